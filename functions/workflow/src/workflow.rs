//! The workflow: its engines, the task dispatch, and the tasks that start, check, drain and
//! sum up an execution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redrive_engine::circuit::{CircuitStore, NoCircuit};
use redrive_engine::engine::{DrainRequest, Engine, StepTotals, StopReason, Summary};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_shared::config::RedriverConfig;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::MAX_PARALLEL;
use crate::config::WorkflowConfig;
use crate::error::{TaskError, invalid};
use crate::executions::Executions;
use crate::state::{DrainItem, ExecutionInput, ItemAction, Mode, Run, Task, Totals};
use crate::tally::drain_plan;

type Drainer<Q, A, M, C> = Arc<Engine<Q, A, M, C>>;

/// The tasks, over one engine for decisions with long waits and one engine per drain count
/// (velocity cap split K ways) for scale-out.
pub struct Workflow<Q, A, M, X, C = NoCircuit> {
    /// Decides with the long backoff; holds the circuit store (`CIRCUIT_TABLE`).
    pub engine: Engine<Q, A, M, C>,
    pub config: WorkflowConfig,
    pub executions: X,
    drainers: Mutex<HashMap<u32, Drainer<Q, A, M, C>>>,
    pub(crate) settings: redrive_engine::engine::Settings,
    pub(crate) clock: fn() -> i64,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl<Q, A, M, X> Workflow<Q, A, M, X>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    X: Executions,
{
    pub fn new(queue: Q, alarms: A, metrics: M, executions: X, config: WorkflowConfig) -> Self {
        let deciding = RedriverConfig {
            backoff: config.wait_backoff,
            ..config.redriver.clone()
        };
        Self {
            engine: Engine::new(queue, alarms, metrics, deciding),
            config,
            executions,
            drainers: Mutex::new(HashMap::new()),
            settings: redrive_engine::engine::Settings::default(),
            clock: now_ms,
        }
    }

    /// The circuit table (`CIRCUIT_TABLE`): its operator flag holds the breaker open, and the
    /// tasks measure bounces into it as the Lambda does (`receiveBatch`, `tally`, `drain`).
    pub fn with_circuit<S: CircuitStore + Clone>(self, store: S) -> Workflow<Q, A, M, X, S> {
        Workflow {
            engine: self.engine.with_circuit(store),
            config: self.config,
            executions: self.executions,
            drainers: Mutex::new(HashMap::new()),
            settings: self.settings,
            clock: self.clock,
        }
    }
}

impl<Q, A, M, X, C> Workflow<Q, A, M, X, C>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    X: Executions,
    C: CircuitStore + Clone + Send,
{
    /// Engine tunables (tests shorten the receive wait and retry pauses).
    pub fn with_settings(mut self, settings: redrive_engine::engine::Settings) -> Self {
        self.engine = self.engine.with_settings(settings.clone());
        self.settings = settings;
        self
    }

    /// Fixes the jitter's random source (tests).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.engine = self.engine.with_seed(seed);
        self
    }

    /// The init-time call: destination size limits and a connection.
    pub async fn warm_up(&self) {
        let _ = self.engine.warm_up().await;
    }

    /// Runs one task. `deadline` is the Lambda's.
    pub async fn handle(
        &self,
        input: Value,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        let task: Task = serde_json::from_value(input).map_err(invalid)?;
        let out = match task {
            Task::Start {
                input,
                execution_arn,
                state_machine_arn,
            } => {
                self.start(input, &execution_arn, &state_machine_arn)
                    .await?
            }
            Task::CheckCircuit {} => self.check_circuit(deadline).await,
            Task::ReceiveBatch {
                max_messages,
                dry_run,
            } => to_value(self.receive_batch(max_messages, dry_run, deadline).await?),
            Task::ExtendVisibility { item } => self.extend_visibility(&item, deadline).await?,
            Task::Redrive { item } => {
                to_value(self.redeliver(item, ItemAction::Redrive, deadline).await?)
            }
            Task::Isolate { item } => {
                to_value(self.redeliver(item, ItemAction::Isolate, deadline).await?)
            }
            Task::Drain(d) => self.drain(&d, deadline).await?,
            Task::Tally {
                run,
                totals,
                batch,
                results,
            } => to_value(
                self.tally_round(&run, totals, batch.as_ref(), &results)
                    .await,
            ),
            Task::Summary { run, totals } => to_value(self.summary(&run, &totals, deadline).await),
        };
        Ok(out)
    }

