//! In-memory port fakes with fault injection and a per-call latency model: for the faults a
//! real emulator cannot produce (partial batch failures, throttling, a crash between send and
//! delete) and for scale runs without an emulator's cost. They enforce SQS's batch and message
//! limits, so an engine that breaks them fails here too.
//!
//! [`FakeSqs`] is the one in-memory SQS of the repository: the fault tests, `make bench` and
//! the soak's world (`bench/src/world.rs`, which puts an SDK-like fault layer in front of the
//! `*_now` operations) all run on it. Its clock is tokio's, so it also runs on the paused clock.
//!
//! It behaves as AWS's SQS does where moto does not, by default:
//! - a receive from a standard queue returns a random sample of the visible messages (SQS's
//!   best-effort order), drawn from a seeded generator ([`FakeSqs::seeded`]) so that runs
//!   repeat; a FIFO queue returns the messages of its unlocked groups in group order, one group
//!   after another (a group with a message in flight is locked);
//! - a delete with a receipt handle that is not the message's latest succeeds and deletes
//!   nothing (a FIFO queue refuses it);
//! - ChangeMessageVisibility is refused for a message not in flight, for a stale handle, and
//!   when the new timeout would end more than 12 hours after the message was received;
//! - a message is gone once its queue's `MessageRetentionPeriod` has passed since it was sent
//!   (in flight or not), 4 days unless [`FakeSqs::set_retention`] says otherwise.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_shared::backoff::{JitterRng, RandomSource, seeded_rng};
use redrive_shared::limits::{
    MAX_BATCH_BYTES, MAX_BATCH_ENTRIES, MAX_MESSAGE_BYTES, MAX_VISIBILITY_SECONDS, Outgoing,
    is_fifo,
};
use redrive_shared::{Attributes, TraceHeader};
use tokio::time::Instant;

use crate::ports::{
    AlarmInfo, AlarmState, Alarms, BatchOutcome, Depth, EntryFailure, HandleEntry, Metrics,
    PortError, Queue, Received, RunMetrics, SendEntry,
};

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeMessage {
    pub message_id: String,
    pub body: String,
    pub attributes: Attributes,
    pub group_id: Option<String>,
    pub delay_seconds: Option<u32>,
    pub receive_count: u32,
    /// The `AWSTraceHeader` system attribute.
    pub trace_header: Option<TraceHeader>,
    visible_at: Instant,
    /// The latest receive's handle, until the message is received again.
    receipt: Option<String>,
    /// When it was sent (kept when SQS moves it to a DLQ): its retention counts from here.
    sent_at: Instant,
    /// When it was last received: its visibility cannot end 12 hours after this.
    received_at: Option<Instant>,
}

type EntryFault = Box<dyn Fn(&str, &SendEntry) -> Option<EntryFailure> + Send + Sync>;
type DeleteFault = Box<dyn Fn(&FakeMessage) -> bool + Send + Sync>;

/// SQS's default `MessageRetentionPeriod`: 4 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(4 * 24 * 3600);

/// The seed of [`FakeSqs::new`]'s receive order.
const DEFAULT_SEED: u64 = 0x5eed_5e1f;

struct State {
    queues: HashMap<String, VecDeque<FakeMessage>>,
    dedup: HashSet<(String, String)>,
    /// RedrivePolicy per queue: (DLQ URL, maxReceiveCount).
    redrive: HashMap<String, (String, u32)>,
    /// `MessageRetentionPeriod` per queue; [`DEFAULT_RETENTION`] when not set.
    retention: HashMap<String, Duration>,
    next_id: u64,
    /// Draws the order of receives.
    rng: JitterRng,
}

/// FIFO: the positions of the messages of groups with nothing in flight (or delayed), in
/// queue order.
fn fifo_candidates(q: &VecDeque<FakeMessage>, now: Instant) -> Vec<usize> {
    let locked: HashSet<Option<&str>> = q
        .iter()
        .filter(|m| m.visible_at > now)
        .map(|m| m.group_id.as_deref())
        .collect();
    (0..q.len())
        .filter(|&i| !locked.contains(&q[i].group_id.as_deref()))
        .collect()
}

impl State {
    /// Up to `max` of `candidates`, drawn at random, in the order drawn.
    fn sample(&mut self, mut candidates: Vec<usize>, max: usize) -> Vec<usize> {
        let k = max.min(candidates.len());
        for i in 0..k {
            let j = i + self.pick(candidates.len() - i);
            candidates.swap(i, j);
        }
        candidates.truncate(k);
        candidates
    }

