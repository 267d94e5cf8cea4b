//! A button's request, checked before the book is read.

use redrive_shared::config::QueueUrl;
use redrive_shared::triage::GroupId;
use serde_json::Value;

use crate::config::{ConsoleConfig, not_configured};
use crate::{MAX_HOLD_HOURS, MAX_NOTE_CHARS};

/// What a button asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Acknowledge,
    Hold {
        hours: u64,
    },
    Release,
    Note {
        text: String,
    },
    Replay,
    Discard,
    /// A few messages of the group's plan, shown in a popup; nothing changes.
    Samples,
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Acknowledge => "acknowledge",
            Self::Hold { .. } => "hold",
            Self::Release => "release",
            Self::Note { .. } => "note",
            Self::Replay => "replay-canary",
            Self::Discard => "discard",
            Self::Samples => "samples",
        }
    }

    pub(crate) fn done(&self, group: &str, queue: &str) -> String {
        match self {
            Self::Acknowledge => format!("Acknowledged group {group} of {queue}."),
            Self::Hold { hours } => format!(
                "Held group {group} of {queue} for {hours} h: the re-driver leaves its messages on the queue until then."
            ),
            Self::Release => format!(
                "Released group {group} of {queue}: the re-driver drains its messages again."
            ),
            Self::Note { .. } => format!("Noted on group {group} of {queue}."),
            Self::Replay | Self::Discard | Self::Samples => String::new(),
        }
    }
}

/// A button's request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRequest {
    pub kind: Kind,
    pub queue: QueueUrl,
    pub group: String,
    pub plan_id: String,
    /// The plan's size the widget showed (and its confirmation named): a replay or discard is
    /// refused when the stored plan holds another number.
    pub count: Option<u64>,
}

/// A request refused before the book is read: why, and the configured queue it named (when it
/// named one: the widget of that queue is shown below the refusal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub queue: Option<QueueUrl>,
    pub reason: String,
}

fn text_param<'a>(event: &'a Value, name: &str) -> Result<&'a str, String> {
    match event.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(format!("the parameter {name} must be a non-empty string")),
        None => Err(format!("the parameter {name} is missing")),
    }
}

fn is_plan_id(p: &str) -> bool {
    (1..=128).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

impl ActionRequest {
    /// Checks a button's parameters (the event's top level): a known action, a configured
    /// queue, a well-formed group id and plan id, and `hours` in 1..=168 for a hold.
    pub fn parse(cfg: &ConsoleConfig, event: &Value) -> Result<Self, Rejected> {
        let reject = |queue: Option<&QueueUrl>, reason: String| Rejected {
            queue: queue.cloned(),
            reason,
        };
        let asked = text_param(event, "queue").map_err(|e| reject(None, e))?;
        let queue = cfg
            .queue(asked)
            .ok_or_else(|| reject(None, not_configured(asked, cfg)))?;
        let q = Some(queue);
        let action = text_param(event, "action").map_err(|e| reject(q, e))?;
        let group = text_param(event, "group").map_err(|e| reject(q, e))?;
        GroupId::parse(group).map_err(|e| reject(q, e))?;
        let plan_id = text_param(event, "planId").map_err(|e| reject(q, e))?;
        if !is_plan_id(plan_id) {
            return Err(reject(q, format!("{plan_id:?} is not a plan id")));
        }
        let count =
            match event.get("count") {
                None => None,
                Some(c) => Some(c.as_u64().ok_or_else(|| {
                    reject(q, "the parameter count must be a whole number".into())
                })?),
            };
        let kind = match action {
            "acknowledge" => Kind::Acknowledge,
            "release" => Kind::Release,
            "hold" => {
                let hours = event.get("hours").and_then(Value::as_u64);
                match hours {
                    Some(h) if (1..=MAX_HOLD_HOURS).contains(&h) => Kind::Hold { hours: h },
                    _ => {
                        return Err(reject(
                            q,
                            format!("a hold needs hours, a whole number in 1..={MAX_HOLD_HOURS}"),
                        ));
                    }
                }
            }
            "note" => {
                let text = text_param(event, "text").map_err(|e| reject(q, e))?;
                if text.chars().count() > MAX_NOTE_CHARS || text.trim().is_empty() {
                    return Err(reject(
                        q,
                        format!("a note is 1 to {MAX_NOTE_CHARS} characters"),
                    ));
                }
                Kind::Note {
                    text: text.to_string(),
                }
            }
            "replay-canary" | "replay" | "discard" if count.is_none() => {
                return Err(reject(
                    q,
                    format!("{action} needs count, the size of the plan the widget showed"),
                ));
            }
            "replay-canary" | "replay" => Kind::Replay,
            "discard" => Kind::Discard,
            "samples" => Kind::Samples,
            other => {
                return Err(reject(
                    q,
                    format!(
                        "{other:?} is not an action of this console (acknowledge, hold, release, note, replay-canary, discard, samples)"
                    ),
                ));
            }
        };
        Ok(Self {
            kind,
            queue: queue.clone(),
            group: group.to_string(),
            plan_id: plan_id.to_string(),
            count,
        })
    }
}
