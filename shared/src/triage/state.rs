//! What an operator decided about each group, kept outside SQS: the book of one queue. Pure:
//! the store (one DynamoDB item per queue, written on the version read) is the engine's
//! (`redrive_engine::triage_store`), the commands are the CLI's, and the re-driver reads the
//! holds.
//!
//! A group's lifecycle:
//!
//! | state          | entered when                                                         |
//! |----------------|----------------------------------------------------------------------|
//! | `new`          | a triage pass first sees the group (alert: `new-group`)               |
//! | `acknowledged` | an operator acknowledges it                                          |
//! | `held`         | an operator holds it: the re-driver leaves its messages on the DLQ    |
//! | `replaying`    | a group replay starts (canary first)                                 |
//! | `replay-failed`| a canary came back to the DLQ or was isolated (alert: `canary-failed`) |
//! | `resolved`     | a replay or discard emptied it, or a complete pass no longer finds it |
//! | `regressed`    | a resolved group is seen again (alert: `regressed`)                   |
//!
//! Alerts are transitions: each is raised by the one write that makes the transition, so a
//! group that gains 3,000 messages raises `new-group` once.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::timefmt::rfc3339_from_millis;

/// Entries of a group's audit kept in the book (older ones are only in the logs).
pub const AUDIT_KEPT: usize = 100;
/// Notes kept per group.
pub const NOTES_KEPT: usize = 50;
/// The largest `--count` of a hold: the ids it counts are kept in the book.
pub const MAX_HOLD_COUNT: u32 = 1000;
/// Groups a book keeps; past it the least recently seen resolved groups are dropped.
pub const GROUPS_KEPT: usize = 500;
/// Failure times a group's record keeps for its trend (evenly thinned from the pass's).
pub const TIMES_KEPT: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    New,
    Acknowledged,
    Held,
    Replaying,
    ReplayFailed,
    Resolved,
    Regressed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Acknowledged => "acknowledged",
            Self::Held => "held",
            Self::Replaying => "replaying",
            Self::ReplayFailed => "replay-failed",
            Self::Resolved => "resolved",
            Self::Regressed => "regressed",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

/// The counts of a group replay so far (`triage history`).
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
    pub fn of(g: &super::Group) -> Self {
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

/// The book of one queue (a DLQ or poison queue): every group's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Book {
    pub queue: String,
    #[serde(default)]
    pub groups: BTreeMap<String, GroupRecord>,
    /// When a pass last recorded its groups (RFC 3339): how fresh the book is as an index.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub passed_at: Option<String>,
}

/// A refused action, naming why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no group {0} in the book of this queue: run `redrive triage` on it first")]
    Unknown(String),
    #[error("group {group} is busy: a {operation} is in progress (resume it, or wait)")]
    Busy { group: String, operation: String },
    #[error("{0}")]
    Invalid(String),
}

impl Book {
    pub fn new(queue: &str) -> Self {
        Self {
            queue: queue.to_string(),
            groups: BTreeMap::new(),
            passed_at: None,
        }
    }

    fn alert(&self, kind: &str, group: &str, r: &GroupRecord, now_ms: i64) -> Alert {
        Alert {
            kind: kind.to_string(),
            queue: self.queue.clone(),
            group: group.to_string(),
            title: r.title.clone(),
            count: r.last_count,
            at: rfc3339_from_millis(now_ms),
            detail: None,
        }
    }