    /// FIFO: whole groups drawn at random, each in its order, until `max` messages.
    fn pick_groups(&mut self, url: &str, candidates: Vec<usize>, max: usize) -> Vec<usize> {
        let Some(q) = self.queues.get(url) else {
            return Vec::new();
        };
        let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
        for i in candidates {
            let g = &q[i].group_id;
            match groups.iter_mut().find(|(k, _)| k == g) {
                Some((_, members)) => members.push(i),
                None => groups.push((g.clone(), vec![i])),
            }
        }
        let mut out = Vec::new();
        while out.len() < max && !groups.is_empty() {
            let j = self.pick(groups.len());
            let (_, members) = groups.swap_remove(j);
            out.extend(members.into_iter().take(max - out.len()));
        }
        out
    }

    fn new(seed: u64) -> Self {
        Self {
            queues: HashMap::new(),
            dedup: HashSet::new(),
            redrive: HashMap::new(),
            retention: HashMap::new(),
            next_id: 0,
            rng: seeded_rng(seed),
        }
    }

    /// A queue, without the messages whose retention period has passed.
    fn queue(&mut self, url: &str) -> Option<&mut VecDeque<FakeMessage>> {
        let retention = self
            .retention
            .get(url)
            .copied()
            .unwrap_or(DEFAULT_RETENTION);
        let now = Instant::now();
        let q = self.queues.get_mut(url)?;
        q.retain(|m| now.duration_since(m.sent_at) < retention);
        Some(q)
    }

    /// A uniform index below `n` (n > 0).
    fn pick(&mut self, n: usize) -> usize {
        ((self.rng.next_unit() * n as f64) as usize).min(n - 1)
    }

    /// Stores a message on `url` (created if missing); returns its MessageId.
    fn store(
        &mut self,
        url: &str,
        body: &str,
        attributes: Attributes,
        group_id: Option<String>,
        delay_seconds: Option<u32>,
        trace_header: Option<TraceHeader>,
    ) -> String {
        self.next_id += 1;
        let id = format!("fake-{:08}", self.next_id);
        let delay = Duration::from_secs(u64::from(delay_seconds.unwrap_or(0)));
        self.queues
            .entry(url.to_string())
            .or_default()
            .push_back(FakeMessage {
                message_id: id.clone(),
                body: body.to_string(),
                attributes,
                group_id,
                delay_seconds,
                receive_count: 0,
                trace_header,
                visible_at: Instant::now() + delay,
                receipt: None,
                sent_at: Instant::now(),
                received_at: None,
            });
        id
    }
}

/// Calls per operation, counted.
#[derive(Debug, Default)]
pub struct CallCounts {
    pub receive: AtomicU64,
    pub empty_receive: AtomicU64,
    pub send_batch: AtomicU64,
    pub delete_batch: AtomicU64,
    pub change_visibility: AtomicU64,
    pub depth: AtomicU64,
    /// GetQueueAttributes for `MaximumMessageSize`.
    pub max_size: AtomicU64,
}

impl CallCounts {
    /// Receive, send and delete calls: the calls a drain costs.
    pub fn drain_calls(&self) -> u64 {
        self.receive.load(Ordering::SeqCst)
            + self.send_batch.load(Ordering::SeqCst)
            + self.delete_batch.load(Ordering::SeqCst)
    }
}

/// An in-memory SQS.
pub struct FakeSqs {
    state: Mutex<State>,
    /// Added to every call: the round trip a real service costs.
    pub latency: Duration,
    pub calls: CallCounts,
    /// Errors the next calls of an operation return, in order (`"SendMessageBatch"` etc.).
    call_faults: Mutex<HashMap<&'static str, VecDeque<PortError>>>,
    /// Decides per send entry whether it fails. Runs while the fake's state is locked: it must
    /// not call the fake.
    send_fault: Mutex<Option<EntryFault>>,
    /// Decides per stored message whether its delete fails (a lasting fault). Runs while the
    /// fake's state is locked: it must not call the fake.
    delete_fault: Mutex<Option<DeleteFault>>,
    /// When set, DeleteMessageBatch never returns: the process "dies" between send and delete.
    hang_deletes: Mutex<bool>,
    /// Extra time the calls of an operation take (a stalled connection).
    stalls: Mutex<HashMap<&'static str, Duration>>,
    /// `MaximumMessageSize` per queue; SQS's largest (1 MiB) when not set.
    max_sizes: Mutex<HashMap<String, usize>>,
}

pub fn throttled(operation: &'static str) -> PortError {
    PortError {
        operation,
        code: "ThrottlingException".into(),
        message: "Rate exceeded".into(),
        retryable: true,
    }
}

impl Default for FakeSqs {
    fn default() -> Self {
        Self::with_seed(DEFAULT_SEED)
    }
}

