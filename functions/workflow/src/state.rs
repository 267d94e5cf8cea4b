//! What the execution carries between tasks: settings, totals and records, never bodies.

use redrive_engine::engine::{Admission, StopReason};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How an execution runs: rounds of one drain with a record per message and long waits, or
/// rounds of K parallel engine drains.
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

/// One drain of a scale-out round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainItem {
    pub index: u32,
    pub drains: u32,
    pub max_messages: u32,
    pub dry_run: bool,
    /// This drain's share of the round's circuit plan, e.g. `{"plan":"canary","size":3}`
    /// (see `Admission`): the round's plan is read once, by the task that plans the round
    /// (`start`, `tally`), and its canary or ramp budget split among the drains, whose counts
    /// the round's `tally` lands once. `null` (always written, so that the state machine can
    /// pass it on): the circuit is off, or an item planned before there were shares, whose
    /// drain reads and writes the record itself, as the Lambda's drain does.
    #[serde(default)]
    pub circuit: Option<Admission>,
}

/// Running totals of an execution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub received: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub failed: u64,
    /// Messages sent back to the DLQ to go on waiting (`notBefore` in their `x-redrive`): a
    /// later execution redrives them when they are due.
    #[serde(default)]
    pub waiting: u64,
    /// Later hops of waits begun earlier (each round's `hops`): not counted in `received`
    /// nor in the budget.
    #[serde(default)]
    pub hops: u64,
    /// Messages left on the DLQ untouched because their source refused the re-driver's send
    /// (each round's `ungranted`); not counted in `received`.
    #[serde(default)]
    pub ungranted: u64,
    /// Messages the execution may still receive.
    pub remaining: u32,
    pub queue_empty: bool,
    /// Another round follows.
    pub more: bool,
    pub stopped_because: StopReason,
    /// The next scale-out round's drains (empty in `messages` mode).
    pub drain_plan: Vec<DrainItem>,
    /// When the execution started, epoch ms (`start`; 0 in totals from before it was kept):
    /// the circuit's transitions since then are the execution's.
    #[serde(default)]
    pub started_at: i64,
    /// Redriven copies the execution saw back on the DLQ within the circuit's window (each
    /// round's `circuit.bounced`).
    #[serde(default)]
    pub bounced: u64,
    /// Rounds tallied so far: at [`MAX_ROUNDS_PER_EXECUTION`] the execution ends.
    #[serde(default)]
    pub rounds: u32,
}

#[derive(Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub(crate) enum Task {
    Start {
        input: Value,
        #[serde(rename = "executionArn")]
        execution_arn: String,
    },
    CheckCircuit {
        /// Renews the execution's lease on the DLQ (`$$.Execution.Id`).
        #[serde(rename = "executionArn", default)]
        execution_arn: Option<String>,
    },
    RedriveBatch {
        #[serde(rename = "maxMessages")]
        max_messages: u32,
        #[serde(rename = "dryRun", default)]
        dry_run: bool,
    },
    Drain(DrainItem),
    Tally {
        run: Run,
        totals: Totals,
        /// `messages` mode: the round's `redriveBatch` answer.
        #[serde(default)]
        batch: Option<Value>,
        /// `scaleOut` mode: the round's drains' answers.
        #[serde(default)]
        results: Vec<Value>,
    },
    Summary {
        run: Run,
        totals: Totals,
        /// Releases the execution's lease on the DLQ (`$$.Execution.Id`).
        #[serde(rename = "executionArn", default)]
        execution_arn: Option<String>,
    },
}

/// The execution input a person or the EventBridge rule gives.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ExecutionInput {
    pub(crate) max_messages: Option<u32>,
    pub(crate) dry_run: Option<bool>,
    pub(crate) mode: Option<Mode>,
    pub(crate) drains: Option<u32>,
    pub(crate) trigger_alarm: Option<String>,
}
