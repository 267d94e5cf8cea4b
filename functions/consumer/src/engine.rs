//! One invocation: each record of the SQS event is read, keyed, claimed, processed and settled
//! on its own, and the failures are reported as a partial batch response.
//!
//! Per record (standard queues concurrently, FIFO queues in order):
//! 1. Read the record and its `x-redrive` metadata (total: a garbled value keys on the MessageId).
//! 2. Derive the idempotency key (and, with the payload check, the payload's fingerprint). A key
//!    that cannot be derived is a permanent failure.
//! 3. Claim the key with one conditional write, under its hash. COMPLETED: success without a
//!    side effect, unless the payload check finds another payload there (a permanent failure).
//!    IN_PROGRESS (unexpired): reported failed, retried after the backoff. Store unavailable:
//!    reported failed, retried after the backoff, nothing processed.
//! 4. Process. Success: mark COMPLETED (the second and last write of the happy path).
//!    Transient: release, set the visibility to the backoff, report failed. Permanent: copy to
//!    the DLQ with the `lastError` stamp and delete the original (or report failed without a
//!    DLQ), then release.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::SqsEvent;
use futures_util::{FutureExt, StreamExt};
use redrive_shared::attributes::message_size;
use redrive_shared::backoff::{JitterRng, MAX_DELAY_SECONDS, os_seeded_rng};
use redrive_shared::config::{ConsumerConfig, FifoOnFailure};
use redrive_shared::key::{IdempotencyKey, KeyError, PayloadHash, derive};
use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES, Outgoing};
use redrive_shared::meta::{ErrorClass, LastError, MetaSource, RedriveMeta};
use redrive_shared::timefmt::rfc3339_from_millis;
use serde_json::Value;

use crate::cache::CompletedCache;
use crate::message::{MalformedRecord, Message, parse_record, read_message};
use crate::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, QueueOps};
use crate::process::{BODY_NOT_PARSED, FromBody, ProcessError, Processor, RawBody};
use crate::record::Record;

/// The largest processor output stored with a COMPLETED record (its JSON text, in bytes). A
/// larger one is not stored (logged with its size): the record is still COMPLETED, and a
/// duplicate gets `None`. Every failed claim of the key returns the whole record (and is
/// charged write units for the larger of the two items), so results are kept small.
pub const MAX_STORED_RESULT_BYTES: usize = 16 * 1024;

/// Knobs that are not part of the contract's configuration. Built from
/// [`Settings::default`] with the `with_*` methods.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub(crate) max_concurrency: usize,
    pub(crate) fallback_claim: Duration,
    pub(crate) complete_retries: u32,
    pub(crate) complete_retry_base: Duration,
    pub(crate) deadline_margin: Duration,
    pub(crate) emit_metrics: bool,
}

impl Settings {
    /// Records of a standard queue processed at once (default 10; at least 1).
    pub fn with_max_concurrency(mut self, records: usize) -> Self {
        self.max_concurrency = records.max(1);
        self
    }

    /// How long a claim lasts when the invocation has no usable deadline (a local emulator
    /// reports one in the past). Default 900 s: the longest a Lambda invocation can run.
    pub fn with_fallback_claim(mut self, claim: Duration) -> Self {
        self.fallback_claim = claim;
        self
    }

    /// Further tries of a COMPLETED write that failed (beyond the SDK's own retries), each
    /// after twice the previous wait, from `base`, while the claim holds. Default 3 from
    /// 100 ms.
    pub fn with_complete_retries(mut self, retries: u32, base: Duration) -> Self {
        self.complete_retries = retries;
        self.complete_retry_base = base;
        self
    }

    /// Time a record needs besides its processing step (claim, COMPLETED write and its
    /// retries, release, visibility change, DLQ copy and delete). A record is started only
    /// while the processor's [`Processor::time_limit`] plus this margin is left before the
    /// invocation deadline; the others are reported failed untouched. Default 3 s.
    pub fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    pub fn fallback_claim(&self) -> Duration {
        self.fallback_claim
    }

    pub fn deadline_margin(&self) -> Duration {
        self.deadline_margin
    }

    /// Whether each invocation prints its metrics as an Embedded Metric Format line on stdout
    /// (see [`crate::metrics`]). Default on; off for in-process simulations that run
    /// thousands of batches.
    pub fn with_emit_metrics(mut self, emit: bool) -> Self {
        self.emit_metrics = emit;
        self
    }

    pub fn emit_metrics(&self) -> bool {
        self.emit_metrics
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_concurrency: 10,
            fallback_claim: Duration::from_secs(900),
            complete_retries: 3,
            complete_retry_base: Duration::from_millis(100),
            deadline_margin: Duration::from_secs(3),
            emit_metrics: true,
        }
    }
}

/// `{"batchItemFailures":[{"itemIdentifier":"<messageId>"}]}`: `aws_lambda_events`' type.
pub use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse as BatchResponse};

/// The reported MessageIds of a batch response, in record order.
pub trait FailedIds {
    fn failed_ids(&self) -> Vec<&str>;
}

impl FailedIds for BatchResponse {
    fn failed_ids(&self) -> Vec<&str> {
        self.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }
}

fn item_failure(item_identifier: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = item_identifier;
    failure
}