impl FakeSqs {
    fn with_seed(seed: u64) -> Self {
        Self {
            state: Mutex::new(State::new(seed)),
            latency: Duration::ZERO,
            calls: CallCounts::default(),
            call_faults: Mutex::default(),
            send_fault: Mutex::default(),
            delete_fault: Mutex::default(),
            hang_deletes: Mutex::default(),
            stalls: Mutex::default(),
            max_sizes: Mutex::default(),
        }
    }

    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A fake whose receive order is drawn from `seed`.
    pub fn seeded(seed: u64) -> Arc<Self> {
        Arc::new(Self::with_seed(seed))
    }

    pub fn with_latency(latency: Duration) -> Arc<Self> {
        Arc::new(Self {
            latency,
            ..Self::default()
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn create_queue(&self, url: &str) {
        self.lock().queues.entry(url.to_string()).or_default();
    }

    /// Gives `url` a RedrivePolicy: a message received `max_receives` times moves to `dlq` on
    /// its next receive, keeping its MessageId, as SQS (and moto) do.
    pub fn set_redrive_policy(&self, url: &str, dlq: &str, max_receives: u32) {
        self.lock()
            .redrive
            .insert(url.to_string(), (dlq.to_string(), max_receives));
    }

    /// Sets `url`'s `MessageRetentionPeriod`: its messages are gone once it passed since they
    /// were sent, in flight or not.
    pub fn set_retention(&self, url: &str, retention: Duration) {
        self.lock().retention.insert(url.to_string(), retention);
    }

    /// Puts a message on a queue as a producer (or SQS's own DLQ move) would; returns its id.
    pub fn push(
        &self,
        url: &str,
        body: &str,
        attributes: Attributes,
        group_id: Option<&str>,
    ) -> String {
        self.lock().store(
            url,
            body,
            attributes,
            group_id.map(str::to_string),
            None,
            None,
        )
    }

    /// [`Self::push`] by a traced producer: the message carries `AWSTraceHeader`.
    pub fn push_traced(
        &self,
        url: &str,
        body: &str,
        attributes: Attributes,
        trace_header: TraceHeader,
    ) -> String {
        self.lock()
            .store(url, body, attributes, None, None, Some(trace_header))
    }

    /// All messages of a queue, visible or not.
    pub fn messages(&self, url: &str) -> Vec<FakeMessage> {
        self.lock()
            .queue(url)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn len(&self, url: &str) -> usize {
        self.lock().queue(url).map_or(0, |q| q.len())
    }

    pub fn is_empty(&self, url: &str) -> bool {
        self.len(url) == 0
    }

    /// Messages visible now.
    pub fn depth_visible(&self, url: &str) -> usize {
        let now = Instant::now();
        self.lock()
            .queue(url)
            .map_or(0, |q| q.iter().filter(|m| m.visible_at <= now).count())
    }

    /// Makes every message of a queue visible now (as if their timeouts passed). Their latest
    /// handles stay valid for a delete until they are received again, as in SQS.
    pub fn expire_visibility(&self, url: &str) {
        if let Some(q) = self.lock().queue(url) {
            for m in q.iter_mut() {
                m.visible_at = Instant::now();
            }
        }
    }

    pub fn fail_next(&self, operation: &'static str, error: PortError) {
        self.call_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(operation)
            .or_default()
            .push_back(error);
    }

    pub fn fail_send_entries(
        &self,
        fault: impl Fn(&str, &SendEntry) -> Option<EntryFailure> + Send + Sync + 'static,
    ) {
        *self.send_fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(fault));
    }

    /// Deletes of the messages `fault` picks fail every time (`InternalError`, retryable).
    pub fn fail_delete_entries(
        &self,
        fault: impl Fn(&FakeMessage) -> bool + Send + Sync + 'static,
    ) {
        *self.delete_fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(fault));
    }

    /// Every call of `operation` takes `extra` longer (on top of the latency) until cleared
    /// with `Duration::ZERO`.
    pub fn stall(&self, operation: &'static str, extra: Duration) {
        self.stalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(operation, extra);
    }

    /// Sets a queue's `MaximumMessageSize`: larger sends fail as SQS fails them, per entry and
    /// as the sender's fault.
    pub fn set_max_message_size(&self, url: &str, bytes: usize) {
        self.max_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_string(), bytes);
    }

    fn max_size_of(&self, url: &str) -> usize {
        self.max_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            .copied()
            .unwrap_or(MAX_MESSAGE_BYTES)
    }

    pub fn hang_deletes(&self, hang: bool) {
        *self.hang_deletes.lock().unwrap_or_else(|e| e.into_inner()) = hang;
    }

    async fn call(&self, operation: &'static str) -> Result<(), PortError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let stall = self
            .stalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(operation)
            .copied()
            .unwrap_or_default();
        if !stall.is_zero() {
            tokio::time::sleep(stall).await;
        }
        let fault = self
            .call_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(operation)
            .and_then(VecDeque::pop_front);
        fault.map_or(Ok(()), Err)
    }
}

fn invalid(operation: &'static str, message: String) -> PortError {
    PortError {
        operation,
        code: "InvalidParameterValue".into(),
        message,
        retryable: false,
    }
}

fn check_batch_ids<'a>(
    operation: &'static str,
    ids: impl Iterator<Item = &'a str>,
) -> Result<usize, PortError> {
    let mut seen = HashSet::new();
    for id in ids {
        if !seen.insert(id) {
            return Err(invalid(
                operation,
                format!("BatchEntryIdsNotDistinct: {id}"),
            ));
        }
    }
    if seen.is_empty() {
        return Err(invalid(operation, "EmptyBatchRequest".into()));
    }
    if seen.len() > MAX_BATCH_ENTRIES {
        return Err(invalid(
            operation,
            format!("TooManyEntriesInBatchRequest: {}", seen.len()),
        ));
    }
    Ok(seen.len())
}