    /// A pass saw `count` messages of `group` (and listed them as `plan`): a new group is
    /// `new`, a resolved one `regressed`; either raises its alert.
    pub fn observe(
        &mut self,
        group: &str,
        title: &str,
        source: Option<&str>,
        count: u64,
        plan: Option<(&str, u64)>,
        now_ms: i64,
    ) -> Option<Alert> {
        let now = rfc3339_from_millis(now_ms);
        let (record, kind) = match self.groups.get_mut(group) {
            Some(r) => {
                let regressed = r.state == State::Resolved;
                if regressed {
                    r.state = State::Regressed;
                }
                (r, regressed.then_some("regressed"))
            }
            None => {
                self.groups.insert(
                    group.to_string(),
                    GroupRecord {
                        state: State::New,
                        title: title.to_string(),
                        source: None,
                        first_seen: now.clone(),
                        last_seen: now.clone(),
                        last_count: count,
                        plan_id: None,
                        plan_size: None,
                        hold: None,
                        replay: None,
                        operation: None,
                        notes: Vec::new(),
                        audit: Vec::new(),
                        pass: None,
                    },
                );
                (
                    self.groups.get_mut(group).expect("inserted"),
                    Some("new-group"),
                )
            }
        };
        record.last_seen = now;
        record.last_count = count;
        record.title = title.to_string();
        if source.is_some() {
            record.source = source.map(str::to_string);
        }
        if let Some((id, size)) = plan {
            record.plan_id = Some(id.to_string());
            record.plan_size = Some(size);
        }
        let alert = kind.map(|k| {
            let r = &self.groups[group];
            self.alert(k, group, r, now_ms)
        });
        self.trim();
        alert
    }

    /// Keeps what a pass knew of `group` (observed first), and marks the book as passed now.
    pub fn keep_pass_facts(
        &mut self,
        group: &str,
        facts: PassFacts,
        now_ms: i64,
    ) -> Result<(), Refused> {
        self.get_mut(group)?.pass = Some(facts);
        self.passed(now_ms);
        Ok(())
    }

    /// Marks the book as recorded by a pass at `now_ms`.
    pub fn passed(&mut self, now_ms: i64) {
        self.passed_at = Some(rfc3339_from_millis(now_ms));
    }

