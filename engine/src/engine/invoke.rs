//! One run, as every front end asks for it: the guard alarms checked (one in ALARM holds it),
//! the drain, then the end of the run; or a run that touches nothing ([`Engine::skip`]).

use super::request::summary_of_mut;
use super::{DestinationLimits, DrainError, DrainRequest, Engine, StopReason, Summary};
use crate::circuit::CircuitStore;
use crate::ports::{Alarms, Metrics, PortError, Queue};

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// GetQueueAttributes on the destinations (their `MaximumMessageSize`, which every drain
    /// needs), both at once, made at init so that resolving credentials and the endpoint,
    /// opening the connections and reading the limits are not paid by the first invocation.
    /// Nothing else: a depth read here would be stale by the first event and cost init a
    /// call. It touches no message; a failure is logged and left to the invocations, which
    /// read the limits again and report their own errors.
    pub async fn warm_up(&self) -> Result<DestinationLimits, PortError> {
        let _ = self.read_sources().await;
        self.load_limits().await.inspect_err(|e| {
            tracing::warn!(error = %e, "warm-up: cannot read the destinations' MaximumMessageSize yet");
        })
    }

    /// A run that touches no queue (an alarm that is not in ALARM or names another DLQ): its
    /// zero counts published and its summary logged, `stopped_because` saying why.
    pub async fn skip(&self, request: &DrainRequest, stopped_because: StopReason) -> Summary {
        let summary = Summary::new(request.dry_run, stopped_because);
        self.publish(&summary, false, request.deadline).await;
        log_summary(&summary);
        summary
    }

    /// Circuit check, drain, metrics, re-arm, summary log. A DLQ that cannot be read fails
    /// the run ([`DrainError`]); what it did before is still reported, metered and logged.
    pub async fn run(&self, request: &DrainRequest) -> Result<Summary, DrainError> {
        let end = request.deadline;
        if let Err(e) = self.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        let mut outcome = match self.open_guards(end).await {
            Some(open) => {
                tracing::warn!(guards = ?open, action = "circuit-open", "guard alarm in ALARM: nothing received");
                Ok(Summary::new(request.dry_run, StopReason::CircuitOpen))
            }
            None => self.drain_with_circuit(request).await,
        };
        let unreadable = outcome.is_err();
        self.end_run(request, summary_of_mut(&mut outcome), unreadable)
            .await;
        outcome
    }
}

pub(super) fn log_summary(s: &Summary) {
    crate::info_counts!(
        s,
        dry_run = s.dry_run,
        stopped_because = s.stopped_because.as_str(),
        dlq_remaining = s.dlq_remaining,
        "summary"
    );
}
