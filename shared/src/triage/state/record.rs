//! A group's record in the book: its state, hold, notes, audit, replay counts and what the
//! last pass knew of it; and the alerts its transitions raise.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{AUDIT_KEPT, TIMES_KEPT};
use crate::timefmt::rfc3339_from_millis;
use crate::triage::Group;

crate::text_enum! {
    #[derive(Debug, PartialEq, Eq)]
    pub enum State {
        New,
        Acknowledged,
        Held,
        Replaying,
        ReplayFailed,
        Resolved,
        Regressed,
    }
}

/// A hold: the re-driver leaves the group's messages on the DLQ until `until_ms`, or until it
/// has left `count` distinct messages of the group, whichever comes first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    pub since_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub until_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub count: Option<u32>,
    /// The MessageIds the re-driver left under this hold (counted once each).
    #[serde(default)]
    pub left: BTreeSet<String>,
}

impl Hold {
    /// Whether the hold still holds at `now_ms`.
    pub fn holds(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|u| now_ms < u)
            && self.count.is_none_or(|c| self.left.len() < c as usize)
    }

    /// Why the hold ended, if it did.
    pub fn ended(&self, now_ms: i64) -> Option<String> {
        if let Some(u) = self.until_ms.filter(|u| now_ms >= *u) {
            return Some(format!("its time ran out at {}", rfc3339_from_millis(u)));
        }
        self.count
            .filter(|c| self.left.len() >= *c as usize)
            .map(|c| format!("{c} message(s) were left under it"))
    }
}

/// One line of a group's audit: who did what, when, to how many messages of which plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub at: String,
    pub who: String,
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub plan_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    pub at: String,
    pub who: String,
    pub text: String,
}

/// The counts of a group replay so far (`triage history`), over every run of its plan: a run
/// resumed or run again counts on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayTally {
    pub plan_id: String,
    pub sent: u64,
    pub deleted: u64,
    /// Copies found back on the DLQ within a verdict window.
    pub back: u64,
    /// Copies found isolated (on the poison queue) within a verdict window.
    pub isolated: u64,
    /// The stage reached: the messages sent so far, by stage (1, 10, 100, all).
    pub stages: Vec<u64>,
    pub finished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    pub state: State,
    pub title: String,
    /// The source queue's name, when the pass knew it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source: Option<String>,
    pub first_seen: String,
    pub last_seen: String,
    /// Messages the last pass counted.
    pub last_count: u64,
    /// The plan the last pass listed (its ids are stored under the plan's own key).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub plan_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub plan_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hold: Option<Hold>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub replay: Option<ReplayTally>,
    /// An operation in progress on the group (one at a time): `replay` or `discard`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub operation: Option<String>,
    #[serde(default)]
    pub notes: Vec<Note>,
    #[serde(default)]
    pub audit: Vec<AuditEntry>,
    /// What the last pass that recorded the group knew of it beyond its count (absent in a
    /// book written before passes kept it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pass: Option<PassFacts>,
}

/// What a pass knew of a group: its cause, recommended action, first and last failure and a
/// sample of its failure times (the trend). The book keeps it so that a reader of the book
/// (the CloudWatch widget) shows the group as the last pass saw it, without reading the queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassFacts {
    /// The recommended action (`fix-then-replay-canary`, ...; `Action::as_str`).
    pub action: String,
    /// Its one line of advice.
    pub advice: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_failure: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last_failure: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub code: Option<String>,
    pub attempts_min: u32,
    pub attempts_max: u32,
    /// Failure times (epoch ms), at most [`TIMES_KEPT`], evenly thinned.
    #[serde(default)]
    pub failure_times: Vec<i64>,
    /// How many messages each kept time stands for.
    #[serde(default = "one")]
    pub failure_times_every: u64,
}

fn one() -> u64 {
    1
}

impl PassFacts {
    /// What `g` (a pass's group) tells, its failure times thinned to [`TIMES_KEPT`].
    pub fn of(g: &Group) -> Self {
        let (failure_times, failure_times_every) =
            thin(&g.failure_times, g.failure_times_every.max(1) as u64);
        Self {
            action: g.action.as_str().to_string(),
            advice: g.action_advice.to_string(),
            first_failure: g.first_failure.clone(),
            last_failure: g.last_failure.clone(),
            class: g.class.clone(),
            code: g.code.clone(),
            attempts_min: g.attempts.min,
            attempts_max: g.attempts.max,
            failure_times,
            failure_times_every,
        }
    }
}

/// `times` (each standing for `every` messages) thinned evenly to at most [`TIMES_KEPT`]: every
/// `k`-th kept, each then standing for `every * k` messages.
pub fn thin(times: &[i64], every: u64) -> (Vec<i64>, u64) {
    if times.len() <= TIMES_KEPT {
        return (times.to_vec(), every.max(1));
    }
    let k = times.len().div_ceil(TIMES_KEPT);
    let kept = times.iter().step_by(k).copied().collect();
    (kept, every.max(1) * k as u64)
}

/// An alert a transition raised: published once, by the writer that made the transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// `new-group`, `regressed` or `canary-failed`.
    pub kind: String,
    pub queue: String,
    pub group: String,
    pub title: String,
    pub count: u64,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
}

impl Alert {
    /// The SNS Subject of the alert's one message: `redrive triage: KIND GROUP`.
    pub fn subject(&self) -> String {
        format!("redrive triage: {} {}", self.kind, self.group)
    }
}

/// An audit entry stamped `now_ms`.
pub(super) fn audit(
    now_ms: i64,
    who: &str,
    action: &str,
    plan_id: Option<&str>,
    count: Option<u64>,
    detail: Option<&str>,
) -> AuditEntry {
    AuditEntry {
        at: rfc3339_from_millis(now_ms),
        who: who.to_string(),
        action: action.to_string(),
        plan_id: plan_id.map(str::to_string),
        count,
        detail: detail.map(str::to_string),
    }
}

pub(super) fn push_audit(r: &mut GroupRecord, entry: AuditEntry) {
    r.audit.push(entry);
    let excess = r.audit.len().saturating_sub(AUDIT_KEPT);
    r.audit.drain(..excess);
}
