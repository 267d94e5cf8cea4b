//! What the execution carries between tasks: ids, receipt handles and decisions, never bodies.

use redrive_engine::engine::{Admission, StopReason};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    pub outcome: MessageOutcome,
}

/// What happened to one message: the redrive task's answer, or the state machine's `Catch`
/// (`left-on-dlq`: the task failed for good; `not-found`: the message never came back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MessageOutcome {
    Redriven,
    Isolated,
    Failed,
    LeftOnDlq,
    NotFound,
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
    pub stopped_because: StopReason,
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
pub(crate) enum Task {
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
pub(crate) struct ExecutionInput {
    pub(crate) max_messages: Option<u32>,
    pub(crate) dry_run: Option<bool>,
    pub(crate) mode: Option<Mode>,
    pub(crate) drains: Option<u32>,
    pub(crate) trigger_alarm: Option<String>,
}
