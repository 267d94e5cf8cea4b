//! The book of one queue and what a triage pass records in it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::GROUPS_KEPT;
use super::record::{Alert, GroupRecord, PassFacts, State, audit, push_audit};
use crate::timefmt::rfc3339_from_millis;

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

    pub(super) fn alert(&self, kind: &str, group: &str, r: &GroupRecord, now_ms: i64) -> Alert {
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

    /// The groups as readers list them: the largest count of the last pass first, then by id;
    /// resolved ones only with `resolved`.
    pub fn largest_first(&self, resolved: bool) -> Vec<(&String, &GroupRecord)> {
        let mut groups: Vec<_> = self
            .groups
            .iter()
            .filter(|(_, r)| resolved || r.state != State::Resolved)
            .collect();
        groups.sort_by(|a, b| b.1.last_count.cmp(&a.1.last_count).then(a.0.cmp(b.0)));
        groups
    }

    pub fn get(&self, group: &str) -> Result<&GroupRecord, Refused> {
        self.groups
            .get(group)
            .ok_or_else(|| Refused::Unknown(group.to_string()))
    }

    pub(super) fn get_mut(&mut self, group: &str) -> Result<&mut GroupRecord, Refused> {
        self.groups
            .get_mut(group)
            .ok_or_else(|| Refused::Unknown(group.to_string()))
    }
}
