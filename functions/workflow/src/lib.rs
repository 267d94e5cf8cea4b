//! The Step Functions orchestrator's tasks: one Lambda binary
//! (`src/bin/redrive-workflow.rs`) whose actions are thin adapters over the [`Engine`], chosen
//! by an `"action"` field. The state machine is `infra/statemachine/redrive.asl.json`.
//!
//! # Where a waiting message lives, and why bodies never enter the state
//! Step Functions state is limited to 256 KiB and an SQS message can be 1 MiB, so the execution
//! carries ids, receipt handles and decisions, never bodies. A receipt handle does not give the
//! body back, so the task that sends a copy must receive the message itself:
//! 1. `receiveBatch` receives up to `WORKFLOW_BATCH_SIZE` messages and decides each with the
//!    engine's decision code; it sends nothing. A backoff up to `WORKFLOW_MAX_DELAY_SECONDS`
//!    (900 by default) becomes the copy's `DelaySeconds`; the rest (`waitSeconds`) is waited by
//!    the state machine while the message stays on the DLQ.
//! 2. `extendVisibility` hides the message on the DLQ for its wait (plus
//!    `WORKFLOW_HOLD_SLACK_SECONDS`), capped at SQS's 12 h from the receive.
//! 3. After the wait, `redrive` (or, for a poison pill, `isolate`) releases that message and
//!    receives from the DLQ until that MessageId comes back (at most `WORKFLOW_SEARCH_RECEIVES`
//!    receives; every other message it sees is released again at once), then runs the engine's
//!    own send-then-delete-what-was-acknowledged on it ([`Engine::apply_decided`]). A message
//!    that does not come back fails the task with `MessageNotFound` (retried, then caught as
//!    `not-found`): this attempt deleted nothing. Most often an earlier attempt of the same task
//!    already redrove it and its answer was lost; otherwise another reader holds it on the DLQ.
//!
//! The DLQ stays the store throughout: a failed, timed-out or stopped execution leaves every
//! message it had not redriven on the DLQ, where it reappears when its visibility lapses.
//! FIFO queues take no per-message delay, so they run as engine drains (`drain`, one at a
//! time: one pipeline, one message per group per batch, a failed group held).
//!
//! # Actions: input (`{"action": ..., ...}`) and output, camelCase JSON
//! | action | input | output |
//! |---|---|---|
//! | `start` | `{"input": <execution input>, "executionArn", "stateMachineArn"}` | `{"proceed", "blockedBy"?, "run": Run, "totals": Totals}` |
//! | `checkCircuit` | `{}` | `{"open", "guards": [..], "operator": null\|"open"\|"closed"}` |
//! | `receiveBatch` | `{"maxMessages", "dryRun"}` | `{"items": [Item], "received", "queueEmpty", "dryRun", "circuitOpened", "bounced"}` |
//! | `extendVisibility` | `{"item": Item}` | `{"messageId", "held", "heldSeconds"}` |
//! | `redrive` / `isolate` | `{"item": Item}` | `Outcome` |
//! | `drain` | `{"index", "drains", "maxMessages", "dryRun"}` | the Lambda's response + `"index"` |
//! | `tally` | `{"run", "totals", "batch"?, "results": [..]}` | `Totals` |
//! | `summary` | `{"run", "totals"}` | the Lambda's response (publishes the metrics, re-arms) |
//!
//! The execution input (`start`): `{"maxMessages": N, "dryRun": bool, "mode": "messages" |
//! "scaleOut", "drains": K, "triggerAlarm": "name"}`, all optional, unknown keys rejected.
//! - `Run`: `{"maxMessages", "dryRun", "mode", "drains", "fifo", "triggerAlarm"?}` (the input's
//!   `triggerAlarm`, else `TRIGGER_ALARM_NAME`)
//! - `Item`: `{"messageId", "receiptHandle", "receivedAt" (epoch ms), "groupId"?,
//!   "originalMessageId", "attempt", "action": "redrive"|"isolate", "reason"?, "backoffSeconds",
//!   "waitSeconds", "delaySeconds", "destination" (queue name)}`
//! - `Outcome`: `{"messageId", "originalMessageId", "attempt", "action", "reason"?,
//!   "delaySeconds", "waitedSeconds", "destination", "outcome": "redriven"|"isolated"|"failed"}`
//! - `Totals`: `{"received", "redriven", "isolated", "failed", "leftOnDlq", "notFound", "remaining",
//!   "queueEmpty", "more", "stoppedBecause", "drainPlan": [{"index","drains","maxMessages","dryRun"}],
//!   "startedAt" (epoch ms), "bounced", "rounds"}`
//!
//! Every execution ends in `summary` (the response, the metrics, the re-arm of the trigger
//! alarm), also one that found another execution running (`start`: `proceed` false,
//! `stoppedBecause` `already-running`) or a circuit open (`circuit-open`): both succeed. An
//! execution runs at most [`MAX_ROUNDS_PER_EXECUTION`] rounds, the bound of its history.
//!
//! # The adaptive circuit, when `CIRCUIT_TABLE` is set
//! The tasks measure bounces into the record as the Lambda does: `receiveBatch` counts each
//! batch's bounced copies and follows the plan (hold or watch: the batch goes back on the DLQ at
//! once and `circuitOpened` ends the execution; half-open: only the canary is kept, without its
//! backoff), `tally` counts each round's redriven copies, and a `drain` runs the engine's
//! circuit path (`Engine::drain_with_circuit`). The totals add up the bounced copies the
//! execution saw (`receiveBatch`'s `bounced`, each drain's `circuit.bounced`), and `summary`
//! reads the record (read only) into the response's `circuit`, as the Lambda's: state,
//! operator, plan and budget as the tasks left the record, `bounced`, and `transitions` (the
//! record's history entries since `startedAt`); its PutMetricData carries `CircuitOpen`,
//! `CircuitTransitions` and `BouncedCopies`. An unreadable record: no `circuit`, no circuit
//! metrics, an ERROR logged (the Lambda's response on an unreadable record has none either).
//!
//! Task errors (the Lambda error's `errorType`, which `Retry` and `Catch` match): `InvalidInput`
//! (not retried), `MessageNotFound`, `Sqs.Retryable`, `Sqs.Failed`, `DlqUnreadable`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use redrive_shared::backoff::{Backoff, MAX_DELAY_SECONDS, MAX_WAIT_SECONDS};
use redrive_shared::config::{ConfigError, Env, RedriverConfig, parse_u32};
use redrive_shared::decision::Decision;
use redrive_shared::limits::MAX_RECEIVE;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use redrive_engine::circuit::{self, CircuitError, CircuitStore, NoCircuit};
use redrive_engine::engine::{CircuitSummary, DrainRequest, Engine, StopReason, Summary};
use redrive_engine::ports::{Alarms, HandleEntry, Metrics, PortError, Queue, Received};
use redrive_shared::circuit::{
    CircuitRecord, CircuitSettings, Event, Plan, State, Transition, bounce_of,
};
use redrive_shared::meta::RedriveMeta;

/// Map items of one `receiveBatch`, and drains of one scale-out round, at most: the ASL's Map
/// `MaxConcurrency`, so that every item starts (and holds its message) at once.
pub const MAX_PARALLEL: u32 = 40;

/// Rounds (a receive and its Map, or a round of drains, then `tally`) one execution runs at
/// most; `tally` ends it there with `limit` and the next trigger continues. With at most
/// [`MAX_PARALLEL`] items per round, every retrier exhausted and every Catch taken, a Standard
/// execution's history stays within 16,846 of its 25,000 events (computed from the definition
/// by `infra/tests/test_asl_quotas.py`, which reads this constant).
pub const MAX_ROUNDS_PER_EXECUTION: u32 = 8;

/// The orchestrator's configuration: the re-driver's variables (its backoff capped at 900 s,
/// for the scale-out drains), the same backoff up to 12 h for waits, and the workflow's own.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowConfig {
    /// The re-driver's configuration; `backoff` capped at 900 s (what a drain sends).
    pub redriver: RedriverConfig,
    /// `BACKOFF_*` with `BACKOFF_MAX_SECONDS` up to 43,200 (12 h).
    pub wait_backoff: Backoff,
    /// `WORKFLOW_MAX_DELAY_SECONDS` (0..=900, default 900): the part of a backoff left to the
    /// copy's `DelaySeconds`; the rest is waited by the state machine, the message held on the
    /// DLQ.
    pub max_delay_seconds: u32,
    /// `WORKFLOW_HOLD_SLACK_SECONDS` (1..=3600, default 300): a held message stays hidden this
    /// long beyond its wait, for the redrive task to reach it.
    pub hold_slack_seconds: u32,
    /// `WORKFLOW_BATCH_SIZE` (1..=40, default 40): messages per `receiveBatch`.
    pub batch_size: u32,
    /// `WORKFLOW_SEARCH_RECEIVES` (1..=100, default 10): receives a redrive task makes to find
    /// its message back on the DLQ.
    pub search_receives: u32,
}

