//! The drain: receive from the DLQ, decide each message, send the copies, and delete from the
//! DLQ only what the destination acknowledged.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redrive_shared::attributes::message_size;
use redrive_shared::backoff::{JitterRng, os_seeded_rng, seeded_rng};
use redrive_shared::config::QueueUrl;
use redrive_shared::config::RedriverConfig;
use redrive_shared::decision::{Decision, Policy, ReceivedMessage, decide, decide_unknown_source};
use redrive_shared::event::{EventError, Skip, Trigger, recognize};
use redrive_shared::limits::{
    HeldGroups, MAX_ATTRIBUTES, MAX_DELAY_SECONDS, MAX_MESSAGE_BYTES, MAX_RECEIVE, split_batches,
    split_fifo_batches,
};
use redrive_shared::meta::IsolationReason;
use redrive_shared::meta::MetaSource;
use redrive_shared::meta::RedriveMeta;
use serde::Serialize;
use tokio::time::Instant;

mod batch;
mod circuit;
mod finish;
mod request;
mod steps;
mod transfer;
use crate::circuit::{CircuitStore, NoCircuit};
use crate::ports::{
    AlarmState, Alarms, BatchOutcome, EntryFailure, HandleEntry, Metrics, PortError, Queue,
    Received, RunMetrics, SendEntry,
};
pub use batch::{SEND_REJECTED_AFTER, SEND_REJECTIONS_FIELD};
pub use circuit::{Admission, CircuitCheck, CircuitSummary, DrainCounts};
pub use finish::StepTotals;
pub use request::{DrainRequest, InvocationError, MessageRecord, Settings, StopReason, Summary};
use transfer::entry_size;
pub use transfer::{Acks, Moved, Transfer};

/// The engine. `C` is the adaptive circuit's store ([`NoCircuit`] by default: off, as when
/// `CIRCUIT_TABLE` is unset); see [`Engine::with_circuit`].
pub struct Engine<Q, A, M, C = NoCircuit> {
    pub queue: Q,
    pub alarms: A,
    pub metrics: M,
    /// The adaptive circuit's record; used only when `config.circuit` is set too.
    pub circuit: C,
    pub config: RedriverConfig,
    pub settings: Settings,
    rng: Mutex<JitterRng>,
    clock: fn() -> i64,
    /// When each trigger alarm was last re-armed by this process (at most once per period
    /// while a drain makes no progress).
    rearmed: Mutex<HashMap<String, Instant>>,
    /// The destinations' `MaximumMessageSize`, once read.
    limits: Mutex<Option<DestinationLimits>>,
    /// The longest `DelaySeconds` of a copy: a longer backoff waits on the DLQ in hops of at
    /// most this (see [`Engine::with_max_delay`]).
    max_delay_seconds: u32,
    /// The DLQ's `MessageRetentionPeriod`, as last read by [`Engine::read_dlq_retention`].
    dlq_retention: Mutex<Option<u64>>,
    /// A protected DLQ (no configured source): its sources as last listed
    /// (`ListDeadLetterSourceQueues`, at the start of each drain), each with its
    /// `MaximumMessageSize` once read.
    sources: Mutex<Option<Vec<String>>>,
    source_limits: Mutex<HashMap<String, usize>>,
}

/// A received batch's messages bound for one route, decided (`None`: source unknown).
pub(crate) type Routed = (Option<Route>, Vec<(Received, Decision)>);

/// Where one received batch's redriven copies go: the configured source, or, for a protected
/// DLQ, the source its messages named (its ARN then recorded in each copy's `x-redrive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub url: String,
    pub arn: Option<String>,
}

/// What a wait keeps between the end of a hop and the end of the DLQ's retention period: a
/// hop ends at least this long before its copy could expire (half the period when it is
/// shorter than twice this).
pub const RETENTION_MARGIN_SECONDS: u64 = 300;

