//! The fault-injection soak: the full loop, consumer and re-driver, with a flaky downstream,
//! a share of SQS and DynamoDB calls failing, and a re-driver killed at random points between
//! send and delete; then the reconciliation by `originalMessageId`.
//!
//! ```text
//! producer -> source --(event source mapping: poll, invoke consumer, delete the settled)--> flaky downstream
//!               | maxReceiveCount                 | permanent failure: copy + lastError
//!               v                                 v
//!              DLQ <------------------------------'
//!               '--(re-driver, every tick while the DLQ is not empty; some invocations killed)--> source | poison
//! ```
//!
//! The loop runs until every message settled (the source and the DLQ are empty), then every
//! produced message must be delivered downstream, or sit in one of the queues; a message
//! in none is lost. The same loop runs on moto (through the fault proxy, [`moto`]) and on the
//! port fakes (the in-memory [`crate::world`], [`fake`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redrive_consumer::Consumer;
use redrive_consumer::ports::{IdempotencyStore, QueueOps};
use redrive_consumer::{Message, Processor};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_engine::{DrainError, DrainRequest, Engine};
use redrive_shared::backoff::{RandomSource, seeded_rng};
use redrive_shared::sync::lock;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::time::Instant;

use redrive_tests::event_source::{self, Source};

use crate::downstream::{DOOMED_MARKER, Flaky, POISON_MARKER};
use crate::event_source::InProcess;
use crate::faults::FaultLayer;

pub mod fake;
pub mod moto;
mod reconcile;
// The workflow soak
pub mod workflow;

pub use reconcile::{Depths, LayerStats, Parked, Place, Reconciliation, reconcile};
use reconcile::{by_chain, record_id_of};

/// The soak's knobs.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSettings {
    pub messages: u64,
    /// Share of SQS and DynamoDB calls that fail.
    pub fault_rate: f64,
    /// Share of deliveries of ordinary messages the downstream fails transiently.
    pub downstream_failure_rate: f64,
    /// Share of messages the downstream always rejects (400): they end in the poison queue.
    pub poison_share: f64,
    /// Share of messages the downstream never accepts (503): they exhaust their attempts.
    pub doomed_share: f64,
    /// Share of re-driver invocations killed (at a DeleteMessageBatch, or at a random instant).
    pub kill_share: f64,
    /// Event source mapping pollers (concurrent consumer invocations).
    pub pollers: usize,
    /// The producer keeps the source queue below this depth.
    pub high_water: u64,
    /// The re-driver runs every tick while the DLQ holds messages.
    pub redriver_tick: Duration,
    /// Visibility timeout of the event source mapping's receives.
    pub esm_visibility: Duration,
    /// Give up waiting for the loop to settle after this long.
    pub max_duration: Duration,
    /// How long a late (timed-out) call may still land after the loop stopped.
    pub settle_grace: Duration,
    pub seed: u64,
    /// Print a progress line to stderr every 15 s.
    pub progress: bool,
}

impl SoakSettings {
    fn common(messages: u64, seed: u64) -> Self {
        Self {
            messages,
            fault_rate: 0.2,
            downstream_failure_rate: 0.2,
            poison_share: 0.03,
            doomed_share: 0.015,
            kill_share: 0.3,
            pollers: 3,
            high_water: 150,
            redriver_tick: Duration::from_secs(1),
            esm_visibility: Duration::from_secs(10),
            max_duration: Duration::from_secs(600),
            settle_grace: Duration::from_secs(5),
            seed,
            progress: false,
        }
    }

    /// On moto (the fast-clock one): a shallow source queue (moto's receive still costs CPU
    /// in proportion to depth) and eight pollers; at most 15 minutes.
    pub fn moto(messages: u64, seed: u64) -> Self {
        Self {
            pollers: 8,
            high_water: 100,
            max_duration: Duration::from_secs(900),
            progress: true,
            ..Self::common(messages, seed)
        }
    }

    /// On the port fakes (modelled time): ten pollers, as the event source mapping scales out.
    pub fn fake(messages: u64, seed: u64) -> Self {
        Self {
            pollers: 10,
            high_water: 1000,
            max_duration: Duration::from_secs(600 + messages / 5),
            ..Self::common(messages, seed)
        }
    }
}

