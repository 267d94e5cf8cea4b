//! The first task of an execution: its input validated, its defaults resolved, and whether it
//! may drain the DLQ.

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::StopReason;
use redrive_engine::ports::{Alarms, Metrics, Queue};
use serde_json::{Value, json};

use crate::MAX_PARALLEL;
use crate::error::{TaskError, invalid};
use crate::lease::LeaseState;
use crate::state::{ExecutionInput, Mode, Run, Totals};
use crate::tally::drain_plan;
use crate::workflow::Workflow;

impl<Q: Queue + Clone, A: Alarms + Clone, M: Metrics + Clone, C: CircuitStore + Clone + Send>
    Workflow<Q, A, M, C>
{
    /// Validates the execution input, resolves the defaults, and takes the DLQ's lease: only
    /// its holder proceeds (one execution per DLQ at a time); another goes to its summary.
    pub(crate) async fn start(
        &self,
        input: Value,
        execution_arn: &str,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Value, TaskError> {
        let input: ExecutionInput = match input {
            Value::Null => ExecutionInput::default(),
            other => serde_json::from_value(other).map_err(|e| {
                invalid(format!(
                    "execution input: {e} (allowed keys: maxMessages, dryRun, mode, drains, triggerAlarm)"
                ))
            })?,
        };
        let max_messages = input
            .max_messages
            .unwrap_or(self.config.redriver.max_messages_per_invocation);
        if max_messages == 0 {
            return Err(invalid("execution input: maxMessages must be >= 1"));
        }
        let fifo = self.engine.fifo();
        let drains = input.drains.unwrap_or(1);
        if !(1..=MAX_PARALLEL).contains(&drains) {
            return Err(invalid(format!(
                "execution input: drains {drains} must be from 1 to {MAX_PARALLEL}"
            )));
        }
        let run = Run {
            max_messages,
            dry_run: input.dry_run.unwrap_or(self.config.redriver.dry_run),
            // FIFO copies take no delay: the engine's FIFO drain, one at a time, keeps order.
            mode: if fifo {
                Mode::ScaleOut
            } else {
                input.mode.unwrap_or(Mode::Messages)
            },
            drains: if fifo { 1 } else { drains },
            fifo,
            // The alarm that started the execution, else the configured one (a scheduled or
            // manual execution): the summary re-arms it, as the Lambda's drains do.
            trigger_alarm: input
                .trigger_alarm
                .filter(|a| !a.is_empty())
                .or_else(|| self.config.redriver.trigger_alarm_name.clone()),
        };
        let blocked_by = match self.hold_lease(execution_arn, deadline).await? {
            LeaseState::Held => None,
            LeaseState::Off => {
                tracing::info!(
                    execution = execution_arn,
                    "no circuit table (CIRCUIT_TABLE): no lease, so executions started together may drain this DLQ side by side, each message moved inside one task"
                );
                None
            }
            LeaseState::HeldBy(other) => Some(other.holder),
        };
        let me = (self.clock)();
        let mut totals = Totals {
            remaining: max_messages,
            more: true,
            stopped_because: StopReason::Limit,
            drain_plan: drain_plan(&run, max_messages),
            started_at: me,
            ..Totals::default()
        };
        if let Some(holder) = &blocked_by {
            tracing::warn!(execution = execution_arn, running = %holder, action = "already-running", "another execution holds this DLQ's lease: this one receives nothing and goes to its summary");
            totals.more = false;
            totals.stopped_because = StopReason::AlreadyRunning;
            totals.drain_plan = Vec::new();
        }
        self.admit(&mut totals.drain_plan).await;
        Ok(json!({
            "proceed": blocked_by.is_none(),
            "blockedBy": blocked_by,
            "run": run,
            "totals": totals,
        }))
    }
}
