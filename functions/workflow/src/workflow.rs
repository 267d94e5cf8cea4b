//! The workflow: its engines, the task dispatch, and the tasks that start, check, drain and
//! sum up an execution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redrive_engine::circuit::{CircuitStore, NoCircuit};
use redrive_engine::engine::{DrainRequest, Engine, StepTotals, Summary};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_shared::config::RedriverConfig;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::WorkflowConfig;
use crate::error::{TaskError, invalid};
use crate::lease::LeaseState;
use crate::state::{Run, Task, Totals};

pub(crate) type Drainer<Q, A, M, C> = Arc<Engine<Q, A, M, C>>;

/// The tasks, over one engine for decisions with long waits and one engine per drain count
/// (velocity cap split K ways) for scale-out.
pub struct Workflow<Q, A, M, C = NoCircuit> {
    /// `messages` mode's engine: the long backoff, waits beyond `WORKFLOW_MAX_DELAY_SECONDS`
    /// hopping on the DLQ; holds the circuit store (`CIRCUIT_TABLE`).
    pub engine: Engine<Q, A, M, C>,
    pub config: WorkflowConfig,
    pub(crate) drainers: Mutex<HashMap<u32, Drainer<Q, A, M, C>>>,
    pub(crate) settings: redrive_engine::engine::Settings,
    pub(crate) clock: fn() -> i64,
}

pub(crate) use redrive_shared::clock::now_ms;

impl<Q, A, M> Workflow<Q, A, M>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
{
    pub fn new(queue: Q, alarms: A, metrics: M, config: WorkflowConfig) -> Self {
        let deciding = RedriverConfig {
            backoff: config.wait_backoff,
            ..config.redriver.clone()
        };
        Self {
            engine: Engine::new(queue, alarms, metrics, deciding)
                .with_max_delay(config.max_delay_seconds),
            config,
            drainers: Mutex::new(HashMap::new()),
            settings: redrive_engine::engine::Settings::default(),
            clock: now_ms,
        }
    }

    /// The circuit table (`CIRCUIT_TABLE`): its operator flag holds the breaker open, and the
    /// tasks measure bounces into it as the Lambda does (`redriveBatch`, `drain`, `tally`).
    pub fn with_circuit<S: CircuitStore + Clone>(self, store: S) -> Workflow<Q, A, M, S> {
        Workflow {
            engine: self.engine.with_circuit(store),
            config: self.config,
            drainers: Mutex::new(HashMap::new()),
            settings: self.settings,
            clock: self.clock,
        }
    }
}

impl<Q: Queue + Clone, A: Alarms + Clone, M: Metrics + Clone, C: CircuitStore + Clone + Send>
    Workflow<Q, A, M, C>
{
    /// Triage's book, whose holds every drain of the workflow keeps (`TRIAGE_TABLE`).
    pub fn with_triage(mut self, books: Option<redrive_engine::engine::TriageBooks>) -> Self {
        self.engine = self.engine.with_triage(books);
        self
    }

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
            } => self.start(input, &execution_arn, deadline).await?,
            Task::CheckCircuit { execution_arn } => {
                self.check_circuit(execution_arn.as_deref(), deadline)
                    .await?
            }
            Task::RedriveBatch {
                max_messages,
                dry_run,
            } => to_value(self.redrive_batch(max_messages, dry_run, deadline).await?),
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
            Task::Summary {
                run,
                totals,
                execution_arn,
            } => {
                let summary = to_value(self.summary(&run, &totals, deadline).await);
                if let Some(arn) = execution_arn {
                    self.release_lease(&arn).await;
                }
                summary
            }
        };
        Ok(out)
    }

    /// Renews the DLQ's lease when given the execution (a lease lost to another execution
    /// stops it: `open` and `leaseLost`, the round does not run), then the guard alarms and
    /// the circuit record (any guard in ALARM or missing, or a record that holds, opens the
    /// circuit, as in the Lambda).
    async fn check_circuit(
        &self,
        execution_arn: Option<&str>,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        if let Some(arn) = execution_arn
            && let LeaseState::HeldBy(other) = self.hold_lease(arn, deadline).await?
        {
            tracing::warn!(execution = arn, running = %other.holder, action = "lease-lost", "another execution took this DLQ's lease: this one receives no more and goes to its summary");
            return Ok(json!({
                "open": true,
                "leaseLost": true,
                "blockedBy": other.holder,
                "guards": [],
                "operator": null,
            }));
        }
        let check = self.engine.check_circuit(deadline).await;
        Ok(json!({
            "open": check.open(),
            "leaseLost": false,
            "guards": check.guards,
            "operator": check.operator,
        }))
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
        let mut summary = self
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
                    ungranted: totals.ungranted,
                },
            )
            .await;
        // The execution's answer accounts for every message it received: those sent back to
        // wait on the DLQ too.
        summary.waiting = totals.waiting;
        summary.hops = totals.hops;
        summary
    }
}

pub(crate) fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
