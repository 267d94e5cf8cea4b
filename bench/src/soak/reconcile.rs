//! The end of a soak: where every produced message is (delivered downstream, or parked in one
//! of the queues), what the fault layer did, and the verdict.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use redrive_shared::meta::RedriveMeta;
use serde::Serialize;

use crate::downstream::chain_of;
use crate::faults::{FaultCounts, FaultStats};

use super::{Kind, SoakSettings};

/// Queue depths (visible, in flight and delayed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depths {
    pub source: u64,
    pub dlq: u64,
    pub poison: u64,
}

/// Which queue a message sits in at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Place {
    Source,
    Dlq,
    Poison,
}

impl Place {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Dlq => "dlq",
            Self::Poison => "poison",
        }
    }
}

/// A message found in a queue at the end.
#[derive(Debug, Clone)]
pub struct Parked {
    pub place: Place,
    /// `originalMessageId` (or the MessageId of a message never redriven).
    pub key: String,
    pub reason: Option<String>,
}

impl Parked {
    pub fn read(place: Place, message_id: &str, attributes: &redrive_shared::Attributes) -> Self {
        let (meta, _) = RedriveMeta::read(attributes, message_id);
        Self {
            place,
            key: meta.original_message_id,
            reason: meta.reason.map(|r| r.as_str().to_string()),
        }
    }
}

/// What the fault layer (proxy or world) did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LayerStats {
    pub calls: u64,
    pub faults: FaultCounts,
    pub sdk_retries: u64,
    pub failed_entries: u64,
    pub completion_faulted: BTreeSet<String>,
    pub claim_lost: BTreeSet<String>,
    /// Kills that landed on a DeleteMessageBatch: after the copies were acknowledged.
    pub kills_between_send_and_delete: u64,
}

impl From<&FaultStats> for LayerStats {
    fn from(s: &FaultStats) -> Self {
        LayerStats {
            calls: s.calls.values().sum(),
            faults: s.faults.clone(),
            sdk_retries: s.sdk_retries,
            failed_entries: s.failed_entries,
            completion_faulted: s.completion_faulted.clone(),
            claim_lost: s.claim_lost.clone(),
            kills_between_send_and_delete: s.kills.get("DeleteMessageBatch").copied().unwrap_or(0),
        }
    }
}

/// The outcome: where every message ended, and what the loop went through.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reconciliation {
    pub emulator: String,
    pub settings: Option<SoakSettings>,
    pub messages: u64,
    pub delivered_once: u64,
    /// Keys whose side effect happened more than once.
    pub delivered_repeatedly: u64,
    /// ... of which the COMPLETED write met a fault: the contract's documented window, closed
    /// by the `Idempotency-Key` the downstream receives.
    pub repeats_explained: u64,
    /// Delivered keys of which a duplicate copy still sits in a queue. Each must follow an
    /// idempotency write that failed or whose answer was lost for good (every SDK retry
    /// failed too): the key then reads IN_PROGRESS until the claim expires, and a duplicate
    /// copy, retried meanwhile, can exhaust its attempts. (A claim whose first answer was lost
    /// and whose retry succeeded is the consumer's own: it carries its token.)
    pub leftovers_explained: u64,
    /// Keys parked, by `queue:reason`.
    pub parked: BTreeMap<String, u64>,
    /// Copies beyond the first of a parked key (a crash yields at worst a duplicate).
    pub duplicate_copies: u64,
    pub lost: Vec<String>,
    pub violations: Vec<String>,
    pub quiesced: bool,
    pub seconds: f64,
    pub layer: LayerStats,
    pub redriver_invocations: u64,
    pub redriver_kills: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub redrive_failures: u64,
    /// Consumer outcomes (processed, duplicate, retry, in-progress, dead-lettered...).
    pub consumer_outcomes: BTreeMap<String, u64>,
    /// Deliveries the consumer did not repeat because the key was COMPLETED.
    pub duplicates_suppressed: u64,
    /// The downstream's answers, by status.
    pub downstream: BTreeMap<String, u64>,
    /// Produced messages by kind.
    pub kinds: BTreeMap<String, u64>,
}

impl Reconciliation {
    pub fn passed(&self) -> bool {
        self.lost.is_empty() && self.violations.is_empty() && self.quiesced
    }
}

