//! In-memory fakes of the ports and a scriptable processing step, with fault injection: for the
//! faults an emulator cannot produce on demand (the store failing between claim and complete,
//! a send that is never acknowledged) and to count the calls the happy path costs.
//!
//! [`FakeStore`] evaluates the same claim condition as the DynamoDB adapter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redrive_shared::Attributes;
use redrive_shared::backoff::{Backoff, Jitter};
use redrive_shared::config::{
    ConsumerConfig, DEFAULT_CONSUMER_METRIC_NAMESPACE, FifoOnFailure, QueueUrl,
};
use redrive_shared::key::IdempotencyKey;
use redrive_shared::key::KeySource;
use redrive_shared::limits::Outgoing;
use serde_json::Value;

use crate::engine::{Consumer, Handled};
use crate::message::{Message, QueueArn, record_to_event_json};
use crate::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, PortError, QueueOps};
use crate::process::{FromBody, ProcessError, Processor, RawBody};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn unavailable(operation: &'static str) -> PortError {
    PortError {
        operation,
        code: "ServiceUnavailable".into(),
        message: "injected fault".into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
}

/// One stored idempotency record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub status: Status,
    pub expiration_s: i64,
    pub in_progress_expiration_ms: i64,
    pub token: Option<String>,
    /// `payloadHash`, when the payload check is on.
    pub payload_hash: Option<String>,
    /// (COMPLETED) the processor's output, JSON text.
    pub result: Option<String>,
}

impl Record {
    /// A COMPLETED record kept until `expiration_s`, without a result or a payload hash.
    pub fn completed(expiration_s: i64) -> Self {
        Self {
            status: Status::Completed,
            expiration_s,
            in_progress_expiration_ms: 0,
            token: None,
            payload_hash: None,
            result: None,
        }
    }
}

/// Calls per operation.
#[derive(Debug, Default)]
pub struct StoreCalls {
    pub claim: AtomicU64,
    pub complete: AtomicU64,
    pub release: AtomicU64,
    /// Reads: the fake never needs one, so this stays 0 (the happy path costs no read).
    pub read: AtomicU64,
}

impl StoreCalls {
    pub fn writes(&self) -> u64 {
        self.claim.load(Ordering::SeqCst)
            + self.complete.load(Ordering::SeqCst)
            + self.release.load(Ordering::SeqCst)
    }
}

/// An in-memory idempotency table.
#[derive(Debug, Default)]
pub struct FakeStore {
    records: Mutex<HashMap<String, Record>>,
    faults: Mutex<HashMap<&'static str, VecDeque<PortError>>>,
    /// Claims that are applied and then answered with an error (the reply was lost).
    lost_claim_replies: Mutex<u32>,
    down: Mutex<bool>,
    pub calls: StoreCalls,
}