/// The longest hop a DLQ whose retention period is `retention_seconds` allows.
pub fn hop_cap(retention_seconds: u64) -> u32 {
    let cap = if retention_seconds > 2 * RETENTION_MARGIN_SECONDS {
        retention_seconds - RETENTION_MARGIN_SECONDS
    } else {
        retention_seconds / 2
    };
    u32::try_from(cap.max(1)).unwrap_or(u32::MAX)
}

/// `MaximumMessageSize` of the source and poison queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestinationLimits {
    pub source_max_bytes: usize,
    pub poison_max_bytes: usize,
}

impl Default for DestinationLimits {
    fn default() -> Self {
        Self {
            source_max_bytes: MAX_MESSAGE_BYTES,
            poison_max_bytes: MAX_MESSAGE_BYTES,
        }
    }
}

fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct Run<'a> {
    remaining: AtomicU32,
    stop: Mutex<Option<StopReason>>,
    received: AtomicU64,
    redriven: AtomicU64,
    isolated: AtomicU64,
    failed: AtomicU64,
    waiting: AtomicU64,
    /// Each message's record, when the request asked for them.
    records: Option<Mutex<Vec<MessageRecord>>>,
    held: Mutex<Vec<HandleEntry>>,
    held_groups: Mutex<HeldGroups>,
    pacer: Option<Pacer>,
    /// No drain call runs past this (the deadline minus the post-drain reserve).
    calls_end: Option<Instant>,
    dlq_unreadable: Mutex<Option<PortError>>,
    unplaceable: AtomicU64,
    /// The adaptive circuit's part of this run; `None` when it is off.
    circuit: Option<&'a circuit::CircuitRun>,
}

impl Run<'_> {
    fn stop(&self, reason: StopReason) {
        let mut s = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        s.get_or_insert(reason);
    }

    fn stopped(&self) -> bool {
        self.stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn reserve(&self, want: u32) -> u32 {
        let mut got = 0;
        let _ = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                got = r.min(want);
                Some(r - got)
            });
        got
    }

    fn unreserve(&self, n: u32) {
        self.remaining.fetch_add(n, Ordering::SeqCst);
    }
}

/// Spreads receives so that the invocation never exceeds `rate` messages per second.
struct Pacer {
    start: Instant,
    per_message: Duration,
    granted: Mutex<u64>,
}

impl Pacer {
    fn new(rate: f64) -> Option<Self> {
        (rate > 0.0).then(|| Self {
            start: Instant::now(),
            per_message: Duration::from_secs_f64(1.0 / rate),
            granted: Mutex::new(0),
        })
    }

    /// The instant at which `n` more messages may be received.
    fn grant(&self, n: u32) -> Instant {
        let mut g = self.granted.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.start + self.per_message.mul_f64(*g as f64);
        *g += u64::from(n);
        at
    }
}