/// The operations applied at once, without latency, counters or injected faults: what the
/// [`Queue`] port runs after its latency and faults, and what a fault layer in front of the
/// fake (the soak's world) applies when an attempt reaches the service.
impl FakeSqs {
    /// ReceiveMessage: a random sample of the visible messages of a standard queue, the
    /// messages of unlocked groups of a FIFO queue (see the module docs). A queue with a
    /// RedrivePolicy moves a message received `maxReceiveCount` times to its DLQ instead of
    /// returning it.
    pub fn receive_now(
        &self,
        queue_url: &str,
        max_messages: i32,
        visibility_seconds: i32,
    ) -> Result<Vec<Received>, PortError> {
        if !(1..=10).contains(&max_messages) {
            return Err(invalid(
                "ReceiveMessage",
                format!("MaxNumberOfMessages {max_messages}"),
            ));
        }
        let max = max_messages as usize;
        let now = Instant::now();
        let mut s = self.lock();
        let s = &mut *s;
        let redrive = s.redrive.get(queue_url).cloned();
        let chosen = {
            let q = s
                .queue(queue_url)
                .ok_or_else(|| invalid("ReceiveMessage", format!("no queue {queue_url}")))?;
            let q: &VecDeque<FakeMessage> = q;
            if is_fifo(queue_url) {
                fifo_candidates(q, now)
            } else {
                (0..q.len()).filter(|&i| q[i].visible_at <= now).collect()
            }
        };
        let picked = if is_fifo(queue_url) {
            s.pick_groups(queue_url, chosen, max)
        } else {
            s.sample(chosen, max)
        };
        let mut out = Vec::new();
        let mut moved = Vec::new();
        let mut ids = Vec::with_capacity(picked.len());
        for _ in &picked {
            s.next_id += 1;
            ids.push(s.next_id);
        }
        let q = s
            .queues
            .get_mut(queue_url)
            .expect("the queue was found above");
        for (&i, n) in picked.iter().zip(ids) {
            let m = &mut q[i];
            if let Some((_, max_receives)) = &redrive
                && m.receive_count >= *max_receives
            {
                moved.push(i);
                continue;
            }
            let receipt = format!("rh-{}-{n}", m.message_id);
            m.receive_count += 1;
            m.visible_at = now + Duration::from_secs(visibility_seconds.max(0) as u64);
            m.receipt = Some(receipt.clone());
            m.received_at = Some(now);
            out.push(Received {
                message_id: m.message_id.clone(),
                receipt_handle: receipt,
                body: m.body.clone(),
                attributes: m.attributes.clone(),
                group_id: m.group_id.clone(),
                receive_count: m.receive_count,
                sent_timestamp_ms: None,
                trace_header: m.trace_header.clone(),
            });
        }
        if let Some((dlq, _)) = redrive {
            moved.sort_unstable();
            let mut gone = Vec::with_capacity(moved.len());
            for i in moved.into_iter().rev() {
                let mut m = q.remove(i).expect("index in range");
                m.receipt = None;
                m.received_at = None;
                m.visible_at = now;
                gone.push(m);
            }
            gone.reverse();
            s.queues.entry(dlq).or_default().extend(gone);
        }
        Ok(out)
    }

    /// SendMessageBatch: SQS's batch and message limits, the queue's `MaximumMessageSize`, the
    /// injected per-entry faults and FIFO deduplication.
    pub fn send_now(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.send_stored(queue_url, entries)
            .map(|(outcome, _)| outcome)
    }