/// What became of one record.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Processed now, and recorded COMPLETED.
    Processed,
    /// Already COMPLETED: success without a second side effect.
    Duplicate,
    /// Another invocation holds the key: reported failed, retried later.
    InProgress,
    /// Transient failure (of the processing step, or of the idempotency store): reported
    /// failed, visibility set to `visibility_seconds` when that call succeeded.
    Retry {
        code: String,
        visibility_seconds: Option<u32>,
    },
    /// Permanent failure: a copy (stamped with `lastError` when there was room) is on the
    /// DLQ and the original was deleted. Not reported: it is settled.
    DeadLettered { code: String, stamped: bool },
    /// Permanent failure without a DLQ, or whose DLQ copy was not acknowledged: reported failed.
    Failed { code: String },
    /// The payload check (`IDEMPOTENCY_PAYLOAD`): the key is COMPLETED for a different payload.
    /// Not processed (the side effect is not repeated) and never taken for a duplicate: a
    /// permanent failure with code [`PAYLOAD_MISMATCH`], dead-lettered with the `lastError`
    /// stamp (`dead_lettered`, `stamped` as in [`Outcome::DeadLettered`]) when `DLQ_URL` is set
    /// and SQS acknowledged the copy, else reported failed.
    PayloadMismatch { dead_lettered: bool, stamped: bool },
    /// FIFO: an earlier record of the same message group was reported failed, so this one was
    /// not processed (to keep the group's order) and is reported failed too.
    Skipped,
    /// The record could not be read: reported failed when it has a MessageId.
    Malformed,
    /// Not started: too little time was left before the invocation deadline to finish it.
    /// Reported failed untouched (nothing claimed, no SQS call): SQS delivers it again.
    Unstarted,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::InProgress => "in-progress",
            Self::Retry { .. } => "retry",
            Self::DeadLettered { .. } => "dead-lettered",
            Self::Failed { .. } => "failed",
            Self::PayloadMismatch { .. } => "payload-mismatch",
            Self::Skipped => "skipped",
            Self::Malformed => "malformed",
            Self::Unstarted => "unstarted",
        }
    }

    /// True when the record goes into `batchItemFailures` (SQS will deliver it again).
    pub fn is_reported(&self) -> bool {
        !matches!(
            self,
            Self::Processed
                | Self::Duplicate
                | Self::DeadLettered { .. }
                | Self::PayloadMismatch {
                    dead_lettered: true,
                    ..
                }
        )
    }

    fn code(&self) -> Option<&str> {
        match self {
            Self::Retry { code, .. } | Self::DeadLettered { code, .. } | Self::Failed { code } => {
                Some(code)
            }
            Self::PayloadMismatch { .. } => Some(PAYLOAD_MISMATCH),
            _ => None,
        }
    }
}

/// One record's fate, for logs, tests and callers that want more than the response.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    pub message_id: Option<String>,
    pub key: Option<String>,
    pub outcome: Outcome,
    /// The processor's output as JSON text: the one it just returned (`processed`), or the
    /// one stored with the COMPLETED record (`duplicate`, twins included). `None` when there
    /// is none (`()`, too large to store, or another outcome).
    pub result: Option<String>,
}

impl RecordReport {
    fn new(message_id: Option<String>, key: Option<String>, outcome: Outcome) -> Self {
        Self {
            message_id,
            key,
            outcome,
            result: None,
        }
    }
}

/// The result of one invocation.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    pub response: BatchResponse,
    /// In record order.
    pub records: Vec<RecordReport>,
    /// The source queue's name, from the records' `eventSourceARN`.
    queue_name: Option<String>,
    /// `FAIL_WHEN_ALL_FAILED` is on and every record of the (non-empty) batch failed.
    fail_invocation: bool,
}

impl Handled {
    pub fn outcome_of(&self, message_id: &str) -> Option<&Outcome> {
        self.report_of(message_id).map(|r| &r.outcome)
    }

    pub fn report_of(&self, message_id: &str) -> Option<&RecordReport> {
        self.records
            .iter()
            .find(|r| r.message_id.as_deref() == Some(message_id))
    }

    /// The source queue's name (the metrics' `QueueName`), when a record named it.
    pub fn queue_name(&self) -> Option<&str> {
        self.queue_name.as_deref()
    }

    /// True when the batch is not empty and every record of it failed (is reported, or
    /// could not be reported for want of a MessageId).
    pub fn every_record_failed(&self) -> bool {
        !self.records.is_empty() && self.records.iter().all(|r| r.outcome.is_reported())
    }

