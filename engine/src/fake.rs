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
use redrive_shared::limits::MAX_MESSAGE_BYTES;
use redrive_shared::{Attributes, TraceHeader};
use tokio::time::Instant;

use crate::ports::{EntryFailure, PortError, SendEntry};

/// The ARN SQS gives the queue at `url` (`000000000000` when the URL names no account).
pub fn queue_arn(url: &str) -> String {
    let (account, name) = redrive_shared::source::url_account_and_name(url)
        .unwrap_or(("000000000000", url.rsplit('/').next().unwrap_or(url)));
    format!("arn:aws:sqs:us-east-1:{account}:{name}")
}

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
    /// `DeadLetterQueueSourceArn`: set when the queue's RedrivePolicy moved it to its DLQ.
    pub dead_letter_source_arn: Option<String>,
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
    /// Tags per queue.
    tags: HashMap<String, HashMap<String, String>>,
    /// `MessageRetentionPeriod` per queue; [`DEFAULT_RETENTION`] when not set.
    retention: HashMap<String, Duration>,
    next_id: u64,
    /// Receives still to deliver messages in flight again ([`FakeSqs::redeliver_in_flight`]).
    redeliver: u32,
    /// In-flight limit per queue ([`FakeSqs::set_in_flight_limit`]); none when not set.
    in_flight_limits: HashMap<String, usize>,
    /// Per queue, a time before which none of its messages' retention ends: a message stored
    /// later expires later (one moved in from another queue, which keeps its send time,
    /// clears it, as a change of the retention does).
    next_expiry: HashMap<String, Instant>,
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
            tags: HashMap::new(),
            retention: HashMap::new(),
            next_id: 0,
            redeliver: 0,
            in_flight_limits: HashMap::new(),
            next_expiry: HashMap::new(),
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
        if self.next_expiry.get(url).is_some_and(|&at| now < at) {
            // No message can have expired yet: no walk over the queue (a queue of 100,000
            // messages is read on every call).
            return self.queues.get_mut(url);
        }
        let q = self.queues.get_mut(url)?;
        q.retain(|m| now.duration_since(m.sent_at) < retention);
        let next = q.iter().map(|m| m.sent_at).min().unwrap_or(now) + retention;
        self.next_expiry.insert(url.to_string(), next);
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
                dead_letter_source_arn: None,
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
    PortError::new(operation, "ThrottlingException", "Rate exceeded", true)
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
    /// TagQueue: sets `key` to `value` on the queue.
    pub fn tag_queue(&self, url: &str, key: &str, value: &str) {
        self.lock()
            .tags
            .entry(url.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
    }

    pub fn set_retention(&self, url: &str, retention: Duration) {
        let mut s = self.lock();
        s.retention.insert(url.to_string(), retention);
        s.next_expiry.remove(url);
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
    /// A message on the DLQ `dlq_url` as SQS leaves it after moving it from `source_url`:
    /// `DeadLetterQueueSourceArn` names the source (which need not list the DLQ: a test of a
    /// source whose RedrivePolicy changed since).
    pub fn push_moved(
        &self,
        dlq_url: &str,
        source_url: &str,
        body: &str,
        attributes: Attributes,
        group_id: Option<&str>,
    ) -> String {
        let mut s = self.lock();
        let id = s.store(
            dlq_url,
            body,
            attributes,
            group_id.map(str::to_string),
            None,
            None,
        );
        if let Some(m) = s.queues.get_mut(dlq_url).and_then(|q| q.back_mut()) {
            m.dead_letter_source_arn = Some(queue_arn(source_url));
        }
        id
    }

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

    /// When each message of a queue was sent, in queue order (the fake's clock, tokio's).
    pub fn sent_at(&self, url: &str) -> Vec<Instant> {
        self.lock()
            .queue(url)
            .map(|q| q.iter().map(|m| m.sent_at).collect())
            .unwrap_or_default()
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

    /// The next `n` receives from a standard queue that find messages in flight return them
    /// too, each with a new receipt handle (the one before goes stale), as SQS's at-least-once
    /// delivery may: two receivers, or one whose earlier receive is still being handled.
    /// Sets a queue's in-flight limit (SQS's is 120,000 for a standard queue, 20,000 for a
    /// FIFO one): a receive from a standard queue with that many messages in flight fails with
    /// `OverLimit`, as SQS's does, and takes no more than the room left; a FIFO queue's returns
    /// nothing.
    pub fn set_in_flight_limit(&self, url: &str, limit: usize) {
        self.lock().in_flight_limits.insert(url.to_string(), limit);
    }

    pub fn redeliver_in_flight(&self, n: u32) {
        self.lock().redeliver += n;
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
    PortError::new(operation, "InvalidParameterValue", message, false)
}

pub mod clock;
mod cloudwatch;
mod ops;
pub mod orders;
mod port;
pub use cloudwatch::FakeCloudWatch;

#[cfg(test)]
mod tests;
