//! One invocation of the re-driver for one DLQ: the event recognised (or, in a fleet, the
//! trigger recognised once for all its DLQs), the drain it asks for, run on the engine.

use redrive_engine::circuit::CircuitStore;
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_engine::{DrainError, DrainRequest, Engine, Summary};
use redrive_shared::event::{EventError, Trigger, recognize};
use tokio::time::Instant;

/// Why an invocation fails.
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    /// An unrecognized event: nothing was touched.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The drain failed (the DLQ could not be read): metered, and the invocation fails so
    /// that the Lambda `Errors` alarm sees it.
    #[error(transparent)]
    Drain(#[from] DrainError),
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

/// Handles one invocation payload on `engine`'s DLQ. An unrecognized event is an error and
/// touches nothing.
pub async fn handle<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore>(
    engine: &Engine<Q, A, M, C>,
    event: &serde_json::Value,
    deadline: Option<Instant>,
) -> Result<Summary, InvocationError> {
    handle_trigger(engine, recognize(event)?, deadline).await
}

/// Handles one invocation whose event was recognised as `trigger` (by [`handle`], or by a
/// fleet that recognised it once for all its DLQs).
pub async fn handle_trigger<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore>(
    engine: &Engine<Q, A, M, C>,
    trigger: Trigger,
    deadline: Option<Instant>,
) -> Result<Summary, InvocationError> {
    // Scheduled and manual drains re-arm the configured trigger alarm; an alarm's own drain
    // re-arms the alarm that notified it.
    let defaults = DrainRequest::configured(&engine.config, deadline);
    let request = match trigger {
        Trigger::Alarm(alarm) => {
            if let Some(skip) = alarm.skip_for_dlq(engine.config.dlq_url.as_str()) {
                tracing::info!(alarm = %alarm.alarm_name, alarm_arn = ?alarm.alarm_arn, state = %alarm.new_state, queues = ?alarm.queue_names, action = skip.as_str(), "alarm ignored");
                return Ok(engine.skip(&defaults, skip.into()).await);
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
    Ok(engine.run(&request).await?)
}
