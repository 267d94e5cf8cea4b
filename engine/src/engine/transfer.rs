//! Sending copies and deleting originals: valid batches, the FIFO hold of a group with a failed
//! entry, retries of failed entries, and deletes of exactly what the destination acknowledged.

use super::*;

/// What a send of entries came to.
#[derive(Debug, Default)]
pub(super) struct Sent {
    pub(super) acked: Vec<String>,
    /// FIFO: not sent, an earlier message of the group failed.
    pub(super) held: Vec<String>,
    /// Rejected as the sender's fault: the entries, with the failure.
    pub(super) rejected: Vec<(SendEntry, EntryFailure)>,
}

impl Sent {
    pub(super) fn merge(&mut self, other: Sent) {
        self.acked.extend(other.acked);
        self.held.extend(other.held);
        self.rejected.extend(other.rejected);
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Sends entries in valid batches, concurrently.
    pub(super) async fn send_all(
        &self,
        run: &Run<'_>,
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
                .map(|b| self.send_with_retry(run, queue_url, b)),
        )
        .await;
        for r in results {
            sent.merge(r);
        }
        sent
    }

    /// FIFO: one entry per group per batch, batches in order, and a group whose send failed is
    /// held back for the rest of the invocation so that no later message overtakes it.
    pub(super) async fn send_fifo(
        &self,
        run: &Run<'_>,
        queue_url: &str,
        entries: Vec<SendEntry>,
    ) -> Sent {
        let mut sent = Sent::default();
        let batches = split_fifo_batches(entries, entry_size, |e| e.group_id.as_deref());
        for batch in batches {
            let (send, hold) = run
                .held_groups
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .partition(batch, |e| e.group_id.as_deref());
            sent.held.extend(hold.into_iter().map(|e| e.id));
            if send.is_empty() {
                continue;
            }
            let groups: Vec<(String, Option<String>)> = send
                .iter()
                .map(|e| (e.id.clone(), e.group_id.clone()))
                .collect();
            let result = self.send_with_retry(run, queue_url, send).await;
            let mut held = run.held_groups.lock().unwrap_or_else(|e| e.into_inner());
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

    /// One batch, retrying the whole call or its retryable failed entries.
    pub(super) async fn send_with_retry(
        &self,
        run: &Run<'_>,
        queue_url: &str,
        mut batch: Vec<SendEntry>,
    ) -> Sent {
        let mut sent = Sent::default();
        let end = run.calls_end;
        for attempt in 0..self.settings.retry_attempts.max(1) {
            if attempt > 0 && !self.pause_before_retry(end, attempt).await {
                break;
            }
            match self
                .bounded(
                    end,
                    "SendMessageBatch",
                    self.queue.send_batch(queue_url, &batch),
                )
                .await
            {
                Ok(outcome) => {
                    let retry: HashSet<String> = retryable_ids(&outcome.failed);
                    log_entry_failures("SendMessageBatch", queue_url, &outcome);
                    for f in outcome.failed.into_iter().filter(|f| f.sender_fault) {
                        if let Some(pos) = batch.iter().position(|e| e.id == f.id) {
                            sent.rejected.push((batch.swap_remove(pos), f));
                        }
                    }
                    sent.acked.extend(outcome.succeeded);
                    batch.retain(|e| retry.contains(&e.id));
                }
                Err(e) => {
                    tracing::warn!(error = %e, queue = queue_url, entries = batch.len(), "SendMessageBatch failed");
                    if !e.retryable {
                        break;
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
        }
        sent
    }

    /// The isolation of a message whose copy the source keeps rejecting: `decide`'s own
    /// isolation (stamp, FIFO ids, the poison queue's size limit), with reason `send-rejected`.
    pub(super) fn isolate_send_rejected(&self, message: &ReceivedMessage<'_>) -> Decision {
        let policy = Policy {
            max_attempts: 0,
            ..self.policy()
        };
        let now = (self.clock)();
        let decision = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            decide(message, &policy, now, &mut *rng)
        };
        let Decision::Isolate(mut plan) = decision else {
            return decision;
        };
        plan.reason = IsolationReason::SendRejected;
        plan.meta.reason = Some(IsolationReason::SendRejected);
        if plan.stamped {
            let mut attributes = message.attributes.clone();
            plan.meta.write_into(&mut attributes);
            if attributes.len() <= MAX_ATTRIBUTES
                && message_size(message.body, &attributes) <= policy.poison_max_bytes
            {
                plan.attributes = attributes;
            } else {
                plan.stamped = false;
                plan.attributes = message.attributes.clone();
            }
        }
        Decision::Isolate(plan)
    }

    /// Deletes from the DLQ; returns the ids deleted.
    pub(super) async fn delete_all(
        &self,
        run: &Run<'_>,
        mut entries: Vec<HandleEntry>,
    ) -> HashSet<String> {
        let mut deleted = HashSet::new();
        let dlq = self.config.dlq_url.as_str();
        let end = run.calls_end;
        for attempt in 0..self.settings.retry_attempts.max(1) {
            if entries.is_empty() {
                break;
            }
            if attempt > 0 && !self.pause_before_retry(end, attempt).await {
                break;
            }
            match self
                .bounded(
                    end,
                    "DeleteMessageBatch",
                    self.queue.delete_batch(dlq, &entries),
                )
                .await
            {
                Ok(outcome) => {
                    log_entry_failures("DeleteMessageBatch", dlq, &outcome);
                    let retry = retryable_ids(&outcome.failed);
                    deleted.extend(outcome.succeeded);
                    entries.retain(|e| retry.contains(&e.id));
                }
                Err(e) => {
                    tracing::warn!(error = %e, entries = entries.len(), "DeleteMessageBatch failed");
                    if !e.retryable {
                        break;
                    }
                }
            }
        }
        deleted
    }

    /// Dry run: make every held message visible again at once.
    pub(super) async fn release(&self, run: &Run<'_>, held: Vec<HandleEntry>) {
        let dlq = self.config.dlq_url.as_str();
        let end = run.calls_end;
        for chunk in held.chunks(10) {
            let entries: Vec<HandleEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, e)| HandleEntry {
                    id: i.to_string(),
                    receipt_handle: e.receipt_handle.clone(),
                })
                .collect();
            match self
                .retry(end, || {
                    self.bounded(
                        end,
                        "ChangeMessageVisibilityBatch",
                        self.queue.change_visibility_batch(dlq, &entries, 0),
                    )
                })
                .await
            {
                Ok(o) => log_entry_failures("ChangeMessageVisibilityBatch", dlq, &o),
                Err(e) => {
                    tracing::warn!(error = %e, "releasing dry-run messages failed; they reappear after their visibility timeout")
                }
            }
        }
    }

    pub(super) fn retry_delay(&self, attempt: u32) -> Duration {
        self.settings.retry_base * 2u32.saturating_pow(attempt.saturating_sub(1))
    }

    /// Sleeps before retry `attempt`; false when that would end past `end`.
    pub(super) async fn pause_before_retry(&self, end: Option<Instant>, attempt: u32) -> bool {
        let delay = self.retry_delay(attempt);
        if end.is_some_and(|e| Instant::now() + delay >= e) {
            return false;
        }
        tokio::time::sleep(delay).await;
        true
    }

    /// Retries a whole call while it fails in a retryable way and there is time left.
    pub(super) async fn retry<T, F, Fut>(
        &self,
        end: Option<Instant>,
        mut call: F,
    ) -> Result<T, PortError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, PortError>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if e.retryable && attempt + 1 < self.settings.retry_attempts => {
                    attempt += 1;
                    tracing::warn!(error = %e, attempt, "retrying");
                    if !self.pause_before_retry(end, attempt).await {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One port call, given at most `call_timeout` and never past `end`: a stalled call fails
    /// as a retryable `Timeout` instead of outliving the deadline (and the visibility timeout
    /// of the messages it carries).
    pub(super) async fn bounded<T>(
        &self,
        end: Option<Instant>,
        operation: &'static str,
        call: impl Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        let budget = end.map_or(self.settings.call_timeout, |e| {
            self.settings
                .call_timeout
                .min(e.saturating_duration_since(Instant::now()))
        });
        match tokio::time::timeout(budget, call).await {
            Ok(result) => result,
            Err(_) => Err(PortError {
                operation,
                code: "Timeout".into(),
                message: format!("no answer within {} ms", budget.as_millis()),
                retryable: true,
            }),
        }
    }
}

pub(super) fn entry_size(e: &SendEntry) -> usize {
    redrive_shared::attributes::message_size(&e.body, &e.attributes)
}

pub(super) fn retryable_ids(failed: &[EntryFailure]) -> HashSet<String> {
    failed
        .iter()
        .filter(|f| !f.sender_fault)
        .map(|f| f.id.clone())
        .collect()
}

pub(super) fn log_entry_failures(operation: &str, queue_url: &str, outcome: &BatchOutcome) {
    for f in &outcome.failed {
        tracing::warn!(operation, queue = queue_url, entry = %f.id, code = %f.code, error = %f.message, sender_fault = f.sender_fault, "batch entry failed");
    }
}
