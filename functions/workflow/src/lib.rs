//! The Step Functions orchestrator's tasks: one Lambda binary (`redrive-workflow`) whose
//! actions are thin adapters over the [`Engine`](redrive_engine::engine::Engine), chosen by an
//! `"action"` field. The contract (actions, inputs, outputs, errors) is `docs/workflow.md`; the
//! state machine is `infra/statemachine/redrive.asl.json`.

mod config;
mod drains;
mod error;
mod lease;
mod messages;
mod start;
mod state;
mod tally;
mod workflow;

pub use config::WorkflowConfig;
pub use error::TaskError;
pub use lease::{LEASE_TTL_SECONDS, lease_ttl_seconds};
pub use state::{DrainItem, Mode, Run, Totals};
pub use tally::tally;
pub use workflow::Workflow;

/// Messages of one `redriveBatch` (`WORKFLOW_BATCH_SIZE`, so that a round's records stay small
/// in the execution state), and drains of one scale-out round (the ASL's Map
/// `MaxConcurrency`), at most.
pub const MAX_PARALLEL: u32 = 40;

/// Rounds (a `redriveBatch` or a round of drains, then `tally`) one execution runs at most;
/// `tally` ends it there with `limit` and the next trigger continues. Every retrier exhausted,
/// a Standard execution's history stays well within its 25,000 events (computed from the
/// definition by `infra/tests/test_asl_quotas.py`, which reads this constant).
pub const MAX_ROUNDS_PER_EXECUTION: u32 = 8;

#[cfg(test)]
mod tests;