/// The emulator under the loop: moto behind the fault proxy, or the in-memory world. Its own
/// calls (the producer, the event source mapping, the inventory) bypass the faults.
pub trait Emulator: Sync {
    /// Sends these bodies to the source queue; returns their MessageIds, in order.
    fn produce(&self, bodies: Vec<String>) -> impl Future<Output = Vec<String>> + Send;
    /// The source queue as the event source mapping polls it.
    type Source: Source<Message = Message>;
    /// The source queue, polled with this visibility timeout.
    fn source(&self, visibility: Duration) -> Self::Source;
    fn depths(&self) -> impl Future<Output = Depths> + Send;
    /// The depth of the source queue alone (the producer's check).
    fn source_depth(&self) -> impl Future<Output = u64> + Send;
    /// Every message left in the three queues.
    fn inventory(&self) -> impl Future<Output = Vec<Parked>> + Send;
    /// The fault layer between the loop and the queues.
    type Layer: FaultLayer;
    fn layer(&self) -> &Self::Layer;
    /// Kills the re-driver at its `nth` next call of one of `operations`.
    fn arm_kill(&self, operations: &[&str], nth: u32) -> oneshot::Receiver<()> {
        self.layer().kill_switch().arm(operations, nth)
    }
    fn disarm_kill(&self) {
        self.layer().kill_switch().disarm();
    }
    fn layer_stats(&self) -> LayerStats {
        LayerStats::from(&self.layer().fault_stats())
    }
}

/// The re-driver's tunables in the soak: no long poll (an empty receive ends the drain at
/// once), and a short visibility timeout so that what a killed invocation held comes back soon.
pub fn redriver_settings() -> redrive_engine::Settings {
    redrive_engine::Settings {
        deadline_margin: Duration::from_secs(2),
        receive_wait_seconds: 0,
        visibility_seconds: 5,
        retry_attempts: 3,
        retry_base: Duration::from_millis(100),
        ..redrive_engine::Settings::default()
    }
}

/// The re-driver's configuration in the soak: 3 attempts, backoff of 1 to 4 s.
pub fn redriver_config(
    dlq: &str,
    source: &str,
    poison: &str,
) -> redrive_shared::config::RedriverConfig {
    let map: HashMap<&str, String> = [
        ("DLQ_URL", dlq.to_string()),
        ("SOURCE_QUEUE_URL", source.to_string()),
        ("POISON_QUEUE_URL", poison.to_string()),
        ("MAX_REDRIVE_ATTEMPTS", "3".into()),
        ("BACKOFF_BASE_SECONDS", "1".into()),
        ("BACKOFF_MULTIPLIER", "2".into()),
        ("BACKOFF_MAX_SECONDS", "4".into()),
        ("REARM_ALARM", "false".into()),
        ("METRIC_NAMESPACE", "RedriveSoak".into()),
    ]
    .into();
    redrive_shared::config::RedriverConfig::from_env(&redrive_shared::config::Env(
        move |k: &str| map.get(k).cloned(),
    ))
    .expect("the soak's re-driver configuration is valid")
}

/// The consumer's configuration in the soak: permanent failures fast-tracked to the DLQ,
/// transient ones retried after 1 to 4 s.
pub fn consumer_config(table: &str, dlq: &str) -> redrive_consumer::ConsumerConfig {
    let map: HashMap<&str, String> = [
        ("IDEMPOTENCY_TABLE", table.to_string()),
        ("DLQ_URL", dlq.to_string()),
        ("RETRY_BASE_SECONDS", "1".into()),
        ("RETRY_MULTIPLIER", "2".into()),
        ("RETRY_MAX_SECONDS", "4".into()),
    ]
    .into();
    redrive_consumer::ConsumerConfig::from_env(&redrive_shared::config::Env(move |k: &str| {
        map.get(k).cloned()
    }))
    .expect("the soak's consumer configuration is valid")
}

/// What kind of payload a produced message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Normal,
    Poison,
    Doomed,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Poison => "poison",
            Self::Doomed => "doomed",
        }
    }
}

