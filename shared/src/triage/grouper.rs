//! One pass over messages folded into groups: per group its count, first and last failure,
//! source, class and code, attempts, isolation, the top values of each masked kind, one
//! recommended action, and the ids of its messages (the plan an action on the group acts on).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::action::Action;
use super::facts::{Facts, Observation};
use super::group::{GroupId, Key, key};
use super::normalise::{self, Kind, Version};
use super::rules::Rules;
use crate::key::sha256_hex;
use crate::timefmt::rfc3339_from_millis;

/// Values shown per masked kind.
pub const TOP_VALUES: usize = 3;
/// Distinct values counted per kind and group; past it, new values are no longer counted.
const MAX_DISTINCT: usize = 1000;
/// Failure times kept per group (for a trend); past it, every other one is dropped and one in
/// twice as many kept from then on, so that the kept times stay an even sample of the group.
pub const MAX_FAILURE_TIMES: usize = 1000;

/// How messages are grouped.
#[derive(Debug)]
pub struct GroupingConfig {
    /// The normaliser version of computed ids.
    pub version: Version,
    pub rules: Rules,
    /// Attributes whose values split the messages without a recorded cause.
    pub key_attributes: Vec<String>,
    /// The re-driver's attempt limit (`MAX_REDRIVE_ATTEMPTS`).
    pub max_attempts: u32,
    /// The source queue's name for messages that name none (the operator knows it).
    pub fallback_source: Option<String>,
}

impl Default for GroupingConfig {
    fn default() -> Self {
        Self {
            version: normalise::CURRENT,
            rules: Rules::default(),
            key_attributes: Vec::new(),
            max_attempts: 5,
            fallback_source: None,
        }
    }
}

/// One value and how many messages carried it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueCount {
    pub value: String,
    pub count: usize,
}

/// The most frequent values a group's messages carried in place of one kind of placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopValues {
    pub kind: Kind,
    /// Distinct values seen (at most 1000 are counted: see `distinctCapped`).
    pub distinct: usize,
    pub distinct_capped: bool,
    pub top: Vec<ValueCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempts {
    pub min: u32,
    pub max: u32,
    /// attempt -> messages
    pub histogram: BTreeMap<u32, usize>,
}

/// A group, as `redrive triage` shows it (`--json`: docs/triage.md has the schema).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub id: String,
    /// The rule that named the group, when one did.
    pub rule: Option<String>,
    /// The computed ids of its messages: one, unless a rule merged groups.
    pub computed_ids: Vec<String>,
    pub title: String,
    /// A cause was recorded for its messages (false: grouped by what they carry).
    pub recorded: bool,
    pub count: usize,
    pub first_failure: Option<String>,
    pub last_failure: Option<String>,
    /// The most common source queue (`null`: none known).
    pub source: Option<String>,
    pub class: Option<String>,
    pub code: Option<String>,
    pub attempts: Attempts,
    /// isolation reason (`none`: not isolated) -> messages
    pub isolation: BTreeMap<String, usize>,
    pub top_values: Vec<TopValues>,
    pub action: Action,
    pub action_advice: &'static str,
    /// The row of the action table that gave the action.
    pub action_row: u8,
    /// Messages whose `x-redrive` could not be read.
    pub garbled: usize,
    /// The MessageIds of its messages, in the order they were seen: the plan.
    pub message_ids: Vec<String>,
    /// A digest of the group id and its sorted message ids: the same plan, the same id.
    pub plan_id: String,
    /// Failure times (epoch ms, in the order seen) of at most 1000 of its messages: every
    /// `failure_times_every`-th message that has a time.
    pub failure_times: Vec<i64>,
    /// How many messages each kept failure time stands for (1 until 1000 were kept).
    pub failure_times_every: usize,
}

#[derive(Debug, Default)]
struct Acc {
    rule: Option<String>,
    computed: Vec<String>,
    title: String,
    recorded: bool,
    first: Option<i64>,
    last: Option<i64>,
    sources: HashMap<Option<String>, usize>,
    classes: HashMap<String, usize>,
    codes: HashMap<String, usize>,
    attempts: BTreeMap<u32, usize>,
    isolation: BTreeMap<String, usize>,
    values: BTreeMap<Kind, HashMap<String, usize>>,
    capped: HashSet<Kind>,
    /// (table row, action) -> messages
    actions: BTreeMap<(u8, Action), usize>,
    garbled: usize,
    ids: Vec<String>,
    times: Times,
}

