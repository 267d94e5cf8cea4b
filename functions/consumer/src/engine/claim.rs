//! One keyed record: the claim, the processing step, the COMPLETED write (retried while the
//! claim holds), and this process's memory of completed keys.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use redrive_shared::key::{IdempotencyKey, PayloadHash};
use redrive_shared::meta::RedriveMeta;

use crate::cause::FailureCause;
use crate::message::Message;
use crate::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, QueueOps};
use crate::process::{BODY_NOT_PARSED, FromBody, ProcessError, Processor};
use crate::record::Record;

use super::batch::Settled;
use super::report::{PROCESSOR_PANIC, STORE_UNAVAILABLE};
use super::{Consumer, MAX_STORED_RESULT_BYTES, Outcome, key_digest, now_ms};

/// Error code when the processor's output could not be serialized (logged; not stored).
const RESULT_NOT_STORED: &str = "RESULT_NOT_STORED";

impl<S: IdempotencyStore, Q: QueueOps, P: Processor<T>, T: FromBody> Consumer<S, Q, P, T> {
    /// Writes COMPLETED after the side effect, retrying a failed write while the claim holds:
    /// until it lands, a duplicate copy that arrives after the claim expires would repeat the
    /// side effect (with the same `Idempotency-Key`).
    /// Returns the `expiration` written (or last tried).
    pub(super) async fn complete(
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

    pub(super) async fn run_keyed(
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
        let error = match result {
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
                return Settled {
                    outcome: Outcome::Processed,
                    error: None,
                    result: stored,
                    payload: None,
                };
            }
            Err(error) => error,
        };
        self.record_cause(message, key, &error).await;
        match error {
            ProcessError::Transient {
                code,
                message: text,
                retry_after,
            } => {
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
            ProcessError::Permanent {
                code,
                message: text,
            } => {
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

    /// Records why this attempt failed in the key's cause item ([`crate::cause`]), so that a
    /// message SQS later moves to the DLQ untouched can be classified. A failed write is logged
    /// (the key's digest and the store's error, never the body) and changes nothing else.
    async fn record_cause(&self, message: &Message, key: &IdempotencyKey, error: &ProcessError) {
        let now = now_ms();
        let cause = FailureCause::of_error(key, self.config.key_namespace.as_deref(), error)
            .at(now)
            .expiring(self.expiration_s(now));
        if let Err(e) = self.store.record_cause(&cause).await {
            tracing::warn!(
                message_id = %message.message_id,
                key_digest = %key_digest(key.as_str()),
                code = error.code(),
                error = %e,
                "could not record the failure's cause; the message's outcome is unchanged"
            );
        }
    }

    /// What a key found COMPLETED (by a claim, or in this process's memory) becomes: a
    /// duplicate, handed the stored output.
    pub(super) async fn on_completed(
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
    pub(super) fn remembered(&self, key: &IdempotencyKey) -> Option<CompletedRecord> {
        self.completed.as_ref()?.get(key.as_str(), now_ms())
    }

    pub(super) fn remember(&self, key: &IdempotencyKey, record: CompletedRecord) {
        if let Some(cache) = &self.completed {
            cache.insert(key.as_str(), record);
        }
    }

    /// The output as the JSON text to store: `None` for `null` (`()` and `None` store
    /// nothing), for an output over [`MAX_STORED_RESULT_BYTES`] and for one that does not
    /// serialize (both logged, with the size only: an output may hold body content).
    pub(super) fn stored_result(&self, message: &Message, output: &P::Output) -> Option<String> {
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
    pub(super) async fn tell_duplicate(&self, record: &Record, stored: Option<&str>) {
        let output = stored.and_then(|text| {
            redrive_shared::json::from_str::<P::Output>(text)
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

    pub(super) fn expiration_s(&self, now_ms: i64) -> i64 {
        now_ms
            .div_euclid(1000)
            .saturating_add(i64::try_from(self.config.ttl_seconds).unwrap_or(i64::MAX))
    }
}