impl<Q: Queue, A: Alarms, M: Metrics> Engine<Q, A, M> {
    pub fn new(queue: Q, alarms: A, metrics: M, config: RedriverConfig) -> Self {
        Self {
            queue,
            alarms,
            metrics,
            circuit: NoCircuit,
            config,
            settings: Settings::default(),
            rng: Mutex::new(os_seeded_rng()),
            clock: system_now_ms,
            rearmed: Mutex::new(HashMap::new()),
            limits: Mutex::new(None),
            max_delay_seconds: MAX_DELAY_SECONDS,
            dlq_retention: Mutex::new(None),
            sources: Mutex::new(None),
            source_limits: Mutex::new(HashMap::new()),
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// The adaptive circuit's store: used when `config.circuit` is set
    /// (`CIRCUIT_TABLE`); `None` or [`NoCircuit`] keep the circuit off.
    pub fn with_circuit<S: CircuitStore>(self, store: S) -> Engine<Q, A, M, S> {
        Engine {
            queue: self.queue,
            alarms: self.alarms,
            metrics: self.metrics,
            circuit: store,
            config: self.config,
            settings: self.settings,
            rng: self.rng,
            clock: self.clock,
            rearmed: self.rearmed,
            limits: self.limits,
            max_delay_seconds: self.max_delay_seconds,
            dlq_retention: self.dlq_retention,
            sources: self.sources,
            source_limits: self.source_limits,
        }
    }

    /// The longest `DelaySeconds` a copy gets (1..=900; SQS's 900 by default). A backoff
    /// longer than this waits on the DLQ: the message goes back there with this delay and
    /// `notBefore` in its `x-redrive`, hop after hop, until it is due (the Step Functions
    /// orchestrator's long waits; tests scale it down).
    pub fn with_max_delay(mut self, seconds: u32) -> Self {
        self.max_delay_seconds = seconds.clamp(1, MAX_DELAY_SECONDS);
        self
    }

    /// True when this engine's backoff can outgrow a copy's delay.
    pub fn can_wait(&self) -> bool {
        !self.fifo() && self.config.backoff.max() > self.max_delay_seconds
    }

    /// Reads the DLQ's `MessageRetentionPeriod` (GetQueueAttributes), which bounds every hop
    /// of a wait: called before each round of an engine that can decide waits, so that a
    /// retention changed on the queue applies at once. A failure is logged and the last value
    /// read (or none: hops of the delay cap) stays.
    pub async fn read_dlq_retention(&self) {
        let read = self
            .bounded(
                None,
                "GetQueueAttributes",
                self.queue.retention_seconds(self.config.dlq_url.as_str()),
            )
            .await;
        match read {
            Ok(seconds) => {
                *self.dlq_retention.lock().unwrap_or_else(|e| e.into_inner()) = Some(seconds);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the DLQ's MessageRetentionPeriod; waits hop by the last one read, or by the delay cap");
            }
        }
    }

    /// The wall clock (epoch milliseconds) of the stamps and of the circuit (tests, simulations).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Fixes the jitter's random source (tests, benchmarks).
    pub fn with_seed(self, seed: u64) -> Self {
        *self.rng.lock().unwrap_or_else(|e| e.into_inner()) = seeded_rng(seed);
        self
    }

    /// The policy of messages going to `route` (`None`: messages whose source is unknown,
    /// which are only isolated).
    fn policy_for(&self, route: Option<&Route>) -> Policy {
        let limits = self
            .limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_default();
        let source_max_bytes = match route {
            Some(r) if self.config.source_queue_url.is_none() => self
                .source_limits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&r.url)
                .copied()
                .unwrap_or(MAX_MESSAGE_BYTES),
            _ => limits.source_max_bytes,
        };
        Policy {
            max_attempts: self.config.max_redrive_attempts,
            backoff: self.config.backoff,
            source_fifo: self.fifo(),
            poison_fifo: self.config.poison_queue_url.is_fifo(),
            source_max_bytes,
            poison_max_bytes: limits.poison_max_bytes,
            max_delay_seconds: self.max_delay_seconds,
            max_hop_seconds: self
                .dlq_retention
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .map_or(self.max_delay_seconds, hop_cap),
            source_arn: route.and_then(|r| r.arn.clone()),
        }
    }

    /// A protected DLQ's sources (ListDeadLetterSourceQueues), listed at the start of each
    /// drain so that a source added or removed applies at once, and the `MaximumMessageSize` of
    /// each new one. A DLQ with a configured source lists nothing. Until a first list
    /// succeeds, the drain receives nothing: a message is never isolated `unknown-source`
    /// because the list could not be read.
    pub async fn read_sources(&self) -> Result<(), PortError> {
        if self.config.source_queue_url.is_some() {
            return Ok(());
        }
        let dlq = self.config.dlq_url.as_str();
        let listed = self
            .bounded(
                None,
                "ListDeadLetterSourceQueues",
                self.queue.dead_letter_sources(dlq),
            )
            .await;
        let urls = match listed {
            Ok(urls) => urls,
            Err(e) => {
                let known = self
                    .sources
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some();
                tracing::warn!(error = %e, known, "cannot list the DLQ's sources; the last list read serves, if any");
                return if known { Ok(()) } else { Err(e) };
            }
        };
        let new: Vec<String> = {
            let known = self.source_limits.lock().unwrap_or_else(|e| e.into_inner());
            urls.iter()
                .filter(|u| !known.contains_key(*u))
                .cloned()
                .collect()
        };
        for url in new {
            let size = self
                .bounded(
                    None,
                    "GetQueueAttributes",
                    self.queue.max_message_size(&url),
                )
                .await;
            match size {
                Ok(size) => {
                    let size = size.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES);
                    tracing::info!(source = %url, max_bytes = size, "source of the DLQ");
                    self.source_limits
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(url, size);
                }
                Err(e) => {
                    // Assumed 1 MiB until read: an oversize copy meets the send-rejected rule.
                    tracing::warn!(source = %url, error = %e, "cannot read the source's MaximumMessageSize yet");
                }
            }
        }
        if urls.is_empty() {
            tracing::warn!(
                action = "no-source",
                "no queue names this DLQ in its RedrivePolicy: every message is isolated unknown-source"
            );
        }
        *self.sources.lock().unwrap_or_else(|e| e.into_inner()) = Some(urls);
        Ok(())
    }

