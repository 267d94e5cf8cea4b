//! One execution per DLQ: a lease in the circuit record (`CIRCUIT_TABLE`), taken by `start`,
//! renewed by `checkCircuit` before every round, released by the summary. The conditional
//! write and the rule are the engine's (`redrive_engine::circuit::acquire_lease`).

use redrive_engine::circuit::{self, CircuitError, CircuitStore};
use redrive_engine::ports::{Alarms, Metrics, PortError, Queue};
use redrive_shared::circuit::Lease;
use tokio::time::Instant;

use crate::error::TaskError;
use crate::workflow::Workflow;

/// The shortest a lease lives without renewal: two task timeouts (the ASL's `TimeoutSeconds`,
/// 960 s). Renewed before every round, so only an execution that stopped or failed without its
/// summary lets it expire; the next execution then waits at most its TTL. In the Lambda the TTL
/// is [`lease_ttl_seconds`] of the function's timeout, never less than this.
pub const LEASE_TTL_SECONDS: i64 = 2 * 960;

/// The state machine's retriers (`infra/statemachine/redrive.asl.json`): every task is tried up
/// to 5 times (`MaxAttempts` 4), 2, 4, 8 and 16 s apart.
const TASK_ATTEMPTS: i64 = 5;
const RETRY_PAUSES_SECONDS: i64 = 2 + 4 + 8 + 16;
/// The tasks of a round after the renewing `checkCircuit`: `redriveBatch` then `tally` (or the
/// drains, side by side, then `tally`).
const TASKS_AFTER_RENEWAL: i64 = 2;
/// The state machine's own transitions, and clocks apart.
const SLACK_SECONDS: i64 = 60;

/// The lease's TTL for a task function whose timeout is `task_timeout_seconds`: the longest a
/// round can run between two renewals (the rest of the renewing invocation, then each later
/// task of the round with all its retries, every attempt up to the timeout), so that a live
/// execution never loses its lease to the next one; at least [`LEASE_TTL_SECONDS`].
pub fn lease_ttl_seconds(task_timeout_seconds: i64) -> i64 {
    let t = task_timeout_seconds.max(0);
    let worst =
        t + TASKS_AFTER_RENEWAL * (TASK_ATTEMPTS * t + RETRY_PAUSES_SECONDS) + SLACK_SECONDS;
    worst.max(LEASE_TTL_SECONDS)
}

/// What taking or renewing the lease came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// This execution holds it.
    Held,
    /// No circuit table: no lease at all.
    Off,
    /// Another execution's live lease.
    HeldBy(Lease),
}

fn task_error(e: CircuitError) -> TaskError {
    match e {
        CircuitError::Port(p) => TaskError::Port(p),
        // Others kept writing the record: the state machine's Retry tries again.
        CircuitError::Contended { .. } => {
            TaskError::Port(PortError::new("Lease", "Contended", e.to_string(), true))
        }
    }
}

impl<Q: Queue + Clone, A: Alarms + Clone, M: Metrics + Clone, C: CircuitStore + Clone + Send>
    Workflow<Q, A, M, C>
{
    /// Takes or renews the DLQ's lease for `execution_arn` (see [`circuit::acquire_lease`]),
    /// for [`lease_ttl_seconds`] of the function's timeout: the time this invocation was given
    /// (`deadline`, the Lambda's), or [`LEASE_TTL_SECONDS`] without one.
    pub(crate) async fn hold_lease(
        &self,
        execution_arn: &str,
        deadline: Option<Instant>,
    ) -> Result<LeaseState, TaskError> {
        let Some(settings) = self.engine.circuit_config().map(|c| c.settings) else {
            return Ok(LeaseState::Off);
        };
        let ttl_seconds = deadline.map_or(LEASE_TTL_SECONDS, |d| {
            let given = d.saturating_duration_since(Instant::now()).as_millis();
            lease_ttl_seconds(i64::try_from(given.div_ceil(1000)).unwrap_or(i64::MAX / 1000))
        });
        let now = (self.clock)();
        let dlq = self.config.redriver.dlq_url.as_str();
        match circuit::acquire_lease(
            &self.engine.circuit,
            dlq,
            &settings,
            execution_arn,
            now,
            ttl_seconds * 1000,
        )
        .await
        .map_err(task_error)?
        {
            Ok(lease) => {
                tracing::info!(
                    execution = execution_arn,
                    expires_at = lease.expires_at,
                    action = "lease",
                    "this execution holds the DLQ's lease"
                );
                Ok(LeaseState::Held)
            }
            Err(other) => Ok(LeaseState::HeldBy(other)),
        }
    }

    /// Drops the lease if `execution_arn` holds it. A failure is logged: the lease then
    /// expires by itself, and the summary's answer stands.
    pub(crate) async fn release_lease(&self, execution_arn: &str) {
        if self.engine.circuit_config().is_none() {
            return;
        }
        let dlq = self.config.redriver.dlq_url.as_str();
        match circuit::release_lease(&self.engine.circuit, dlq, execution_arn).await {
            Ok(true) => {
                tracing::info!(
                    execution = execution_arn,
                    action = "lease-released",
                    "released the DLQ's lease"
                )
            }
            Ok(false) => {
                tracing::info!(
                    execution = execution_arn,
                    "this execution holds no lease on the DLQ: nothing to release"
                )
            }
            Err(e) => {
                tracing::warn!(execution = execution_arn, error = %e, "cannot release the DLQ's lease; it expires by itself")
            }
        }
    }
}
