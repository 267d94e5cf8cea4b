//! The SQS operations applied at once, on the fake's state.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use redrive_shared::limits::{
    MAX_BATCH_BYTES, MAX_BATCH_ENTRIES, MAX_VISIBILITY_SECONDS, Outgoing, is_fifo,
};
use tokio::time::Instant;

use super::{FakeMessage, FakeSqs, fifo_candidates, invalid};
use crate::ports::{
    BatchOutcome, Depth, EntryFailure, HandleEntry, PortError, Received, SendEntry,
};

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
        let again = s.redeliver > 0 && !is_fifo(queue_url);
        let (mut chosen, in_flight): (Vec<usize>, Vec<usize>) = {
            let q = s
                .queue(queue_url)
                .ok_or_else(|| invalid("ReceiveMessage", format!("no queue {queue_url}")))?;
            let q: &VecDeque<FakeMessage> = q;
            if is_fifo(queue_url) {
                (fifo_candidates(q, now), Vec::new())
            } else {
                let in_flight = (0..q.len())
                    .filter(|&i| again && q[i].visible_at > now && q[i].receipt.is_some())
                    .collect();
                let visible = (0..q.len()).filter(|&i| q[i].visible_at <= now).collect();
                (visible, in_flight)
            }
        };
        if !in_flight.is_empty() {
            // Delivered again although in flight (see [`FakeSqs::redeliver_in_flight`]).
            s.redeliver -= 1;
            chosen.extend(in_flight);
        }
        let mut max = max;
        if let Some(&limit) = s.in_flight_limits.get(queue_url) {
            let in_flight = s.queues.get(queue_url).map_or(0, |q| {
                q.iter()
                    .filter(|m| m.visible_at > now && m.received_at.is_some())
                    .count()
            });
            if in_flight >= limit {
                if is_fifo(queue_url) {
                    return Ok(Vec::new());
                }
                return Err(PortError::new(
                    "ReceiveMessage",
                    "OverLimit",
                    format!("the queue has {in_flight} messages in flight, its limit"),
                    false,
                ));
            }
            max = max.min(limit - in_flight);
        }
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
                dead_letter_source_arn: m.dead_letter_source_arn.clone(),
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
                m.dead_letter_source_arn = Some(super::queue_arn(queue_url));
                gone.push(m);
            }
            gone.reverse();
            s.next_expiry.remove(&dlq);
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
            e.message
                .validate(fifo)
                .map_err(|err| invalid("SendMessageBatch", format!("entry {}: {err}", e.id)))?;
            total += e.message.size();
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
            let size =
                redrive_shared::attributes::message_size(&e.message.body, &e.message.attributes);
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
            if let Some(d) = &e.message.dedup_id
                && !s.dedup.insert((queue_url.to_string(), d.clone()))
            {
                outcome.succeeded.push(e.id.clone());
                continue;
            }
            ids.push(s.store(
                queue_url,
                &e.message.body,
                e.message.attributes.clone(),
                e.message.group_id.clone(),
                e.message.delay_seconds,
                e.message.trace_header.clone(),
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
            message: message.clone(),
        };
        let (outcome, ids) = self.send_stored(queue_url, std::slice::from_ref(&entry))?;
        if let Some(f) = outcome.failed.into_iter().next() {
            return Err(PortError::new(
                "SendMessage",
                f.code,
                f.message,
                !f.sender_fault,
            ));
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
            let pos = position_of(q, &e.receipt_handle);
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
            match position_of(q, &e.receipt_handle).map(|i| &mut q[i]) {
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

/// The position of the message whose latest receipt handle is `handle`. A handle names its
/// message (`rh-<MessageId>-<n>`), and a queue whose messages were only ever sent to it is in
/// MessageId order: a binary search finds it there, checked, before the walk over the queue
/// that finds it anywhere (a queue of 100,000 messages is released in 10,000 batches).
fn position_of(q: &VecDeque<FakeMessage>, handle: &str) -> Option<usize> {
    let holds = |m: &FakeMessage| m.receipt.as_deref() == Some(handle);
    let id = handle
        .strip_prefix("rh-")
        .and_then(|rest| rest.rsplit_once('-'))
        .map(|(id, _)| id);
    if let Some(id) = id
        && let Ok(i) = q.binary_search_by(|m| m.message_id.as_str().cmp(id))
        && holds(&q[i])
    {
        return Some(i);
    }
    q.iter().position(holds)
}

fn stale(id: &str) -> EntryFailure {
    EntryFailure {
        id: id.to_string(),
        code: "ReceiptHandleIsInvalid".into(),
        message: "stale receipt handle".into(),
        sender_fault: true,
    }
}
