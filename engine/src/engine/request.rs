//! What a drain is asked (`DrainRequest`, `Settings`) and what it answers (`Summary`,
//! `StopReason`, or `DrainError` when it failed).

use std::time::Duration;

use redrive_shared::config::RedriverConfig;
use redrive_shared::event::Skip;
use serde::Serialize;
use tokio::time::Instant;

use super::admission::{Admission, CircuitSummary};
use crate::ports::PortError;

redrive_shared::text_enum! {
    /// Why a drain stopped (the contract's `stoppedBecause`).
    #[derive(Debug, Default, PartialEq, Eq)]
    pub enum StopReason {
        QueueEmpty,
        /// A run that ends with no other reason ends at its limit.
        #[default]
        Limit,
        Deadline,
        CircuitOpen,
        NotInAlarm,
        OtherQueue,
        /// A Step Functions execution that found another one draining the DLQ: it received
        /// nothing.
        AlreadyRunning,
        /// A protected DLQ whose settings (its tags) are invalid or unreadable: left alone.
        BadSettings,
        Other,
    }
}

impl From<Skip> for StopReason {
    fn from(s: Skip) -> Self {
        match s {
            Skip::NotInAlarm => Self::NotInAlarm,
            Skip::OtherQueue => Self::OtherQueue,
        }
    }
}

/// The invocation's response, also logged as one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub received: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub failed: u64,
    pub dry_run: bool,
    pub stopped_because: StopReason,
    /// Messages left on the DLQ (visible, in flight and delayed) after the run; `null` when the
    /// queue could not be asked.
    pub dlq_remaining: Option<u64>,
    /// Messages neither the source nor the poison queue accepts; they stay on the DLQ,
    /// published as `UnplaceableMessages`. A count, not a [`DrainError`]: nothing failed and
    /// nothing is lost (each such message is safe on the DLQ, its receive count rising until a
    /// human looks), and the rest of the drain went on. Not part of the response.
    #[serde(skip)]
    pub unplaceable: u64,
    /// The adaptive circuit after the run; absent when the circuit is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit: Option<CircuitSummary>,
    /// Messages sent back to the DLQ to go on waiting: their backoff is longer than a copy's
    /// delay may be (`notBefore` in `x-redrive`). Absent when 0: a drain whose backoff fits in
    /// `DelaySeconds` never has any.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: u64,
    /// Messages that came waiting and were sent on to wait again (a later hop of a wait begun
    /// earlier), when the request counts them apart ([`DrainRequest::max_hops`]): not in
    /// `received` nor `waiting`, no record each. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hops: u64,
    /// Messages of groups an operator held (`redrive triage hold`), left on the DLQ. Absent
    /// when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub on_hold: u64,
    /// Messages left on the DLQ untouched because their source does not let the re-driver
    /// send to it (AccessDenied, or its KMS key: a source added after the deploy); not counted
    /// in `received`. The run publishes `DlqLeftAlone`. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ungranted: u64,
    /// What happened to each message, when the request asked for it
    /// ([`DrainRequest::records`]): the Step Functions audit trail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<MessageRecord>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a drain did with one message. No body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRecord {
    pub message_id: String,
    pub original_message_id: String,
    /// The attempt its copy carries (a redrive, a wait) or its attempt (an isolation).
    pub attempt: u32,
    /// As in the log's `action`: `redriven`, `isolated:<reason>`, `waiting`, `plan:<decision>`
    /// (a dry run), `send-failed:left-on-dlq`, `delete-failed:duplicate-possible`,
    /// `held:group-order`, `send-rejected:requeued-on-dlq`.
    pub outcome: String,
    /// The queue the copy went to (or would have).
    pub destination: String,
    /// The copy's `DelaySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_seconds: Option<u32>,
    /// A waiting message's `notBefore` (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
}

impl Summary {
    /// A run that received nothing yet: every count 0, the DLQ's depth unknown, no circuit.
    pub fn new(dry_run: bool, stopped_because: StopReason) -> Self {
        Self {
            received: 0,
            redriven: 0,
            isolated: 0,
            failed: 0,
            dry_run,
            stopped_because,
            dlq_remaining: None,
            unplaceable: 0,
            circuit: None,
            waiting: 0,
            hops: 0,
            on_hold: 0,
            ungranted: 0,
            records: Vec::new(),
        }
    }
}

/// Why a drain failed. What it did before the failure is still reported (and metered by the
/// end of the run): the error carries that summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    /// The DLQ could not be read (ReceiveMessage failed for good, or its sources could not be
    /// listed): published as `DlqReceiveFailures`. What was moved before it is in `summary`.
    #[error("the DLQ cannot be read: {reason}")]
    DlqUnreadable {
        #[source]
        reason: PortError,
        summary: Box<Summary>,
    },
}

impl DrainError {
    /// What the drain did before it failed.
    pub fn summary(&self) -> &Summary {
        match self {
            Self::DlqUnreadable { summary, .. } => summary,
        }
    }

    /// What the drain did before it failed, for a caller that reports it as it would a
    /// summary (after it matched the error).
    pub fn into_summary(self) -> Summary {
        match self {
            Self::DlqUnreadable { summary, .. } => *summary,
        }
    }

    fn summary_mut(&mut self) -> &mut Summary {
        match self {
            Self::DlqUnreadable { summary, .. } => summary,
        }
    }
}

/// The summary of a drain's outcome, whether it failed or not (the counts, the circuit and
/// the end of the run apply to both).
pub(super) fn summary_of(outcome: &Result<Summary, DrainError>) -> &Summary {
    match outcome {
        Ok(s) => s,
        Err(e) => e.summary(),
    }
}