impl WorkflowConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let long_max = env.optional("BACKOFF_MAX_SECONDS", |v| {
            let n = redrive_shared::config::parse_u64(v)?;
            if n <= u64::from(MAX_WAIT_SECONDS) {
                Ok(n)
            } else {
                Err(format!(
                    "must be between 0 and {MAX_WAIT_SECONDS} seconds (12 h, the longest a message can be held on the DLQ) in the Step Functions orchestrator"
                ))
            }
        })?;
        // The re-driver's own rules read every other variable; its backoff, capped at 900 s, is
        // what a scale-out drain sends.
        let capped = Env(|k: &str| {
            if k == "BACKOFF_MAX_SECONDS" {
                long_max.map(|m| m.min(u64::from(MAX_DELAY_SECONDS)).to_string())
            } else {
                (env.0)(k)
            }
        });
        let redriver = RedriverConfig::from_env(&capped)?;
        let b = redriver.backoff;
        let wait_backoff = Backoff::new_long(
            b.base(),
            b.multiplier(),
            long_max.unwrap_or(u64::from(b.max())),
            b.jitter(),
        )
        .map_err(|e| ConfigError {
            variable: "BACKOFF_MAX_SECONDS",
            value: env.get("BACKOFF_MAX_SECONDS"),
            problem: e.to_string(),
        })?;
        let ranged = |lo: u32, hi: u32| {
            move |v: &str| {
                let n = parse_u32(v)?;
                if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(format!("must be a whole number from {lo} to {hi}"))
                }
            }
        };
        let max_delay_seconds = env.or(
            "WORKFLOW_MAX_DELAY_SECONDS",
            MAX_DELAY_SECONDS,
            ranged(0, MAX_DELAY_SECONDS),
        )?;
        let hold_slack_seconds = env.or("WORKFLOW_HOLD_SLACK_SECONDS", 300, ranged(1, 3600))?;
        let batch_size = env.or("WORKFLOW_BATCH_SIZE", MAX_PARALLEL, ranged(1, MAX_PARALLEL))?;
        let search_receives = env.or("WORKFLOW_SEARCH_RECEIVES", 10, ranged(1, 100))?;
        // The longest hold must fit in SQS's 12 h from the receive.
        let longest_hold = u64::from(wait_backoff.max().saturating_sub(max_delay_seconds))
            + u64::from(hold_slack_seconds);
        if longest_hold > u64::from(MAX_WAIT_SECONDS) {
            return Err(ConfigError {
                variable: "BACKOFF_MAX_SECONDS",
                value: env.get("BACKOFF_MAX_SECONDS"),
                problem: format!(
                    "a wait of BACKOFF_MAX_SECONDS - WORKFLOW_MAX_DELAY_SECONDS ({}) plus WORKFLOW_HOLD_SLACK_SECONDS ({hold_slack_seconds}) must fit in {MAX_WAIT_SECONDS} seconds (12 h from the receive)",
                    wait_backoff.max().saturating_sub(max_delay_seconds)
                ),
            });
        }
        Ok(Self {
            redriver,
            wait_backoff,
            max_delay_seconds,
            hold_slack_seconds,
            batch_size,
            search_receives,
        })
    }
}

/// Why a task failed; `error_type` is the name `Retry` and `Catch` match in the ASL.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("invalid task input: {0}")]
    InvalidInput(String),
    #[error(
        "message {message_id} did not come back from the DLQ within {receives} receives; this attempt deleted nothing. Either an earlier attempt of this task already redrove it (its answer lost) or another reader holds it on the DLQ"
    )]
    MessageNotFound { message_id: String, receives: u32 },
    #[error("the DLQ cannot be read: {0}")]
    DlqUnreadable(String),
    #[error(transparent)]
    Port(#[from] PortError),
}

impl TaskError {
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidInput(_) => "InvalidInput",
            Self::MessageNotFound { .. } => "MessageNotFound",
            Self::DlqUnreadable(_) => "DlqUnreadable",
            Self::Port(e) if e.retryable => "Sqs.Retryable",
            Self::Port(_) => "Sqs.Failed",
        }
    }
}

/// A RUNNING execution of the state machine (ListExecutions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningExecution {
    pub arn: String,
    pub started_ms: i64,
}

/// The state machine's running executions: at most one drains a DLQ at a time.
pub trait Executions: Sync {
    fn running(
        &self,
        state_machine_arn: &str,
    ) -> impl Future<Output = Result<Vec<RunningExecution>, PortError>> + Send;
}

/// ListExecutions (`statusFilter` RUNNING, every page).
#[derive(Clone)]
pub struct SfnExecutions {
    pub client: aws_sdk_sfn::Client,
}

impl Executions for SfnExecutions {
    async fn running(&self, state_machine_arn: &str) -> Result<Vec<RunningExecution>, PortError> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_executions()
            .state_machine_arn(state_machine_arn)
            .status_filter(aws_sdk_sfn::types::ExecutionStatus::Running)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                let retryable = !matches!(e, aws_sdk_sfn::error::SdkError::ServiceError(_));
                PortError {
                    operation: "ListExecutions",
                    code: aws_sdk_sfn::error::ProvideErrorMetadata::code(&e)
                        .unwrap_or("Unknown")
                        .to_string(),
                    message: aws_sdk_sfn::error::DisplayErrorContext(&e).to_string(),
                    retryable,
                }
            })?;
            out.extend(page.executions.into_iter().map(|x| RunningExecution {
                arn: x.execution_arn,
                started_ms: x.start_date.to_millis().unwrap_or(0),
            }));
        }
        Ok(out)
    }
}

/// A fixed list of running executions (tests).
#[derive(Debug, Clone, Default)]
pub struct FixedExecutions(pub Vec<RunningExecution>);

impl Executions for FixedExecutions {
    async fn running(&self, _state_machine_arn: &str) -> Result<Vec<RunningExecution>, PortError> {
        Ok(self.0.clone())
    }
}

/// How an execution runs: one message at a time through waits, or K parallel engine drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    Messages,
    ScaleOut,
}

/// The execution's settings, resolved by `start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub max_messages: u32,
    pub dry_run: bool,
    pub mode: Mode,
    pub drains: u32,
    pub fifo: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_alarm: Option<String>,
}

/// Redrive or isolate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ItemAction {
    Redrive,
    Isolate,
}

/// One received message's decision: what the Map iterates over. No body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    pub message_id: String,
    pub receipt_handle: String,
    /// When `receiveBatch` received it, epoch milliseconds (the 12 h hold counts from here).
    pub received_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    pub original_message_id: String,
    /// The attempt the copy carries (redrive) or the message's attempt (isolate).
    pub attempt: u32,
    pub action: ItemAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The backoff the decision drew: `waitSeconds` + `delaySeconds`.
    pub backoff_seconds: u32,
    /// Waited by the state machine, the message held on the DLQ.
    pub wait_seconds: u32,
    /// The copy's `DelaySeconds`.
    pub delay_seconds: u32,
    /// The destination queue's name.
    pub destination: String,
}

/// What happened to one message: the audit record in the execution history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub message_id: String,
    pub original_message_id: String,
    pub attempt: u32,
    pub action: ItemAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub delay_seconds: u32,
    pub waited_seconds: u32,
    pub destination: String,
    /// `redriven`, `isolated` or `failed` (the copy was not acknowledged: left on the DLQ).
    pub outcome: String,
}

/// One drain of a scale-out round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainItem {
    pub index: u32,
    pub drains: u32,
    pub max_messages: u32,
    pub dry_run: bool,
}

/// Running totals of an execution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub received: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub failed: u64,
    /// Items whose task failed for good (caught): the message stays on the DLQ. In `failed`.
    pub left_on_dlq: u64,
    /// Items whose message never came back from the DLQ (`MessageNotFound` after its retries):
    /// most often an earlier attempt redrove it and its answer was lost; else another reader
    /// holds it on the DLQ. Nothing was deleted without an acknowledged copy, but the redrive is
    /// not confirmed, so these count in `failed` too.
    #[serde(default)]
    pub not_found: u64,
    /// Messages the execution may still receive.
    pub remaining: u32,
    pub queue_empty: bool,
    /// Another round follows.
    pub more: bool,
    pub stopped_because: String,
    /// The next scale-out round's drains (empty in `messages` mode).
    pub drain_plan: Vec<DrainItem>,
    /// When the execution started, epoch ms (`start`; 0 in totals from before it was kept):
    /// the circuit's transitions since then are the execution's.
    #[serde(default)]
    pub started_at: i64,
    /// Redriven copies the execution saw back on the DLQ within the circuit's window
    /// (`receiveBatch`'s `bounced`, the drains' `circuit.bounced`).
    #[serde(default)]
    pub bounced: u64,
    /// Rounds tallied so far: at [`MAX_ROUNDS_PER_EXECUTION`] the execution ends.
    #[serde(default)]
    pub rounds: u32,
}

/// `receiveBatch`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Batch {
    pub items: Vec<Item>,
    pub received: u32,
    pub queue_empty: bool,
    pub dry_run: bool,
    /// The adaptive circuit holds (it opened on this batch's bounced copies, or it is open or
    /// watching for its canary): the whole batch went back on the DLQ at once, `items` is
    /// empty, and the execution stops (`tally`: `more` false, `circuit-open`).
    #[serde(default)]
    pub circuit_opened: bool,
    /// Bounced copies this batch counted into the circuit record.
    #[serde(default)]
    pub bounced: u64,
}

#[derive(Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
enum Task {
    Start {
        input: Value,
        #[serde(rename = "executionArn")]
        execution_arn: String,
        #[serde(rename = "stateMachineArn")]
        state_machine_arn: String,
    },
    CheckCircuit {},
    ReceiveBatch {
        #[serde(rename = "maxMessages")]
        max_messages: u32,
        #[serde(rename = "dryRun", default)]
        dry_run: bool,
    },
    ExtendVisibility {
        item: Item,
    },
    Redrive {
        item: Item,
    },
    Isolate {
        item: Item,
    },
    Drain(DrainItem),
    Tally {
        run: Run,
        totals: Totals,
        #[serde(default)]
        batch: Option<Batch>,
        #[serde(default)]
        results: Vec<Value>,
    },
    Summary {
        run: Run,
        totals: Totals,
    },
}

/// The execution input a person or the EventBridge rule gives.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExecutionInput {
    max_messages: Option<u32>,
    dry_run: Option<bool>,
    mode: Option<Mode>,
    drains: Option<u32>,
    trigger_alarm: Option<String>,
}

type Drainer<Q, A, M, C> = Arc<Engine<Q, A, M, C>>;