    /// [`Self::send_now`], also returning the MessageIds of the messages it stored.
    fn send_stored(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<(BatchOutcome, Vec<String>), PortError> {
        check_batch_ids("SendMessageBatch", entries.iter().map(|e| e.id.as_str()))?;
        let fifo = is_fifo(queue_url);
        let mut total = 0;
        for e in entries {
            let out = Outgoing {
                body: e.body.clone(),
                attributes: e.attributes.clone(),
                delay_seconds: e.delay_seconds,
                group_id: e.group_id.clone(),
                dedup_id: e.dedup_id.clone(),
                trace_header: e.trace_header.clone(),
            };
            out.validate(fifo)
                .map_err(|err| invalid("SendMessageBatch", format!("entry {}: {err}", e.id)))?;
            total += out.size();
        }
        if total > MAX_BATCH_BYTES {
            return Err(invalid(
                "SendMessageBatch",
                format!("BatchRequestTooLong: {total} bytes"),
            ));
        }
        let max_size = self.max_size_of(queue_url);
        let fault = self.send_fault.lock().unwrap_or_else(|e| e.into_inner());
        let mut outcome = BatchOutcome::default();
        let mut ids = Vec::new();
        let mut s = self.lock();
        if !s.queues.contains_key(queue_url) {
            return Err(invalid("SendMessageBatch", format!("no queue {queue_url}")));
        }
        for e in entries {
            if let Some(f) = fault.as_ref().and_then(|f| f(queue_url, e)) {
                outcome.failed.push(f);
                continue;
            }
            let size = redrive_shared::attributes::message_size(&e.body, &e.attributes);
            if size > max_size {
                outcome.failed.push(EntryFailure {
                    id: e.id.clone(),
                    code: "InvalidParameterValue".into(),
                    message: format!(
                        "One or more parameters are invalid. Reason: Message must be shorter than {max_size} bytes."
                    ),
                    sender_fault: true,
                });
                continue;
            }
            if let Some(d) = &e.dedup_id
                && !s.dedup.insert((queue_url.to_string(), d.clone()))
            {
                outcome.succeeded.push(e.id.clone());
                continue;
            }
            ids.push(s.store(
                queue_url,
                &e.body,
                e.attributes.clone(),
                e.group_id.clone(),
                e.delay_seconds,
                e.trace_header.clone(),
            ));
            outcome.succeeded.push(e.id.clone());
        }
        Ok((outcome, ids))
    }

    /// SendMessage: [`Self::send_now`] for one message; returns its MessageId.
    pub fn send_message_now(
        &self,
        queue_url: &str,
        message: &Outgoing,
    ) -> Result<String, PortError> {
        let entry = SendEntry {
            id: "0".into(),
            body: message.body.clone(),
            attributes: message.attributes.clone(),
            delay_seconds: message.delay_seconds,
            group_id: message.group_id.clone(),
            dedup_id: message.dedup_id.clone(),
            trace_header: message.trace_header.clone(),
        };
        let (outcome, ids) = self.send_stored(queue_url, std::slice::from_ref(&entry))?;
        if let Some(f) = outcome.failed.into_iter().next() {
            return Err(PortError {
                operation: "SendMessage",
                code: f.code,
                message: f.message,
                retryable: !f.sender_fault,
            });
        }
        // A FIFO duplicate within the deduplication window stores nothing (and has no new id).
        Ok(ids.into_iter().next().unwrap_or_default())
    }

    /// DeleteMessageBatch. A receipt handle that is not the message's latest, or whose message
    /// is gone, deletes nothing and succeeds, as SQS documents; a FIFO queue fails its entry
    /// instead (its handles expire).
    pub fn delete_now(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        check_batch_ids("DeleteMessageBatch", entries.iter().map(|e| e.id.as_str()))?;
        let fault = self.delete_fault.lock().unwrap_or_else(|e| e.into_inner());
        let mut outcome = BatchOutcome::default();
        let fifo = is_fifo(queue_url);
        let mut s = self.lock();
        let q = s
            .queue(queue_url)
            .ok_or_else(|| invalid("DeleteMessageBatch", format!("no queue {queue_url}")))?;
        for e in entries {
            let pos = q
                .iter()
                .position(|m| m.receipt.as_deref() == Some(&e.receipt_handle));
            if let (Some(f), Some(pos)) = (fault.as_ref(), pos)
                && f(&q[pos])
            {
                // A lasting fault: retries of this entry fail too.
                outcome.failed.push(EntryFailure {
                    id: e.id.clone(),
                    code: "InternalError".into(),
                    message: "injected".into(),
                    sender_fault: false,
                });
                continue;
            }
            match pos {
                Some(pos) => {
                    q.remove(pos);
                    outcome.succeeded.push(e.id.clone());
                }
                None if fifo => outcome.failed.push(EntryFailure {
                    id: e.id.clone(),
                    code: "InvalidParameterValue".into(),
                    message: format!(
                        "Value {} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
                        e.receipt_handle
                    ),
                    sender_fault: true,
                }),
                None => outcome.succeeded.push(e.id.clone()),
            }
        }
        Ok(outcome)
    }

    /// ChangeMessageVisibilityBatch: only with the latest handle of a message in flight, and
    /// only to end within 12 hours of its receive.
    pub fn change_visibility_now(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        check_batch_ids(
            "ChangeMessageVisibilityBatch",
            entries.iter().map(|e| e.id.as_str()),
        )?;
        let mut outcome = BatchOutcome::default();
        let now = Instant::now();
        let visibility = Duration::from_secs(visibility_seconds.max(0) as u64);
        let limit = Duration::from_secs(u64::from(MAX_VISIBILITY_SECONDS));
        let mut s = self.lock();
        let q = s.queue(queue_url).ok_or_else(|| {
            invalid(
                "ChangeMessageVisibilityBatch",
                format!("no queue {queue_url}"),
            )
        })?;
        for e in entries {
            match q
                .iter_mut()
                .find(|m| m.receipt.as_deref() == Some(&e.receipt_handle))
            {
                Some(m) if m.visible_at <= now => outcome.failed.push(EntryFailure {
                    id: e.id.clone(),
                    code: "MessageNotInflight".into(),
                    message: "The message is not in flight.".into(),
                    sender_fault: true,
                }),
                Some(m)
                    if m.received_at
                        .is_some_and(|at| now.duration_since(at) + visibility > limit) =>
                {
                    outcome.failed.push(EntryFailure {
                        id: e.id.clone(),
                        code: "InvalidParameterValue".into(),
                        message: format!(
                            "Value {visibility_seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY_SECONDS} seconds]"
                        ),
                        sender_fault: true,
                    })
                }
                Some(m) => {
                    m.visible_at = now + visibility;
                    outcome.succeeded.push(e.id.clone());
                }
                None => outcome.failed.push(stale(&e.id)),
            }
        }
        Ok(outcome)
    }

    /// GetQueueAttributes for the depth: visible, in flight (received), delayed.
    pub fn depth_now(&self, queue_url: &str) -> Result<Depth, PortError> {
        let now = Instant::now();
        let mut s = self.lock();
        let q = s
            .queue(queue_url)
            .ok_or_else(|| invalid("GetQueueAttributes", format!("no queue {queue_url}")))?;
        let mut d = Depth::default();
        for m in q.iter() {
            if m.visible_at <= now {
                d.visible += 1;
            } else if m.received_at.is_some() {
                d.in_flight += 1;
            } else {
                d.delayed += 1;
            }
        }
        Ok(d)
    }
}

fn stale(id: &str) -> EntryFailure {
    EntryFailure {
        id: id.to_string(),
        code: "ReceiptHandleIsInvalid".into(),
        message: "stale receipt handle".into(),
        sender_fault: true,
    }
}

impl Queue for Arc<FakeSqs> {
    async fn receive(
        &self,
        queue_url: &str,
        max_messages: i32,
        _wait: i32,
        visibility_seconds: i32,
    ) -> Result<Vec<Received>, PortError> {
        self.calls.receive.fetch_add(1, Ordering::SeqCst);
        self.call("ReceiveMessage").await?;
        let out = self.receive_now(queue_url, max_messages, visibility_seconds)?;
        if out.is_empty() {
            self.calls.empty_receive.fetch_add(1, Ordering::SeqCst);
        }
        Ok(out)
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.calls.send_batch.fetch_add(1, Ordering::SeqCst);
        self.call("SendMessageBatch").await?;
        self.send_now(queue_url, entries)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.calls.delete_batch.fetch_add(1, Ordering::SeqCst);
        if *self.hang_deletes.lock().unwrap_or_else(|e| e.into_inner()) {
            std::future::pending::<()>().await;
        }
        self.call("DeleteMessageBatch").await?;
        self.delete_now(queue_url, entries)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        self.calls.change_visibility.fetch_add(1, Ordering::SeqCst);
        self.call("ChangeMessageVisibilityBatch").await?;
        self.change_visibility_now(queue_url, entries, visibility_seconds)
    }

