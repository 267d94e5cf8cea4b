//! Port calls as the drain and [`super::Transfer`] make them: each bounded in time, entries in
//! valid batches, on a FIFO destination one entry per group per batch and a group with a failed
//! entry held, and the failed entries that are worth another try tried again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use redrive_shared::limits::{HeldGroups, split_batches, split_fifo_batches};
use tokio::time::Instant;

use super::Settings;
use super::transfer::Acks;
use crate::lock;
use crate::ports::{BatchOutcome, EntryFailure, HandleEntry, PortError, Queue, SendEntry};

/// What a send of entries came to.
#[derive(Debug, Default)]
pub(super) struct Sent {
    pub(super) acked: Vec<String>,
    /// FIFO: not sent, an earlier message of the group failed.
    pub(super) held: Vec<String>,
    /// Rejected as the sender's fault: the entries, with the failure.
    pub(super) rejected: Vec<(SendEntry, EntryFailure)>,
    /// Not acknowledged after every try (not the sender's fault): the last error of each.
    pub(super) failed: HashMap<String, String>,
    /// The destination refused the sender itself (AccessDenied, or its KMS key): no entry of
    /// this send can pass until a grant changes, so none was tried again. Those entries are in
    /// `failed` (or `held`, FIFO).
    pub(super) denied: Option<PortError>,
}

/// An error that says the caller may not send to the queue at all: AccessDenied (IAM, the
/// queue's policy) or the queue's KMS key refusing, disabled or gone. Not throttling
/// (`KmsThrottled`), which passes.
pub(crate) fn is_access_denied(code: &str) -> bool {
    let code = code.to_ascii_lowercase();
    code.contains("accessdenied") || (code.starts_with("kms") && !code.contains("throttl"))
}

impl Sent {
    pub(super) fn merge(&mut self, other: Sent) {
        self.acked.extend(other.acked);
        self.held.extend(other.held);
        self.rejected.extend(other.rejected);
        self.failed.extend(other.failed);
        if self.denied.is_none() {
            self.denied = other.denied;
        }
    }
}

/// The calls of one run: its settings and the instant no call may outlive.
#[derive(Clone, Copy)]
pub(super) struct Calls<'s> {
    pub(super) settings: &'s Settings,
    pub(super) end: Option<Instant>,
}

