//! One execution per DLQ: a lease in the circuit record (`CIRCUIT_TABLE`), taken by `start`,
//! renewed by `checkCircuit` before every round, released by the summary. The conditional
//! write and the rule are the engine's (`redrive_engine::circuit::acquire_lease`).

use redrive_engine::circuit::{self, CircuitError, CircuitStore};
use redrive_engine::ports::{Alarms, Metrics, PortError, Queue};
use redrive_shared::circuit::Lease;

use crate::error::TaskError;
use crate::workflow::Workflow;

/// How long a lease lives without renewal: two task timeouts (the ASL's `TimeoutSeconds`,
/// 960 s), longer than a round's worst case (one task that times out and its retry). Renewed
/// before every round, so only an execution that stopped or failed without its summary lets it
/// expire; the next execution then waits at most this long.
pub const LEASE_TTL_SECONDS: i64 = 2 * 960;

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

impl<Q, A, M, C> Workflow<Q, A, M, C>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    C: CircuitStore + Clone + Send,
{
    /// Takes or renews the DLQ's lease for `execution_arn` (see [`circuit::acquire_lease`]).
    pub(crate) async fn hold_lease(&self, execution_arn: &str) -> Result<LeaseState, TaskError> {
        let Some(settings) = self.engine.circuit_config().map(|c| c.settings) else {
            return Ok(LeaseState::Off);
        };
        let now = (self.clock)();
        let dlq = self.config.redriver.dlq_url.as_str();
        match circuit::acquire_lease(
            &self.engine.circuit,
            dlq,
            &settings,
            execution_arn,
            now,
            LEASE_TTL_SECONDS * 1000,
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