    async fn depth(&self, queue_url: &str) -> Result<Depth, PortError> {
        self.calls.depth.fetch_add(1, Ordering::SeqCst);
        self.call("GetQueueAttributes").await?;
        self.depth_now(queue_url)
    }

    async fn max_message_size(&self, queue_url: &str) -> Result<Option<usize>, PortError> {
        self.calls.max_size.fetch_add(1, Ordering::SeqCst);
        self.call("GetQueueAttributes").await?;
        if !self.lock().queues.contains_key(queue_url) {
            return Err(invalid(
                "GetQueueAttributes",
                format!("no queue {queue_url}"),
            ));
        }
        Ok(Some(self.max_size_of(queue_url)))
    }
}

/// Alarm states and what the engine did to them.
#[derive(Default)]
pub struct FakeCloudWatch {
    pub states: Mutex<HashMap<String, String>>,
    pub set_ok_calls: Mutex<Vec<String>>,
    pub published: Mutex<Vec<(String, String, RunMetrics)>>,
    pub fail_metrics: Mutex<bool>,
    pub fail_alarms: Mutex<bool>,
    /// `Period` x `EvaluationPeriods` per alarm, in seconds (60 when not set).
    pub periods: Mutex<HashMap<String, u64>>,
    pub describe_calls: Mutex<u64>,
}

impl FakeCloudWatch {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn set_state(&self, name: &str, state: &str) {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), state.to_string());
    }
}