fn payload(i: u64, kind: Kind) -> String {
    let marker = match kind {
        Kind::Normal => "\"kind\":\"normal\"",
        Kind::Poison => POISON_MARKER,
        Kind::Doomed => DOOMED_MARKER,
    };
    format!(
        r#"{{"n":{i},{marker},"amountCents":{},"note":"{}"}}"#,
        100 + i % 9000,
        "p".repeat(64)
    )
}

#[derive(Default)]
struct Progress {
    stop: AtomicBool,
    produced_all: AtomicBool,
    produced: Mutex<HashMap<String, Kind>>,
    /// The idempotency record id of each produced message's key, to its MessageId: the fault
    /// layers see record ids (hashes of the keys), the soak reconciles by chain.
    chains: Mutex<HashMap<String, String>>,
    outcomes: Mutex<BTreeMap<String, u64>>,
    invocations: AtomicU64,
    kills: AtomicU64,
    redriven: AtomicU64,
    isolated: AtomicU64,
    redrive_failures: AtomicU64,
}

impl Progress {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// The calls the re-driver makes to SQS (the consumer makes none of these; the harness's own
/// calls bypass the fault layer).
pub const REDRIVER_CALLS: [&str; 4] = [
    "ReceiveMessage",
    "SendMessageBatch",
    "DeleteMessageBatch",
    "GetQueueAttributes",
];

/// The re-driver invocation's deadline.
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(30);

/// The loop's tasks, each with the emulator, the settings and the shared progress.
struct Soak<'a, E> {
    env: &'a E,
    settings: &'a SoakSettings,
    progress: &'a Progress,
}

impl<E> Clone for Soak<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Soak<'_, E> {}

