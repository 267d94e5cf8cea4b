//! The queue side of a record that is not a success: the retry visibility, the DLQ copy with
//! its `lastError` stamp and the delete of the original, the claim's release, and the source
//! queue's URL.

use std::time::Duration;

use redrive_shared::attributes::message_size;
use redrive_shared::backoff::MAX_DELAY_SECONDS;
use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES, Outgoing};
use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
use redrive_shared::sync::lock;
use redrive_shared::timefmt::rfc3339_from_millis;

use crate::message::Message;
use crate::ports::{Claim, IdempotencyStore, QueueOps};
use crate::process::{FromBody, Processor};

use super::report::PAYLOAD_MISMATCH;
use super::{Consumer, Outcome, digest_of_record_id, now_ms};

impl<S: IdempotencyStore, Q: QueueOps, P: Processor<T>, T: FromBody> Consumer<S, Q, P, T> {
    pub(super) async fn release(&self, claim: &Claim) {
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
    pub(super) async fn retry_later(
        &self,
        message: &Message,
        retry_after: Option<Duration>,
    ) -> Option<u32> {
        let seconds = match retry_after {
            Some(after) => {
                let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                secs.min(u64::from(MAX_DELAY_SECONDS)) as u32
            }
            None => {
                let mut rng = lock(&self.rng);
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
    pub(super) async fn payload_mismatch(&self, message: &Message, meta: &RedriveMeta) -> Outcome {
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
    pub(super) async fn give_up(
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
    pub(super) async fn source_url(&self, message: &Message) -> Option<String> {
        let Some(arn) = &message.source else {
            tracing::warn!(
                message_id = %message.message_id,
                "record has no eventSourceARN; its queue cannot be called"
            );
            return None;
        };
        if let Some(url) = lock(&self.queue_urls).get(&arn.arn) {
            return Some(url.clone());
        }
        match self.queue.queue_url(&arn.name, &arn.account).await {
            Ok(url) => {
                lock(&self.queue_urls).insert(arn.arn.clone(), url.clone());
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
