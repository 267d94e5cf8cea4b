//! What the fault layers inject, and how often. One plan drives both layers: the loopback
//! proxy in front of moto and the in-memory world of the port-fake soak.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use redrive_shared::backoff::RandomSource;
use serde::Serialize;
use tokio::sync::oneshot;

struct Kill {
    operations: Vec<String>,
    remaining: u32,
    fire: oneshot::Sender<()>,
}

/// What a fault layer (the in-memory world, or the proxy in front of moto) counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FaultStats {
    /// Calls by operation name (`ReceiveMessage`, `PutItem`, `PutMetricData`...), retries
    /// included: what the service would bill.
    pub calls: BTreeMap<String, u64>,
    /// Calls that were an SDK retry of an earlier attempt.
    pub sdk_retries: u64,
    pub faults: FaultCounts,
    /// Batch entries reported failed by a `BatchEntries` fault.
    pub failed_entries: u64,
    /// Idempotency keys whose COMPLETED write met a fault (a repeat of such a key's side
    /// effect is the contract's documented window, see the consumer's `Processor`).
    pub completion_faulted: BTreeSet<String>,
    /// Idempotency keys whose claim (`PutItem` with `status` = `IN_PROGRESS`) took effect while
    /// its answer was lost (a reset after the call, a timeout).
    pub claim_lost: BTreeSet<String>,
    /// Calls a kill landed on, by operation.
    pub kills: BTreeMap<String, u64>,
}

/// One of the two fault layers the soak runs on: its kill switch and its counts.
pub trait FaultLayer {
    fn kill_switch(&self) -> &KillSwitch;
    fn fault_stats(&self) -> FaultStats;
}

/// A kill armed at the n-th next call of chosen operations, shared by both fault layers: the
/// layer never answers that call, and the harness, told through the receiver, drops the
/// caller there (a process killed mid-call).
#[derive(Default)]
pub struct KillSwitch(Mutex<Option<Kill>>);

impl KillSwitch {
    /// Arms the kill at the `nth` (1-based) next call of one of `operations`; the receiver
    /// resolves when it lands.
    pub fn arm(&self, operations: &[&str], nth: u32) -> oneshot::Receiver<()> {
        let (fire, fired) = oneshot::channel();
        *self.lock() = Some(Kill {
            operations: operations.iter().map(|o| o.to_string()).collect(),
            remaining: nth.max(1),
            fire,
        });
        fired
    }

    pub fn disarm(&self) {
        self.lock().take();
    }

    /// Counts a call of `operation`; true when the armed kill lands on it (it is then fired
    /// and disarmed).
    pub fn lands(&self, operation: &str) -> bool {
        let mut kill = self.lock();
        let Some(k) = kill.as_mut() else {
            return false;
        };
        if !k.operations.iter().any(|o| o == operation) {
            return false;
        }
        k.remaining -= 1;
        if k.remaining > 0 {
            return false;
        }
        let k = kill.take().expect("checked above");
        let _ = k.fire.send(());
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kill>> {
        redrive_shared::sync::lock(&self.0)
    }
}

/// One kind of injected failure, as a client of SQS or DynamoDB meets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum FaultKind {
    /// 400 `ThrottlingException`; nothing applied.
    Throttle,
    /// 500 `InternalError` / `InternalServerError`; nothing applied.
    ServerError,
    /// The connection is reset before the request reaches the service; nothing applied.
    ResetBefore,
    /// The service applied the request, then the connection was reset before the answer:
    /// the client sees an error for a call that took effect.
    ResetAfter,
    /// The answer comes later than the client's attempt timeout; the request is applied late.
    Timeout,
    /// SendMessageBatch / DeleteMessageBatch: some entries are reported in `Failed`
    /// (`InternalError`, not the sender's fault) and not applied; the rest succeed.
    BatchEntries,
}

impl FaultKind {
    pub const ALL: [FaultKind; 6] = [
        Self::Throttle,
        Self::ServerError,
        Self::ResetBefore,
        Self::ResetAfter,
        Self::Timeout,
        Self::BatchEntries,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Throttle => "throttle",
            Self::ServerError => "server-error",
            Self::ResetBefore => "reset-before",
            Self::ResetAfter => "reset-after",
            Self::Timeout => "timeout",
            Self::BatchEntries => "batch-entries",
        }
    }

    /// True when the request took effect although the client saw a failure.
    pub fn applies(self) -> bool {
        matches!(self, Self::ResetAfter | Self::Timeout)
    }
}