impl Calls<'_> {
    /// Sends entries in valid batches, concurrently.
    pub(super) async fn send_all<Q: Queue>(
        self,
        queue: &Q,
        queue_url: &str,
        entries: Vec<SendEntry>,
    ) -> Sent {
        let mut sent = Sent::default();
        if entries.is_empty() {
            return sent;
        }
        let batches = split_batches(entries, entry_size);
        let results = join_all(
            batches
                .into_iter()
                .map(|b| self.send_batch(queue, queue_url, b)),
        )
        .await;
        for r in results {
            sent.merge(r);
        }
        sent
    }

    /// FIFO: one entry per group per batch, batches in order, and a group whose send failed is
    /// held back for the rest of the run so that no later message overtakes it.
    pub(super) async fn send_fifo<Q: Queue>(
        self,
        queue: &Q,
        queue_url: &str,
        entries: Vec<SendEntry>,
        held_groups: &Mutex<HeldGroups>,
    ) -> Sent {
        let mut sent = Sent::default();
        let batches = split_fifo_batches(entries, entry_size, |e| e.message.group_id.as_deref());
        for batch in batches {
            let (send, hold) =
                lock(held_groups).partition(batch, |e| e.message.group_id.as_deref());
            sent.held.extend(hold.into_iter().map(|e| e.id));
            if send.is_empty() {
                continue;
            }
            let groups: Vec<(String, Option<String>)> = send
                .iter()
                .map(|e| (e.id.clone(), e.message.group_id.clone()))
                .collect();
            let result = self.send_batch(queue, queue_url, send).await;
            let mut held = lock(held_groups);
            for (id, group) in groups {
                if !result.acked.contains(&id) {
                    held.hold(group.as_deref());
                }
            }
            drop(held);
            sent.merge(result);
        }
        sent
    }

    /// One batch, retrying its failed entries that are worth another try. A whole call that
    /// fails is not tried again here: the SDK's retry configuration owns whole calls.
    pub(super) async fn send_batch<Q: Queue>(
        self,
        queue: &Q,
        queue_url: &str,
        mut batch: Vec<SendEntry>,
    ) -> Sent {
        let mut sent = Sent::default();
        for attempt in 0..self.settings.retry_attempts.max(1) {
            if attempt > 0 && !self.pause_before_retry(attempt).await {
                break;
            }
            let outcome = match self
                .bounded("SendMessageBatch", queue.send_batch(queue_url, &batch))
                .await
            {
                Ok(outcome) => outcome,
                Err(e) => {
                    tracing::warn!(error = %e, queue = queue_url, entries = batch.len(), "SendMessageBatch failed");
                    for entry in &batch {
                        sent.failed.insert(entry.id.clone(), e.to_string());
                    }
                    if is_access_denied(&e.code) {
                        sent.denied = Some(e);
                    }
                    break;
                }
            };
            let retry: HashSet<String> = retryable_ids(&outcome.failed);
            log_entry_failures("SendMessageBatch", queue_url, &outcome);
            for f in outcome.failed.into_iter() {
                if is_access_denied(&f.code) {
                    sent.failed
                        .insert(f.id.clone(), format!("{}: {}", f.code, f.message));
                    sent.denied.get_or_insert_with(|| {
                        PortError::new("SendMessageBatch", f.code.clone(), f.message.clone(), false)
                    });
                } else if f.sender_fault {
                    if let Some(pos) = batch.iter().position(|e| e.id == f.id) {
                        sent.failed.remove(&f.id);
                        sent.rejected.push((batch.swap_remove(pos), f));
                    }
                } else {
                    sent.failed
                        .insert(f.id, format!("{}: {}", f.code, f.message));
                }
            }
            for id in &outcome.succeeded {
                sent.failed.remove(id);
            }
            sent.acked.extend(outcome.succeeded);
            batch.retain(|e| retry.contains(&e.id));
            if batch.is_empty() {
                break;
            }
        }
        sent
    }

    /// One call per 10 handles (a delete, or a change of visibility), retrying its failed
    /// entries that are worth another try (a whole call is the SDK's to retry); `ok` holds
    /// the ids acknowledged.
    pub(super) async fn by_handle<F, Fut>(
        self,
        operation: &'static str,
        queue_url: &str,
        entries: Vec<HandleEntry>,
        call: F,
    ) -> Acks
    where
        F: Fn(Vec<HandleEntry>) -> Fut,
        Fut: Future<Output = Result<BatchOutcome, PortError>>,
    {
        let mut acks = Acks::default();
        for chunk in entries.chunks(10) {
            let mut pending = chunk.to_vec();
            for attempt in 0..self.settings.retry_attempts.max(1) {
                if pending.is_empty() {
                    break;
                }
                if attempt > 0 && !self.pause_before_retry(attempt).await {
                    break;
                }
                let outcome = match self.bounded(operation, call(pending.clone())).await {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        tracing::warn!(error = %e, operation, queue = queue_url, entries = pending.len(), "batch call failed");
                        for entry in &pending {
                            acks.failed.insert(entry.id.clone(), e.to_string());
                        }
                        break;
                    }
                };
                log_entry_failures(operation, queue_url, &outcome);
                let retry = retryable_ids(&outcome.failed);
                for f in outcome.failed {
                    acks.failed
                        .insert(f.id, format!("{}: {}", f.code, f.message));
                }
                for id in outcome.succeeded {
                    acks.failed.remove(&id);
                    acks.ok.insert(id);
                }
                pending.retain(|e| retry.contains(&e.id));
            }
        }
        acks
    }

    fn retry_delay(self, attempt: u32) -> Duration {
        self.settings.retry_base * 2u32.saturating_pow(attempt.saturating_sub(1))
    }

    /// Sleeps before retry `attempt`; false when that would end past `end`.
    pub(super) async fn pause_before_retry(self, attempt: u32) -> bool {
        let delay = self.retry_delay(attempt);
        if self.end.is_some_and(|e| Instant::now() + delay >= e) {
            return false;
        }
        tokio::time::sleep(delay).await;
        true
    }

    /// One port call, given at most `call_timeout` and never past `end`: a stalled call fails
    /// as a retryable `Timeout` instead of outliving the deadline (and the visibility timeout
    /// of the messages it carries).
    pub(super) async fn bounded<T>(
        self,
        operation: &'static str,
        call: impl Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        let budget = self.end.map_or(self.settings.call_timeout, |e| {
            self.settings
                .call_timeout
                .min(e.saturating_duration_since(Instant::now()))
        });
        match tokio::time::timeout(budget, call).await {
            Ok(result) => result,
            Err(_) => Err(PortError::new(
                operation,
                "Timeout",
                format!("no answer within {} ms", budget.as_millis()),
                true,
            )),
        }
    }
}

pub(super) fn entry_size(e: &SendEntry) -> usize {
    redrive_shared::attributes::message_size(&e.message.body, &e.message.attributes)
}

fn retryable_ids(failed: &[EntryFailure]) -> HashSet<String> {
    failed
        .iter()
        .filter(|f| !f.sender_fault && !is_access_denied(&f.code))
        .map(|f| f.id.clone())
        .collect()
}

pub(super) fn log_entry_failures(operation: &str, queue_url: &str, outcome: &BatchOutcome) {
    for f in &outcome.failed {
        tracing::warn!(operation, queue = queue_url, entry = %f.id, code = %f.code, error = %f.message, sender_fault = f.sender_fault, "batch entry failed");
    }
}
