//! Which messages `replay` and `discard` act on: by id (MessageId or originalMessageId), or
//! all, narrowed by the shared filters ([`super::filter`]), bounded by `--max`.

use std::collections::BTreeSet;

use redrive_shared::meta::RedriveMeta;

use super::filter::MessageFilter;
use clap::Args;
use redrive_engine::ports::Received;

/// Which messages `replay` and `discard` act on.
#[derive(Debug, Args)]
pub struct Selection {
    /// A message to act on, by MessageId or originalMessageId (repeatable).
    #[arg(long, value_name = "ID", num_args = 1.., action = clap::ArgAction::Append)]
    pub id: Vec<String>,
    /// Every message (narrowed by the filters, bounded by --max).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub filters: super::filter::FilterArgs,
    /// Act on this many messages at most: replay in batches, check, go on.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// Only these MessageIds (a triage plan): matched on the MessageId alone, never on the
    /// originalMessageId, so a copy that came back is not taken for its original.
    #[arg(skip)]
    pub plan: Option<BTreeSet<String>>,
}

#[derive(Debug, Clone)]
pub struct Filter {
    ids: BTreeSet<String>,
    found: BTreeSet<String>,
    filter: MessageFilter,
    max: Option<usize>,
    taken: usize,
    plan: Option<BTreeSet<String>>,
}

impl Filter {
    /// `now_ms` is the instant `--older-than` and `--newer-than` count from.
    pub fn new(selection: &Selection, now_ms: i64) -> Self {
        Self {
            ids: selection.id.iter().cloned().collect(),
            found: BTreeSet::new(),
            filter: MessageFilter::new(&selection.filters, now_ms),
            max: selection.max.map(|n| n as usize),
            taken: 0,
            plan: selection.plan.clone(),
        }
    }

    /// True once `--max` messages were taken.
    pub fn full(&self) -> bool {
        self.max.is_some_and(|max| self.taken >= max)
    }

    /// Whether the message is selected; a selected message counts towards `--max`.
    pub fn take(&mut self, m: &Received) -> bool {
        if self.full() {
            return false;
        }
        let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
        let by_id = if let Some(plan) = &self.plan {
            plan.contains(&m.message_id)
        } else if self.ids.is_empty() {
            true
        } else {
            let hits: Vec<String> = [&m.message_id, &meta.original_message_id]
                .into_iter()
                .filter(|id| self.ids.contains(*id))
                .cloned()
                .collect();
            let hit = !hits.is_empty();
            self.found.extend(hits);
            hit
        };
        let selected = by_id && self.filter.matches(m);
        if selected {
            self.taken += 1;
        }
        selected
    }

    /// Messages taken so far.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// Why the walk that used this filter ended. The walk goes on after the last `--id` was
    /// found (another copy of the same chain may follow); what it did not reach then is not
    /// what was asked for.
    pub fn stop(&self) -> super::scan::Stop {
        if self.full() {
            super::scan::Stop::Limit
        } else if !self.ids.is_empty() && self.found.len() == self.ids.len() {
            super::scan::Stop::AllFound
        } else {
            super::scan::Stop::Exhausted
        }
    }

    /// Ids asked for with `--id` that no visible message carried.
    pub fn not_found(&self) -> Vec<String> {
        self.ids.difference(&self.found).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterArgs;
    use redrive_shared::Attributes;
    use redrive_shared::meta::IsolationReason;

    fn message(id: &str, original: &str, reason: Option<IsolationReason>) -> Received {
        let mut attributes = Attributes::new();
        RedriveMeta {
            reason,
            ..RedriveMeta::fresh(original)
        }
        .write_into(&mut attributes);
        crate::fixtures::received(id, "", attributes)
    }

    fn selection(ids: &[&str], reasons: &[IsolationReason], max: Option<u32>) -> Selection {
        Selection {
            id: ids.iter().map(|s| s.to_string()).collect(),
            all: ids.is_empty(),
            filters: FilterArgs {
                reason: reasons.to_vec(),
                ..FilterArgs::default()
            },
            max,
            plan: None,
        }
    }

    #[test]
    fn ids_match_the_message_id_or_the_original_id() {
        let mut f = Filter::new(&selection(&["m-1", "orig-2", "gone"], &[], None), 0);
        assert!(f.take(&message("m-1", "orig-1", None)));
        assert!(f.take(&message("m-2", "orig-2", None)));
        assert!(!f.take(&message("m-3", "orig-3", None)));
        assert_eq!(f.not_found(), ["gone"]);
    }

    #[test]
    fn a_plan_matches_the_message_id_alone() {
        let mut s = selection(&[], &[], None);
        s.plan = Some(["m-1".to_string()].into());
        let mut f = Filter::new(&s, 0);
        assert!(f.take(&message("m-1", "m-1", None)));
        // A copy of m-1 that came back carries m-1 as its original: not part of the plan.
        assert!(!f.take(&message("m-9", "m-1", None)));
    }

    #[test]
    fn reasons_narrow_and_max_bounds() {
        let perm = Some(IsolationReason::PermanentFailure);
        let maxed = Some(IsolationReason::MaxAttempts);
        let mut f = Filter::new(&selection(&[], &[IsolationReason::MaxAttempts], Some(2)), 0);
        assert!(!f.take(&message("a", "a", perm)));
        assert!(!f.take(&message("b", "b", None)));
        assert!(f.take(&message("c", "c", maxed.clone())));
        assert!(!f.full());
        assert!(f.take(&message("d", "d", maxed.clone())));
        assert!(f.full());
        assert!(!f.take(&message("e", "e", maxed)), "over --max");
    }
}