/// [`summary_of`], to change.
pub(super) fn summary_of_mut(outcome: &mut Result<Summary, DrainError>) -> &mut Summary {
    match outcome {
        Ok(s) => s,
        Err(e) => e.summary_mut(),
    }
}

/// One drain, resolved from the trigger and the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRequest {
    pub max_messages: u32,
    pub dry_run: bool,
    /// The Lambda deadline; `None` runs until the limit or an empty queue.
    pub deadline: Option<Instant>,
    /// The DLQ's trigger alarm, re-armed after the drain when it is in ALARM (see
    /// [`super::Engine::rearm`]): the alarm that notified an alarm-triggered drain, else
    /// `TRIGGER_ALARM_NAME`. `None`: nothing to re-arm.
    pub trigger_alarm: Option<String>,
    /// The copies go out without their backoff delay (a canary by hand, `redrive drain
    /// --canary N`), so that they can come back within the window that judges them.
    pub no_delay: bool,
    /// Keep a [`MessageRecord`] of each message in the summary (bounded drains only: the
    /// workflow's rounds of at most 40).
    pub records: bool,
    /// This drain's share of a circuit plan that several drains share (a workflow's
    /// scale-out round): the drain follows it and writes nothing to the circuit record, its
    /// counts landed once for all by [`super::Engine::land_round`]. `None`: the drain reads the
    /// record, follows its plan and writes what it did (the Lambda's drain).
    pub admission: Option<Admission>,
    /// Hops counted apart: a message that came waiting and is not due yet (a later hop of its
    /// wait) takes nothing of `max_messages` and gets no record; the drain sends on at most
    /// this many (and stops, at its limit, once they are spent; a batch in hand is finished),
    /// so that a round redrives its batch of due messages however many waiting ones it meets
    /// first. `None`: a hop is a message of the budget like any other (the Lambda's drain,
    /// `redrive drain`, whose backoff never starts a wait). A dry run counts hops in the
    /// budget either way: it holds what it receives.
    pub max_hops: Option<u32>,
}

impl DrainRequest {
    /// A drain of up to `max_messages`: not a dry run, no deadline, nothing to re-arm, each
    /// copy with its backoff delay.
    pub fn new(max_messages: u32) -> Self {
        Self {
            max_messages,
            dry_run: false,
            deadline: None,
            trigger_alarm: None,
            no_delay: false,
            records: false,
            admission: None,
            max_hops: None,
        }
    }

    /// The drain `config` asks for when nothing else is said (a schedule, a manual `{}`): its
    /// `MAX_MESSAGES_PER_INVOCATION` and `DRY_RUN`, its trigger alarm to re-arm, until
    /// `deadline`.
    pub fn configured(config: &RedriverConfig, deadline: Option<Instant>) -> Self {
        Self {
            dry_run: config.dry_run,
            deadline,
            trigger_alarm: config.trigger_alarm_name.clone(),
            ..Self::new(config.max_messages_per_invocation)
        }
    }

    /// The same drain, keeping a record of each message in its summary.
    pub fn with_records(self) -> Self {
        Self {
            records: true,
            ..self
        }
    }

    /// The same drain, hops counted apart up to `max_hops` ([`DrainRequest::max_hops`]).
    pub fn with_max_hops(self, max_hops: u32) -> Self {
        Self {
            max_hops: Some(max_hops),
            ..self
        }
    }

    /// This drain with `admission`, its share of a plan shared by several drains.
    pub fn with_admission(self, admission: Option<Admission>) -> Self {
        Self { admission, ..self }
    }

    /// The canary of this drain: at most `n` of its messages, their copies sent without their
    /// backoff delay.
    pub fn canary(&self, n: u32) -> Self {
        Self {
            max_messages: n.min(self.max_messages),
            no_delay: true,
            ..self.clone()
        }
    }
}

/// Tunables that are not part of the contract's configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Stop starting new batches this long before the deadline (at most a quarter of the time
    /// the invocation has).
    pub deadline_margin: Duration,
    /// Long-poll wait of each ReceiveMessage: an empty answer then means an empty queue.
    pub receive_wait_seconds: i32,
    /// Visibility timeout of received messages: if the invocation dies, they reappear after it.
    pub visibility_seconds: i32,
    /// Tries of the failed entries of a batch call that failed in a retryable way (throttled,
    /// not the sender's fault). A whole call is not tried again: the SDK's retry configuration
    /// owns whole calls ([`crate::aws::retry_config`]).
    pub retry_attempts: u32,
    pub retry_base: Duration,
    /// The longest any one port call may take: the SDK's operation timeout, enforced by the
    /// engine too (a fake or a custom port has no SDK timeouts).
    pub call_timeout: Duration,
    /// Time kept for the calls after the drain (DLQ depth, PutMetricData, DescribeAlarms,
    /// SetAlarmState): no drain call runs into it.
    pub post_drain_reserve: Duration,
}

/// Calls after the drain, each bounded by `call_timeout`: DLQ depth, PutMetricData,
/// DescribeAlarms and SetAlarmState.
const POST_DRAIN_CALLS: u32 = 4;
/// Calls of one batch in flight when the margin starts: receive, send, delete.
const BATCH_CALLS: u32 = 3;

impl Default for Settings {
    fn default() -> Self {
        let call_timeout = redrive_shared::sdk::OPERATION_TIMEOUT;
        Self {
            // One batch in flight plus the calls after the drain, each at its timeout.
            deadline_margin: call_timeout * (BATCH_CALLS + POST_DRAIN_CALLS),
            receive_wait_seconds: 1,
            visibility_seconds: 60,
            retry_attempts: 3,
            retry_base: Duration::from_millis(100),
            call_timeout,
            post_drain_reserve: call_timeout * POST_DRAIN_CALLS,
        }
    }
}
