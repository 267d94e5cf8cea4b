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

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;

use aws_lambda_events::event::sqs::SqsEvent;
use redrive_shared::backoff::{JitterRng, os_seeded_rng};
pub(crate) use redrive_shared::clock::now_ms;
use redrive_shared::config::ConsumerConfig;
use serde_json::Value;

use crate::cache::CompletedCache;
use crate::message::{MalformedRecord, Message, parse_record, read_message};
use crate::ports::{IdempotencyStore, QueueOps};
use crate::process::{FromBody, Processor, RawBody};

mod batch;
mod claim;
mod report;
mod settings;
mod settle;

pub use report::{
    BatchItemFailure, BatchResponse, EventError, EveryRecordFailed, FailedIds, Handled,
    IN_PROGRESS, Outcome, PAYLOAD_MISMATCH, PROCESSOR_PANIC, RecordReport, STORE_UNAVAILABLE,
};
pub use settings::Settings;

use batch::{Prepared, Window};
use report::item_failure;

/// The largest processor output stored with a COMPLETED record (its JSON text, in bytes). A
/// larger one is not stored (logged with its size): the record is still COMPLETED, and a
/// duplicate gets `None`. Every failed claim of the key returns the whole record (and is
/// charged write units for the larger of the two items), so results are kept small.
pub const MAX_STORED_RESULT_BYTES: usize = 16 * 1024;

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

impl<S: IdempotencyStore, Q: QueueOps, P: Processor<T>, T: FromBody> Consumer<S, Q, P, T> {
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

#[cfg(test)]
mod tests;
