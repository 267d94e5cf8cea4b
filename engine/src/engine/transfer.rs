//! Sending copies and deleting originals: valid batches, the FIFO hold of a group with a failed
//! entry, retries of failed entries, and deletes of exactly what the destination acknowledged.
//! One path for the drain and for [`Transfer`], the operator CLI's replay, import and discard.

use super::*;

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
}

impl Sent {
    pub(super) fn merge(&mut self, other: Sent) {
        self.acked.extend(other.acked);
        self.held.extend(other.held);
        self.rejected.extend(other.rejected);
        self.failed.extend(other.failed);
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
        let batches = split_fifo_batches(entries, entry_size, |e| e.group_id.as_deref());
        for batch in batches {
            let (send, hold) = held_groups
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
            let result = self.send_batch(queue, queue_url, send).await;
            let mut held = held_groups.lock().unwrap_or_else(|e| e.into_inner());
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
                    break;
                }
            };
            let retry: HashSet<String> = retryable_ids(&outcome.failed);
            log_entry_failures("SendMessageBatch", queue_url, &outcome);
            for f in outcome.failed.into_iter() {
                if f.sender_fault {
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

/// Per entry id: acknowledged, the error of its last try, or (FIFO) held back unsent because
/// an earlier entry of its group was not acknowledged.
#[derive(Debug, Default)]
pub struct Acks {
    pub ok: HashSet<String>,
    pub failed: HashMap<String, String>,
    pub held: HashSet<String>,
}

impl From<Sent> for Acks {
    fn from(sent: Sent) -> Self {
        let mut failed = sent.failed;
        for (entry, f) in sent.rejected {
            failed.insert(entry.id, format!("{}: {}", f.code, f.message));
        }
        Acks {
            ok: sent.acked.into_iter().collect(),
            failed,
            held: sent.held.into_iter().collect(),
        }
    }
}

/// What [`Transfer::send_then_delete`] came to: the sends, and the deletes of the originals
/// whose copy was acknowledged.
#[derive(Debug, Default)]
pub struct Moved {
    pub sent: Acks,
    pub deleted: Acks,
}

/// The drain's send and delete path for a caller outside a drain (the operator CLI's replay,
/// import, discard and export): valid batches, retries of failed entries, on a FIFO
/// destination one entry per group per batch and a group with an entry not acknowledged held
/// for the rest of the transfer, and deletes of exactly the originals whose copy was
/// acknowledged.
pub struct Transfer<'q, Q> {
    queue: &'q Q,
    settings: Settings,
    held_groups: Mutex<HeldGroups>,
}

impl<'q, Q: Queue> Transfer<'q, Q> {
    pub fn new(queue: &'q Q) -> Self {
        Self {
            queue,
            settings: Settings::default(),
            held_groups: Mutex::new(HeldGroups::default()),
        }
    }

    fn calls(&self) -> Calls<'_> {
        Calls {
            settings: &self.settings,
            end: None,
        }
    }

    /// FIFO: holds a group for the rest of the transfer (a message of it is left behind, so
    /// nothing later of the group may pass it).
    pub fn hold_group(&self, group: Option<&str>) {
        self.held_groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .hold(group);
    }

    /// Sends entries; `fifo` for a FIFO destination.
    pub async fn send(&self, url: &str, entries: Vec<SendEntry>, fifo: bool) -> Acks {
        let calls = self.calls();
        let sent = if fifo {
            calls
                .send_fifo(self.queue, url, entries, &self.held_groups)
                .await
        } else {
            calls.send_all(self.queue, url, entries).await
        };
        sent.into()
    }

    /// Deletes by receipt handle.
    pub async fn delete(&self, url: &str, entries: Vec<HandleEntry>) -> Acks {
        let queue = self.queue;
        self.calls()
            .by_handle("DeleteMessageBatch", url, entries, |batch| async move {
                queue.delete_batch(url, &batch).await
            })
            .await
    }

    /// Sets the visibility of held messages. SQS acknowledges an entry only while its handle
    /// is the message's latest and the message is in flight: a handle acknowledged here
    /// deletes its message for certain within the new timeout, whereas a delete with a stale
    /// handle is answered with success and deletes nothing.
    pub async fn hold(
        &self,
        url: &str,
        entries: Vec<HandleEntry>,
        visibility_seconds: i32,
    ) -> Acks {
        let queue = self.queue;
        self.calls()
            .by_handle(
                "ChangeMessageVisibilityBatch",
                url,
                entries,
                |batch| async move {
                    queue
                        .change_visibility_batch(url, &batch, visibility_seconds)
                        .await
                },
            )
            .await
    }

    /// Sends each entry to `to`, then deletes from `from` (by the receipt handle given with
    /// it) exactly the messages whose copy was acknowledged.
    pub async fn send_then_delete(
        &self,
        from: &str,
        to: &str,
        to_fifo: bool,
        entries: Vec<(SendEntry, String)>,
    ) -> Moved {
        let mut handles = HashMap::with_capacity(entries.len());
        let mut sends = Vec::with_capacity(entries.len());
        for (entry, handle) in entries {
            handles.insert(entry.id.clone(), handle);
            sends.push(entry);
        }
        let sent = self.send(to, sends, to_fifo).await;
        let deletes = handles
            .into_iter()
            .filter(|(id, _)| sent.ok.contains(id))
            .map(|(id, receipt_handle)| HandleEntry { id, receipt_handle })
            .collect();
        let deleted = self.delete(from, deletes).await;
        Moved { sent, deleted }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    pub(super) fn calls(&self, end: Option<Instant>) -> Calls<'_> {
        Calls {
            settings: &self.settings,
            end,
        }
    }

    /// [`Calls::send_all`] within the run's time.
    pub(super) async fn send_all(
        &self,
        run: &Run<'_>,
        queue_url: &str,
        entries: Vec<SendEntry>,
    ) -> Sent {
        self.calls(run.calls_end)
            .send_all(&self.queue, queue_url, entries)
            .await
    }

    /// [`Calls::send_fifo`] within the run's time, a group held for the rest of the run.
    pub(super) async fn send_fifo(
        &self,
        run: &Run<'_>,
        queue_url: &str,
        entries: Vec<SendEntry>,
    ) -> Sent {
        let held_groups = &run.held_groups;
        let calls = self.calls(run.calls_end);
        calls
            .send_fifo(&self.queue, queue_url, entries, held_groups)
            .await
    }

    /// The isolation of a message whose copy the source keeps rejecting: `decide`'s own
    /// isolation (stamp, FIFO ids, the poison queue's size limit), with reason `send-rejected`.
    pub(super) fn isolate_send_rejected(
        &self,
        message: &ReceivedMessage<'_>,
        route: Option<&Route>,
    ) -> Decision {
        let policy = Policy {
            max_attempts: 0,
            ..self.policy_for(route)
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
        entries: Vec<HandleEntry>,
    ) -> HashSet<String> {
        let dlq = self.config.dlq_url.as_str();
        let queue = &self.queue;
        self.calls(run.calls_end)
            .by_handle("DeleteMessageBatch", dlq, entries, |batch| async move {
                queue.delete_batch(dlq, &batch).await
            })
            .await
            .ok
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
                .bounded(
                    end,
                    "ChangeMessageVisibilityBatch",
                    self.queue.change_visibility_batch(dlq, &entries, 0),
                )
                .await
            {
                Ok(o) => log_entry_failures("ChangeMessageVisibilityBatch", dlq, &o),
                Err(e) => {
                    tracing::warn!(error = %e, "releasing dry-run messages failed; they reappear after their visibility timeout")
                }
            }
        }
    }

    /// One port call, given at most `call_timeout` and never past `end`.
    pub(super) async fn bounded<T>(
        &self,
        end: Option<Instant>,
        operation: &'static str,
        call: impl Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        self.calls(end).bounded(operation, call).await
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