    /// A complete pass found no message of these groups: any not resolved becomes `resolved`
    /// (a held group too: its messages are gone).
    pub fn absent<'a>(&mut self, seen: impl IntoIterator<Item = &'a str>, now_ms: i64) {
        let seen: BTreeSet<&str> = seen.into_iter().collect();
        for (id, r) in &mut self.groups {
            if !seen.contains(id.as_str()) && r.state != State::Resolved && r.operation.is_none() {
                r.state = State::Resolved;
                r.last_count = 0;
                r.hold = None;
                push_audit(
                    r,
                    audit(
                        now_ms,
                        "triage",
                        "resolved",
                        None,
                        None,
                        Some("a complete pass found none of its messages"),
                    ),
                );
            }
        }
    }

    fn trim(&mut self) {
        while self.groups.len() > GROUPS_KEPT {
            let oldest = self
                .groups
                .iter()
                .filter(|(_, r)| r.state == State::Resolved)
                .min_by(|a, b| a.1.last_seen.cmp(&b.1.last_seen))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => {
                    self.groups.remove(&id);
                }
                None => break,
            }
        }
    }

    pub fn get(&self, group: &str) -> Result<&GroupRecord, Refused> {
        self.groups
            .get(group)
            .ok_or_else(|| Refused::Unknown(group.to_string()))
    }

    fn get_mut(&mut self, group: &str) -> Result<&mut GroupRecord, Refused> {
        self.groups
            .get_mut(group)
            .ok_or_else(|| Refused::Unknown(group.to_string()))
    }

    pub fn acknowledge(&mut self, group: &str, who: &str, now_ms: i64) -> Result<(), Refused> {
        let r = self.get_mut(group)?;
        if matches!(r.state, State::New | State::Regressed | State::ReplayFailed) {
            r.state = State::Acknowledged;
        }
        push_audit(r, audit(now_ms, who, "acknowledge", None, None, None));
        Ok(())
    }

    pub fn note(&mut self, group: &str, who: &str, text: &str, now_ms: i64) -> Result<(), Refused> {
        if text.trim().is_empty() {
            return Err(Refused::Invalid("the note is empty".into()));
        }
        let r = self.get_mut(group)?;
        r.notes.push(Note {
            at: rfc3339_from_millis(now_ms),
            who: who.to_string(),
            text: text.to_string(),
        });
        let excess = r.notes.len().saturating_sub(NOTES_KEPT);
        r.notes.drain(..excess);
        push_audit(r, audit(now_ms, who, "note", None, None, None));
        Ok(())
    }

    /// Holds the group until `until_ms` and/or `count` messages were left under the hold.
    pub fn hold(
        &mut self,
        group: &str,
        who: &str,
        until_ms: Option<i64>,
        count: Option<u32>,
        now_ms: i64,
    ) -> Result<(), Refused> {
        if until_ms.is_none() && count.is_none() {
            return Err(Refused::Invalid(
                "a hold needs an end: --until TIME, --for DURATION or --count N".into(),
            ));
        }
        if let Some(u) = until_ms.filter(|u| *u <= now_ms) {
            return Err(Refused::Invalid(format!(
                "--until {} is not in the future",
                rfc3339_from_millis(u)
            )));
        }
        if let Some(c) = count.filter(|c| *c == 0 || *c > MAX_HOLD_COUNT) {
            return Err(Refused::Invalid(format!(
                "--count {c} is outside 1..={MAX_HOLD_COUNT}"
            )));
        }
        let r = self.get_mut(group)?;
        if let Some(op) = &r.operation {
            return Err(Refused::Busy {
                group: group.to_string(),
                operation: op.clone(),
            });
        }
        r.state = State::Held;
        r.hold = Some(Hold {
            since_ms: now_ms,
            until_ms,
            count,
            left: BTreeSet::new(),
        });
        let detail = match (until_ms, count) {
            (Some(u), Some(c)) => format!("until {} or {c} message(s)", rfc3339_from_millis(u)),
            (Some(u), None) => format!("until {}", rfc3339_from_millis(u)),
            (None, Some(c)) => format!("until {c} message(s) were left"),
            (None, None) => unreachable!("checked above"),
        };
        push_audit(r, audit(now_ms, who, "hold", None, None, Some(&detail)));
        Ok(())
    }

    /// Ends a hold by hand.
    pub fn release(&mut self, group: &str, who: &str, now_ms: i64) -> Result<(), Refused> {
        let r = self.get_mut(group)?;
        if r.hold.take().is_none() {
            return Err(Refused::Invalid(format!("group {group} is not held")));
        }
        r.state = State::Acknowledged;
        push_audit(r, audit(now_ms, who, "release", None, None, None));
        Ok(())
    }

    /// Names on the group's last audit entry the plan and message count it acted on, where the
    /// entry names none (an action whose caller checked the plan, such as the console's).
    pub fn stamp_last_audit(&mut self, group: &str, plan_id: &str, count: u64) {
        if let Some(e) = self.groups.get_mut(group).and_then(|r| r.audit.last_mut()) {
            e.plan_id.get_or_insert_with(|| plan_id.to_string());
            e.count.get_or_insert(count);
        }
    }

    /// The groups whose hold holds at `now_ms`: what the re-driver leaves on the DLQ.
    pub fn held(&self, now_ms: i64) -> BTreeSet<String> {
        self.groups
            .iter()
            .filter(|(_, r)| r.hold.as_ref().is_some_and(|h| h.holds(now_ms)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The re-driver left these messages of `group` on the DLQ. Returns whether the hold
    /// ended (by time or count); an ended hold is released (state `acknowledged`) and audited.
    pub fn left(&mut self, group: &str, message_ids: &[String], now_ms: i64) -> bool {
        let Some(r) = self.groups.get_mut(group) else {
            return false;
        };
        let Some(hold) = r.hold.as_mut() else {
            return false;
        };
        for id in message_ids {
            if hold.count.is_some_and(|c| hold.left.len() >= c as usize) {
                break;
            }
            hold.left.insert(id.clone());
        }
        self.expire(now_ms).contains(&group.to_string())
    }

    /// Ends every hold whose time or count ran out; returns the groups released.
    pub fn expire(&mut self, now_ms: i64) -> Vec<String> {
        let mut ended = Vec::new();
        for (id, r) in &mut self.groups {
            let Some(why) = r.hold.as_ref().and_then(|h| h.ended(now_ms)) else {
                continue;
            };
            r.hold = None;
            if r.state == State::Held {
                r.state = State::Acknowledged;
            }
            push_audit(
                r,
                audit(now_ms, "redriver", "hold-ended", None, None, Some(&why)),
            );
            ended.push(id.clone());
        }
        ended
    }

    /// Marks the start (or resumption) of an operation on a group; refuses a second one.
    pub fn begin(
        &mut self,
        group: &str,
        operation: &str,
        who: &str,
        plan_id: &str,
        count: u64,
        now_ms: i64,
    ) -> Result<(), Refused> {
        let r = self.get_mut(group)?;
        match &r.operation {
            Some(op) if op != operation => {
                return Err(Refused::Busy {
                    group: group.to_string(),
                    operation: op.clone(),
                });
            }
            Some(_) => {
                push_audit(
                    r,
                    audit(
                        now_ms,
                        who,
                        &format!("{operation}-resumed"),
                        Some(plan_id),
                        Some(count),
                        None,
                    ),
                );
            }
            None => {
                push_audit(
                    r,
                    audit(now_ms, who, operation, Some(plan_id), Some(count), None),
                );
            }
        }
        r.operation = Some(operation.to_string());
        if r.hold.take().is_some() {
            r.state = State::Acknowledged;
        }
        if operation == "replay" {
            r.state = State::Replaying;
            let fresh = r
                .replay
                .as_ref()
                .is_none_or(|t| t.plan_id != plan_id || t.finished);
            if fresh {
                r.replay = Some(ReplayTally {
                    plan_id: plan_id.to_string(),
                    ..ReplayTally::default()
                });
            }
        }
        Ok(())
    }

    /// Adds one replay stage's counts.
    pub fn replay_stage(&mut self, group: &str, sent: u64, deleted: u64, back: u64, isolated: u64) {
        if let Some(t) = self.groups.get_mut(group).and_then(|r| r.replay.as_mut()) {
            t.sent += sent;
            t.deleted += deleted;
            t.back += back;
            t.isolated += isolated;
            t.stages.push(sent);
        }
    }

    /// Ends the operation on `group`. `failed` (a replay whose canary came back) marks the
    /// group `replay-failed` and raises `canary-failed`; a completed one marks it `resolved`
    /// when nothing of the plan is left.
    pub fn finish(
        &mut self,
        group: &str,
        who: &str,
        outcome: Finish,
        now_ms: i64,
    ) -> Option<Alert> {
        let r = self.groups.get_mut(group)?;
        let operation = r.operation.take().unwrap_or_default();
        let plan_id = r.replay.as_ref().map(|t| t.plan_id.clone());
        let mut alert = None;
        match &outcome {
            Finish::CanaryFailed(detail) => {
                r.state = State::ReplayFailed;
                push_audit(
                    r,
                    audit(
                        now_ms,
                        who,
                        &format!("{operation}-stopped"),
                        plan_id.as_deref(),
                        None,
                        Some(detail),
                    ),
                );
                let mut a = self.alert("canary-failed", group, &self.groups[group], now_ms);
                a.detail = Some(detail.clone());
                alert = Some(a);
            }
            Finish::Done { left } => {
                if let Some(t) = r.replay.as_mut().filter(|_| operation == "replay") {
                    t.finished = true;
                }
                r.state = if *left == 0 {
                    State::Resolved
                } else {
                    State::Acknowledged
                };
                let detail = format!("{left} message(s) of the plan left on the queue");
                push_audit(
                    r,
                    audit(
                        now_ms,
                        who,
                        &format!("{operation}-finished"),
                        plan_id.as_deref(),
                        None,
                        Some(&detail),
                    ),
                );
            }
        }
        alert
    }
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Every stage ran; `left` messages of the plan were not moved (failed, refused).
    Done { left: u64 },
    /// A canary came back or was isolated: the replay stopped.
    CanaryFailed(String),
}

fn audit(
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

fn push_audit(r: &mut GroupRecord, entry: AuditEntry) {
    r.audit.push(entry);
    let excess = r.audit.len().saturating_sub(AUDIT_KEPT);
    r.audit.drain(..excess);
}

/// Replay stages: `first` messages (the canary), then 10, 100, and the rest, each at least as
/// large as the one before. The sizes are the messages sent in each stage.
pub fn stages(total: u64, first: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut sent = 0;
    for step in [first.max(1), 10, 100] {
        if sent >= total {
            break;
        }
        let n = step.max(out.last().copied().unwrap_or(0)).min(total - sent);
        out.push(n);
        sent += n;
    }
    if sent < total {
        out.push(total - sent);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_764_000_000_000;

    fn book() -> Book {
        let mut b = Book::new("orders-dlq");
        assert!(
            b.observe("g2-a", "timeout", None, 3, Some(("p1", 3)), T0)
                .is_some()
        );
        b
    }

    #[test]
    fn a_group_alerts_new_once_then_regressed_once_after_it_was_resolved() {
        let mut b = book();
        assert_eq!(b.get("g2-a").unwrap().state, State::New);
        for n in 4..100 {
            assert_eq!(
                b.observe("g2-a", "timeout", None, n, None, T0 + n as i64),
                None
            );
        }
        b.absent(["g2-other"], T0 + 1000);
        assert_eq!(b.get("g2-a").unwrap().state, State::Resolved);
        let a = b
            .observe("g2-a", "timeout", None, 1, None, T0 + 2000)
            .unwrap();
        assert_eq!((a.kind.as_str(), a.count), ("regressed", 1));
        assert_eq!(b.get("g2-a").unwrap().state, State::Regressed);
        assert_eq!(b.observe("g2-a", "timeout", None, 2, None, T0 + 3000), None);
    }

    #[test]
    fn a_hold_ends_by_time_or_by_distinct_messages_left() {
        let mut b = book();
        b.hold("g2-a", "ops", Some(T0 + 60_000), None, T0).unwrap();
        assert!(b.held(T0 + 59_999).contains("g2-a"));
        assert!(!b.held(T0 + 60_000).contains("g2-a"));
        assert_eq!(b.expire(T0 + 60_000), vec!["g2-a".to_string()]);
        assert_eq!(b.get("g2-a").unwrap().state, State::Acknowledged);

        b.hold("g2-a", "ops", None, Some(2), T0).unwrap();
        assert!(!b.left("g2-a", &["m1".into(), "m1".into()], T0));
        assert!(
            b.held(T0).contains("g2-a"),
            "one distinct message left of two"
        );
        assert!(b.left("g2-a", &["m2".into()], T0));
        assert!(b.held(T0).is_empty());
        let last = b.get("g2-a").unwrap().audit.last().unwrap().clone();
        assert_eq!(last.action, "hold-ended");
        b.stamp_last_audit("g2-a", "p1", 3);
        let last = b.get("g2-a").unwrap().audit.last().unwrap().clone();
        assert_eq!((last.plan_id.as_deref(), last.count), (Some("p1"), Some(3)));
    }

    #[test]
    fn bad_holds_and_unknown_groups_are_refused_with_the_reason() {
        let mut b = book();
        let e = b.hold("g2-a", "ops", None, None, T0).unwrap_err();
        assert!(e.to_string().contains("needs an end"), "{e}");
        let e = b.hold("g2-a", "ops", Some(T0 - 1), None, T0).unwrap_err();
        assert!(e.to_string().contains("not in the future"), "{e}");
        let e = b.hold("g2-a", "ops", None, Some(0), T0).unwrap_err();
        assert!(e.to_string().contains("--count 0"), "{e}");
        let e = b.acknowledge("g2-zz", "ops", T0).unwrap_err();
        assert!(e.to_string().contains("run `redrive triage`"), "{e}");
        let e = b.release("g2-a", "ops", T0).unwrap_err();
        assert!(e.to_string().contains("not held"), "{e}");
    }

    #[test]
    fn one_operation_per_group_and_a_failed_canary_alerts_once() {
        let mut b = book();
        b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
        let e = b.begin("g2-a", "discard", "ops", "p1", 3, T0).unwrap_err();
        assert!(matches!(e, Refused::Busy { .. }), "{e}");
        // The same operation again is a resumption, audited as such.
        b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
        b.replay_stage("g2-a", 1, 1, 1, 0);
        let a = b
            .finish(
                "g2-a",
                "ops",
                Finish::CanaryFailed("1 of 1 back".into()),
                T0,
            )
            .unwrap();
        assert_eq!(a.kind, "canary-failed");
        let r = b.get("g2-a").unwrap();
        assert_eq!(r.state, State::ReplayFailed);
        assert_eq!(r.operation, None);
        let actions: Vec<&str> = r.audit.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, ["replay", "replay-resumed", "replay-stopped"]);
        assert_eq!(r.replay.as_ref().unwrap().back, 1);
    }

    #[test]
    fn a_finished_replay_that_left_nothing_resolves_the_group() {
        let mut b = book();
        b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
        assert_eq!(b.finish("g2-a", "ops", Finish::Done { left: 0 }, T0), None);
        assert_eq!(b.get("g2-a").unwrap().state, State::Resolved);
        assert!(b.get("g2-a").unwrap().replay.as_ref().unwrap().finished);
    }

    #[test]
    fn a_pass_keeps_its_facts_with_the_trend_thinned_and_an_old_book_still_loads() {
        let mut b = book();
        let times: Vec<i64> = (0..1000).map(|n| T0 + n).collect();
        let facts = PassFacts {
            action: "fix-then-replay-canary".into(),
            advice: "fix it".into(),
            first_failure: Some("2025-11-24T16:00:00Z".into()),
            last_failure: Some("2025-11-24T17:00:00Z".into()),
            failure_times: times.clone(),
            failure_times_every: 3,
            ..PassFacts::default()
        };
        let (kept, every) = thin(&facts.failure_times, facts.failure_times_every);
        assert_eq!(
            (kept.len(), every),
            (200, 15),
            "every 5th of 1000, each for 3 x 5"
        );
        assert_eq!(
            (kept[0], kept[199]),
            (T0, T0 + 995),
            "evenly over the whole range"
        );
        assert_eq!(thin(&times[..200], 1), (times[..200].to_vec(), 1));
        assert_eq!(thin(&times[..201], 2).0.len(), 101);
        b.keep_pass_facts("g2-a", facts.clone(), T0 + 5).unwrap();
        assert_eq!(b.get("g2-a").unwrap().pass.as_ref(), Some(&facts));
        assert_eq!(b.passed_at.as_deref(), Some("2025-11-24T16:00:00Z"));
        assert!(b.keep_pass_facts("g2-zz", facts, T0).is_err());
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Book>(&json).unwrap(), b);

        // A book written before passes kept their facts loads, without them.
        let old = r#"{"queue":"q","groups":{"g2-a":{"state":"held","title":"t","firstSeen":"a","lastSeen":"b","lastCount":3,"notes":[],"audit":[]}}}"#;
        let old: Book = serde_json::from_str(old).unwrap();
        assert_eq!(old.get("g2-a").unwrap().pass, None);
        assert_eq!(old.passed_at, None);
    }

    #[test]
    fn stages_start_with_the_canary_and_widen() {
        assert_eq!(stages(1, 1), vec![1]);
        assert_eq!(stages(5, 1), vec![1, 4]);
        assert_eq!(stages(500, 1), vec![1, 10, 100, 389]);
        assert_eq!(stages(500, 3), vec![3, 10, 100, 387]);
        assert_eq!(stages(20, 50), vec![20]);
        assert_eq!(stages(0, 1), Vec::<u64>::new());
    }
}