    /// What the Lambda returns: the partial batch response, or, with `FAIL_WHEN_ALL_FAILED`
    /// and every record failed, an error, so that the invocation counts in Lambda's `Errors`
    /// metric. SQS then delivers the whole batch again, which is what reporting every record
    /// does too: the visibility each record was given and the released claims stay as they are.
    pub fn into_response(self) -> Result<BatchResponse, EveryRecordFailed> {
        if !self.fail_invocation {
            return Ok(self.response);
        }
        let mut outcomes: Vec<(&'static str, usize)> = Vec::new();
        for r in &self.records {
            match outcomes.iter_mut().find(|(o, _)| *o == r.outcome.as_str()) {
                Some((_, n)) => *n += 1,
                None => outcomes.push((r.outcome.as_str(), 1)),
            }
        }
        Err(EveryRecordFailed {
            records: self.records.len(),
            outcomes: outcomes
                .iter()
                .map(|(o, n)| format!("{o}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Every record of the batch failed and `FAIL_WHEN_ALL_FAILED` is on: the invocation fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "every record of the batch failed ({records} of {records}; {outcomes}): the invocation fails (FAIL_WHEN_ALL_FAILED) and SQS delivers the batch again"
)]
pub struct EveryRecordFailed {
    pub records: usize,
    /// Records per outcome, e.g. `retry: 9, in-progress: 1`.
    pub outcomes: String,
}

/// The event was not an SQS event at all: the invocation fails (nothing was touched).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an SQS event: {0}")]
pub struct EventError(pub &'static str);

/// Error code when the idempotency store could not be reached for a claim.
pub const STORE_UNAVAILABLE: &str = "IDEMPOTENCY_STORE_UNAVAILABLE";
/// Error code when the processing step panicked.
pub const PROCESSOR_PANIC: &str = "PROCESSOR_PANIC";
/// Error code when another invocation holds the key.
pub const IN_PROGRESS: &str = "IN_PROGRESS";
/// Error code of [`Outcome::PayloadMismatch`].
pub const PAYLOAD_MISMATCH: &str = "IDEMPOTENCY_PAYLOAD_MISMATCH";

/// Error code when the processor's output could not be serialized (logged; not stored).
const RESULT_NOT_STORED: &str = "RESULT_NOT_STORED";

/// The idempotent consumer: ports, configuration and per-process caches. `T` is what the
/// processor takes: the body parsed (any `serde::de::DeserializeOwned` type) or [`RawBody`].
pub struct Consumer<S, Q, P, T = RawBody> {
    store: S,
    queue: Q,
    processor: P,
    config: ConsumerConfig,
    settings: Settings,
    rng: Mutex<JitterRng>,
    queue_urls: Mutex<HashMap<String, String>>,
    input: PhantomData<fn() -> T>,
    /// Completed keys this process remembers (`IDEMPOTENCY_CACHE_SIZE`; `None` when 0).
    completed: Option<CompletedCache>,
}

impl<S, Q, P, T> Consumer<S, Q, P, T>
where
    S: IdempotencyStore,
    Q: QueueOps,
    P: Processor<T>,
    T: FromBody,
{
    pub fn new(store: S, queue: Q, processor: P, config: ConsumerConfig) -> Self {
        Self::with_settings(store, queue, processor, config, Settings::default())
    }

    pub fn with_settings(
        store: S,
        queue: Q,
        processor: P,
        config: ConsumerConfig,
        settings: Settings,
    ) -> Self {
        let rng = os_seeded_rng();
        let completed = (config.cache_size > 0).then(|| CompletedCache::new(config.cache_size));
        Self {
            store,
            queue,
            processor,
            config,
            settings,
            rng: Mutex::new(rng),
            queue_urls: Mutex::new(HashMap::new()),
            input: PhantomData,
            completed,
        }
    }

    /// Replaces the jitter's random source (deterministic tests).
    pub fn with_rng(self, rng: JitterRng) -> Self {
        Self {
            rng: Mutex::new(rng),
            ..self
        }
    }

    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    pub fn processor(&self) -> &P {
        &self.processor
    }

    /// Handles one SQS event as the Lambda runtime delivers it typed (what [`crate::run`]
    /// does). `deadline_ms` is the invocation's deadline (epoch ms, `Context::deadline`): an
    /// IN_PROGRESS claim lasts until then, and no record is started that could not finish
    /// before it. Each record is read on its own: one without a messageId, receiptHandle or
    /// body is malformed alone.
    pub async fn handle_event(&self, event: &SqsEvent, deadline_ms: u64) -> Handled {
        let records = event.records.iter().map(read_message).collect();
        self.handle_records(records, deadline_ms).await
    }

    /// Handles one SQS event given as JSON: each record is read on its own, so that even a
    /// record that does not fit `aws_lambda_events`' `SqsMessage` fails alone. Fails only when
    /// the event has no `Records` array (nothing is touched).
    pub async fn handle(&self, event: &Value, deadline_ms: u64) -> Result<Handled, EventError> {
        let records = event
            .get("Records")
            .and_then(Value::as_array)
            .ok_or(EventError("no Records array"))?;
        let records = records.iter().map(parse_record).collect();
        Ok(self.handle_records(records, deadline_ms).await)
    }

    async fn handle_records(
        &self,
        records: Vec<Result<Message, MalformedRecord>>,
        deadline_ms: u64,
    ) -> Handled {
        let now = now_ms();
        let deadline = i64::try_from(deadline_ms).unwrap_or(i64::MAX);
        let window = if deadline > now {
            Window {
                claim_until: deadline,
                deadline: Some(deadline),
            }
        } else {
            tracing::debug!(
                deadline_ms,
                "the invocation deadline is in the past; claims last the fallback instead"
            );
            Window {
                claim_until: now.saturating_add(self.settings.fallback_claim.as_millis() as i64),
                deadline: None,
            }
        };

        let prepared: Vec<Prepared> = records
            .into_iter()
            .map(|record| self.prepare(record))
            .collect();
        let fifo = prepared
            .iter()
            .any(|p| p.message().is_some_and(Message::is_fifo));
        let queue_name = prepared
            .iter()
            .find_map(|p| p.message().and_then(|m| m.source.as_ref()))
            .map(|arn| arn.name.clone());
        let reports = if fifo {
            self.run_in_order(prepared, window).await
        } else {
            self.run_concurrently(prepared, window).await
        };

        let mut response = BatchResponse::default();
        response.batch_item_failures = reports
            .iter()
            .filter(|r| r.outcome.is_reported())
            .filter_map(|r| r.message_id.clone())
            .map(item_failure)
            .collect();
        let count = |name: &str| {
            reports
                .iter()
                .filter(|r| r.outcome.as_str() == name)
                .count()
        };
        tracing::info!(
            records = reports.len(),
            reported_failed = response.batch_item_failures.len(),
            processed = count("processed"),
            duplicates = count("duplicate"),
            dead_lettered = count("dead-lettered"),
            payload_mismatches = count("payload-mismatch"),
            unstarted = count("unstarted"),
            fifo,
            "batch handled"
        );
        let mut handled = Handled {
            response,
            records: reports,
            queue_name,
            fail_invocation: false,
        };
        handled.fail_invocation = self.config.fail_when_all_failed && handled.every_record_failed();
        if handled.fail_invocation {
            tracing::error!(
                records = handled.records.len(),
                "every record of the batch failed; the invocation fails (FAIL_WHEN_ALL_FAILED)"
            );
        }
        if self.settings.emit_metrics {
            crate::metrics::emit(&handled, &self.config.metric_namespace, now_ms());
        }
        handled
    }

    /// Reads a record's metadata and derives its key: everything that needs no call.
    fn prepare(&self, record: Result<Message, MalformedRecord>) -> Prepared {
        let message = match record {
            Ok(message) => message,
            Err(malformed) => return Prepared::Malformed(malformed),
        };
        let (meta, source) = RedriveMeta::read(&message.attributes, &message.message_id);
        if let MetaSource::Garbled(why) = &source {
            tracing::warn!(
                message_id = %message.message_id,
                problem = %why,
                "unreadable x-redrive attribute; keyed on the MessageId"
            );
        }
        let keyed = derive(
            &self.config.key_source,
            &meta.original_message_id,
            &message.body,
            &message.attributes,
        )
        .and_then(|key| {
            let payload = self
                .config
                .payload
                .as_ref()
                .map(|p| p.hash(&message.body, &message.attributes))
                .transpose()?;
            Ok((key, payload))
        });
        match keyed {
            Ok((key, payload)) => Prepared::Keyed {
                message,
                meta,
                key,
                payload,
            },
            Err(error) => Prepared::Unkeyed {
                message,
                meta,
                error,
            },
        }
    }

    /// Standard queues: records with the same key form one group, whose first record is
    /// processed and whose twins take its outcome; groups run concurrently.
    async fn run_concurrently(&self, prepared: Vec<Prepared>, window: Window) -> Vec<RecordReport> {
        let mut groups: Vec<Vec<(usize, Prepared)>> = Vec::new();
        let mut group_of_key: HashMap<String, usize> = HashMap::new();
        for (i, p) in prepared.into_iter().enumerate() {
            let existing = p.key().and_then(|k| group_of_key.get(k.as_str()).copied());
            match existing {
                Some(g) => groups[g].push((i, p)),
                None => {
                    if let Some(k) = p.key() {
                        group_of_key.insert(k.as_str().to_string(), groups.len());
                    }
                    groups.push(vec![(i, p)]);
                }
            }
        }
        let mut indexed: Vec<(usize, RecordReport)> = futures_util::stream::iter(groups)
            .map(|group| Box::pin(self.run_group(group, window)))
            .buffer_unordered(self.settings.max_concurrency.max(1))
            .flat_map(futures_util::stream::iter)
            .collect()
            .await;
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, r)| r).collect()
    }

    async fn run_group(
        &self,
        group: Vec<(usize, Prepared)>,
        window: Window,
    ) -> Vec<(usize, RecordReport)> {
        let mut reports = Vec::with_capacity(group.len());
        let mut members = group.into_iter();
        let Some((i, leader)) = members.next() else {
            return reports;
        };
        let (report, settled) = Box::pin(self.run_one(leader, window)).await;
        reports.push((i, report));
        for (i, twin) in members {
            let report = if settled.same_payload(&twin) {
                Box::pin(self.run_twin(twin, &settled)).await
            } else {
                // Not a twin: another payload under the key. It claims on its own, after the
                // first record, so that the store decides (a mismatch when that one completed,
                // processed when it was released).
                Box::pin(self.run_one(twin, window)).await.0
            };
            reports.push((i, report));
        }
        reports
    }

    /// FIFO: in order; once a record is reported failed, the later records of its group
    /// (`FIFO_ON_FAILURE=skip-group`) or of the whole batch (`stop-batch`) are reported failed
    /// unprocessed, so that SQS redelivers them in order. A record whose key an earlier record
    /// of the batch already handled takes that record's outcome.
    async fn run_in_order(&self, prepared: Vec<Prepared>, window: Window) -> Vec<RecordReport> {
        let stop_batch = self.config.fifo_on_failure == FifoOnFailure::StopBatch;
        let mut blocked: HashSet<Option<String>> = HashSet::new();
        let mut stopped = false;
        let mut settled_keys: HashMap<String, Settled> = HashMap::new();
        let mut reports = Vec::with_capacity(prepared.len());
        for record in prepared {
            let group = record.group_id();
            let report = if stopped || blocked.contains(&group) {
                let message_id = record.message_id();
                tracing::info!(
                    message_id = message_id.as_deref().unwrap_or(""),
                    group_id = group.as_deref().unwrap_or(""),
                    outcome = "skipped",
                    "{}",
                    if stopped {
                        "an earlier message of this batch failed (FIFO_ON_FAILURE=stop-batch); not processed"
                    } else {
                        "an earlier message of this group failed; not processed"
                    }
                );
                RecordReport::new(message_id, None, Outcome::Skipped)
            } else if let Some(settled) = record
                .key()
                .and_then(|k| settled_keys.get(k.as_str()))
                .filter(|settled| settled.same_payload(&record))
                .cloned()
            {
                Box::pin(self.run_twin(record, &settled)).await
            } else {
                let key = record.key().map(|k| k.as_str().to_string());
                let (report, settled) = Box::pin(self.run_one(record, window)).await;
                if let Some(key) = key {
                    settled_keys.entry(key).or_insert(settled);
                }
                report
            };
            if report.outcome.is_reported() {
                stopped = stop_batch;
                blocked.insert(group);
            }
            reports.push(report);
        }
        reports
    }

    /// True when a record started now can finish before the deadline.
    fn may_start(&self, window: Window) -> bool {
        let Some(deadline) = window.deadline else {
            return true;
        };
        let needed =
            self.processor.time_limit().unwrap_or_default() + self.settings.deadline_margin;
        deadline.saturating_sub(now_ms()) >= needed.as_millis() as i64
    }

    async fn run_one(&self, record: Prepared, window: Window) -> (RecordReport, Settled) {
        // A key this process saw completed costs no call, and no time: it settles even when
        // too little is left before the deadline to start a record.
        if let Prepared::Keyed {
            message,
            meta,
            key,
            payload,
        } = &record
            && let Some(found) = self.remembered(key)
        {
            tracing::debug!(
                message_id = %message.message_id,
                key_digest = %key_digest(key.as_str()),
                "completed within this process's memory; no call to the idempotency store"
            );
            let mut settled =
                Box::pin(self.on_completed(message, meta, key, payload.as_ref(), &found)).await;
            settled.payload = payload.clone();
            let report = self.finish(
                message,
                meta,
                Some(key),
                settled.outcome.clone(),
                settled.result.clone(),
            );
            return (report, settled);
        }
        let (message, meta, key, payload) = match record {
            Prepared::Malformed(malformed) => {
                match &malformed.message_id {
                    Some(id) => tracing::warn!(
                        message_id = %id,
                        outcome = "malformed",
                        reason = %malformed.reason,
                        "malformed record; reported failed"
                    ),
                    None => tracing::error!(
                        outcome = "malformed",
                        reason = %malformed.reason,
                        "record without a messageId cannot be reported; skipped"
                    ),
                }
                let report = RecordReport::new(malformed.message_id, None, Outcome::Malformed);
                return (report, Settled::unstarted());
            }
            Prepared::Unkeyed { message, .. } | Prepared::Keyed { message, .. }
                if !self.may_start(window) =>
            {
                tracing::warn!(
                    message_id = %message.message_id,
                    outcome = "unstarted",
                    "too little time left before the deadline to finish this record; reported failed untouched"
                );
                let report =
                    RecordReport::new(Some(message.message_id.clone()), None, Outcome::Unstarted);
                return (report, Settled::unstarted());
            }
            Prepared::Unkeyed {
                message,
                meta,
                error,
            } => {
                // Replaying cannot make a key appear: a permanent failure of this record alone.
                let outcome =
                    Box::pin(self.give_up(&message, &meta, error.code(), &error.to_string())).await;
                let report = self.finish(&message, &meta, None, outcome, None);
                return (report, Settled::unstarted());
            }
            Prepared::Keyed {
                message,
                meta,
                key,
                payload,
            } => (message, meta, key, payload),
        };
        // Boxed: the nested futures (SDK, HTTP client, processor) are too deep for the
        // compiler's layout queries otherwise.
        let mut settled =
            Box::pin(self.run_keyed(&message, &meta, &key, payload.as_ref(), window.claim_until))
                .await;
        settled.payload = payload;
        let report = self.finish(
            &message,
            &meta,
            Some(&key),
            settled.outcome.clone(),
            settled.result.clone(),
        );
        (report, settled)
    }

    /// A record whose key an earlier record of this batch handled: it takes that outcome
    /// (success: settled without a side effect; transient or in progress: reported failed
    /// after the same delay; permanent: the same dead-lettering), and is never processed.
    async fn run_twin(&self, record: Prepared, settled: &Settled) -> RecordReport {
        let Prepared::Keyed {
            message, meta, key, ..
        } = record
        else {
            // Only keyed records have twins.
            return Box::pin(self.run_one(record, Window::unbounded())).await.0;
        };
        tracing::info!(
            message_id = %message.message_id,
            key_digest = %key_digest(key.as_str()),
            leader_outcome = settled.outcome.as_str(),
            "a record with the same key in this batch was handled first; taking its outcome"
        );
        let mut result = None;
        let outcome = match &settled.outcome {
            Outcome::Processed | Outcome::Duplicate => {
                result = settled.result.clone();
                let record = Record::with_history(
                    message.clone(),
                    key.clone(),
                    meta.original_message_id.clone(),
                    meta.attempt,
                );
                self.tell_duplicate(&record, result.as_deref()).await;
                Outcome::Duplicate
            }
            Outcome::InProgress => {
                self.retry_later(&message, None).await;
                Outcome::InProgress
            }
            Outcome::Retry {
                code,
                visibility_seconds,
            } => {
                let after = visibility_seconds.map(|s| Duration::from_secs(u64::from(s)));
                let visibility_seconds = self.retry_later(&message, after).await;
                Outcome::Retry {
                    code: code.clone(),
                    visibility_seconds,
                }
            }
            Outcome::DeadLettered { code, .. } | Outcome::Failed { code } => {
                let text = settled.error.as_deref().unwrap_or("permanent failure");
                self.give_up(&message, &meta, code, text).await
            }
            Outcome::PayloadMismatch { .. } => self.payload_mismatch(&message, &meta).await,
            Outcome::Unstarted => Outcome::Unstarted,
            Outcome::Skipped | Outcome::Malformed => Outcome::Skipped,
        };
        self.finish(&message, &meta, Some(&key), outcome, result)
    }

    /// Logs one record's outcome and makes its report.
    fn finish(
        &self,
        message: &Message,
        meta: &RedriveMeta,
        key: Option<&IdempotencyKey>,
        outcome: Outcome,
        result: Option<String>,
    ) -> RecordReport {
        let digest = key.map(|k| key_digest(k.as_str())).unwrap_or_default();
        let code = outcome.code().unwrap_or("");
        // One line a record: a warning when it is reported failed, information otherwise.
        macro_rules! settled {
            ($level:ident, $text:literal) => {
                tracing::$level!(
                    message_id = %message.message_id,
                    key_digest = %digest,
                    original_message_id = %meta.original_message_id,
                    attempt = meta.attempt,
                    receive_count = message.receive_count,
                    outcome = outcome.as_str(),
                    code,
                    $text
                )
            };
        }
        if outcome.is_reported() {
            settled!(warn, "record reported failed");
        } else {
            settled!(info, "record settled");
        }
        RecordReport {
            message_id: Some(message.message_id.clone()),
            key: key.map(|k| k.as_str().to_string()),
            outcome,
            result,
        }
    }

    /// Writes COMPLETED after the side effect, retrying a failed write while the claim holds:
    /// until it lands, a duplicate copy that arrives after the claim expires would repeat the
    /// side effect (with the same `Idempotency-Key`).
    /// Returns the `expiration` written (or last tried).
    async fn complete(
        &self,
        message: &Message,
        key: &IdempotencyKey,
        claim: &Claim,
        result: Option<&str>,
    ) -> i64 {
        let mut wait = self.settings.complete_retry_base;
        let mut tries_left = self.settings.complete_retries;
        loop {
            let expiration_s = self.expiration_s(now_ms());
            let Err(e) = self.store.complete(claim, expiration_s, result).await else {
                return expiration_s;
            };
            let retry_at = now_ms().saturating_add(wait.as_millis() as i64);
            if tries_left == 0 || retry_at >= claim.in_progress_expiration_ms {
                // The side effect happened: reporting a failure would repeat it. The claim
                // stays IN_PROGRESS until it expires, which blocks nothing once this message
                // is deleted.
                tracing::error!(
                    message_id = %message.message_id,
                    key_digest = %key_digest(key.as_str()),
                    error = %e,
                    "processed, but the COMPLETED record could not be written"
                );
                return expiration_s;
            }
            tracing::warn!(
                message_id = %message.message_id,
                key_digest = %key_digest(key.as_str()),
                error = %e,
                retry_in_ms = wait.as_millis() as u64,
                "COMPLETED write failed; retrying"
            );
            tokio::time::sleep(wait).await;
            wait *= 2;
            tries_left -= 1;
        }
    }

    async fn run_keyed(
        &self,
        message: &Message,
        meta: &RedriveMeta,
        key: &IdempotencyKey,
        payload: Option<&PayloadHash>,
        claim_until: i64,
    ) -> Settled {
        let now = now_ms();
        let claim = Claim {
            key: key.record_id(self.config.key_namespace.as_deref()),
            // A random v4 UUID: claim tokens must never repeat across instances, since a claim
            // that finds its own token on an IN_PROGRESS record takes it for its own (a retried
            // write whose answer was lost).
            token: uuid::Uuid::new_v4().to_string(),
            now_ms: now,
            expiration_s: self.expiration_s(now),
            in_progress_expiration_ms: claim_until,
            payload_hash: payload.map(|p| p.as_str().to_string()),
        };
        match self.store.claim(&claim).await {
            Ok(ClaimOutcome::Claimed) => {}
            Ok(ClaimOutcome::Completed(found)) => {
                self.remember(key, found.clone());
                return self.on_completed(message, meta, key, payload, &found).await;
            }
            Ok(ClaimOutcome::InProgress { until_ms }) => {
                tracing::info!(
                    message_id = %message.message_id,
                    key_digest = %key_digest(key.as_str()),
                    held_until_ms = until_ms,
                    "another invocation holds this key"
                );
                self.retry_later(message, None).await;
                return Outcome::InProgress.into();
            }
            Err(e) => {
                tracing::error!(
                    message_id = %message.message_id,
                    key_digest = %key_digest(key.as_str()),
                    error = %e,
                    "idempotency store unavailable; not processed"
                );
                // The claim may have been written with only its answer lost: release it (a
                // delete conditioned on this claim's token, a no-op otherwise), so that the
                // retry is not held off by our own claim until it expires.
                self.release(&claim).await;
                let visibility_seconds = self.retry_later(message, None).await;
                return Outcome::Retry {
                    code: STORE_UNAVAILABLE.into(),
                    visibility_seconds,
                }
                .into();
            }
        }

        let record = Record::with_history(
            message.clone(),
            key.clone(),
            meta.original_message_id.clone(),
            meta.attempt,
        );
        let result = match T::from_body(&message.body) {
            Ok(input) => AssertUnwindSafe(self.processor.process(input, &record))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(ProcessError::transient(
                        PROCESSOR_PANIC,
                        "the processing step panicked",
                    ))
                }),
            // Replaying the same bytes cannot make them parse.
            Err(reason) => Err(ProcessError::permanent(BODY_NOT_PARSED, reason)),
        };
        match result {
            Ok(output) => {
                let stored = self.stored_result(message, &output);
                let expiration_s = self.complete(message, key, &claim, stored.as_deref()).await;
                // Remembered even when the COMPLETED write never landed: the side effect
                // happened, and this process must not repeat it.
                self.remember(
                    key,
                    CompletedRecord::new(expiration_s)
                        .with_result(stored.clone())
                        .with_payload_hash(claim.payload_hash.clone()),
                );
                Settled {
                    outcome: Outcome::Processed,
                    error: None,
                    result: stored,
                    payload: None,
                }
            }
            Err(ProcessError::Transient {
                code,
                message: text,
                retry_after,
            }) => {
                tracing::info!(
                    message_id = %message.message_id,
                    key_digest = %key_digest(key.as_str()),
                    code = %code,
                    error = %text,
                    "transient failure"
                );
                self.release(&claim).await;
                let visibility_seconds = self.retry_later(message, retry_after).await;
                Outcome::Retry {
                    code,
                    visibility_seconds,
                }
                .into()
            }
            Err(ProcessError::Permanent {
                code,
                message: text,
            }) => {
                let outcome = self.give_up(message, meta, &code, &text).await;
                self.release(&claim).await;
                Settled {
                    outcome,
                    error: Some(text),
                    payload: None,
                    result: None,
                }
            }
        }
    }

    /// What a key found COMPLETED (by a claim, or in this process's memory) becomes: a
    /// duplicate, handed the stored output.
    async fn on_completed(
        &self,
        message: &Message,
        meta: &RedriveMeta,
        key: &IdempotencyKey,
        payload: Option<&PayloadHash>,
        found: &CompletedRecord,
    ) -> Settled {
        if payload.is_some_and(|ours| ours.contradicts(found.payload_hash.as_deref())) {
            tracing::warn!(
                message_id = %message.message_id,
                key_digest = %key_digest(key.as_str()),
                "the key was processed for a different payload; not processed again"
            );
            return self.payload_mismatch(message, meta).await.into();
        }
        let record = Record::with_history(
            message.clone(),
            key.clone(),
            meta.original_message_id.clone(),
            meta.attempt,
        );
        self.tell_duplicate(&record, found.result.as_deref()).await;
        Settled {
            outcome: Outcome::Duplicate,
            error: None,
            result: found.result.clone(),
            payload: None,
        }
    }

    /// The completed record of `key` this process remembers, unexpired.
    fn remembered(&self, key: &IdempotencyKey) -> Option<CompletedRecord> {
        self.completed.as_ref()?.get(key.as_str(), now_ms())
    }

    fn remember(&self, key: &IdempotencyKey, record: CompletedRecord) {
        if let Some(cache) = &self.completed {
            cache.insert(key.as_str(), record);
        }
    }

    /// The output as the JSON text to store: `None` for `null` (`()` and `None` store
    /// nothing), for an output over [`MAX_STORED_RESULT_BYTES`] and for one that does not
    /// serialize (both logged, with the size only: an output may hold body content).
    fn stored_result(&self, message: &Message, output: &P::Output) -> Option<String> {
        match serde_json::to_string(output) {
            Ok(text) if text == "null" => None,
            Ok(text) if text.len() > MAX_STORED_RESULT_BYTES => {
                tracing::warn!(
                    message_id = %message.message_id,
                    bytes = text.len(),
                    limit = MAX_STORED_RESULT_BYTES,
                    code = RESULT_NOT_STORED,
                    "the processor's output is too large to store; duplicates will get none"
                );
                None
            }
            Ok(text) => Some(text),
            Err(e) => {
                tracing::warn!(
                    message_id = %message.message_id,
                    error = %e,
                    code = RESULT_NOT_STORED,
                    "the processor's output does not serialize; duplicates will get none"
                );
                None
            }
        }
    }

    /// Hands a duplicate its stored output ([`Processor::duplicate`]).
    async fn tell_duplicate(&self, record: &Record, stored: Option<&str>) {
        let output = stored.and_then(|text| {
            serde_json::from_str::<P::Output>(text)
                .inspect_err(|e| {
                    tracing::warn!(
                        message_id = %record.message_id(),
                        error = %crate::process::describe_json_error(e),
                        "the stored result no longer parses as the processor's output; the duplicate gets none"
                    )
                })
                .ok()
        });
        let hook = AssertUnwindSafe(self.processor.duplicate(output, record)).catch_unwind();
        if hook.await.is_err() {
            tracing::error!(
                message_id = %record.message_id(),
                "the processor's duplicate hook panicked; the record is still a duplicate"
            );
        }
    }

    fn expiration_s(&self, now_ms: i64) -> i64 {
        now_ms
            .div_euclid(1000)
            .saturating_add(i64::try_from(self.config.ttl_seconds).unwrap_or(i64::MAX))
    }

    async fn release(&self, claim: &Claim) {
        if let Err(e) = self.store.release(claim).await {
            tracing::warn!(
                key_digest = %digest_of_record_id(&claim.key),
                error = %e,
                "could not release the claim; the key is held until its in-progress expiry"
            );
        }
    }

    /// Sets the message's visibility to `retry_after` (capped at 900 s) or the retry backoff
    /// for its receive count. Returns the visibility set, `None` when it could not be.
    async fn retry_later(&self, message: &Message, retry_after: Option<Duration>) -> Option<u32> {
        let seconds = match retry_after {
            Some(after) => {
                let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                secs.min(u64::from(MAX_DELAY_SECONDS)) as u32
            }
            None => {
                let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                self.config
                    .retry
                    .delay_seconds(message.receive_count, None, &mut *rng)
            }
        };
        let url = self.source_url(message).await?;
        match self
            .queue
            .change_visibility(&url, &message.receipt_handle, seconds)
            .await
        {
            Ok(()) => Some(seconds),
            Err(e) => {
                tracing::warn!(
                    message_id = %message.message_id,
                    error = %e,
                    "could not set the retry visibility; the queue's own timeout applies"
                );
                None
            }
        }
    }

    /// The payload check failed: a permanent failure of its own, fast-tracked like the others.
    async fn payload_mismatch(&self, message: &Message, meta: &RedriveMeta) -> Outcome {
        let text = match &self.config.payload {
            Some(source) => format!(
                "the idempotency key was already processed for a different payload (IDEMPOTENCY_PAYLOAD={source})"
            ),
            None => "the idempotency key was already processed for a different payload".into(),
        };
        match self.give_up(message, meta, PAYLOAD_MISMATCH, &text).await {
            Outcome::DeadLettered { stamped, .. } => Outcome::PayloadMismatch {
                dead_lettered: true,
                stamped,
            },
            _ => Outcome::PayloadMismatch {
                dead_lettered: false,
                stamped: false,
            },
        }
    }

    /// Permanent failure: copy to the DLQ with the `lastError` stamp, then delete the original.
    async fn give_up(
        &self,
        message: &Message,
        meta: &RedriveMeta,
        code: &str,
        text: &str,
    ) -> Outcome {
        let Some(dlq) = &self.config.dlq_url else {
            tracing::info!(
                message_id = %message.message_id,
                code,
                error = %text,
                "permanent failure; no DLQ_URL, so it is reported failed"
            );
            return Outcome::Failed { code: code.into() };
        };
        let mut stamped_meta = meta.clone();
        stamped_meta.last_error = Some(LastError::new(
            ErrorClass::Permanent,
            code,
            text,
            rfc3339_from_millis(now_ms()),
        ));
        let mut attributes = message.attributes.clone();
        stamped_meta.write_into(&mut attributes);
        let stamped = attributes.len() <= MAX_ATTRIBUTES
            && message_size(&message.body, &attributes) <= MAX_MESSAGE_BYTES;
        if !stamped {
            // The re-driver isolates an unstamped message at the limit (attribute-limit or
            // size-limit) instead of replaying it.
            tracing::warn!(
                message_id = %message.message_id,
                attributes = message.attributes.len(),
                "no room for the x-redrive stamp; the DLQ copy goes unstamped"
            );
            attributes = message.attributes.clone();
        }
        let fifo = dlq.is_fifo();
        let copy = Outgoing {
            body: message.body.clone(),
            attributes,
            delay_seconds: None,
            group_id: fifo.then(|| {
                message
                    .group_id
                    .clone()
                    .unwrap_or_else(|| meta.original_message_id.clone())
            }),
            // A repeat of this send (a retried invocation) is deduplicated by SQS.
            dedup_id: fifo.then(|| message.message_id.clone()),
            // The producer's trace follows the message through the DLQ and back.
            trace_header: message.trace_header.clone(),
        };
        match self.queue.send(dlq.as_str(), &copy).await {
            Err(e) => {
                tracing::error!(
                    message_id = %message.message_id,
                    code,
                    error = %e,
                    "permanent failure, but the DLQ copy was not acknowledged; reported failed"
                );
                Outcome::Failed { code: code.into() }
            }
            Ok(copy_id) => {
                match self.source_url(message).await {
                    Some(url) => {
                        if let Err(e) = self.queue.delete(&url, &message.receipt_handle).await {
                            // Not reported failed: the event source mapping deletes it.
                            tracing::warn!(
                                message_id = %message.message_id,
                                error = %e,
                                "DLQ copy sent, but the original could not be deleted now"
                            );
                        }
                    }
                    None => tracing::warn!(
                        message_id = %message.message_id,
                        "DLQ copy sent; the source queue is unknown, the event source mapping deletes the original"
                    ),
                }
                tracing::info!(
                    message_id = %message.message_id,
                    dlq_message_id = %copy_id,
                    code,
                    stamped,
                    "permanent failure fast-tracked to the DLQ"
                );
                Outcome::DeadLettered {
                    code: code.into(),
                    stamped,
                }
            }
        }
    }

    /// The URL of the record's source queue (GetQueueUrl from its ARN, cached per ARN).
    async fn source_url(&self, message: &Message) -> Option<String> {
        let Some(arn) = &message.source else {
            tracing::warn!(
                message_id = %message.message_id,
                "record has no eventSourceARN; its queue cannot be called"
            );
            return None;
        };
        if let Some(url) = self
            .queue_urls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&arn.arn)
        {
            return Some(url.clone());
        }
        match self.queue.queue_url(&arn.name, &arn.account).await {
            Ok(url) => {
                self.queue_urls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(arn.arn.clone(), url.clone());
                Some(url)
            }
            Err(e) => {
                tracing::warn!(
                    message_id = %message.message_id,
                    queue = %arn.name,
                    error = %e,
                    "could not resolve the source queue URL"
                );
                None
            }
        }
    }
}

/// The invocation's time: how long claims last, and the deadline records must finish by
/// (`None` when the invocation has no usable deadline).
#[derive(Debug, Clone, Copy)]
struct Window {
    claim_until: i64,
    deadline: Option<i64>,
}

impl Window {
    fn unbounded() -> Self {
        Self {
            claim_until: now_ms(),
            deadline: None,
        }
    }
}

/// A record read and keyed, before any call.
enum Prepared {
    Malformed(MalformedRecord),
    /// The key could not be derived: a permanent failure of this record alone.
    Unkeyed {
        message: Message,
        meta: RedriveMeta,
        error: KeyError,
    },
    Keyed {
        message: Message,
        meta: RedriveMeta,
        key: IdempotencyKey,
        /// The payload's fingerprint, when the payload check is on.
        payload: Option<PayloadHash>,
    },
}

impl Prepared {
    fn message(&self) -> Option<&Message> {
        match self {
            Self::Malformed(_) => None,
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => Some(message),
        }
    }

    fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::Keyed { key, .. } => Some(key),
            _ => None,
        }
    }

    fn payload(&self) -> Option<&PayloadHash> {
        match self {
            Self::Keyed { payload, .. } => payload.as_ref(),
            _ => None,
        }
    }

    fn message_id(&self) -> Option<String> {
        match self {
            Self::Malformed(m) => m.message_id.clone(),
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => {
                Some(message.message_id.clone())
            }
        }
    }

    fn group_id(&self) -> Option<String> {
        match self {
            Self::Malformed(m) => m.group_id.clone(),
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => message.group_id.clone(),
        }
    }
}

/// How a key's first record in the batch ended: its twins take this outcome.
#[derive(Debug, Clone)]
struct Settled {
    outcome: Outcome,
    /// The permanent failure's text, for the twins' `lastError` stamps.
    error: Option<String>,
    /// The stored output (JSON text), for the twins of a success.
    result: Option<String>,
    /// The first record's payload fingerprint (payload check on).
    payload: Option<PayloadHash>,
}

impl Settled {
    fn unstarted() -> Self {
        Outcome::Unstarted.into()
    }

    /// True when `record` carries the payload of the record that settled its key (always, when
    /// the payload check is off): only then is it a twin that takes that outcome.
    fn same_payload(&self, record: &Prepared) -> bool {
        self.payload.as_ref() == record.payload()
    }
}

impl From<Outcome> for Settled {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            error: None,
            payload: None,
            result: None,
        }
    }
}

/// What the logs carry instead of a key: pointer keys are body content (an e-mail, a card
/// token), so only the first 8 hex digits of the key's SHA-256 are logged, enough to
/// correlate the lines of one key.
pub fn key_digest(key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// [`key_digest`] read back from a record id: the key's SHA-256 is the id's hash, so its first
/// 8 hex digits are the same.
fn digest_of_record_id(id: &str) -> &str {
    let hash = id.rsplit('#').next().unwrap_or(id);
    hash.get(..8).unwrap_or(hash)
}

/// The wall clock in Unix epoch milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