    /// Reads the destinations' `MaximumMessageSize` once (at init through [`Self::warm_up`],
    /// else at the first drain); until it is known, SQS's largest is assumed and an oversize
    /// copy is caught by the send-rejected rule.
    pub async fn load_limits(&self) -> Result<DestinationLimits, PortError> {
        if let Some(known) = *self.limits.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(known);
        }
        let source = self.config.source_queue_url.as_ref().map(QueueUrl::as_str);
        let poison = self.config.poison_queue_url.as_str();
        let (s, p) = futures_util::future::join(
            async {
                match source {
                    Some(source) => {
                        self.bounded(
                            None,
                            "GetQueueAttributes",
                            self.queue.max_message_size(source),
                        )
                        .await
                    }
                    // A protected DLQ's sources are read with their list.
                    None => Ok(None),
                }
            },
            self.bounded(
                None,
                "GetQueueAttributes",
                self.queue.max_message_size(poison),
            ),
        )
        .await;
        let limits = DestinationLimits {
            source_max_bytes: s?.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES),
            poison_max_bytes: p?.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES),
        };
        tracing::info!(
            source_max_bytes = limits.source_max_bytes,
            poison_max_bytes = limits.poison_max_bytes,
            "destination MaximumMessageSize"
        );
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = Some(limits);
        Ok(limits)
    }

    /// GetQueueAttributes on the destinations (their `MaximumMessageSize`, which every drain
    /// needs), both at once, made at init so that resolving credentials and the endpoint,
    /// opening the connections and reading the limits are not paid by the first invocation.
    /// Nothing else: a depth read here would be stale by the first event and cost init a
    /// call. It touches no message; a failure is logged and left to the invocations, which
    /// read the limits again and report their own errors.
    pub async fn warm_up(&self) -> Result<DestinationLimits, PortError> {
        let _ = self.read_sources().await;
        self.load_limits().await.inspect_err(|e| {
            tracing::warn!(error = %e, "warm-up: cannot read the destinations' MaximumMessageSize yet");
        })
    }

    /// Handles one invocation payload. An unrecognized event is an error and touches nothing.
    pub async fn handle(
        &self,
        event: &serde_json::Value,
        deadline: Option<Instant>,
    ) -> Result<Summary, InvocationError> {
        let trigger = recognize(event)?;
        // Scheduled and manual drains re-arm the configured trigger alarm; an alarm's own
        // drain re-arms the alarm that notified it.
        let defaults = DrainRequest {
            max_messages: self.config.max_messages_per_invocation,
            dry_run: self.config.dry_run,
            deadline,
            trigger_alarm: self.config.trigger_alarm_name.clone(),
            ..DrainRequest::new(self.config.max_messages_per_invocation)
        };
        let request = match trigger {
            Trigger::Alarm(alarm) => {
                if let Some(skip) = alarm.skip_for_dlq(self.config.dlq_url.as_str()) {
                    tracing::info!(alarm = %alarm.alarm_name, alarm_arn = ?alarm.alarm_arn, state = %alarm.new_state, queues = ?alarm.queue_names, action = skip.as_str(), "alarm ignored");
                    let summary = Summary::new(defaults.dry_run, skip.into());
                    self.publish(&summary, deadline).await;
                    log_summary(&summary);
                    return Ok(summary);
                }
                DrainRequest {
                    trigger_alarm: Some(alarm.alarm_name),
                    ..defaults
                }
            }
            Trigger::Manual(m) => DrainRequest {
                max_messages: m.max_messages.unwrap_or(defaults.max_messages),
                dry_run: m.dry_run.unwrap_or(defaults.dry_run),
                ..defaults
            },
            Trigger::Scheduled => defaults,
        };
        let summary = self.run(&request).await;
        match &summary.dlq_unreadable {
            Some(reason) => Err(InvocationError::DlqUnreadable {
                reason: reason.clone(),
                summary: Box::new(summary),
            }),
            None => Ok(summary),
        }
    }

    /// Circuit check, drain, metrics, re-arm, summary log.
    pub async fn run(&self, request: &DrainRequest) -> Summary {
        let end = request.deadline;
        if let Err(e) = self.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        let mut summary = match self.open_guards(end).await {
            Some(open) => {
                tracing::warn!(guards = ?open, action = "circuit-open", "guard alarm in ALARM: nothing received");
                Summary::new(request.dry_run, StopReason::CircuitOpen)
            }
            None => self.drain_with_circuit(request).await,
        };
        self.end_run(request, &mut summary).await;
        summary
    }

    /// Drains up to `request.max_messages`, several pipelines at once (one for FIFO queues).
    pub async fn drain(&self, request: &DrainRequest) -> Summary {
        self.drain_with(request, None).await
    }

    /// [`Self::drain`], with the adaptive circuit's part of the run when it is on.
    async fn drain_with(
        &self,
        request: &DrainRequest,
        circuit: Option<&circuit::CircuitRun>,
    ) -> Summary {
        if let Err(e) = self.read_sources().await {
            tracing::error!(error = %e, action = "sources-unknown", "cannot list the DLQ's sources: nothing is received");
            return Summary {
                dlq_unreadable: Some(e),
                ..Summary::new(request.dry_run, StopReason::Other)
            };
        }
        // The margin is at most a quarter of the time left, so that a short Lambda timeout
        // still drains; the reserve for the calls after the drain at most half the margin.
        let margin = request.deadline.map_or(self.settings.deadline_margin, |d| {
            self.settings
                .deadline_margin
                .min(d.saturating_duration_since(Instant::now()) / 4)
        });
        let reserve = self.settings.post_drain_reserve.min(margin / 2);
        let run = Run {
            remaining: AtomicU32::new(request.max_messages),
            stop: Mutex::new(None),
            received: AtomicU64::new(0),
            redriven: AtomicU64::new(0),
            isolated: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            records: request.records.then(|| Mutex::new(Vec::new())),
            held: Mutex::new(Vec::new()),
            held_groups: Mutex::new(HeldGroups::default()),
            pacer: Pacer::new(self.config.max_messages_per_second),
            calls_end: request.deadline.map(|d| d - reserve),
            dlq_unreadable: Mutex::new(None),
            unplaceable: AtomicU64::new(0),
            circuit,
        };
        let fifo = self.fifo();
        let pipelines = if fifo {
            1
        } else {
            self.config.max_concurrent_batches.max(1)
        };
        // A dry run (and a half-open circuit watching for its canary) holds what it received
        // until the end, so it never sees a message twice.
        let watch = circuit.is_some_and(|c| c.watching());
        let visibility = if request.dry_run || watch {
            let until_deadline = request.deadline.map_or(900, |d| {
                d.saturating_duration_since(Instant::now()).as_secs() + 60
            });
            until_deadline.clamp(60, 43_200) as i32
        } else {
            self.settings.visibility_seconds
        };
        join_all((0..pipelines).map(|_| self.pipeline(&run, request, visibility, margin))).await;

        // Held: a dry run's messages, and those the circuit kept from being redriven.
        let held = std::mem::take(&mut *run.held.lock().unwrap_or_else(|e| e.into_inner()));
        if !held.is_empty() {
            self.release(&run, held).await;
        }
        let stopped_because = run
            .stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or(StopReason::Limit);
        Summary {
            received: run.received.load(Ordering::SeqCst),
            redriven: run.redriven.load(Ordering::SeqCst),
            isolated: run.isolated.load(Ordering::SeqCst),
            failed: run.failed.load(Ordering::SeqCst),
            dlq_unreadable: run
                .dlq_unreadable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
            unplaceable: run.unplaceable.load(Ordering::SeqCst),
            waiting: run.waiting.load(Ordering::SeqCst),
            records: run
                .records
                .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
                .unwrap_or_default(),
            ..Summary::new(request.dry_run, stopped_because)
        }
    }

    async fn pipeline(
        &self,
        run: &Run<'_>,
        request: &DrainRequest,
        visibility: i32,
        margin: Duration,
    ) {
        let dlq = self.config.dlq_url.as_str();
        loop {
            if run.stopped() {
                return;
            }
            let near_deadline = |at: Instant| request.deadline.is_some_and(|d| at + margin >= d);
            if near_deadline(Instant::now()) {
                run.stop(StopReason::Deadline);
                return;
            }
            let want = run.reserve(MAX_RECEIVE as u32);
            if want == 0 {
                // The budget is spent or held by other pipelines, which finish their share:
                // a drain that ends with no other reason ends at its limit.
                return;
            }
            if let Some(pacer) = &run.pacer {
                let at = pacer.grant(want);
                if near_deadline(at) {
                    run.unreserve(want);
                    run.stop(StopReason::Deadline);
                    return;
                }
                tokio::time::sleep_until(at).await;
                if run.stopped() {
                    run.unreserve(want);
                    return;
                }
            }
            let wait = self.settings.receive_wait_seconds;
            let end = run.calls_end;
            let messages = match self
                .bounded(
                    end,
                    "ReceiveMessage",
                    self.queue.receive(dlq, want as i32, wait, visibility),
                )
                .await
            {
                Ok(m) => m,
                Err(_) if end.is_some_and(|e| Instant::now() >= e) => {
                    run.unreserve(want);
                    run.stop(StopReason::Deadline);
                    return;
                }
                Err(e) => {
                    // AccessDenied, KMS, a deleted queue, or a service that keeps failing: the
                    // invocation fails (and says so in a metric) instead of ending quietly.
                    tracing::error!(error = %e, action = "dlq-unreadable", "receiving from the DLQ failed for good; the invocation fails");
                    run.unreserve(want);
                    run.dlq_unreadable
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                    run.stop(StopReason::Other);
                    return;
                }
            };
            let got = messages.len().min(want as usize) as u32;
            run.unreserve(want - got);
            if messages.is_empty() {
                run.stop(StopReason::QueueEmpty);
                return;
            }
            run.received
                .fetch_add(messages.len() as u64, Ordering::SeqCst);
            // The adaptive circuit counts bounced copies before anything is sent; an open
            // circuit (or a watch for the canary) keeps the batch on the DLQ.
            if let Some(c) = run.circuit
                && !self.circuit_admits(run, c, &messages)
            {
                // Kept on the DLQ untouched: not counted as received, so that received is
                // still redriven + isolated + failed.
                run.received
                    .fetch_sub(messages.len() as u64, Ordering::SeqCst);
                run.held.lock().unwrap_or_else(|e| e.into_inner()).extend(
                    messages.into_iter().map(|m| HandleEntry {
                        id: m.message_id,
                        receipt_handle: m.receipt_handle,
                    }),
                );
                continue;
            }
            for (route, mut decided) in self.decide_routed(messages) {
                if run.circuit.is_some_and(|c| c.canary()) || request.no_delay {
                    // A canary goes out at once, a waiting message too: a copy delayed beyond
                    // the window would let the canary pass untried.
                    let now = (self.clock)();
                    decided = decided
                        .into_iter()
                        .map(|(m, d)| (m, d.at_once(now)))
                        .collect();
                }
                self.process_decided(run, route.as_ref(), decided, request.dry_run)
                    .await;
            }
            if let Some(c) = run.circuit {
                c.note_redriven(run.redriven.load(Ordering::SeqCst), request.dry_run);
            }
        }
    }

    /// Decides a received batch, by destination: one group for a DLQ with a configured
    /// source; for a protected DLQ, a group per source its messages named and a group
    /// (`None`) of those whose source is unknown, each isolated `unknown-source`.
    pub(super) fn decide_routed(&self, messages: Vec<Received>) -> Vec<Routed> {
        if let Some(source) = &self.config.source_queue_url {
            let route = Route {
                url: source.as_str().to_string(),
                arn: None,
            };
            let decided = self.decide_with(messages, &self.policy_for(Some(&route)));
            return vec![(Some(route), decided)];
        }
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        let mut groups: Vec<(Route, Vec<Received>)> = Vec::new();
        let mut unknown = Vec::new();
        for m in messages {
            // `decide` parses x-redrive anyway: here only for a message SQS did not stamp.
            let system = m
                .dead_letter_source_arn
                .as_deref()
                .filter(|s| !s.is_empty());
            let recorded = match system {
                Some(_) => None,
                None => RedriveMeta::read(&m.attributes, &m.message_id)
                    .0
                    .source()
                    .map(str::to_string),
            };
            match redrive_shared::source::resolve(system, recorded.as_deref(), &sources) {
                Ok(found) => match groups.iter_mut().find(|(r, _)| r.url == found.url) {
                    Some((_, members)) => members.push(m),
                    None => groups.push((
                        Route {
                            url: found.url.to_string(),
                            arn: Some(found.arn),
                        },
                        vec![m],
                    )),
                },
                Err(why) => {
                    tracing::warn!(message_id = %m.message_id, problem = %why, action = "isolate:unknown-source", "the message's source queue is not known: isolated, never guessed");
                    unknown.push(m);
                }
            }
        }
        let mut out: Vec<Routed> = groups
            .into_iter()
            .map(|(route, members)| {
                let decided = self.decide_with(members, &self.policy_for(Some(&route)));
                (Some(route), decided)
            })
            .collect();
        if !unknown.is_empty() {
            let policy = self.policy_for(None);
            let now = (self.clock)();
            let decided = unknown
                .into_iter()
                .map(|m| {
                    let d = decide_unknown_source(&view_of(&m), &policy, now);
                    (m, d)
                })
                .collect();
            out.push((None, decided));
        }
        out
    }

    fn decide_with(&self, messages: Vec<Received>, policy: &Policy) -> Vec<(Received, Decision)> {
        let now = (self.clock)();
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        messages
            .into_iter()
            .map(|m| {
                let decision = decide(&view_of(&m), policy, now, &mut *rng);
                if let MetaSource::Garbled(why) = decision.read_from() {
                    tracing::warn!(message_id = %m.message_id, problem = %why, "garbled redrive metadata: restarting its history");
                }
                (m, decision)
            })
            .collect()
    }
}

fn view_of(m: &Received) -> ReceivedMessage<'_> {
    ReceivedMessage {
        message_id: &m.message_id,
        body: &m.body,
        attributes: &m.attributes,
        group_id: m.group_id.as_deref(),
    }
}

fn log_summary(s: &Summary) {
    tracing::info!(
        received = s.received,
        redriven = s.redriven,
        isolated = s.isolated,
        failed = s.failed,
        dry_run = s.dry_run,
        stopped_because = s.stopped_because.as_str(),
        dlq_remaining = s.dlq_remaining,
        "summary"
    );
}

impl InvocationError {
    /// The Lambda `errorType` of this failure.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Event(_) => "InvalidEvent",
            Self::DlqUnreadable { .. } => "DlqUnreadable",
        }
    }
}