/// An even sample of failure times: every `every`-th of those seen, at most `MAX_FAILURE_TIMES`.
#[derive(Debug)]
struct Times {
    kept: Vec<i64>,
    every: usize,
    seen: usize,
}

impl Default for Times {
    fn default() -> Self {
        Self {
            kept: Vec::new(),
            every: 1,
            seen: 0,
        }
    }
}

impl Times {
    fn add(&mut self, at: i64) {
        if self.seen.is_multiple_of(self.every) {
            self.kept.push(at);
            if self.kept.len() > MAX_FAILURE_TIMES {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.every *= 2;
            }
        }
        self.seen += 1;
    }
}

/// Groups messages as they come; a message seen twice (by MessageId) counts once.
#[derive(Debug)]
pub struct Grouper {
    cfg: GroupingConfig,
    groups: HashMap<GroupId, Acc>,
    seen: HashSet<String>,
    repeats: usize,
}

impl Grouper {
    pub fn new(cfg: GroupingConfig) -> Self {
        Self {
            cfg,
            groups: HashMap::new(),
            seen: HashSet::new(),
            repeats: 0,
        }
    }

    pub fn config(&self) -> &GroupingConfig {
        &self.cfg
    }

    /// Reads what `m` carries (see [`Grouper::facts`]) and adds it.
    pub fn add(&mut self, m: &Observation<'_>) -> Option<GroupId> {
        let facts = self.facts(m);
        self.add_facts(m, facts)
    }

    /// What `m` carries, with the configured source for a message that names none.
    pub fn facts(&self, m: &Observation<'_>) -> Facts {
        let mut facts = Facts::read(m);
        if facts.source.is_none() {
            facts.source.clone_from(&self.cfg.fallback_source);
        }
        facts
    }

    /// Adds a message whose facts the caller read (and may have completed, say with a cause
    /// recorded outside the message). Returns its group id; `None` for a MessageId seen before.
    pub fn add_facts(&mut self, m: &Observation<'_>, facts: Facts) -> Option<GroupId> {
        if !self.seen.insert(facts.message_id.clone()) {
            self.repeats += 1;
            return None;
        }
        let computed = key(m, &facts, &self.cfg.key_attributes, self.cfg.version);
        let rule = self.cfg.rules.group_of(m, &facts).map(str::to_string);
        let id = rule
            .clone()
            .map_or_else(|| computed.id.clone(), GroupId::Rule);
        let acc = self.groups.entry(id.clone()).or_default();
        fold(acc, &computed, rule, &facts, self.cfg.max_attempts);
        Some(id)
    }

    /// Messages added more than once (counted once).
    pub fn repeats(&self) -> usize {
        self.repeats
    }

    /// Distinct messages grouped.
    pub fn grouped(&self) -> usize {
        self.seen.len()
    }

    /// The groups, largest first (then by id).
    pub fn finish(self) -> Vec<Group> {
        let mut groups: Vec<Group> = self
            .groups
            .into_iter()
            .map(|(id, acc)| finish_group(&id, acc))
            .collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
        groups
    }
}

/// True when `m` belongs to the group `id` under `cfg`: a rule id by that rule, a computed id
/// by the key computed with the normaliser version the id names (so that an id an older
/// version computed still finds its messages, whether or not a rule now names them).
pub fn belongs(id: &GroupId, m: &Observation<'_>, facts: &Facts, cfg: &GroupingConfig) -> bool {
    match id {
        GroupId::Rule(name) => cfg.rules.group_of(m, facts) == Some(name.as_str()),
        GroupId::Computed { version, .. } => key(m, facts, &cfg.key_attributes, *version).id == *id,
    }
}