impl FakeStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The record whose `id` is `id` ([`IdempotencyKey::record_id`] of a key).
    pub fn record(&self, id: &str) -> Option<Record> {
        lock(&self.records).get(id).cloned()
    }

    /// The record of an idempotency key, for a consumer without a namespace (the table holds
    /// [`IdempotencyKey::record_id`], the key's hash).
    pub fn record_of_key(&self, key: &str) -> Option<Record> {
        let id = IdempotencyKey::try_from(key.to_string())
            .ok()?
            .record_id(None);
        self.record(&id)
    }

    /// Every record id in the table.
    pub fn ids(&self) -> Vec<String> {
        lock(&self.records).keys().cloned().collect()
    }

    pub fn insert(&self, key: &str, record: Record) {
        lock(&self.records).insert(key.to_string(), record);
    }

    pub fn len(&self) -> usize {
        lock(&self.records).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next call of `operation` (`"claim"`, `"complete"`, `"release"`) fails.
    pub fn fail_next(&self, operation: &'static str) {
        lock(&self.faults)
            .entry(operation)
            .or_default()
            .push_back(unavailable(operation));
    }

    /// The next claim is applied, but its caller gets an error: the answer was lost (a
    /// timeout or a reset after DynamoDB wrote it) and every retry failed too.
    pub fn lose_next_claim_reply(&self) {
        *lock(&self.lost_claim_replies) += 1;
    }

    /// Every call fails while down.
    pub fn set_down(&self, down: bool) {
        *lock(&self.down) = down;
    }

    fn fault(&self, operation: &'static str) -> Result<(), PortError> {
        if *lock(&self.down) {
            return Err(unavailable(operation));
        }
        match lock(&self.faults)
            .get_mut(operation)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl IdempotencyStore for FakeStore {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, PortError> {
        self.calls.claim.fetch_add(1, Ordering::SeqCst);
        self.fault("claim")?;
        let mut records = lock(&self.records);
        let claimable = match records.get(&claim.key) {
            None => true,
            Some(r) => {
                r.expiration_s < claim.now_ms.div_euclid(1000)
                    || (r.status == Status::InProgress
                        && r.in_progress_expiration_ms < claim.now_ms)
            }
        };
        if !claimable {
            let r = &records[&claim.key];
            return Ok(match r.status {
                Status::Completed => ClaimOutcome::Completed(
                    CompletedRecord::new(r.expiration_s)
                        .with_result(r.result.clone())
                        .with_payload_hash(r.payload_hash.clone()),
                ),
                // The same claim again (its first reply was lost): it is ours.
                Status::InProgress if r.token.as_deref() == Some(claim.token.as_str()) => {
                    ClaimOutcome::Claimed
                }
                Status::InProgress => ClaimOutcome::InProgress {
                    until_ms: Some(r.in_progress_expiration_ms),
                },
            });
        }
        records.insert(
            claim.key.clone(),
            Record {
                status: Status::InProgress,
                expiration_s: claim.expiration_s,
                in_progress_expiration_ms: claim.in_progress_expiration_ms,
                token: Some(claim.token.clone()),
                payload_hash: claim.payload_hash.clone(),
                result: None,
            },
        );
        let mut lost = lock(&self.lost_claim_replies);
        if *lost > 0 {
            *lost -= 1;
            return Err(unavailable("claim"));
        }
        Ok(ClaimOutcome::Claimed)
    }

    async fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> Result<(), PortError> {
        self.calls.complete.fetch_add(1, Ordering::SeqCst);
        self.fault("complete")?;
        lock(&self.records).insert(
            claim.key.clone(),
            Record {
                status: Status::Completed,
                expiration_s,
                in_progress_expiration_ms: claim.in_progress_expiration_ms,
                token: None,
                payload_hash: claim.payload_hash.clone(),
                result: result.map(str::to_string),
            },
        );
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), PortError> {
        self.calls.release.fetch_add(1, Ordering::SeqCst);
        self.fault("release")?;
        let mut records = lock(&self.records);
        if records.get(&claim.key).and_then(|r| r.token.as_deref()) == Some(claim.token.as_str()) {
            records.remove(&claim.key);
        }
        Ok(())
    }
}

/// One SQS call the consumer made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCall {
    QueueUrl {
        name: String,
        account: String,
    },
    ChangeVisibility {
        queue_url: String,
        receipt_handle: String,
        seconds: u32,
    },
    Send {
        queue_url: String,
        message: Outgoing,
    },
    Delete {
        queue_url: String,
        receipt_handle: String,
    },
}

/// A recording SQS. `queue_url` answers `https://sqs.fake/<account>/<name>`.
#[derive(Debug, Default)]
pub struct FakeQueue {
    calls: Mutex<Vec<QueueCall>>,
    faults: Mutex<HashMap<&'static str, VecDeque<PortError>>>,
}

impl FakeQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn calls(&self) -> Vec<QueueCall> {
        lock(&self.calls).clone()
    }

    pub fn sends(&self) -> Vec<(String, Outgoing)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::Send { queue_url, message } => Some((queue_url, message)),
                _ => None,
            })
            .collect()
    }

    pub fn deletes(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::Delete { receipt_handle, .. } => Some(receipt_handle),
                _ => None,
            })
            .collect()
    }

    /// (receipt handle, seconds) of every ChangeMessageVisibility.
    pub fn visibility_changes(&self) -> Vec<(String, u32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::ChangeVisibility {
                    receipt_handle,
                    seconds,
                    ..
                } => Some((receipt_handle, seconds)),
                _ => None,
            })
            .collect()
    }

    /// The next call of `operation` (`"GetQueueUrl"`, `"ChangeMessageVisibility"`,
    /// `"SendMessage"`, `"DeleteMessage"`) fails (it is still recorded).
    pub fn fail_next(&self, operation: &'static str) {
        lock(&self.faults)
            .entry(operation)
            .or_default()
            .push_back(unavailable(operation));
    }

    fn record(&self, operation: &'static str, call: QueueCall) -> Result<(), PortError> {
        lock(&self.calls).push(call);
        match lock(&self.faults)
            .get_mut(operation)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub const FAKE_QUEUE_HOST: &str = "https://sqs.fake";

impl QueueOps for FakeQueue {
    async fn queue_url(&self, name: &str, owner_account: &str) -> Result<String, PortError> {
        self.record(
            "GetQueueUrl",
            QueueCall::QueueUrl {
                name: name.into(),
                account: owner_account.into(),
            },
        )?;
        Ok(format!("{FAKE_QUEUE_HOST}/{owner_account}/{name}"))
    }

    async fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        seconds: u32,
    ) -> Result<(), PortError> {
        self.record(
            "ChangeMessageVisibility",
            QueueCall::ChangeVisibility {
                queue_url: queue_url.into(),
                receipt_handle: receipt_handle.into(),
                seconds,
            },
        )
    }

    async fn send(&self, queue_url: &str, message: &Outgoing) -> Result<String, PortError> {
        self.record(
            "SendMessage",
            QueueCall::Send {
                queue_url: queue_url.into(),
                message: message.clone(),
            },
        )?;
        Ok(format!("copy-{}", lock(&self.calls).len()))
    }

    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), PortError> {
        self.record(
            "DeleteMessage",
            QueueCall::Delete {
                queue_url: queue_url.into(),
                receipt_handle: receipt_handle.into(),
            },
        )
    }
}