    /// Validates the execution input, resolves the defaults, and lets only the oldest RUNNING
    /// execution of the state machine proceed (one execution per DLQ at a time).
    async fn start(
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
        Ok(json!({
            "proceed": older.is_none(),
            "blockedBy": older.map(|o| o.arn.clone()),
            "run": run,
            "totals": totals,
        }))
    }

    /// The guard alarms and the circuit record (any guard in ALARM or missing, or a record
    /// that holds, opens the circuit, as in the Lambda).
    async fn check_circuit(&self, deadline: Option<Instant>) -> Value {
        let check = self.engine.check_circuit(deadline).await;
        json!({
            "open": check.open(),
            "guards": check.guards,
            "operator": check.operator,
        })
    }

    pub(crate) fn drainer(&self, drains: u32) -> Drainer<Q, A, M, C> {
        let mut map = self.drainers.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(drains)
            .or_insert_with(|| {
                let cfg = &self.config.redriver;
                let config = RedriverConfig {
                    max_messages_per_second: cfg.max_messages_per_second / f64::from(drains),
                    ..cfg.clone()
                };
                Arc::new(
                    Engine::new(
                        self.engine.queue.clone(),
                        self.engine.alarms.clone(),
                        self.engine.metrics.clone(),
                        config,
                    )
                    .with_settings(self.settings.clone())
                    .with_clock(self.clock)
                    .with_circuit(self.engine.circuit.clone()),
                )
            })
            .clone()
    }

    /// One bounded engine drain with a 1/K share of `MAX_MESSAGES_PER_SECOND` and the
    /// re-driver's 900 s backoff cap: a scale-out Map item (or the FIFO drain).
    pub async fn drain(
        &self,
        d: &DrainItem,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        if !(1..=MAX_PARALLEL).contains(&d.drains) {
            return Err(invalid(format!(
                "drains {} must be from 1 to {MAX_PARALLEL}",
                d.drains
            )));
        }
        let engine = self.drainer(d.drains);
        if let Err(e) = engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        // Under the adaptive circuit when it is on, as in the Lambda: the drain follows the
        // record's plan, counts its bounced and redriven copies into it and stops with
        // circuit-open when it opens (no metrics here: `summary` publishes once).
        let summary = engine
            .drain_step(&DrainRequest {
                dry_run: d.dry_run,
                deadline,
                ..DrainRequest::new(d.max_messages)
            })
            .await;
        if let Some(reason) = &summary.dlq_unreadable {
            tracing::error!(error = %reason, action = "dlq-unreadable", "the drain could not read the DLQ");
            return Err(TaskError::DlqUnreadable(reason.clone()));
        }
        tracing::info!(
            index = d.index,
            drains = d.drains,
            received = summary.received,
            redriven = summary.redriven,
            isolated = summary.isolated,
            failed = summary.failed,
            stopped_because = summary.stopped_because.as_str(),
            "drain"
        );
        let mut out = to_value(&summary);
        out["index"] = json!(d.index);
        Ok(out)
    }

    /// The Lambda's response for the whole execution, then the engine's end of a run, as the
    /// Lambda's: one PutMetricData and the re-arm of the trigger alarm.
    pub async fn summary(&self, run: &Run, totals: &Totals, deadline: Option<Instant>) -> Summary {
        let request = DrainRequest {
            dry_run: run.dry_run,
            deadline,
            trigger_alarm: run.trigger_alarm.clone(),
            ..DrainRequest::new(run.max_messages)
        };
        let summary = self
            .engine
            .finish(
                &request,
                StepTotals {
                    received: totals.received,
                    redriven: totals.redriven,
                    isolated: totals.isolated,
                    failed: totals.failed,
                    stopped_because: totals.stopped_because,
                    started_at: totals.started_at,
                    bounced: totals.bounced,
                },
            )
            .await;
        if totals.not_found > 0 {
            tracing::warn!(
                not_found = totals.not_found,
                "messages that never came back from the DLQ (counted in failed)"
            );
        }
        summary
    }
}

pub(crate) fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
