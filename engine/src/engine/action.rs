//! What happened to one received message: counted in the run's tally, logged as `action` and,
//! when the request asks, kept as its [`MessageRecord`].

use std::fmt;

use redrive_shared::decision::Decision;
use redrive_shared::meta::IsolationReason;

use super::MessageRecord;
use super::destinations::Route;

/// The move a decision makes (what a dry run plans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Move {
    Redrive,
    Isolate,
    Wait,
}

impl Move {
    pub(super) fn of(d: &Decision) -> Self {
        match d {
            Decision::Redrive(_) => Self::Redrive,
            Decision::Isolate(_) => Self::Isolate,
            Decision::Wait(_) => Self::Wait,
        }
    }
}

/// What happened to one received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// A dry run's plan: the move, and the decision's own `action` (`redrive`,
    /// `isolate:<reason>`, `wait`).
    Plan(Move, String),
    Redriven,
    Isolated(IsolationReason),
    /// Sent back to the DLQ to go on waiting.
    Waiting,
    /// Not acknowledged by the destination: it stays on the DLQ.
    SendFailed,
    /// The copy was acknowledged but the original could not be deleted.
    DeleteFailed,
    /// FIFO: not sent because an earlier message of its group failed in this run.
    HeldForOrder,
    /// Rejected by the source: sent back to the DLQ with its count of rejections.
    Requeued,
    /// Its source does not let the re-driver send to it (AccessDenied, KMS): left on the DLQ
    /// untouched, not tried again in this run.
    Ungranted,
}

impl fmt::Display for Action {
    /// As in the log's `action` and a record's `outcome`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plan(_, action) => write!(f, "plan:{action}"),
            Self::Redriven => f.write_str("redriven"),
            Self::Isolated(reason) => write!(f, "isolated:{reason}"),
            Self::Waiting => f.write_str("waiting"),
            Self::SendFailed => f.write_str("send-failed:left-on-dlq"),
            Self::DeleteFailed => f.write_str("delete-failed:duplicate-possible"),
            Self::HeldForOrder => f.write_str("held:group-order"),
            Self::Requeued => f.write_str("send-rejected:requeued-on-dlq"),
            Self::Ungranted => f.write_str("left-on-dlq:ungranted-source"),
        }
    }
}

/// Logs one message's action (never its body).
pub(super) fn log(message_id: &str, d: &Decision, action: &Action) {
    let meta = d.meta();
    tracing::info!(
        message_id = %message_id,
        original_message_id = %meta.original_message_id,
        attempt = meta.attempt,
        delay_seconds = d.delay_seconds(),
        action = %action,
    );
}

/// The record of one message: where its copy went (or would have), `poison` and `dlq` being
/// the names of the poison queue and of the DLQ.
pub(super) fn record(
    route: Option<&Route>,
    poison: &str,
    dlq: &str,
    message_id: &str,
    d: &Decision,
    action: &Action,
) -> MessageRecord {
    let meta = d.meta();
    let destination = match d {
        Decision::Redrive(_) => route.map_or("", |r| {
            redrive_shared::source::url_account_and_name(&r.url).map_or(&r.url, |(_, n)| n)
        }),
        Decision::Isolate(_) => poison,
        Decision::Wait(_) => dlq,
    };
    let not_before = match d {
        Decision::Wait(w) => Some(redrive_shared::timefmt::rfc3339_from_millis(
            w.not_before_ms,
        )),
        _ => None,
    };
    MessageRecord {
        message_id: message_id.to_string(),
        original_message_id: meta.original_message_id.clone(),
        attempt: meta.attempt,
        outcome: action.to_string(),
        destination: destination.to_string(),
        delay_seconds: d.delay_seconds(),
        not_before,
    }
}