fn unavailable(operation: &'static str) -> PortError {
    PortError {
        operation,
        code: "ServiceUnavailable".into(),
        message: "injected".into(),
        retryable: false,
    }
}

impl Alarms for Arc<FakeCloudWatch> {
    async fn describe(&self, names: &[String]) -> Result<Vec<AlarmInfo>, PortError> {
        *self
            .describe_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
        if *self.fail_alarms.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(unavailable("DescribeAlarms"));
        }
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        Ok(names
            .iter()
            .filter_map(|n| {
                let state = match states.get(n)?.as_str() {
                    "ALARM" => AlarmState::Alarm,
                    "OK" => AlarmState::Ok,
                    _ => AlarmState::InsufficientData,
                };
                Some(AlarmInfo {
                    name: n.clone(),
                    state,
                    period_seconds: Some(periods.get(n).copied().unwrap_or(60)),
                })
            })
            .collect())
    }

    async fn set_ok(&self, name: &str, _reason: &str) -> Result<(), PortError> {
        self.set_ok_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_string());
        self.set_state(name, "OK");
        Ok(())
    }
}

impl Metrics for Arc<FakeCloudWatch> {
    async fn publish(
        &self,
        namespace: &str,
        queue_name: &str,
        metrics: RunMetrics,
    ) -> Result<(), PortError> {
        if *self.fail_metrics.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(unavailable("PutMetricData"));
        }
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((namespace.to_string(), queue_name.to_string(), metrics));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/q";
    const FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/q.fifo";

    fn handle(id: &str, receipt_handle: &str) -> HandleEntry {
        HandleEntry {
            id: id.to_string(),
            receipt_handle: receipt_handle.to_string(),
        }
    }

    fn filled(sqs: &FakeSqs, url: &str, n: usize) -> Vec<String> {
        sqs.create_queue(url);
        (0..n)
            .map(|i| sqs.push(url, &format!("m{i}"), Attributes::new(), None))
            .collect()
    }

    fn drain_order(seed: u64) -> Vec<String> {
        let sqs = FakeSqs::seeded(seed);
        filled(&sqs, Q, 30);
        let mut order = Vec::new();
        loop {
            let got = sqs.receive_now(Q, 10, 300).unwrap();
            if got.is_empty() {
                return order;
            }
            order.extend(got.into_iter().map(|m| m.message_id));
        }
    }