/// A configurable share of calls failing, split between kinds by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Share of SQS and DynamoDB calls that fail, 0..=1.
    pub rate: f64,
    pub weights: Vec<(FaultKind, u32)>,
    /// How long a `Timeout` fault holds the answer (longer than the client's attempt timeout).
    pub timeout_hold: Duration,
}

impl FaultPlan {
    /// The soak's mix: throttling and 500s most often, then failed batch entries, then the
    /// nastier ones (resets on either side of the service, timeouts).
    pub fn soak(rate: f64, timeout_hold: Duration) -> Self {
        Self {
            rate,
            weights: vec![
                (FaultKind::Throttle, 3),
                (FaultKind::ServerError, 3),
                (FaultKind::BatchEntries, 3),
                (FaultKind::ResetBefore, 1),
                (FaultKind::ResetAfter, 1),
                (FaultKind::Timeout, 1),
            ],
            timeout_hold,
        }
    }

    /// Whether this call fails, and how. `batch` is true for calls with per-entry results
    /// (the only ones a `BatchEntries` fault applies to).
    pub fn draw(&self, rng: &mut impl RandomSource, batch: bool) -> Option<FaultKind> {
        if rng.next_unit() >= self.rate {
            return None;
        }
        let eligible: Vec<(FaultKind, u32)> = self
            .weights
            .iter()
            .copied()
            .filter(|(k, w)| *w > 0 && (batch || *k != FaultKind::BatchEntries))
            .collect();
        let total: u32 = eligible.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return None;
        }
        let mut pick = (rng.next_unit() * f64::from(total)) as u32;
        for (kind, w) in eligible {
            if pick < w {
                return Some(kind);
            }
            pick -= w;
        }
        None
    }
}

/// Picks which entries of a batch fail: each with probability one half, at least one.
pub fn failing_entries(n: usize, rng: &mut impl RandomSource) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let mut picked: Vec<usize> = (0..n).filter(|_| rng.next_unit() < 0.5).collect();
    if picked.is_empty() {
        picked.push((rng.next_unit() * n as f64) as usize % n);
    }
    picked
}

/// Faults injected, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FaultCounts(pub BTreeMap<&'static str, u64>);

impl FaultCounts {
    pub fn add(&mut self, kind: FaultKind) {
        *self.0.entry(kind.as_str()).or_default() += 1;
    }

    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    pub fn get(&self, kind: FaultKind) -> u64 {
        self.0.get(kind.as_str()).copied().unwrap_or(0)
    }
}

impl std::fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(f, "{}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_shared::backoff::seeded_rng;

    #[test]
    fn the_rate_is_the_share_of_calls_that_fail() {
        let plan = FaultPlan::soak(0.2, Duration::from_secs(1));
        let mut rng = seeded_rng(7);
        let n = 100_000;
        let mut counts = FaultCounts::default();
        for _ in 0..n {
            if let Some(k) = plan.draw(&mut rng, true) {
                counts.add(k);
            }
        }
        let share = counts.total() as f64 / n as f64;
        assert!((0.19..0.21).contains(&share), "{share}");
        for kind in FaultKind::ALL {
            assert!(counts.get(kind) > 0, "{kind:?} never drawn");
        }
        // Throttling (weight 3) is drawn about three times as often as a timeout (weight 1).
        let ratio = counts.get(FaultKind::Throttle) as f64 / counts.get(FaultKind::Timeout) as f64;
        assert!((2.5..3.5).contains(&ratio), "{ratio}");
    }

    #[test]
    fn batch_entry_faults_only_hit_batch_calls() {
        let plan = FaultPlan::soak(1.0, Duration::from_secs(1));
        let mut rng = seeded_rng(1);
        for _ in 0..10_000 {
            let k = plan.draw(&mut rng, false).expect("rate 1 always fails");
            assert_ne!(k, FaultKind::BatchEntries);
        }
        assert_eq!(
            FaultPlan::soak(0.0, Duration::ZERO).draw(&mut rng, true),
            None
        );
    }

    #[test]
    fn at_least_one_entry_fails_and_all_are_in_range() {
        let mut rng = seeded_rng(3);
        for n in 1..=10 {
            for _ in 0..200 {
                let picked = failing_entries(n, &mut rng);
                assert!(!picked.is_empty());
                assert!(picked.iter().all(|&i| i < n));
            }
        }
        assert!(failing_entries(0, &mut rng).is_empty());
    }
}
