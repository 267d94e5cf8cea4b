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
pub use lease::LEASE_TTL_SECONDS;
pub use state::{Batch, DrainItem, Item, ItemAction, MessageOutcome, Mode, Outcome, Run, Totals};
pub use tally::tally;
pub use workflow::Workflow;

/// Map items of one `receiveBatch`, and drains of one scale-out round, at most: the ASL's Map
/// `MaxConcurrency`, so that every item starts (and holds its message) at once.
pub const MAX_PARALLEL: u32 = 40;

/// Rounds (a receive and its Map, or a round of drains, then `tally`) one execution runs at
/// most; `tally` ends it there with `limit` and the next trigger continues. With at most
/// [`MAX_PARALLEL`] items per round, every retrier exhausted and every Catch taken, a Standard
/// execution's history stays within 16,846 of its 25,000 events (computed from the definition
/// by `infra/tests/test_asl_quotas.py`, which reads this constant).
pub const MAX_ROUNDS_PER_EXECUTION: u32 = 8;

#[cfg(test)]
mod tests;