    #[tokio::test]
    async fn a_standard_receive_samples_the_visible_messages_in_no_set_order() {
        // GIVEN 30 messages sent in order
        let sent = filled(&FakeSqs::new(), Q, 30);

        // WHEN they are received until none is visible
        let order = drain_order(7);

        // THEN each comes once, not in the order sent, and the same seed repeats the order
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, sent);
        assert_ne!(order, sent, "best-effort order, not insertion order");
        assert_eq!(order, drain_order(7));
        assert_ne!(order, drain_order(8));
    }

    #[tokio::test]
    async fn a_fifo_receive_returns_unlocked_groups_in_their_order() {
        // GIVEN two groups of three messages, interleaved
        let sqs = FakeSqs::new();
        sqs.create_queue(FIFO);
        let mut ids: HashMap<&str, Vec<String>> = HashMap::new();
        for i in 0..6 {
            let g = if i % 2 == 0 { "a" } else { "b" };
            let id = sqs.push(FIFO, &format!("m{i}"), Attributes::new(), Some(g));
            ids.entry(g).or_default().push(id);
        }

        // WHEN one message is received
        let first = sqs.receive_now(FIFO, 1, 300).unwrap();
        assert_eq!(first.len(), 1);
        let g = first[0].group_id.clone().unwrap();
        let other = if g == "a" { "b" } else { "a" };

        // THEN it is the head of its group, and that group is locked while it is in flight:
        // the next receive returns the other group, whole and in order
        assert_eq!(first[0].message_id, ids[g.as_str()][0]);
        let next = sqs.receive_now(FIFO, 10, 300).unwrap();
        let got: Vec<String> = next.into_iter().map(|m| m.message_id).collect();
        assert_eq!(got, ids[other]);
        assert!(sqs.receive_now(FIFO, 10, 300).unwrap().is_empty());

        // AND once the head is deleted, the rest of its group comes in order
        sqs.delete_now(FIFO, &[handle("0", &first[0].receipt_handle)])
            .unwrap();
        let rest: Vec<String> = sqs
            .receive_now(FIFO, 10, 300)
            .unwrap()
            .into_iter()
            .map(|m| m.message_id)
            .collect();
        assert_eq!(rest, ids[g.as_str()][1..]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_with_a_stale_handle_succeeds_and_deletes_nothing() {
        // GIVEN a message received twice (its visibility ran out in between)
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 1);
        let old = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(2)).await;
        let new = sqs.receive_now(Q, 1, 30).unwrap().remove(0);

        // WHEN it is deleted with the first handle
        let outcome = sqs
            .delete_now(Q, &[handle("0", &old.receipt_handle)])
            .unwrap();

        // THEN SQS answers success, and the message is still there
        assert_eq!(outcome.succeeded, vec!["0".to_string()]);
        assert_eq!(sqs.len(Q), 1);

        // AND the latest handle deletes it
        sqs.delete_now(Q, &[handle("0", &new.receipt_handle)])
            .unwrap();
        assert_eq!(sqs.len(Q), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_latest_handle_deletes_after_the_visibility_ran_out() {
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 1);
        let m = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(2)).await;
        sqs.delete_now(Q, &[handle("0", &m.receipt_handle)])
            .unwrap();
        assert_eq!(sqs.len(Q), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fifo_queue_refuses_a_stale_handle() {
        let sqs = FakeSqs::new();
        sqs.create_queue(FIFO);
        sqs.push(FIFO, "b", Attributes::new(), Some("g"));
        let old = sqs.receive_now(FIFO, 1, 1).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(2)).await;
        sqs.receive_now(FIFO, 1, 30).unwrap();
        let outcome = sqs
            .delete_now(FIFO, &[handle("0", &old.receipt_handle)])
            .unwrap();
        assert!(
            outcome.failed[0].message.contains("expired"),
            "{:?}",
            outcome.failed
        );
        assert_eq!(sqs.len(FIFO), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn change_visibility_past_twelve_hours_from_the_receive_is_refused() {
        // GIVEN a message received an hour ago
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 1);
        let m = sqs.receive_now(Q, 1, 7200).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(3600)).await;
        let entry = [handle("0", &m.receipt_handle)];

        // WHEN its visibility is set to end 12 hours and 1 second after the receive
        let refused = sqs.change_visibility_now(Q, &entry, 11 * 3600 + 1).unwrap();

        // THEN SQS refuses it as the caller's fault, and 11 hours (exactly 12) is accepted
        let f = &refused.failed[0];
        assert_eq!(f.code, "InvalidParameterValue");
        assert!(
            f.message.contains("Total VisibilityTimeout"),
            "{}",
            f.message
        );
        assert!(f.sender_fault);
        let ok = sqs.change_visibility_now(Q, &entry, 11 * 3600).unwrap();
        assert_eq!(ok.succeeded, vec!["0".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn change_visibility_needs_the_latest_handle_of_a_message_in_flight() {
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 1);
        let old = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(2)).await;
        // Its visibility ran out: not in flight.
        let out = sqs
            .change_visibility_now(Q, &[handle("0", &old.receipt_handle)], 60)
            .unwrap();
        assert_eq!(out.failed[0].code, "MessageNotInflight");
        // Received again: the old handle is stale.
        sqs.receive_now(Q, 1, 60).unwrap();
        let out = sqs
            .change_visibility_now(Q, &[handle("0", &old.receipt_handle)], 60)
            .unwrap();
        assert_eq!(out.failed[0].code, "ReceiptHandleIsInvalid");
    }

    #[tokio::test(start_paused = true)]
    async fn retention_deletes_messages_in_flight_or_not() {
        // GIVEN a queue keeping messages 60 seconds, one message in flight and one visible
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 2);
        sqs.set_retention(Q, Duration::from_secs(60));
        let m = sqs.receive_now(Q, 1, 300).unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(30)).await;
        let young = sqs.push(Q, "young", Attributes::new(), None);

        // WHEN 60 seconds passed since the first two were sent
        tokio::time::advance(Duration::from_secs(30)).await;

        // THEN both are gone, the one in flight too; the younger one stays
        let left: Vec<String> = sqs.messages(Q).into_iter().map(|m| m.message_id).collect();
        assert_eq!(left, vec![young]);
        assert_eq!(sqs.depth_now(Q).unwrap().total(), 1);
        let out = sqs
            .change_visibility_now(Q, &[handle("0", &m.receipt_handle)], 60)
            .unwrap();
        assert_eq!(out.failed.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retention_counts_from_the_send_on_the_default_four_days() {
        let sqs = FakeSqs::new();
        filled(&sqs, Q, 1);
        tokio::time::advance(DEFAULT_RETENTION - Duration::from_secs(1)).await;
        assert_eq!(sqs.len(Q), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sqs.len(Q), 0);
    }
}