/// What a [`ScriptedProcessor`] does for one call.
#[derive(Debug, Clone)]
pub enum Step {
    /// Success with no output (nothing stored).
    Succeed,
    /// Success with this output (stored with the COMPLETED record).
    Return(Value),
    Fail(ProcessError),
    /// Never returns: an invocation that crashed or timed out mid-way.
    Hang,
    Panic,
}

/// A processing step scripted per key (in call order), with a default for unscripted calls.
/// Counts calls and successful side effects per key.
#[derive(Debug)]
pub struct ScriptedProcessor {
    script: Mutex<HashMap<String, VecDeque<Step>>>,
    default: Mutex<Step>,
    /// Added before every step: lets concurrent invocations overlap.
    pub delay: Duration,
    /// What [`Processor::time_limit`] reports.
    pub time_limit: Option<Duration>,
    calls: Mutex<HashMap<String, u32>>,
    effects: Mutex<HashMap<String, u32>>,
    duplicates: Mutex<Vec<(String, Option<Value>)>>,
}

impl Default for ScriptedProcessor {
    fn default() -> Self {
        Self::new(Step::Succeed)
    }
}

impl ScriptedProcessor {
    pub fn new(default: Step) -> Self {
        Self {
            script: Mutex::default(),
            default: Mutex::new(default),
            delay: Duration::ZERO,
            time_limit: None,
            calls: Mutex::default(),
            effects: Mutex::default(),
            duplicates: Mutex::default(),
        }
    }

    pub fn with_delay(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    pub fn with_time_limit(self, limit: Duration) -> Self {
        Self {
            time_limit: Some(limit),
            ..self
        }
    }

    /// The next unscripted calls for `key` do `steps`, in order.
    pub fn script(&self, key: &str, steps: impl IntoIterator<Item = Step>) {
        lock(&self.script)
            .entry(key.to_string())
            .or_default()
            .extend(steps);
    }

    pub fn set_default(&self, step: Step) {
        *lock(&self.default) = step;
    }

    /// Calls for `key`, whatever their result.
    pub fn calls(&self, key: &str) -> u32 {
        lock(&self.calls).get(key).copied().unwrap_or(0)
    }

    /// Successful calls for `key`: the side effects.
    pub fn effects(&self, key: &str) -> u32 {
        lock(&self.effects).get(key).copied().unwrap_or(0)
    }

    pub fn total_calls(&self) -> u32 {
        lock(&self.calls).values().sum()
    }

    /// Every [`Processor::duplicate`] call, in order: (message id, the stored output).
    pub fn duplicates(&self) -> Vec<(String, Option<Value>)> {
        lock(&self.duplicates).clone()
    }

    async fn run(&self, key: &str) -> Result<Value, ProcessError> {
        *lock(&self.calls).entry(key.to_string()).or_default() += 1;
        let step = lock(&self.script)
            .get_mut(key)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| lock(&self.default).clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let output = match step {
            Step::Succeed => Value::Null,
            Step::Return(value) => value,
            Step::Fail(e) => return Err(e),
            Step::Hang => std::future::pending().await,
            Step::Panic => panic!("scripted panic in the processing step"),
        };
        *lock(&self.effects).entry(key.to_string()).or_default() += 1;
        Ok(output)
    }
}

/// The output is a JSON value: `null` ([`Step::Succeed`]) stores nothing.
impl Processor<RawBody> for ScriptedProcessor {
    type Output = Value;