fn fold(acc: &mut Acc, k: &Key, rule: Option<String>, f: &Facts, max_attempts: u32) {
    let computed = k.id.to_string();
    if acc.ids.is_empty() {
        acc.title = match &rule {
            Some(name) => format!("{name}: {}", k.title),
            None => k.title.clone(),
        };
        acc.rule = rule;
        acc.recorded = f.cause.is_some();
    }
    if !acc.computed.contains(&computed) {
        acc.computed.push(computed);
    }
    if let Some(at) = f.failed_at_ms() {
        acc.first = Some(acc.first.map_or(at, |t| t.min(at)));
        acc.last = Some(acc.last.map_or(at, |t| t.max(at)));
        acc.times.add(at);
    }
    *acc.sources.entry(f.source.clone()).or_default() += 1;
    if let Some(c) = &f.cause {
        *acc.classes.entry(c.class.to_string()).or_default() += 1;
        *acc.codes.entry(c.code.clone()).or_default() += 1;
    }
    *acc.attempts.entry(f.attempt).or_default() += 1;
    let reason = f.reason.as_ref().map_or("none", |r| r.as_str());
    *acc.isolation.entry(reason.to_string()).or_default() += 1;
    if let Some(n) = &k.normalised {
        for m in &n.masked {
            let values = acc.values.entry(m.kind).or_default();
            if let Some(count) = values.get_mut(&m.value) {
                *count += 1;
            } else if values.len() < MAX_DISTINCT {
                values.insert(m.value.clone(), 1);
            } else {
                acc.capped.insert(m.kind);
            }
        }
    }
    let (action, row) = Action::of(f, max_attempts);
    *acc.actions.entry((row, action)).or_default() += 1;
    acc.garbled += usize::from(f.garbled);
    acc.ids.push(f.message_id.clone());
}

/// The key with the most messages (ties: the smallest key).
fn most<K: Ord + Clone>(counts: impl IntoIterator<Item = (K, usize)>) -> Option<K> {
    counts
        .into_iter()
        .max_by(|(ka, a), (kb, b)| a.cmp(b).then_with(|| kb.cmp(ka)))
        .map(|(k, _)| k)
}

fn finish_group(id: &GroupId, acc: Acc) -> Group {
    let (action_row, action) = most(acc.actions).unwrap_or((5, Action::FixThenReplayCanary));
    let top_values = acc
        .values
        .into_iter()
        .map(|(kind, values)| {
            let distinct = values.len();
            let mut top: Vec<ValueCount> = values
                .into_iter()
                .map(|(value, count)| ValueCount { value, count })
                .collect();
            top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
            top.truncate(TOP_VALUES);
            TopValues {
                kind,
                distinct,
                distinct_capped: acc.capped.contains(&kind),
                top,
            }
        })
        .collect();
    let mut sorted = acc.ids.clone();
    sorted.sort();
    let plan_id = format!(
        "p-{}",
        sha256_hex(format!("{id}\n{}", sorted.join("\n")).as_bytes(), 16)
    );
    Group {
        id: id.to_string(),
        rule: acc.rule,
        computed_ids: acc.computed,
        title: acc.title,
        recorded: acc.recorded,
        count: acc.ids.len(),
        first_failure: acc.first.map(rfc3339_from_millis),
        last_failure: acc.last.map(rfc3339_from_millis),
        source: most(acc.sources).flatten(),
        class: most(acc.classes),
        code: most(acc.codes),
        attempts: Attempts {
            min: acc.attempts.keys().next().copied().unwrap_or(0),
            max: acc.attempts.keys().next_back().copied().unwrap_or(0),
            histogram: acc.attempts,
        },
        isolation: acc.isolation,
        top_values,
        action,
        action_advice: action.advice(),
        action_row,
        garbled: acc.garbled,
        message_ids: acc.ids,
        plan_id,
        failure_times: acc.times.kept,
        failure_times_every: acc.times.every,
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn failure_times_stay_an_even_bounded_sample() {
        let mut t = Times::default();
        for at in 0..1000 {
            t.add(at);
        }
        assert_eq!(
            (t.kept.len(), t.every),
            (1000, 1),
            "all kept up to the bound"
        );
        for at in 1000..2500 {
            t.add(at);
        }
        assert_eq!(t.every, 4);
        assert_eq!(t.kept, (0..2500).step_by(4).collect::<Vec<i64>>());
        assert!(t.kept.len() <= MAX_FAILURE_TIMES);
    }
}
