//! The first task of an execution: its input validated, its defaults resolved, and whether it
//! may drain the DLQ.

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::StopReason;
use redrive_engine::ports::{Alarms, Metrics, Queue};
use serde_json::{Value, json};

use crate::MAX_PARALLEL;
use crate::error::{TaskError, invalid};
use crate::executions::Executions;
use crate::state::{ExecutionInput, Mode, Run, Totals};
use crate::tally::drain_plan;
use crate::workflow::Workflow;

impl<Q, A, M, X, C> Workflow<Q, A, M, X, C>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    X: Executions,
    C: CircuitStore + Clone + Send,
{
    /// Validates the execution input, resolves the defaults, and lets only the oldest RUNNING
    /// execution of the state machine proceed (one execution per DLQ at a time).
    pub(crate) async fn start(
        &self,
        input: Value,
        execution_arn: &str,
        state_machine_arn: &str,
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
        let running = self.executions.running(state_machine_arn).await?;
        let me = running
            .iter()
            .find(|x| x.arn == execution_arn)
            .map_or_else(|| (self.clock)(), |x| x.started_ms);
        let older = running
            .iter()
            .filter(|x| x.arn != execution_arn)
            .find(|x| (x.started_ms, x.arn.as_str()) < (me, execution_arn));
        let mut totals = Totals {
            remaining: max_messages,
            more: true,
            stopped_because: StopReason::Limit,
            drain_plan: drain_plan(&run, max_messages),
            started_at: me,
            ..Totals::default()
        };
        if let Some(o) = older {
            tracing::warn!(execution = execution_arn, running = %o.arn, action = "already-running", "another execution is draining this DLQ: this one receives nothing and goes to its summary");
            totals.more = false;
            totals.stopped_because = StopReason::AlreadyRunning;
            totals.drain_plan = Vec::new();
        }
        self.admit(&mut totals.drain_plan).await;
        Ok(json!({
            "proceed": older.is_none(),
            "blockedBy": older.map(|o| o.arn.clone()),
            "run": run,
            "totals": totals,
        }))
    }
}