    async fn process(&self, _body: RawBody, record: &crate::Record) -> Result<Value, ProcessError> {
        self.run(record.key().as_str()).await
    }

    async fn duplicate(&self, stored: Option<Value>, record: &crate::Record) {
        lock(&self.duplicates).push((record.message_id().to_string(), stored));
    }

    fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }
}

/// So that a test keeps the processor to count its calls.
impl Processor<RawBody> for &ScriptedProcessor {
    type Output = Value;

    async fn process(&self, body: RawBody, record: &crate::Record) -> Result<Value, ProcessError> {
        (**self).process(body, record).await
    }

    async fn duplicate(&self, stored: Option<Value>, record: &crate::Record) {
        (**self).duplicate(stored, record).await
    }

    fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }
}

/// The standard queue the fixture messages come from.
pub const FIXTURE_SOURCE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:orders";

/// The DLQ of the fixture configuration.
pub const FIXTURE_DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";

/// A fixture: the configuration of table `idempotency`, keyed by `key_source`, records kept an
/// hour, the fixture DLQ when `dlq`, retries after 2 s times 3 per receive (no jitter, at most
/// 900 s), no cache, a FIFO group held after a failure.
pub fn config(dlq: bool, key_source: KeySource) -> ConsumerConfig {
    ConsumerConfig {
        idempotency_table: "idempotency".into(),
        key_source,
        key_namespace: None,
        payload: None,
        ttl_seconds: 3600,
        dlq_url: dlq.then(|| QueueUrl::parse(FIXTURE_DLQ_URL).expect("the fixture DLQ URL parses")),
        retry: Backoff::new(2.0, 3.0, 900, Jitter::None).expect("the fixture backoff is valid"),
        cache_size: 0,
        fail_when_all_failed: false,
        fifo_on_failure: FifoOnFailure::SkipGroup,
        metric_namespace: DEFAULT_CONSUMER_METRIC_NAMESPACE.into(),
    }
}

/// A fixture: a message of the standard queue `orders`, received once, handle `handle-<id>`.
pub fn message(id: &str, body: &str) -> Message {
    Message {
        message_id: id.into(),
        receipt_handle: format!("handle-{id}"),
        body: body.into(),
        attributes: Attributes::new(),
        receive_count: 1,
        group_id: None,
        source: QueueArn::parse(FIXTURE_SOURCE_ARN),
        trace_header: None,
    }
}

/// A fixture: the Lambda SQS event of these messages (region `us-east-1`).
pub fn event(messages: &[Message]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| record_to_event_json(m, "us-east-1"))
        .collect();
    serde_json::json!({ "Records": records })
}

/// A fixture: the deadline of an invocation a minute from now, in epoch milliseconds.
pub fn in_a_minute() -> u64 {
    (crate::engine::now_ms() + 60_000) as u64
}

/// A fixture: `consumer` handles these messages as one event, a minute before its deadline.
pub async fn handle<S, Q, P, T>(consumer: &Consumer<S, Q, P, T>, messages: &[Message]) -> Handled
where
    S: IdempotencyStore,
    Q: QueueOps,
    P: Processor<T>,
    T: FromBody,
{
    consumer
        .handle(&event(messages), in_a_minute())
        .await
        .expect("a fixture event has a Records array")
}

/// Each record's message id and outcome, in the batch's order.
pub fn outcomes(handled: &Handled) -> Vec<(&str, &str)> {
    handled
        .records
        .iter()
        .map(|r| (r.message_id.as_deref().unwrap_or(""), r.outcome.as_str()))
        .collect()
}