/// The tasks, over one engine for decisions with long waits and one engine per drain count
/// (velocity cap split K ways) for scale-out.
pub struct Workflow<Q, A, M, X, C = NoCircuit> {
    pub engine: Engine<Q, A, M>,
    pub config: WorkflowConfig,
    pub executions: X,
    /// The circuit table (`CIRCUIT_TABLE`): its operator flag opens the circuit breaker.
    pub circuit: C,
    drainers: Mutex<HashMap<u32, Drainer<Q, A, M, C>>>,
    settings: redrive_engine::engine::Settings,
    clock: fn() -> i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn invalid(e: impl std::fmt::Display) -> TaskError {
    TaskError::InvalidInput(e.to_string())
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
            circuit: NoCircuit,
            drainers: Mutex::new(HashMap::new()),
            settings: redrive_engine::engine::Settings::default(),
            clock: now_ms,
        }
    }

    /// The circuit table (`CIRCUIT_TABLE`): its operator flag holds the breaker open, and the
    /// tasks measure bounces into it as the Lambda does (`receiveBatch`, `tally`, `drain`).
    pub fn with_circuit<S: CircuitStore + Clone>(self, store: S) -> Workflow<Q, A, M, X, S> {
        Workflow {
            engine: self.engine,
            config: self.config,
            executions: self.executions,
            circuit: store,
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

    fn fifo(&self) -> bool {
        self.config.redriver.dlq_url.is_fifo() || self.config.redriver.source_queue_url.is_fifo()
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
        let fifo = self.fifo();
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
            stopped_because: StopReason::Limit.as_str().to_string(),
            drain_plan: drain_plan(&run, max_messages),
            started_at: me,
            ..Totals::default()
        };
        if let Some(o) = older {
            tracing::warn!(execution = execution_arn, running = %o.arn, action = "already-running", "another execution is draining this DLQ: this one receives nothing and goes to its summary");
            totals.more = false;
            totals.stopped_because = StopReason::AlreadyRunning.as_str().to_string();
            totals.drain_plan = Vec::new();
        }
        Ok(json!({
            "proceed": older.is_none(),
            "blockedBy": older.map(|o| o.arn.clone()),
            "run": run,
            "totals": totals,
        }))
    }

    /// The guard alarms (any in ALARM or missing opens the circuit, as in the Lambda).
    async fn check_circuit(&self, deadline: Option<Instant>) -> Value {
        let guards = self.engine.open_guards(deadline).await;
        if let Some(open) = &guards {
            tracing::warn!(guards = ?open, action = "circuit-open", "guard alarm in ALARM: the execution touches nothing");
        }
        let (operator, held) = self.operator_flag().await;
        json!({
            "open": guards.is_some() || held,
            "guards": guards.unwrap_or_default(),
            "operator": operator,
        })
    }

    /// The circuit record's operator flag and whether the record holds the circuit open
    /// (`redrive circuit open`, or an adaptive circuit open and cooling down). A record that
    /// cannot be read holds it open (fail closed, as unreadable guard alarms do).
    async fn operator_flag(&self) -> (Value, bool) {
        let Some(cfg) = &self.config.redriver.circuit else {
            return (Value::Null, false);
        };
        if !self.circuit.enabled() {
            return (Value::Null, false);
        }
        let now = (self.clock)();
        match self
            .circuit
            .load(self.config.redriver.dlq_url.as_str())
            .await
        {
            Ok(None) => (json!("auto"), false),
            Ok(Some(stored)) => {
                let mut record = stored.record;
                let operator = record.operator.as_str();
                // Read only: the tick shows what the record holds now; the Lambda writes it.
                record.apply(&cfg.settings, &redrive_shared::circuit::Event::Tick { now });
                let held = record.plan(&cfg.settings) == redrive_shared::circuit::Plan::Hold;
                if held {
                    tracing::warn!(
                        operator,
                        action = "circuit-open",
                        "the circuit record holds the circuit open: the execution touches nothing"
                    );
                }
                (json!(operator), held)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the circuit record; treating the circuit as open");
                (json!("unknown"), true)
            }
        }
    }

    async fn receive(
        &self,
        want: u32,
        visibility: u32,
        deadline: Option<Instant>,
    ) -> Result<Vec<Received>, PortError> {
        let dlq = self.config.redriver.dlq_url.as_str();
        let wait = self.settings.receive_wait_seconds;
        self.engine
            .retry(deadline, || {
                self.engine.bounded(
                    deadline,
                    "ReceiveMessage",
                    self.engine
                        .queue
                        .receive(dlq, want as i32, wait, visibility as i32),
                )
            })
            .await
    }

    /// Sets the visibility of held messages (0 releases them); entry failures are logged.
    async fn set_visibility(
        &self,
        handles: &[String],
        seconds: u32,
        deadline: Option<Instant>,
    ) -> Result<Vec<String>, PortError> {
        let dlq = self.config.redriver.dlq_url.as_str();
        let mut failed = Vec::new();
        for chunk in handles.chunks(MAX_RECEIVE as usize) {
            let entries: Vec<HandleEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| HandleEntry {
                    id: i.to_string(),
                    receipt_handle: h.clone(),
                })
                .collect();
            let outcome = self
                .engine
                .retry(deadline, || {
                    self.engine.bounded(
                        deadline,
                        "ChangeMessageVisibilityBatch",
                        self.engine
                            .queue
                            .change_visibility_batch(dlq, &entries, seconds as i32),
                    )
                })
                .await?;
            for f in outcome.failed {
                tracing::warn!(entry = %f.id, code = %f.code, error = %f.message, "ChangeMessageVisibility entry failed");
                failed.push(f.code);
            }
        }
        Ok(failed)
    }

    /// Receives up to `maxMessages` (at most `WORKFLOW_BATCH_SIZE`) and decides each; sends
    /// nothing. A dry run releases what it received at once.
    pub async fn receive_batch(
        &self,
        max_messages: u32,
        dry_run: bool,
        deadline: Option<Instant>,
    ) -> Result<Batch, TaskError> {
        if self.fifo() {
            return Err(invalid(
                "receiveBatch serves standard queues; a FIFO queue runs as drains (mode scaleOut, one drain)",
            ));
        }
        if let Err(e) = self.engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        let want = max_messages.min(self.config.batch_size);
        let mut messages: Vec<Received> = Vec::new();
        let mut queue_empty = false;
        while (messages.len() as u32) < want {
            let ask = (want - messages.len() as u32).min(MAX_RECEIVE as u32);
            match self
                .receive(ask, self.config.hold_slack_seconds, deadline)
                .await
            {
                Ok(got) if got.is_empty() => {
                    queue_empty = true;
                    break;
                }
                Ok(got) => messages.extend(got),
                Err(e) if messages.is_empty() => {
                    tracing::error!(error = %e, action = "dlq-unreadable", "receiving from the DLQ failed");
                    return Err(if e.retryable {
                        TaskError::Port(e)
                    } else {
                        TaskError::DlqUnreadable(e.to_string())
                    });
                }
                Err(e) => {
                    // What was received is decided and returned; the rest waits for a round.
                    tracing::warn!(error = %e, "receiving more from the DLQ failed; continuing with what was received");
                    break;
                }
            }
        }
        let mut canary = false;
        let mut bounced = 0;
        if !dry_run && !messages.is_empty() {
            let (gate, seen) = self.circuit_gate(&messages).await;
            bounced = seen;
            match gate {
                Gate::Pass => {}
                Gate::Canary(size) => {
                    canary = true;
                    if messages.len() > size as usize {
                        let rest: Vec<String> = messages
                            .split_off(size as usize)
                            .into_iter()
                            .map(|m| m.receipt_handle)
                            .collect();
                        self.release(&rest, deadline).await;
                    }
                }
                Gate::Hold => {
                    let all: Vec<String> = messages.into_iter().map(|m| m.receipt_handle).collect();
                    self.release(&all, deadline).await;
                    tracing::warn!(
                        released = all.len(),
                        action = "circuit-open",
                        "the circuit holds: the batch went back on the DLQ, no attempt spent; the execution stops"
                    );
                    return Ok(Batch {
                        items: Vec::new(),
                        received: 0,
                        queue_empty: false,
                        dry_run,
                        circuit_opened: true,
                        bounced,
                    });
                }
            }
        }
        let received_at = (self.clock)();
        let decided = self.engine.decide_all(messages);
        let mut items: Vec<Item> = decided
            .iter()
            .map(|(m, d)| self.item(m, d, received_at))
            .collect();
        if canary {
            // As in the Lambda, a canary goes out without its backoff: a copy held or delayed
            // beyond the window would let the canary pass untried.
            for i in items.iter_mut().filter(|i| i.action == ItemAction::Redrive) {
                i.wait_seconds = 0;
                i.delay_seconds = 0;
            }
        }
        for item in &items {
            tracing::info!(message_id = %item.message_id, original_message_id = %item.original_message_id, attempt = item.attempt, backoff_seconds = item.backoff_seconds, wait_seconds = item.wait_seconds, delay_seconds = item.delay_seconds, action = if dry_run { "plan" } else { "decided" }, decision = ?item.action, "received");
        }
        if dry_run {
            let handles: Vec<String> = items.iter().map(|i| i.receipt_handle.clone()).collect();
            if let Err(e) = self.set_visibility(&handles, 0, deadline).await {
                tracing::warn!(error = %e, "releasing dry-run messages failed; they reappear after their visibility timeout");
            }
        }
        Ok(Batch {
            received: items.len() as u32,
            items,
            queue_empty,
            dry_run,
            circuit_opened: false,
            bounced,
        })
    }

    /// Releases held messages at once (visibility 0); a failure is logged: they reappear
    /// after their visibility timeout.
    async fn release(&self, handles: &[String], deadline: Option<Instant>) {
        if let Err(e) = self.set_visibility(handles, 0, deadline).await {
            tracing::warn!(error = %e, "releasing messages failed; they reappear after their visibility timeout");
        }
    }

    /// The adaptive circuit's settings when it is on (`CIRCUIT_TABLE` set and a store given).
    fn circuit_settings(&self) -> Option<CircuitSettings> {
        let cfg = self.config.redriver.circuit.as_ref()?;
        self.circuit.enabled().then_some(cfg.settings)
    }

    /// What the adaptive circuit lets a received batch do, as the Lambda's run does: the
    /// batch's bounced copies are counted into the record (a write on the version read; none
    /// when there are none), then the record's plan decides. A record that cannot be read or
    /// written holds (fail closed). With the gate: the bounced copies counted into the record.
    async fn circuit_gate(&self, messages: &[Received]) -> (Gate, u64) {
        let Some(settings) = self.circuit_settings() else {
            return (Gate::Pass, 0);
        };
        let dlq = self.config.redriver.dlq_url.as_str();
        let now = (self.clock)();
        let bounces: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                bounce_of(&meta, now, &settings)
            })
            .collect();
        let bounced = bounces.len();
        let looked = if bounces.is_empty() {
            redrive_engine::circuit::load_or_new(&self.circuit, dlq, &settings, now)
                .await
                .map(|(_, mut record)| {
                    record.tick(&settings, now);
                    (record, Vec::new())
                })
                .map_err(CircuitError::from)
        } else {
            let events = [Event::Tick { now }, Event::Bounces { now, bounces }];
            circuit::update(&self.circuit, dlq, &settings, now, &events).await
        };
        let (record, transitions) = match looked {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read or write the circuit record; treating the circuit as open");
                return (Gate::Hold, 0);
            }
        };
        log_transitions(dlq, &transitions);
        let plan = record.plan(&settings);
        tracing::info!(queue = dlq, bounced, state = %record.state, plan = plan.as_str(), "circuit");
        let gate = match plan {
            Plan::Hold | Plan::Watch => Gate::Hold,
            Plan::Canary { size } => Gate::Canary(size),
            Plan::Drain { .. } => Gate::Pass,
        };
        (gate, bounced as u64)
    }

    /// [`tally`], and the copies the round redrove (messages mode) counted into the circuit
    /// record, so that the bounce-back rate has its denominator (the scale-out drains count
    /// their own). They count from the batch's receive, no later than any `lastRedrivenAt`
    /// they carry, so that a canary recognises all its copies.
    pub async fn tally_round(
        &self,
        run: &Run,
        totals: Totals,
        batch: Option<&Batch>,
        results: &[Value],
    ) -> Totals {
        let before = totals.redriven;
        let after = tally(run, totals, batch, results);
        let n = after.redriven.saturating_sub(before);
        if run.mode != Mode::Messages || run.dry_run || n == 0 {
            return after;
        }
        let Some(settings) = self.circuit_settings() else {
            return after;
        };
        let dlq = self.config.redriver.dlq_url.as_str();
        let now = (self.clock)();
        let sent = batch
            .and_then(|b| b.items.iter().map(|i| i.received_at).min())
            .unwrap_or(now);
        let events = [
            Event::Tick { now },
            Event::Redriven {
                now: sent,
                n: u32::try_from(n).unwrap_or(u32::MAX),
            },
        ];
        match circuit::update(&self.circuit, dlq, &settings, now, &events).await {
            Ok((_, transitions)) => log_transitions(dlq, &transitions),
            Err(e) => {
                tracing::error!(error = %e, redriven = n, "saving the circuit record failed; this round's redriven count is lost")
            }
        }
        after
    }

    fn item(&self, m: &Received, d: &Decision, received_at: i64) -> Item {
        let cfg = &self.config.redriver;
        let meta = d.meta();
        let (action, reason, destination) = match d {
            Decision::Redrive(_) => (ItemAction::Redrive, None, cfg.source_queue_url.name()),
            Decision::Isolate(p) => (
                ItemAction::Isolate,
                Some(p.reason.to_string()),
                cfg.poison_queue_url.name(),
            ),
        };
        let backoff = d.delay_seconds().unwrap_or(0);
        let delay = backoff.min(self.config.max_delay_seconds);
        Item {
            message_id: m.message_id.clone(),
            receipt_handle: m.receipt_handle.clone(),
            received_at,
            group_id: m.group_id.clone(),
            original_message_id: meta.original_message_id.clone(),
            attempt: meta.attempt,
            action,
            reason,
            backoff_seconds: backoff,
            wait_seconds: backoff - delay,
            delay_seconds: delay,
            destination: destination.to_string(),
        }
    }

    /// Hides a message on the DLQ for its wait plus the slack, capped at 12 h from its receive.
    /// A hold that SQS refuses (the handle went stale) is reported, not failed: the message is
    /// then visible on the DLQ, where the redrive task finds it after the wait.
    pub async fn extend_visibility(
        &self,
        item: &Item,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        let elapsed = ((self.clock)() - item.received_at).max(0) as u64;
        let left = u64::from(MAX_WAIT_SECONDS).saturating_sub(elapsed.div_ceil(1000));
        let hold =
            (u64::from(item.wait_seconds) + u64::from(self.config.hold_slack_seconds)).min(left);
        let failed = self
            .set_visibility(
                std::slice::from_ref(&item.receipt_handle),
                hold as u32,
                deadline,
            )
            .await?;
        let held = failed.is_empty();
        tracing::info!(message_id = %item.message_id, original_message_id = %item.original_message_id, held, hold_seconds = hold, action = "hold", "message held on the DLQ for its wait");
        Ok(json!({
            "messageId": item.message_id,
            "held": held,
            "heldSeconds": if held { hold } else { 0 },
        }))
    }

    /// Releases the held message, receives until it comes back, and sends it with its decision
    /// (the engine's send, then delete only what was acknowledged).
    pub async fn redeliver(
        &self,
        item: Item,
        task: ItemAction,
        deadline: Option<Instant>,
    ) -> Result<Outcome, TaskError> {
        if item.action != task {
            return Err(invalid(format!(
                "message {} was decided {:?}, not {:?}",
                item.message_id, item.action, task
            )));
        }
        if let Err(e) = self.engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        // Stale (the hold lapsed, or a retry of this task already released it): it is visible.
        self.set_visibility(std::slice::from_ref(&item.receipt_handle), 0, deadline)
            .await?;
        let mut others: Vec<String> = Vec::new();
        let mut found: Option<Received> = None;
        let mut error: Option<PortError> = None;
        for _ in 0..self.config.search_receives {
            match self
                .receive(MAX_RECEIVE as u32, self.config.hold_slack_seconds, deadline)
                .await
            {
                Ok(got) => {
                    for m in got {
                        if m.message_id == item.message_id && found.is_none() {
                            found = Some(m);
                        } else {
                            others.push(m.receipt_handle);
                        }
                    }
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            if found.is_some() {
                break;
            }
        }
        // Everything else seen goes back at once, whatever happened.
        if !others.is_empty()
            && let Err(e) = self.set_visibility(&others, 0, deadline).await
        {
            tracing::warn!(error = %e, "releasing messages seen while searching failed; they reappear after their visibility timeout");
        }
        let Some(message) = found else {
            if let Some(e) = error {
                return Err(TaskError::Port(e));
            }
            tracing::warn!(message_id = %item.message_id, action = "not-found:left-on-dlq", "the message did not come back from the DLQ");
            return Err(TaskError::MessageNotFound {
                message_id: item.message_id,
                receives: self.config.search_receives,
            });
        };
        let mut decided = self.engine.decide_all(vec![message]);
        if let Some((_, Decision::Redrive(plan))) = decided.first_mut()
            && plan.delay_seconds.is_some()
        {
            // The wait is over: what is left of the drawn backoff is the copy's delay.
            plan.delay_seconds = Some(item.delay_seconds);
        }
        let decision = decided[0].1.clone();
        let action = if decision.is_redrive() {
            ItemAction::Redrive
        } else {
            ItemAction::Isolate
        };
        if action != item.action {
            tracing::warn!(message_id = %item.message_id, decided = ?item.action, now = ?action, "the decision changed since the batch was received; the new one applies");
        }
        let summary = self.engine.apply_decided(decided, deadline).await;
        let outcome = if summary.redriven > 0 {
            "redriven"
        } else if summary.isolated > 0 {
            "isolated"
        } else {
            "failed"
        };
        let cfg = &self.config.redriver;
        let (reason, destination) = match &decision {
            Decision::Redrive(_) => (None, cfg.source_queue_url.name()),
            Decision::Isolate(p) => (Some(p.reason.to_string()), cfg.poison_queue_url.name()),
        };
        Ok(Outcome {
            message_id: item.message_id,
            original_message_id: decision.meta().original_message_id.clone(),
            attempt: decision.meta().attempt,
            action,
            reason,
            delay_seconds: decision.delay_seconds().unwrap_or(0),
            waited_seconds: item.wait_seconds,
            destination: destination.to_string(),
            outcome: outcome.to_string(),
        })
    }

    fn drainer(&self, drains: u32) -> Drainer<Q, A, M, C> {
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
                    .with_circuit(self.circuit.clone()),
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
            .drain_with_circuit(&DrainRequest {
                max_messages: d.max_messages,
                dry_run: d.dry_run,
                deadline,
                trigger_alarm: None,
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
        let mut summary = Summary {
            received: totals.received,
            redriven: totals.redriven,
            isolated: totals.isolated,
            failed: totals.failed,
            dry_run: run.dry_run,
            stopped_because: stop_reason(&totals.stopped_because),
            dlq_remaining: None,
            dlq_unreadable: None,
            unplaceable: 0,
            circuit: self.circuit_summary(totals).await,
        };
        let request = DrainRequest {
            max_messages: run.max_messages,
            dry_run: run.dry_run,
            deadline,
            trigger_alarm: run.trigger_alarm.clone(),
        };
        self.engine.end_run(&request, &mut summary).await;
        if totals.not_found > 0 {
            tracing::warn!(
                not_found = totals.not_found,
                "messages that never came back from the DLQ (counted in failed)"
            );
        }
        summary
    }
}

impl<Q, A, M, X, C> Workflow<Q, A, M, X, C>
where
    C: CircuitStore,
{
    /// The circuit in the execution's response when it is on, as the Lambda reports it: the
    /// record's state, operator and plan as the tasks left it (read only: the tasks write it),
    /// the bounced copies the execution saw and the transitions the record made since the
    /// execution started (kept in its history). A record that cannot be read reports no
    /// circuit, as the Lambda's response on an unreadable record has none (the tasks that
    /// could not read it held the circuit open and stopped with `circuit-open`).
    async fn circuit_summary(&self, totals: &Totals) -> Option<CircuitSummary> {
        let cfg = self.config.redriver.circuit.as_ref()?;
        if !self.circuit.enabled() {
            return None;
        }
        let settings = cfg.settings;
        let dlq = self.config.redriver.dlq_url.as_str();
        let record = match self.circuit.load(dlq).await {
            Ok(Some(stored)) => stored.record,
            Ok(None) => CircuitRecord::new(&settings, (self.clock)()),
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; the response carries no circuit state and no circuit metrics");
                return None;
            }
        };
        let plan = record.plan(&settings);
        // Totals from before the start time was kept cannot tell this execution's
        // transitions from older ones: none are claimed.
        let transitions = if totals.started_at > 0 {
            record
                .history
                .iter()
                .filter(|t| t.at >= totals.started_at)
                .count() as u64
        } else {
            0
        };
        Some(CircuitSummary {
            state: record.state,
            operator: record.operator,
            plan: plan.as_str(),
            budget: plan.budget(),
            bounced: totals.bounced,
            transitions,
        })
    }
}

/// What the adaptive circuit lets a received batch do.
enum Gate {
    /// Closed (or off): decide the batch as usual.
    Pass,
    /// Half-open: this many messages are the canary; the rest go back on the DLQ.
    Canary(u32),
    /// Open, or watching for the canary: the whole batch goes back on the DLQ.
    Hold,
}

fn log_transitions(queue: &str, transitions: &[Transition]) {
    for t in transitions {
        if t.to == State::Open {
            tracing::warn!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit opened: nothing is redriven until a canary comes through");
        } else {
            tracing::info!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit transition");
        }
    }
}

fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "queue-empty" => StopReason::QueueEmpty,
        "limit" => StopReason::Limit,
        "deadline" => StopReason::Deadline,
        "circuit-open" => StopReason::CircuitOpen,
        "not-in-alarm" => StopReason::NotInAlarm,
        "other-queue" => StopReason::OtherQueue,
        "already-running" => StopReason::AlreadyRunning,
        _ => StopReason::Other,
    }
}

