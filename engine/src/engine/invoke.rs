//! One invocation of the engine's own Lambda: the event recognised, the drain it asks for (a
//! guard alarm in ALARM holds it), then the end of the run.

use redrive_shared::event::{Trigger, recognize};
use tokio::time::Instant;

use super::request::summary_of_mut;
use super::{
    DestinationLimits, DrainError, DrainRequest, Engine, InvocationError, StopReason, Summary,
};
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

    /// Handles one invocation payload. An unrecognized event is an error and touches nothing.
    pub async fn handle(
        &self,
        event: &serde_json::Value,
        deadline: Option<Instant>,
    ) -> Result<Summary, InvocationError> {
        self.handle_trigger(recognize(event)?, deadline).await
    }

    /// Handles one invocation whose event was recognised as `trigger` (by [`Self::handle`],
    /// or by a fleet that recognised it once for all its DLQs).
    pub async fn handle_trigger(
        &self,
        trigger: Trigger,
        deadline: Option<Instant>,
    ) -> Result<Summary, InvocationError> {
        // Scheduled and manual drains re-arm the configured trigger alarm; an alarm's own
        // drain re-arms the alarm that notified it.
        let defaults = DrainRequest {
            max_messages: self.config.max_messages_per_invocation,
            dry_run: self.config.dry_run,
            deadline,
            trigger_alarm: self.config.trigger_alarm_name.clone(),
            ..DrainRequest::new(self.config.max_messages_per_invocation)
        };
        let request = match trigger {
            Trigger::Alarm(alarm) => {
                if let Some(skip) = alarm.skip_for_dlq(self.config.dlq_url.as_str()) {
                    tracing::info!(alarm = %alarm.alarm_name, alarm_arn = ?alarm.alarm_arn, state = %alarm.new_state, queues = ?alarm.queue_names, action = skip.as_str(), "alarm ignored");
                    let summary = Summary::new(defaults.dry_run, skip.into());
                    self.publish(&summary, false, deadline).await;
                    log_summary(&summary);
                    return Ok(summary);
                }
                DrainRequest {
                    trigger_alarm: Some(alarm.alarm_name),
                    ..defaults
                }
            }
            Trigger::Manual(m) => DrainRequest {
                max_messages: m.max_messages.unwrap_or(defaults.max_messages),
                dry_run: m.dry_run.unwrap_or(defaults.dry_run),
                ..defaults
            },
            Trigger::Scheduled => defaults,
        };
        Ok(self.run(&request).await?)
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
    tracing::info!(
        received = s.received,
        redriven = s.redriven,
        isolated = s.isolated,
        failed = s.failed,
        dry_run = s.dry_run,
        stopped_because = s.stopped_because.as_str(),
        dlq_remaining = s.dlq_remaining,
        "summary"
    );
}

impl InvocationError {
    /// The Lambda `errorType` of this failure.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Event(_) => "InvalidEvent",
            Self::Drain(DrainError::DlqUnreadable { .. }) => "DlqUnreadable",
        }
    }
}
