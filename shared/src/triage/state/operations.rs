//! What an operator does to a group in the book (acknowledge, note, hold, release), what the
//! re-driver records under a hold, and the operations that move a group's plan.

use std::collections::BTreeSet;

use super::book::{Book, Refused};
use super::record::{Alert, Hold, Note, ReplayTally, State, audit, push_audit};
use super::{MAX_HOLD_COUNT, NOTES_KEPT};
use crate::timefmt::rfc3339_from_millis;

impl Book {
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
            // One tally per plan, over every run of it: a run resumed, or run again after it
            // finished with messages left, counts on from what the runs before moved.
            match r.replay.as_mut() {
                Some(t) if t.plan_id == plan_id => t.finished = false,
                _ => {
                    r.replay = Some(ReplayTally {
                        plan_id: plan_id.to_string(),
                        ..ReplayTally::default()
                    });
                }
            }
        }
        Ok(())
    }

    /// Adds what one replay stage moved, as soon as it moved it (before its verdict): a run
    /// killed in the window leaves the counts the next run goes on from.
    pub fn replay_stage(&mut self, group: &str, sent: u64, deleted: u64) {
        if let Some(t) = self.groups.get_mut(group).and_then(|r| r.replay.as_mut()) {
            t.sent += sent;
            t.deleted += deleted;
            t.stages.push(sent);
        }
    }

    /// Adds a stage's verdict: the copies found back on the DLQ or isolated.
    pub fn replay_verdict(&mut self, group: &str, back: u64, isolated: u64) {
        if let Some(t) = self.groups.get_mut(group).and_then(|r| r.replay.as_mut()) {
            t.back += back;
            t.isolated += isolated;
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
                let detail = if *left == 0 {
                    "every message of the plan moved".to_string()
                } else {
                    format!(
                        "{left} message(s) of the plan not moved: on the queue, or held by another run until its hold ends; run the replay again to move them"
                    )
                };
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
    /// Every stage ran; `left` messages of the plan were not moved (failed, refused, not
    /// found visible), over every run of the plan.
    Done { left: u64 },
    /// A canary came back or was isolated: the replay stopped.
    CanaryFailed(String),
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