/// The drains of the next scale-out round: the remaining budget split K ways.
fn drain_plan(run: &Run, remaining: u32) -> Vec<DrainItem> {
    if run.mode != Mode::ScaleOut || remaining == 0 {
        return Vec::new();
    }
    let share = remaining.div_ceil(run.drains);
    let mut left = remaining;
    (0..run.drains)
        .map_while(|index| {
            let n = share.min(left);
            left -= n;
            (n > 0).then_some(DrainItem {
                index,
                drains: run.drains,
                max_messages: n,
                dry_run: run.dry_run,
            })
        })
        .collect()
}

/// Adds a round's results to the totals and decides whether another round follows.
pub fn tally(run: &Run, mut totals: Totals, batch: Option<&Batch>, results: &[Value]) -> Totals {
    let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut received = 0u64;
    let mut queue_empty = false;
    let mut progress = 0u64;
    let mut circuit_open = false;
    match (run.mode, batch) {
        (Mode::Messages, Some(b)) => {
            circuit_open = b.circuit_opened;
            totals.bounced += b.bounced;
            received = u64::from(b.received);
            queue_empty = b.queue_empty;
            if b.dry_run {
                // A plan: counted as the Lambda's dry run counts it; nothing was sent.
                for i in &b.items {
                    match i.action {
                        ItemAction::Redrive => totals.redriven += 1,
                        ItemAction::Isolate => totals.isolated += 1,
                    }
                }
            } else {
                for r in results {
                    match r.get("outcome").and_then(Value::as_str) {
                        Some("redriven") => {
                            totals.redriven += 1;
                            progress += 1;
                        }
                        Some("isolated") => {
                            totals.isolated += 1;
                            progress += 1;
                        }
                        Some("left-on-dlq") => {
                            totals.failed += 1;
                            totals.left_on_dlq += 1;
                        }
                        Some("not-found") => {
                            totals.failed += 1;
                            totals.not_found += 1;
                        }
                        _ => totals.failed += 1,
                    }
                }
            }
        }
        _ => {
            for r in results {
                received += count(r, "received");
                totals.redriven += count(r, "redriven");
                totals.isolated += count(r, "isolated");
                totals.failed += count(r, "failed");
                progress += count(r, "redriven") + count(r, "isolated");
                let stopped = r.get("stoppedBecause").and_then(Value::as_str);
                queue_empty |= stopped == Some("queue-empty");
                circuit_open |= stopped == Some(StopReason::CircuitOpen.as_str());
                totals.bounced += r.get("circuit").map_or(0, |c| count(c, "bounced"));
            }
        }
    }
    totals.received += received;
    totals.rounds += 1;
    totals.remaining = totals
        .remaining
        .saturating_sub(u32::try_from(received).unwrap_or(u32::MAX));
    totals.queue_empty = queue_empty;
    totals.stopped_because = if queue_empty {
        StopReason::QueueEmpty
    } else {
        StopReason::Limit
    }
    .as_str()
    .to_string();
    // A dry run plans one round (it releases what it saw, so a second would see it again);
    // a round that moved nothing stops rather than spin on messages that keep failing.
    totals.more = !run.dry_run && !queue_empty && totals.remaining > 0 && progress > 0;
    if !totals.more && !queue_empty && totals.remaining > 0 && !run.dry_run {
        totals.stopped_because = StopReason::Other.as_str().to_string();
    }
    if totals.more && totals.rounds >= MAX_ROUNDS_PER_EXECUTION {
        // The history's bound: the next trigger continues (the summary re-arms the alarm).
        totals.more = false;
    }
    if circuit_open {
        // The adaptive circuit opened (or holds): no further round; the summary says why.
        totals.more = false;
        totals.stopped_because = StopReason::CircuitOpen.as_str().to_string();
    }
    totals.drain_plan = if totals.more {
        drain_plan(run, totals.remaining)
    } else {
        Vec::new()
    };
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
    use redrive_engine::ports::{EntryFailure, SendEntry};
    use redrive_shared::Attributes;
    use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
    use std::time::Duration;

    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
    const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
    const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";
    const SRC_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo";

    type TestWorkflow =
        Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, FixedExecutions>;

    fn config(pairs: &[(&str, &str)]) -> Result<WorkflowConfig, ConfigError> {
        let mut map: HashMap<String, String> = [
            ("DLQ_URL", DLQ),
            ("SOURCE_QUEUE_URL", SRC),
            ("POISON_QUEUE_URL", POISON),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in pairs {
            map.insert(k.to_string(), v.to_string());
        }
        WorkflowConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
    }

    fn setup(pairs: &[(&str, &str)]) -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestWorkflow) {
        let sqs = FakeSqs::new();
        let cfg = config(pairs).expect("valid test config");
        for q in [
            cfg.redriver.dlq_url.as_str(),
            cfg.redriver.source_queue_url.as_str(),
            cfg.redriver.poison_queue_url.as_str(),
        ] {
            sqs.create_queue(q);
        }
        let cw = FakeCloudWatch::new();
        let wf = Workflow::new(
            sqs.clone(),
            cw.clone(),
            cw.clone(),
            FixedExecutions::default(),
            cfg,
        )
        .with_settings(redrive_engine::engine::Settings {
            retry_base: Duration::from_millis(1),
            receive_wait_seconds: 0,
            ..redrive_engine::engine::Settings::default()
        })
        .with_seed(7);
        (sqs, cw, wf)
    }

    /// Executions `e1` (the older) and `e2` are running.
    fn two_running() -> FixedExecutions {
        FixedExecutions(
            ["e1", "e2"]
                .iter()
                .zip(1..)
                .map(|(arn, started_ms)| RunningExecution {
                    arn: arn.to_string(),
                    started_ms,
                })
                .collect(),
        )
    }

    /// A fixed 2,000 s backoff: 900 s of DelaySeconds and 1,100 s held on the DLQ.
    const LONG: &[(&str, &str)] = &[
        ("BACKOFF_BASE_SECONDS", "2000"),
        ("BACKOFF_MAX_SECONDS", "43200"),
        ("BACKOFF_JITTER", "none"),
    ];

    fn permanent() -> Attributes {
        let mut a = Attributes::new();
        RedriveMeta {
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "HTTP_400",
                "rejected",
                "2026-11-21T10:00:00Z".into(),
            )),
            ..RedriveMeta::fresh("m-perm")
        }
        .write_into(&mut a);
        a
    }

    fn attempt_of(a: &Attributes, id: &str) -> u32 {
        RedriveMeta::read(a, id).0.attempt
    }

    #[test]
    fn backoff_cap_is_twelve_hours_here_and_900_s_for_drains() {
        let c = config(LONG).unwrap();
        assert_eq!(c.wait_backoff.max(), 43_200);
        assert_eq!(
            c.redriver.backoff.max(),
            900,
            "scale-out drains keep SQS's limit"
        );
        let e = config(&[("BACKOFF_MAX_SECONDS", "43201")]).unwrap_err();
        assert_eq!(e.variable, "BACKOFF_MAX_SECONDS");
        assert!(e.to_string().contains("43200"), "{e}");
        // The hold (wait + slack) must fit in 12 h from the receive.
        let e = config(&[
            ("BACKOFF_MAX_SECONDS", "43200"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "0"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("12 h"), "{e}");
        let e = config(&[("WORKFLOW_BATCH_SIZE", "41")]).unwrap_err();
        assert_eq!(e.variable, "WORKFLOW_BATCH_SIZE");
        let e = config(&[("DLQ_URL", "nope")]).unwrap_err();
        assert_eq!(
            e.variable, "DLQ_URL",
            "the re-driver's own rules still apply"
        );
    }

    #[tokio::test]
    async fn receive_batch_decides_holds_and_carries_no_body() {
        let (sqs, _, wf) = setup(LONG);
        let body = "x".repeat(200_000);
        let id = sqs.push(DLQ, &body, Attributes::new(), None);
        let poison_id = sqs.push(DLQ, "poison", permanent(), None);
        let batch = wf.receive_batch(10, false, None).await.unwrap();
        assert_eq!(batch.received, 2);
        let json = serde_json::to_string(&batch).unwrap();
        assert!(!json.contains("xxxxxxxx"), "bodies never enter the state");
        assert!(json.len() < 4_000, "small state: {} bytes", json.len());
        let r = batch.items.iter().find(|i| i.message_id == id).unwrap();
        assert_eq!(r.action, ItemAction::Redrive);
        assert_eq!(
            (r.backoff_seconds, r.delay_seconds, r.wait_seconds),
            (2000, 900, 1100)
        );
        assert_eq!(r.attempt, 1);
        assert_eq!(r.destination, "orders");
        let p = batch
            .items
            .iter()
            .find(|i| i.message_id == poison_id)
            .unwrap();
        assert_eq!(p.action, ItemAction::Isolate);
        assert_eq!(p.reason.as_deref(), Some("permanent-failure"));
        assert_eq!(p.destination, "orders-poison");
        // Nothing sent, nothing deleted: both still on the DLQ, in flight.
        assert_eq!(sqs.len(DLQ), 2);
        assert_eq!(sqs.depth_visible(DLQ), 0);
        assert!(sqs.is_empty(SRC) && sqs.is_empty(POISON));
    }

    #[tokio::test]
    async fn a_long_wait_holds_the_message_then_redrives_it_with_the_rest_as_delay() {
        let (sqs, _, wf) = setup(LONG);
        let id = sqs.push(DLQ, "order o-101", Attributes::new(), None);
        let item = wf.receive_batch(10, false, None).await.unwrap().items[0].clone();
        let held = wf.extend_visibility(&item, None).await.unwrap();
        assert_eq!(held["held"], true);
        assert_eq!(held["heldSeconds"], 1100 + 300);
        assert_eq!(
            sqs.depth_visible(DLQ),
            0,
            "hidden on the DLQ while it waits"
        );
        assert!(sqs.is_empty(SRC));

        let out = wf.redeliver(item, ItemAction::Redrive, None).await.unwrap();
        assert_eq!(out.outcome, "redriven");
        assert_eq!((out.delay_seconds, out.waited_seconds), (900, 1100));
        assert_eq!(out.original_message_id, id);
        assert!(sqs.is_empty(DLQ), "deleted once the copy was acknowledged");
        let copy = &sqs.messages(SRC)[0];
        assert_eq!(copy.body, "order o-101");
        assert_eq!(copy.delay_seconds, Some(900));
        assert_eq!(attempt_of(&copy.attributes, &copy.message_id), 1);
    }

    #[tokio::test]
    async fn isolate_finds_its_message_among_others_and_releases_them() {
        let (sqs, _, wf) = setup(&[("WORKFLOW_BATCH_SIZE", "1")]);
        let poison_id = sqs.push(DLQ, "poison", permanent(), None);
        let item = wf.receive_batch(10, false, None).await.unwrap().items[0].clone();
        assert_eq!(item.message_id, poison_id);
        for i in 0..15 {
            sqs.push(DLQ, &format!("other {i}"), Attributes::new(), None);
        }
        // The redrive task is not the isolation task.
        assert!(matches!(
            wf.redeliver(item.clone(), ItemAction::Redrive, None).await,
            Err(TaskError::InvalidInput(_))
        ));
        let out = wf.redeliver(item, ItemAction::Isolate, None).await.unwrap();
        assert_eq!(out.outcome, "isolated");
        assert_eq!(out.reason.as_deref(), Some("permanent-failure"));
        assert_eq!(sqs.messages(POISON)[0].body, "poison");
        assert_eq!(sqs.len(DLQ), 15);
        assert_eq!(
            sqs.depth_visible(DLQ),
            15,
            "every other message seen went back"
        );
        assert!(sqs.is_empty(SRC));
    }

    #[tokio::test]
    async fn a_copy_not_acknowledged_leaves_the_message_on_the_dlq() {
        let (sqs, _, wf) = setup(&[]);
        sqs.push(DLQ, "order", Attributes::new(), None);
        let item = wf.receive_batch(10, false, None).await.unwrap().items[0].clone();
        sqs.fail_send_entries(|_, e: &SendEntry| {
            Some(EntryFailure {
                id: e.id.clone(),
                code: "InternalError".into(),
                message: "injected".into(),
                sender_fault: false,
            })
        });
        let out = wf.redeliver(item, ItemAction::Redrive, None).await.unwrap();
        assert_eq!(out.outcome, "failed");
        assert_eq!(
            sqs.len(DLQ),
            1,
            "not deleted: the copy was never acknowledged"
        );
        assert!(sqs.is_empty(SRC));
    }

    #[tokio::test]
    async fn a_message_that_does_not_come_back_is_not_found_and_nothing_is_deleted() {
        let (sqs, _, wf) = setup(&[("WORKFLOW_SEARCH_RECEIVES", "2")]);
        sqs.push(DLQ, "order", Attributes::new(), None);
        let mut item = wf.receive_batch(10, false, None).await.unwrap().items[0].clone();
        sqs.push(DLQ, "other", Attributes::new(), None);
        item.message_id = "gone".into();
        let err = wf
            .redeliver(item, ItemAction::Redrive, None)
            .await
            .unwrap_err();
        assert_eq!(err.error_type(), "MessageNotFound");
        assert_eq!(sqs.len(DLQ), 2);
        assert_eq!(sqs.depth_visible(DLQ), 2, "released, not deleted");
        assert!(sqs.is_empty(SRC));
    }

    #[tokio::test]
    async fn dry_run_plans_and_releases() {
        let (sqs, _, wf) = setup(&[]);
        sqs.push(DLQ, "a", Attributes::new(), None);
        sqs.push(DLQ, "p", permanent(), None);
        let batch = wf.receive_batch(10, true, None).await.unwrap();
        assert_eq!(batch.received, 2);
        assert_eq!(sqs.depth_visible(DLQ), 2, "released at once");
        let run = Run {
            max_messages: 10,
            dry_run: true,
            mode: Mode::Messages,
            drains: 1,
            fifo: false,
            trigger_alarm: None,
        };
        let totals = Totals {
            remaining: 10,
            ..Totals::default()
        };
        let t = tally(&run, totals, Some(&batch), &[]);
        assert_eq!((t.received, t.redriven, t.isolated), (2, 1, 1));
        assert!(!t.more, "a dry run plans one round");
    }

    #[test]
    fn a_message_that_never_came_back_is_counted_not_found_apart_from_left_on_dlq() {
        let run = Run {
            max_messages: 10,
            dry_run: false,
            mode: Mode::Messages,
            drains: 1,
            fifo: false,
            trigger_alarm: None,
        };
        let batch = Batch {
            items: Vec::new(),
            received: 4,
            queue_empty: true,
            dry_run: false,
            circuit_opened: false,
            bounced: 0,
        };
        let results = [
            json!({"outcome": "redriven"}),
            json!({"outcome": "isolated"}),
            json!({"outcome": "not-found", "error": "MessageNotFound"}),
            json!({"outcome": "left-on-dlq", "error": "Sqs.Failed"}),
        ];
        let totals = Totals {
            remaining: 10,
            ..Totals::default()
        };
        let t = tally(&run, totals, Some(&batch), &results);
        assert_eq!((t.redriven, t.isolated, t.failed), (1, 1, 2));
        assert_eq!((t.not_found, t.left_on_dlq), (1, 1));
        assert_eq!(t.received, t.redriven + t.isolated + t.failed);
    }

    #[tokio::test]
    async fn start_rejects_unknown_keys_and_lets_only_the_oldest_execution_proceed() {
        let (_, _, mut wf) = setup(&[]);
        let err = wf
            .handle(
                json!({"action":"start","input":{"maxMesages":5},"executionArn":"e2","stateMachineArn":"sm"}),
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(err.error_type(), "InvalidInput");
        assert!(err.to_string().contains("maxMesages"), "{err}");
        wf.executions = two_running();
        let start = |arn: &'static str| json!({"action":"start","input":{"maxMessages":5,"mode":"scaleOut","drains":2},"executionArn":arn,"stateMachineArn":"sm"});
        let later = wf.handle(start("e2"), None).await.unwrap();
        assert_eq!(later["proceed"], false);
        assert_eq!(later["blockedBy"], "e1");
        let older = wf.handle(start("e1"), None).await.unwrap();
        assert_eq!(older["proceed"], true);
        assert_eq!(older["run"]["drains"], 2);
        assert_eq!(
            older["totals"]["drainPlan"],
            json!([
                {"index":0,"drains":2,"maxMessages":3,"dryRun":false},
                {"index":1,"drains":2,"maxMessages":2,"dryRun":false}
            ])
        );
    }

    #[tokio::test]
    async fn an_execution_that_finds_another_running_goes_to_its_summary_which_re_arms() {
        let (_, cw, mut wf) = setup(&[]);
        wf.executions = two_running();
        let started = wf
            .handle(
                json!({"action":"start","input":{"triggerAlarm":"orders-dlq-depth"},"executionArn":"e2","stateMachineArn":"sm"}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(started["proceed"], false);
        assert_eq!(started["totals"]["stoppedBecause"], "already-running");
        assert_eq!(started["totals"]["more"], false);
        cw.set_state("orders-dlq-depth", "ALARM");
        let summary = wf
            .handle(
                json!({"action":"summary","run":started["run"],"totals":started["totals"]}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(summary["stoppedBecause"], "already-running");
        assert_eq!(summary["received"], 0);
        assert_eq!(
            cw.set_ok_calls.lock().unwrap().as_slice(),
            ["orders-dlq-depth"]
        );
    }

    #[tokio::test]
    async fn a_scheduled_or_manual_execution_re_arms_the_configured_trigger_alarm() {
        let (_, _, wf) = setup(&[("TRIGGER_ALARM_NAME", "orders-dlq-not-empty")]);
        let start = |input: Value| json!({"action":"start","input":input,"executionArn":"e","stateMachineArn":"sm"});
        // The schedule's input is {}; an operator's may name nothing either.
        let scheduled = wf.handle(start(json!({})), None).await.unwrap();
        assert_eq!(scheduled["run"]["triggerAlarm"], "orders-dlq-not-empty");
        // The alarm rule names the alarm that fired.
        let alarmed = wf
            .handle(start(json!({"triggerAlarm": "other-alarm"})), None)
            .await
            .unwrap();
        assert_eq!(alarmed["run"]["triggerAlarm"], "other-alarm");
    }

    #[tokio::test]
    async fn an_execution_ends_after_its_rounds_with_limit_and_the_next_trigger_continues() {
        let (_, _, wf) = setup(&[]);
        // No cap on maxMessages itself: the rounds bound the execution.
        let started = wf
            .handle(
                json!({"action":"start","input":{"maxMessages":5000},"executionArn":"e","stateMachineArn":"sm"}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(started["proceed"], true);
        let run: Run = serde_json::from_value(started["run"].clone()).unwrap();
        let mut totals: Totals = serde_json::from_value(started["totals"].clone()).unwrap();
        let batch = Batch {
            received: MAX_PARALLEL,
            ..Batch::default()
        };
        let results = vec![json!({"outcome": "redriven"}); MAX_PARALLEL as usize];
        for round in 1..=MAX_ROUNDS_PER_EXECUTION {
            totals = tally(&run, totals, Some(&batch), &results);
            assert_eq!(totals.rounds, round);
            assert_eq!(
                totals.more,
                round < MAX_ROUNDS_PER_EXECUTION,
                "round {round}"
            );
        }
        assert_eq!(totals.stopped_because, "limit");
        assert_eq!(
            totals.received,
            u64::from(MAX_ROUNDS_PER_EXECUTION * MAX_PARALLEL)
        );
        assert!(totals.remaining > 0);

        // Scale-out rounds count the same way.
        let run = Run {
            mode: Mode::ScaleOut,
            drains: 2,
            ..run
        };
        let totals = Totals {
            remaining: 1_000_000,
            rounds: MAX_ROUNDS_PER_EXECUTION - 1,
            ..Totals::default()
        };
        let drained = json!({"received": 100, "redriven": 100, "stoppedBecause": "limit"});
        let t = tally(&run, totals, None, &[drained.clone(), drained]);
        assert!(!t.more);
        assert!(t.drain_plan.is_empty());
        assert_eq!(t.stopped_because, "limit");
    }

    #[tokio::test]
    async fn fifo_runs_as_one_drain_and_refuses_the_per_message_path() {
        let (_, _, wf) = setup(&[("SOURCE_QUEUE_URL", SRC_FIFO)]);
        let out = wf
            .handle(
                json!({"action":"start","input":{"mode":"messages","drains":4},"executionArn":"e","stateMachineArn":"sm"}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(out["run"]["mode"], "scaleOut");
        assert_eq!(out["run"]["drains"], 1);
        assert!(wf.receive_batch(10, false, None).await.is_err());
    }

    #[tokio::test]
    async fn scale_out_drains_share_the_budget_and_the_velocity_cap() {
        let (sqs, cw, wf) = setup(&[("MAX_MESSAGES_PER_SECOND", "100")]);
        for i in 0..30 {
            sqs.push(DLQ, &format!("m{i}"), Attributes::new(), None);
        }
        let run = Run {
            max_messages: 30,
            dry_run: false,
            mode: Mode::ScaleOut,
            drains: 3,
            fifo: false,
            trigger_alarm: None,
        };
        assert_eq!(
            wf.drainer(3).config.max_messages_per_second,
            100.0 / 3.0,
            "each drain takes 1/K of the cap"
        );
        let plan = drain_plan(&run, 30);
        let results = futures_util::future::join_all(plan.iter().map(|d| wf.drain(d, None))).await;
        let results: Vec<Value> = results.into_iter().map(Result::unwrap).collect();
        let totals = tally(
            &run,
            Totals {
                remaining: 30,
                ..Totals::default()
            },
            None,
            &results,
        );
        assert_eq!((totals.received, totals.redriven), (30, 30));
        assert_eq!(totals.remaining, 0);
        assert!(!totals.more);
        assert_eq!(sqs.len(SRC), 30);
        assert!(sqs.is_empty(DLQ));
        // The execution's summary publishes one PutMetricData with the totals.
        let s = wf.summary(&run, &totals, None).await;
        assert_eq!(s.redriven, 30);
        assert_eq!(s.dlq_remaining, Some(0));
        let published = cw.published.lock().unwrap();
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].2.successful_redrives, 30);
    }

    #[tokio::test]
    async fn the_circuit_check_reads_the_guard_alarms() {
        let (_, cw, wf) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors")]);
        cw.set_state("downstream-errors", "OK");
        let out = wf
            .handle(json!({"action":"checkCircuit"}), None)
            .await
            .unwrap();
        assert_eq!(out["open"], false);
        cw.set_state("downstream-errors", "ALARM");
        let out = wf
            .handle(json!({"action":"checkCircuit"}), None)
            .await
            .unwrap();
        assert_eq!(out["open"], true);
        assert_eq!(out["guards"], json!(["downstream-errors"]));
    }

    #[tokio::test]
    async fn the_operator_flag_opens_the_circuit() {
        use redrive_engine::circuit::MemoryCircuitStore;
        use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Override};
        let (_, _, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
        let store = MemoryCircuitStore::new();
        let mut record = CircuitRecord::new(&CircuitSettings::default(), 0);
        record.operator = Override::Open;
        store.put(DLQ, record.clone());
        let wf = wf.with_circuit(store);
        let out = wf
            .handle(json!({"action":"checkCircuit"}), None)
            .await
            .unwrap();
        assert_eq!(out["open"], true);
        assert_eq!(out["operator"], "open");
        assert_eq!(out["guards"], json!([]));
        record.operator = Override::Auto;
        wf.circuit.put(DLQ, record);
        let out = wf
            .handle(json!({"action":"checkCircuit"}), None)
            .await
            .unwrap();
        assert_eq!(out["open"], false);
        assert_eq!(out["operator"], "auto");
    }

    mod adaptive_circuit {
        use super::*;
        use redrive_engine::circuit::MemoryCircuitStore;
        use redrive_shared::circuit::{Override, State};

        type CircuitWorkflow = Workflow<
            Arc<FakeSqs>,
            Arc<FakeCloudWatch>,
            Arc<FakeCloudWatch>,
            FixedExecutions,
            Arc<MemoryCircuitStore>,
        >;

        fn with_store() -> (Arc<FakeSqs>, Arc<MemoryCircuitStore>, CircuitWorkflow) {
            let (sqs, _, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
            let store = MemoryCircuitStore::new();
            (sqs, store.clone(), wf.with_circuit(store))
        }

        /// A redriven copy back on the DLQ just now (attempt 1, `lastRedrivenAt` now).
        fn bounced(sqs: &FakeSqs, original: &str) -> String {
            let mut a = Attributes::new();
            RedriveMeta {
                attempt: 1,
                first_redriven_at: Some(redrive_shared::timefmt::rfc3339_from_millis(now_ms())),
                last_redriven_at: Some(redrive_shared::timefmt::rfc3339_from_millis(now_ms())),
                ..RedriveMeta::fresh(original)
            }
            .write_into(&mut a);
            sqs.push(DLQ, &format!("copy of {original}"), a, None)
        }

        fn run(mode: Mode) -> Run {
            Run {
                max_messages: 100,
                dry_run: false,
                mode,
                drains: 1,
                fifo: false,
                trigger_alarm: None,
            }
        }

        fn totals() -> Totals {
            Totals {
                remaining: 100,
                ..Totals::default()
            }
        }

        fn state(store: &MemoryCircuitStore) -> State {
            store.get(DLQ).expect("a circuit record").record.state
        }

        #[tokio::test]
        async fn bounced_copies_seen_by_receive_batch_open_it_and_the_batch_goes_back_untouched() {
            let (sqs, store, wf) = with_store();
            for i in 0..3 {
                bounced(&sqs, &format!("orig-{i}"));
            }
            sqs.push(DLQ, "fresh a", Attributes::new(), None);
            sqs.push(DLQ, "fresh b", Attributes::new(), None);

            let batch = wf.receive_batch(10, false, None).await.unwrap();

            assert!(batch.circuit_opened, "{batch:?}");
            assert!(batch.items.is_empty() && batch.received == 0 && !batch.queue_empty);
            assert_eq!(state(&store), State::Open, "the record opened by itself");
            assert_eq!(
                store.get(DLQ).unwrap().record.counts().1,
                0,
                "cleared on open"
            );
            // Untouched: all five visible again on the DLQ at once, nothing sent, no attempt spent.
            assert_eq!((sqs.len(DLQ), sqs.depth_visible(DLQ)), (5, 5));
            assert!(sqs.is_empty(SRC) && sqs.is_empty(POISON));
            for m in sqs.messages(DLQ) {
                let want = u32::from(m.body.starts_with("copy"));
                assert_eq!(attempt_of(&m.attributes, &m.message_id), want);
            }
            // The round ends the execution, stopped by the circuit.
            let t = tally(&run(Mode::Messages), totals(), Some(&batch), &[]);
            assert!(!t.more);
            assert_eq!(t.stopped_because, "circuit-open");
            assert_eq!(t.received, 0);
            // The next batch is held by the open record (nothing received is decided).
            let again = wf.receive_batch(10, false, None).await.unwrap();
            assert!(again.circuit_opened && again.items.is_empty());
            assert_eq!(sqs.depth_visible(DLQ), 5);
        }

        #[tokio::test]
        async fn a_scale_out_drain_with_bounced_copies_opens_it_and_stops() {
            let (sqs, store, wf) = with_store();
            for i in 0..3 {
                bounced(&sqs, &format!("orig-{i}"));
            }
            for i in 0..4 {
                sqs.push(DLQ, &format!("fresh {i}"), Attributes::new(), None);
            }
            let plan = drain_plan(&run(Mode::ScaleOut), 7);
            let out = wf.drain(&plan[0], None).await.unwrap();

            assert_eq!(out["stoppedBecause"], "circuit-open", "{out}");
            assert_eq!(out["redriven"], 0, "{out}");
            assert_eq!(out["circuit"]["state"], "open", "{out}");
            assert_eq!(state(&store), State::Open);
            assert_eq!((sqs.len(DLQ), sqs.depth_visible(DLQ)), (7, 7));
            assert!(sqs.is_empty(SRC));
            let t = tally(&run(Mode::ScaleOut), totals(), None, &[out]);
            assert!(!t.more && t.drain_plan.is_empty());
            assert_eq!(t.stopped_because, "circuit-open");
        }

        #[tokio::test]
        async fn half_open_keeps_only_the_canary_without_its_backoff_and_the_tally_sends_it_out() {
            use redrive_shared::circuit::{CircuitRecord, CircuitSettings};
            let (sqs, _, wf) = setup(&[
                ("CIRCUIT_TABLE", "redrive-circuit"),
                LONG[0],
                LONG[1],
                LONG[2],
            ]);
            let store = MemoryCircuitStore::new();
            let wf = wf.with_circuit(store.clone());
            let mut record = CircuitRecord::new(&CircuitSettings::default(), now_ms());
            record.state = State::HalfOpen;
            store.put(DLQ, record);
            for i in 0..15 {
                sqs.push(DLQ, &format!("fresh {i}"), Attributes::new(), None);
            }
            let batch = wf.receive_batch(40, false, None).await.unwrap();
            assert!(!batch.circuit_opened);
            assert_eq!(
                batch.items.len(),
                10,
                "CIRCUIT_CANARY_SIZE messages, no more"
            );
            assert!(
                batch
                    .items
                    .iter()
                    .all(|i| i.wait_seconds == 0 && i.delay_seconds == 0)
            );
            assert_eq!(sqs.depth_visible(DLQ), 5, "the rest went back at once");
            let results: Vec<Value> = (0..10).map(|_| json!({"outcome": "redriven"})).collect();
            wf.tally_round(&run(Mode::Messages), totals(), Some(&batch), &results)
                .await;
            let canary = store
                .get(DLQ)
                .unwrap()
                .record
                .canary
                .expect("the canary is out");
            assert_eq!(canary.sent, 10);
            // With the canary out, the next batch only watches: released, the execution stops.
            let next = wf.receive_batch(40, false, None).await.unwrap();
            assert!(next.circuit_opened && next.items.is_empty());
            assert_eq!(sqs.depth_visible(DLQ), 5);
        }

        #[tokio::test]
        async fn redriven_copies_reach_the_record_in_both_modes() {
            // Scale-out: the drain counts its own.
            let (sqs, store, wf) = with_store();
            for i in 0..4 {
                sqs.push(DLQ, &format!("fresh {i}"), Attributes::new(), None);
            }
            let plan = drain_plan(&run(Mode::ScaleOut), 4);
            let out = wf.drain(&plan[0], None).await.unwrap();
            assert_eq!(out["redriven"], 4, "{out}");
            assert_eq!(store.get(DLQ).unwrap().record.counts(), (4, 0));

            // Messages: the round's tally counts what its redrive tasks redrove.
            let (sqs, store, wf) = with_store();
            sqs.push(DLQ, "a", Attributes::new(), None);
            sqs.push(DLQ, "b", Attributes::new(), None);
            sqs.push(DLQ, "p", permanent(), None);
            let batch = wf.receive_batch(10, false, None).await.unwrap();
            assert_eq!(batch.received, 3);
            assert!(store.get(DLQ).is_none(), "no bounce, no write");
            let mut results = Vec::new();
            for item in batch.items.clone() {
                let action = item.action;
                results.push(to_value(wf.redeliver(item, action, None).await.unwrap()));
            }
            let t = wf
                .tally_round(&run(Mode::Messages), totals(), Some(&batch), &results)
                .await;
            assert_eq!((t.redriven, t.isolated), (2, 1));
            let record = store.get(DLQ).expect("the tally wrote the record").record;
            assert_eq!(record.counts(), (2, 0), "isolated copies are not redriven");
            assert_eq!(record.state, State::Closed);
            // A dry run writes nothing.
            let (_, store, wf) = with_store();
            let dry = Run {
                dry_run: true,
                ..run(Mode::Messages)
            };
            wf.tally_round(&dry, totals(), Some(&batch), &results).await;
            assert!(store.get(DLQ).is_none());
        }

        /// `start` through the handler: the execution's run and totals (with its start time).
        async fn started<C: CircuitStore + Clone + Send>(
            wf: &Workflow<
                Arc<FakeSqs>,
                Arc<FakeCloudWatch>,
                Arc<FakeCloudWatch>,
                FixedExecutions,
                C,
            >,
            input: Value,
        ) -> (Run, Totals) {
            let out = wf
                .handle(
                    json!({"action": "start", "input": input, "executionArn": "exec-1", "stateMachineArn": "sm"}),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(out["proceed"], true, "{out}");
            (
                serde_json::from_value(out["run"].clone()).unwrap(),
                serde_json::from_value(out["totals"].clone()).unwrap(),
            )
        }

        fn published_circuit(
            cw: &FakeCloudWatch,
        ) -> Vec<Option<redrive_engine::ports::CircuitMetrics>> {
            let published = cw.published.lock().unwrap();
            published.iter().map(|(_, _, m)| m.circuit).collect()
        }

        #[tokio::test]
        async fn the_summary_of_an_execution_that_opened_the_circuit_reports_and_publishes_it() {
            let (sqs, cw, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
            let store = MemoryCircuitStore::new();
            let wf = wf.with_circuit(store.clone());
            // An earlier transition, before this execution started: not this execution's.
            let mut record = CircuitRecord::new(&CircuitSettings::default(), 0);
            record.set_override(1_000, Override::Open);
            record.set_override(2_000, Override::Closed);
            record.set_override(3_000, Override::Auto);
            let before = record.history.len();
            assert!(before > 0, "{record:?}");
            store.put(DLQ, record);
            for i in 0..3 {
                bounced(&sqs, &format!("orig-{i}"));
            }
            sqs.push(DLQ, "fresh a", Attributes::new(), None);
            sqs.push(DLQ, "fresh b", Attributes::new(), None);

            let (run, totals) = started(&wf, json!({"maxMessages": 10})).await;
            assert!(totals.started_at > 0);
            let batch = wf.receive_batch(10, false, None).await.unwrap();
            assert!(batch.circuit_opened, "{batch:?}");
            assert_eq!(batch.bounced, 3);
            let totals = wf.tally_round(&run, totals, Some(&batch), &[]).await;
            assert_eq!(totals.bounced, 3);
            assert_eq!(state(&store), State::Open);

            let out = wf
                .handle(
                    json!({"action": "summary", "run": run, "totals": totals}),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(out["stoppedBecause"], "circuit-open", "{out}");
            let c = &out["circuit"];
            assert_eq!(c["state"], "open", "{out}");
            assert_eq!(c["operator"], "auto", "{out}");
            assert_eq!(c["plan"], "hold", "{out}");
            assert_eq!(c["budget"], 0, "{out}");
            assert_eq!(c["bounced"], 3, "{out}");
            assert_eq!(
                c["transitions"], 1,
                "only the open this execution made: {out}"
            );
            assert_eq!(
                published_circuit(&cw),
                vec![Some(redrive_engine::ports::CircuitMetrics {
                    open: true,
                    transitions: 1,
                    bounced: 3,
                })],
                "CircuitOpen=1, CircuitTransitions=1, BouncedCopies=3 in the one PutMetricData"
            );
        }

        #[tokio::test]
        async fn the_summary_of_a_scale_out_execution_counts_the_drains_bounced_copies() {
            let (sqs, cw, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
            let store = MemoryCircuitStore::new();
            let wf = wf.with_circuit(store.clone());
            for i in 0..3 {
                bounced(&sqs, &format!("orig-{i}"));
            }
            for i in 0..4 {
                sqs.push(DLQ, &format!("fresh {i}"), Attributes::new(), None);
            }
            let (run, totals) = started(
                &wf,
                json!({"maxMessages": 7, "mode": "scaleOut", "drains": 1}),
            )
            .await;
            let out = wf.drain(&totals.drain_plan[0], None).await.unwrap();
            assert_eq!(out["circuit"]["bounced"], 3, "{out}");
            let totals = wf.tally_round(&run, totals, None, &[out]).await;
            assert_eq!(totals.bounced, 3);

            let s = wf.summary(&run, &totals, None).await;
            let c = s.circuit.expect("the circuit in the response");
            assert_eq!(
                (c.state, c.plan, c.bounced, c.transitions),
                (State::Open, "hold", 3, 1)
            );
            assert_eq!(
                published_circuit(&cw),
                vec![Some(redrive_engine::ports::CircuitMetrics {
                    open: true,
                    transitions: 1,
                    bounced: 3,
                })]
            );
        }

        #[tokio::test]
        async fn an_unreadable_record_gives_no_circuit_in_the_summary() {
            let (_, cw, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
            let store = MemoryCircuitStore::new();
            let wf = wf.with_circuit(store.clone());
            let (run, totals) = started(&wf, json!({})).await;
            store.fail_next(redrive_engine::fake::throttled("GetItem"));
            let s = wf.summary(&run, &totals, None).await;
            assert_eq!(s.circuit, None);
            assert_eq!(published_circuit(&cw), vec![None]);
            // Readable again (no record yet): closed, nothing seen, nothing changed.
            let s = wf.summary(&run, &totals, None).await;
            let c = s.circuit.expect("the circuit in the response");
            assert_eq!(
                (
                    c.state,
                    c.operator,
                    c.plan,
                    c.budget,
                    c.bounced,
                    c.transitions
                ),
                (State::Closed, Override::Auto, "drain", None, 0, 0)
            );
        }

        #[tokio::test]
        async fn with_the_circuit_off_the_summary_has_no_circuit_and_publishes_none() {
            // No CIRCUIT_TABLE; then CIRCUIT_TABLE set but no store given: off both times.
            for pairs in [&[][..], &[("CIRCUIT_TABLE", "redrive-circuit")][..]] {
                let (sqs, cw, wf) = setup(pairs);
                bounced(&sqs, "orig-0");
                let (run, totals) = started(&wf, json!({"maxMessages": 5})).await;
                let batch = wf.receive_batch(5, false, None).await.unwrap();
                assert!(!batch.circuit_opened && batch.bounced == 0, "{batch:?}");
                let totals = wf.tally_round(&run, totals, Some(&batch), &[]).await;
                let out = wf
                    .handle(
                        json!({"action": "summary", "run": run, "totals": totals}),
                        None,
                    )
                    .await
                    .unwrap();
                assert!(out.get("circuit").is_none(), "{out}");
                assert_eq!(published_circuit(&cw), vec![None]);
            }
        }
        #[tokio::test]
        async fn totals_from_before_the_start_time_parse_and_claim_no_transitions() {
            let (sqs, _, wf) = with_store();
            for i in 0..3 {
                bounced(&sqs, &format!("orig-{i}"));
            }
            let batch = wf.receive_batch(10, false, None).await.unwrap();
            assert!(batch.circuit_opened);
            let old: Totals = serde_json::from_value(json!({
                "received": 0, "redriven": 0, "isolated": 0, "failed": 0, "leftOnDlq": 0,
                "remaining": 10, "queueEmpty": false, "more": false,
                "stoppedBecause": "circuit-open", "drainPlan": []
            }))
            .unwrap();
            assert_eq!((old.started_at, old.bounced), (0, 0));
            let s = wf.summary(&run(Mode::Messages), &old, None).await;
            let c = s.circuit.expect("the circuit in the response");
            assert_eq!((c.state, c.transitions), (State::Open, 0));
        }
    }
}