impl std::fmt::Display for Reconciliation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kv = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let parked: u64 = self.parked.values().sum();
        writeln!(
            f,
            "soak reconciliation ({}): {}",
            self.emulator,
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        writeln!(
            f,
            "  messages           {} ({}) in {:.1} s{}",
            self.messages,
            kv(&self.kinds),
            self.seconds,
            if self.quiesced {
                ""
            } else {
                " -- did NOT settle"
            }
        )?;
        writeln!(
            f,
            "  delivered once     {}   (side effects per key at most 1 except {} keys, {} of them explained)",
            self.delivered_once, self.delivered_repeatedly, self.repeats_explained
        )?;
        writeln!(
            f,
            "  parked             {parked}   ({}), duplicate copies {}",
            kv(&self.parked),
            self.duplicate_copies
        )?;
        if self.leftovers_explained > 0 {
            writeln!(
                f,
                "  delivered + copy   {}   (delivered keys with a duplicate copy left parked, each after a lost or failed idempotency write)",
                self.leftovers_explained
            )?;
        }
        writeln!(f, "  lost               {}", self.lost.len())?;
        writeln!(
            f,
            "  faults injected    {} of {} calls ({})",
            self.layer.faults.total(),
            self.layer.calls,
            self.layer.faults
        )?;
        writeln!(
            f,
            "  retries            {} SDK retries, {} failed batch entries",
            self.layer.sdk_retries, self.layer.failed_entries
        )?;
        writeln!(
            f,
            "  re-driver          {} invocations, {} killed mid-call ({} of them between send and delete); redriven {}, isolated {}, failed {}",
            self.redriver_invocations,
            self.redriver_kills,
            self.layer.kills_between_send_and_delete,
            self.redriven,
            self.isolated,
            self.redrive_failures
        )?;
        writeln!(
            f,
            "  consumer           {}; duplicates suppressed {}",
            kv(&self.consumer_outcomes),
            self.duplicates_suppressed
        )?;
        writeln!(f, "  downstream         {}", kv(&self.downstream))?;
        for v in &self.violations {
            writeln!(f, "  VIOLATION          {v}")?;
        }
        for k in self.lost.iter().take(20) {
            writeln!(f, "  LOST               {k}")?;
        }
        Ok(())
    }
}

/// The record id the consumer of [`super::consumer_config`] (default `message` key, no namespace)
/// gives a message first sent with this MessageId and body.
pub(super) fn record_id_of(message_id: &str, body: &str) -> String {
    redrive_shared::key::derive(
        &redrive_shared::key::KeySource::Message,
        message_id,
        body,
        &redrive_shared::Attributes::new(),
    )
    .map(|key| key.record_id(None))
    .unwrap_or_default()
}

/// The layer's failed idempotency writes, by chain instead of by record id.
pub(super) fn by_chain(mut layer: LayerStats, chains: &HashMap<String, String>) -> LayerStats {
    let map = |ids: BTreeSet<String>| {
        ids.into_iter()
            .map(|id| chains.get(&id).cloned().unwrap_or(id))
            .collect()
    };
    layer.completion_faulted = map(std::mem::take(&mut layer.completion_faulted));
    layer.claim_lost = map(std::mem::take(&mut layer.claim_lost));
    layer
}

/// Every produced message is delivered downstream, or sits in exactly one of the queues.
pub fn reconcile(
    produced: &HashMap<String, Kind>,
    inventory: &[Parked],
    effects: &HashMap<String, u32>,
    layer: LayerStats,
) -> Reconciliation {
    let mut r = Reconciliation {
        messages: produced.len() as u64,
        ..Reconciliation::default()
    };
    for kind in produced.values() {
        *r.kinds.entry(kind.as_str().to_string()).or_default() += 1;
    }
    let mut places: HashMap<&str, Vec<&Parked>> = HashMap::new();
    for p in inventory {
        places.entry(p.key.as_str()).or_default().push(p);
    }
    for key in places.keys() {
        if !produced.contains_key(*key) {
            r.violations
                .push(format!("a queue holds {key}, which was never produced"));
        }
    }
    for key in effects.keys() {
        if !produced.contains_key(key) {
            r.violations.push(format!(
                "the downstream saw key {key}, which was never produced"
            ));
        }
    }
    // Failed idempotency writes arrive by chain (see `by_chain`) or by key text
    // (`<originalMessageId>:<body digest>`); the soak reconciles by originalMessageId.
    let completion_faulted: BTreeSet<&str> = layer
        .completion_faulted
        .iter()
        .map(|k| chain_of(k))
        .collect();
    let claim_lost: BTreeSet<&str> = layer.claim_lost.iter().map(|k| chain_of(k)).collect();
    let mut keys: Vec<&String> = produced.keys().collect();
    keys.sort();
    for key in keys {
        let delivered = effects.get(key).copied().unwrap_or(0);
        let copies = places.get(key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let queues: BTreeSet<Place> = copies.iter().map(|p| p.place).collect();
        match (delivered, copies.len()) {
            (0, 0) => r.lost.push(key.clone()),
            (0, n) => {
                if queues.len() > 1 {
                    r.violations
                        .push(format!("{key} sits in more than one queue: {queues:?}"));
                }
                let first = copies[0];
                let label = match &first.reason {
                    Some(reason) => format!("{}:{reason}", first.place.as_str()),
                    None => first.place.as_str().to_string(),
                };
                *r.parked.entry(label).or_default() += 1;
                r.duplicate_copies += n as u64 - 1;
            }
            (d, n) => {
                if n > 0 {
                    if completion_faulted.contains(key.as_str())
                        || claim_lost.contains(key.as_str())
                    {
                        r.leftovers_explained += 1;
                    } else {
                        r.violations.push(format!(
                            "{key} was delivered and still sits in {queues:?}, with no failed idempotency write to explain it"
                        ));
                    }
                }
                if d == 1 {
                    r.delivered_once += 1;
                } else {
                    r.delivered_repeatedly += 1;
                    if completion_faulted.contains(key.as_str()) {
                        r.repeats_explained += 1;
                    } else {
                        r.violations.push(format!(
                            "{key} reached the downstream {d} times, and its COMPLETED write never failed"
                        ));
                    }
                }
            }
        }
    }
    r.layer = layer;
    r
}