impl<E: Emulator> Soak<'_, E> {
    async fn producer(self) {
        let mut rng = seeded_rng(self.settings.seed ^ 0xa11ce);
        let mut next = 0;
        while next < self.settings.messages && !self.progress.stopped() {
            if self.env.source_depth().await >= self.settings.high_water {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let wave = (self.settings.messages - next).min(50);
            let kinds: Vec<Kind> = (0..wave)
                .map(|_| {
                    let r = rng.next_unit();
                    if r < self.settings.poison_share {
                        Kind::Poison
                    } else if r < self.settings.poison_share + self.settings.doomed_share {
                        Kind::Doomed
                    } else {
                        Kind::Normal
                    }
                })
                .collect();
            let bodies: Vec<String> = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| payload(next + i as u64, *k))
                .collect();
            let ids = self.env.produce(bodies.clone()).await;
            assert_eq!(ids.len(), kinds.len(), "the producer lost a send");
            lock(&self.progress.chains).extend(
                ids.iter()
                    .zip(&bodies)
                    .map(|(id, body)| (record_id_of(id, body), id.clone())),
            );
            lock(&self.progress.produced).extend(ids.into_iter().zip(kinds));
            next += wave;
        }
        self.progress.produced_all.store(true, Ordering::SeqCst);
    }

    /// One poller of the event source mapping, in front of the consumer.
    async fn poller<S, Q, P>(self, consumer: &Consumer<S, Q, P>)
    where
        S: IdempotencyStore,
        Q: QueueOps,
        P: Processor,
    {
        let source = self.env.source(self.settings.esm_visibility);
        let consumer = InProcess {
            consumer,
            outcomes: Some(&self.progress.outcomes),
        };
        event_source::poll(&source, &consumer, || self.progress.stopped()).await;
    }

    async fn redriver<Q, A, M>(self, engine: &Engine<Q, A, M>)
    where
        Q: Queue,
        A: Alarms,
        M: Metrics,
    {
        let mut rng = seeded_rng(self.settings.seed ^ 0xdead);
        while !self.progress.stopped() {
            tokio::time::sleep(self.settings.redriver_tick).await;
            if self.env.depths().await.dlq == 0 {
                continue;
            }
            let request = DrainRequest {
                deadline: Some(Instant::now() + REDRIVER_TIMEOUT),
                ..DrainRequest::new(100)
            };
            self.progress.invocations.fetch_add(1, Ordering::SeqCst);
            let summary = if rng.next_unit() >= self.settings.kill_share {
                Some(engine.run(&request).await)
            } else {
                // Most kills land exactly between send and delete; the rest at a random call.
                let fired = if rng.next_unit() < 0.6 {
                    self.env.arm_kill(&["DeleteMessageBatch"], 1)
                } else {
                    self.env
                        .arm_kill(&REDRIVER_CALLS, 1 + (rng.next_unit() * 4.0) as u32)
                };
                let summary = tokio::select! {
                    s = engine.run(&request) => Some(s),
                    _ = fired => None,
                };
                self.env.disarm_kill();
                summary
            };
            // A DLQ that could not be read still reports what it moved before.
            match summary.map(|s| s.unwrap_or_else(DrainError::into_summary)) {
                Some(s) => {
                    self.progress
                        .redriven
                        .fetch_add(s.redriven, Ordering::SeqCst);
                    self.progress
                        .isolated
                        .fetch_add(s.isolated, Ordering::SeqCst);
                    self.progress
                        .redrive_failures
                        .fetch_add(s.failed, Ordering::SeqCst);
                }
                None => {
                    self.progress.kills.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }

    async fn monitor(self) -> bool {
        let started = Instant::now();
        let mut next_report = started + Duration::from_secs(15);
        let mut calm = 0;
        let quiesced = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if started.elapsed() > self.settings.max_duration {
                break false;
            }
            let produced_all = self.progress.produced_all.load(Ordering::SeqCst);
            let depths = if produced_all || self.settings.progress {
                Some(self.env.depths().await)
            } else {
                None
            };
            if self.settings.progress && Instant::now() >= next_report {
                next_report += Duration::from_secs(15);
                let d = depths.unwrap_or_default();
                eprintln!(
                    "soak: {:>4} s  produced {:>6}  source {:>5}  dlq {:>4}  poison {:>4}",
                    started.elapsed().as_secs(),
                    lock(&self.progress.produced).len(),
                    d.source,
                    d.dlq,
                    d.poison
                );
            }
            match depths {
                Some(d) if produced_all && d.source == 0 && d.dlq == 0 => {
                    calm += 1;
                    if calm >= 3 {
                        break true;
                    }
                }
                _ => calm = 0,
            }
        };
        self.progress.stop.store(true, Ordering::SeqCst);
        quiesced
    }
}

/// Runs the loop to the end and reconciles.
pub async fn run<E, S, Q, P, RQ, A, M>(
    emulator_name: &str,
    env: &E,
    consumer: &Consumer<S, Q, P>,
    engine: &Engine<RQ, A, M>,
    flaky: &Flaky,
    settings: &SoakSettings,
) -> Reconciliation
where
    E: Emulator,
    S: IdempotencyStore,
    Q: QueueOps,
    P: Processor,
    RQ: Queue,
    A: Alarms,
    M: Metrics,
{
    let progress = Progress::default();
    let started = Instant::now();
    let soak = Soak {
        env,
        settings,
        progress: &progress,
    };
    let pollers = join_all((0..settings.pollers.max(1)).map(|_| soak.poller(consumer)));
    let (_, _, _, quiesced) = tokio::join!(
        soak.producer(),
        pollers,
        soak.redriver(engine),
        soak.monitor(),
    );
    // Calls answered late (timeouts) may still land: let them, then count.
    tokio::time::sleep(settings.settle_grace).await;
    let seconds = started.elapsed().as_secs_f64();
    let inventory = env.inventory().await;
    let produced = std::mem::take(&mut *lock(&progress.produced));
    let layer = by_chain(env.layer_stats(), &lock(&progress.chains));
    let mut r = reconcile(&produced, &inventory, &flaky.effects(), layer);
    r.emulator = emulator_name.to_string();
    r.settings = Some(settings.clone());
    r.quiesced = quiesced;
    r.seconds = seconds;
    r.redriver_invocations = progress.invocations.load(Ordering::SeqCst);
    r.redriver_kills = progress.kills.load(Ordering::SeqCst);
    r.redriven = progress.redriven.load(Ordering::SeqCst);
    r.isolated = progress.isolated.load(Ordering::SeqCst);
    r.redrive_failures = progress.redrive_failures.load(Ordering::SeqCst);
    r.consumer_outcomes = std::mem::take(&mut *lock(&progress.outcomes));
    r.duplicates_suppressed = r.consumer_outcomes.get("duplicate").copied().unwrap_or(0);
    r.downstream = flaky
        .verdicts()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    r
}

#[cfg(test)]
mod tests;
