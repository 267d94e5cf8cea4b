//! One received batch, decided: the copies sent (to the source, the poison queue, or back to
//! the DLQ to go on waiting), a copy the source keeps rejecting isolated `send-rejected`, the
//! originals deleted from the DLQ exactly when their copy was acknowledged, and each message's
//! outcome counted, logged and, when the request asks, recorded.

use super::*;

/// A message whose copy the source rejects as the sender's fault (not throttling, not a 5xx)
/// is isolated `send-rejected` at this rejection, instead of looping until retention.
///
/// The count is the re-driver's own: each rejection before that sends the message back to
/// the DLQ with the count in its `x-redrive` ([`SEND_REJECTIONS_FIELD`]) and deletes the
/// original once that copy is acknowledged. `ApproximateReceiveCount` is no measure: every
/// sweep, search or peek of the DLQ raises it. A FIFO DLQ keeps the receive count, since a copy
/// sent back would go behind the later messages of its group.
pub const SEND_REJECTED_AFTER: u32 = 3;

/// The `x-redrive` field (a number) counting the source's rejections of the message's copies.
pub const SEND_REJECTIONS_FIELD: &str = "sendRejections";

/// What happened to one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    SendFailed,
    DeleteFailed,
    /// FIFO: not sent because an earlier message of its group failed in this invocation.
    HeldForOrder,
    /// Rejected by the source: sent back to the DLQ with its count of rejections.
    Requeued,
    /// Sent back to the DLQ to go on waiting.
    Waiting,
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    pub(super) async fn process_decided(
        &self,
        run: &Run<'_>,
        route: Option<&Route>,
        decided: Vec<(Received, Decision)>,
        dry_run: bool,
    ) {
        if dry_run {
            let mut held = Vec::with_capacity(decided.len());
            for (i, (m, d)) in decided.into_iter().enumerate() {
                let action = format!("plan:{}", d.action());
                log_action(&m, &d, &action);
                self.record(run, route, &m.message_id, &d, &action);
                match d {
                    Decision::Redrive(_) => run.redriven.fetch_add(1, Ordering::SeqCst),
                    Decision::Isolate(_) => run.isolated.fetch_add(1, Ordering::SeqCst),
                    Decision::Wait(_) => run.waiting.fetch_add(1, Ordering::SeqCst),
                };
                held.push(HandleEntry {
                    id: i.to_string(),
                    receipt_handle: m.receipt_handle,
                });
            }
            run.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(held);
            return;
        }

        // Entry ids are the positions in this received batch.
        let mut to_source = Vec::new();
        let mut to_poison = Vec::new();
        let mut to_dlq = Vec::new();
        let mut meta = Vec::with_capacity(decided.len());
        let mut received = Vec::with_capacity(decided.len());
        for (i, (m, d)) in decided.into_iter().enumerate() {
            let entry = SendEntry {
                id: i.to_string(),
                body: m.body,
                attributes: d.attributes().clone(),
                delay_seconds: d.delay_seconds(),
                group_id: d.group_id().map(str::to_string),
                dedup_id: d.dedup_id().map(str::to_string),
                // The producer's trace follows the message to wherever its copy goes.
                trace_header: m.trace_header,
            };
            match d {
                Decision::Redrive(_) => to_source.push(entry),
                Decision::Isolate(_) => to_poison.push(entry),
                Decision::Wait(_) => to_dlq.push(entry),
            }
            meta.push((m.message_id, m.receipt_handle, d));
            received.push((m.attributes, m.group_id, m.receive_count));
        }

        let fifo = self.fifo();
        // No route: messages whose source is unknown, all of them isolated.
        let source_url = route.map_or("", |r| r.url.as_str());
        let poison_url = self.config.poison_queue_url.as_str();
        let (mut source, mut poison, waits) = if fifo {
            let s = self.send_fifo(run, source_url, to_source).await;
            let p = self.send_fifo(run, poison_url, to_poison).await;
            (s, p, transfer::Sent::default())
        } else {
            futures_util::future::join3(
                self.send_all(run, source_url, to_source),
                self.send_all(run, poison_url, to_poison),
                // A waiting message goes back to the DLQ; one the DLQ does not take stays
                // where it is, received again when its visibility lapses.
                self.send_all(run, self.config.dlq_url.as_str(), to_dlq),
            )
            .await
        };
        let waited: HashSet<String> = waits.acked.into_iter().collect();

        // A copy the source keeps rejecting as the sender's fault (a queue smaller than it
        // says, an attribute SQS refuses) would loop until retention: at its
        // SEND_REJECTED_AFTER-th rejection it is isolated `send-rejected` instead, and before
        // that it goes back to the DLQ carrying the count.
        let dlq_fifo = self.config.dlq_url.is_fifo();
        let mut second = Vec::new();
        let mut requeue = Vec::new();
        for (entry, failure) in std::mem::take(&mut source.rejected) {
            let Ok(i) = entry.id.parse::<usize>() else {
                continue;
            };
            let (attributes, group_id, receive_count) = &received[i];
            let message_id = meta[i].0.clone();
            let (mut history, _) = RedriveMeta::read(attributes, &message_id);
            let rejections = history
                .extra
                .get(SEND_REJECTIONS_FIELD)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                + 1;
            let count = if dlq_fifo {
                u64::from(*receive_count)
            } else {
                rejections
            };
            if count < u64::from(SEND_REJECTED_AFTER) {
                if dlq_fifo {
                    tracing::warn!(message_id = %message_id, code = %failure.code, error = %failure.message, receive_count, action = "send-rejected:left-on-dlq", "the source queue rejected the copy; isolated if it keeps doing so");
                    continue;
                }
                tracing::warn!(message_id = %message_id, code = %failure.code, error = %failure.message, rejections, action = "send-rejected:requeued-on-dlq", "the source queue rejected the copy; back on the DLQ with the count, isolated if it keeps doing so");
                history
                    .extra
                    .insert(SEND_REJECTIONS_FIELD.to_string(), rejections.into());
                if let Some(arn) = route.and_then(|r| r.arn.as_deref()) {
                    // Back on the DLQ without DeadLetterQueueSourceArn: the source goes along.
                    history.set_source(arn);
                }
                let mut counted = attributes.clone();
                history.write_into(&mut counted);
                requeue.push(SendEntry {
                    id: entry.id,
                    body: entry.body,
                    attributes: counted,
                    // Hidden as long as the original would have stayed in flight, so that
                    // this drain does not take it up again at once.
                    delay_seconds: Some(
                        self.settings
                            .visibility_seconds
                            .clamp(0, MAX_DELAY_SECONDS as i32) as u32,
                    ),
                    group_id: group_id.clone(),
                    dedup_id: None,
                    trace_header: entry.trace_header,
                });
                continue;
            }
            let view = ReceivedMessage {
                message_id: &message_id,
                body: &entry.body,
                attributes,
                group_id: group_id.as_deref(),
            };
            let decision = self.isolate_send_rejected(&view, route);
            tracing::warn!(message_id = %message_id, code = %failure.code, error = %failure.message, receive_count, rejections, action = "isolate:send-rejected", "the source queue keeps rejecting the copy as the sender's fault");
            second.push(SendEntry {
                id: entry.id,
                body: entry.body,
                attributes: decision.attributes().clone(),
                delay_seconds: None,
                group_id: decision.group_id().map(str::to_string),
                dedup_id: decision.dedup_id().map(str::to_string),
                trace_header: entry.trace_header,
            });
            meta[i].2 = decision;
        }
        // The count's copies; one the DLQ refuses leaves the original where it is.
        let requeued: HashSet<String> = self
            .send_all(run, self.config.dlq_url.as_str(), requeue)
            .await
            .acked
            .into_iter()
            .collect();
        if !second.is_empty() {
            // Straight to the poison queue, in FIFO batches where needed: the group was held
            // back from the source for this invocation, which does not apply to the isolation.
            let batches = if fifo {
                split_fifo_batches(second, entry_size, |e| e.group_id.as_deref())
            } else {
                split_batches(second, entry_size)
            };
            for batch in batches {
                let calls = self.calls(run.calls_end);
                poison.merge(calls.send_batch(&self.queue, poison_url, batch).await);
            }
        }
        source.merge(poison);
        for (entry, failure) in &source.rejected {
            let message_id = entry
                .id
                .parse::<usize>()
                .ok()
                .and_then(|i| meta.get(i))
                .map_or("?", |m| m.0.as_str());
            tracing::error!(message_id = %message_id, code = %failure.code, error = %failure.message, action = "unplaceable:left-on-dlq", "the poison queue rejects this message too: it stays on the DLQ for a human");
            run.unplaceable.fetch_add(1, Ordering::SeqCst);
        }
        let acked: HashSet<String> = source.acked.into_iter().collect();
        let held: HashSet<String> = source.held.into_iter().collect();

        // Delete only what the destination acknowledged.
        let deletes: Vec<HandleEntry> = meta
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let id = i.to_string();
                acked.contains(&id) || requeued.contains(&id) || waited.contains(&id)
            })
            .map(|(i, (_, handle, _))| HandleEntry {
                id: i.to_string(),
                receipt_handle: handle.clone(),
            })
            .collect();
        let deleted = self.delete_all(run, deletes).await;

        for (i, (message_id, _, decision)) in meta.iter().enumerate() {
            let id = i.to_string();
            let outcome = if deleted.contains(&id) && requeued.contains(&id) {
                Outcome::Requeued
            } else if deleted.contains(&id) && waited.contains(&id) {
                Outcome::Waiting
            } else if deleted.contains(&id) {
                Outcome::Done
            } else if acked.contains(&id) || requeued.contains(&id) || waited.contains(&id) {
                Outcome::DeleteFailed
            } else if held.contains(&id) {
                Outcome::HeldForOrder
            } else {
                Outcome::SendFailed
            };
            let action = match (outcome, decision) {
                (Outcome::Done, Decision::Redrive(_)) => {
                    run.redriven.fetch_add(1, Ordering::SeqCst);
                    "redriven".to_string()
                }
                (Outcome::Done, Decision::Isolate(p)) => {
                    run.isolated.fetch_add(1, Ordering::SeqCst);
                    format!("isolated:{}", p.reason)
                }
                (Outcome::SendFailed, _) => {
                    run.failed.fetch_add(1, Ordering::SeqCst);
                    "send-failed:left-on-dlq".to_string()
                }
                (Outcome::DeleteFailed, _) => {
                    run.failed.fetch_add(1, Ordering::SeqCst);
                    "delete-failed:duplicate-possible".to_string()
                }
                (Outcome::HeldForOrder, _) => {
                    run.failed.fetch_add(1, Ordering::SeqCst);
                    "held:group-order".to_string()
                }
                (Outcome::Requeued, _) => {
                    run.failed.fetch_add(1, Ordering::SeqCst);
                    "send-rejected:requeued-on-dlq".to_string()
                }
                (Outcome::Waiting, _) | (Outcome::Done, Decision::Wait(_)) => {
                    run.waiting.fetch_add(1, Ordering::SeqCst);
                    "waiting".to_string()
                }
            };
            log_decided(message_id, decision, &action);
            self.record(run, route, message_id, decision, &action);
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Keeps the message's record when the run keeps records.
    fn record(
        &self,
        run: &Run<'_>,
        route: Option<&Route>,
        message_id: &str,
        d: &Decision,
        action: &str,
    ) {
        let Some(records) = &run.records else {
            return;
        };
        let meta = d.meta();
        let destination = match d {
            Decision::Redrive(_) => route.map_or("", |r| {
                redrive_shared::source::url_account_and_name(&r.url).map_or(&r.url, |(_, n)| n)
            }),
            Decision::Isolate(_) => self.config.poison_queue_url.name(),
            Decision::Wait(_) => self.config.dlq_url.name(),
        };
        let not_before = match d {
            Decision::Wait(w) => Some(redrive_shared::timefmt::rfc3339_from_millis(
                w.not_before_ms,
            )),
            _ => None,
        };
        records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(MessageRecord {
                message_id: message_id.to_string(),
                original_message_id: meta.original_message_id.clone(),
                attempt: meta.attempt,
                outcome: action.to_string(),
                destination: destination.to_string(),
                delay_seconds: d.delay_seconds(),
                not_before,
            });
    }
}

fn log_action(m: &Received, d: &Decision, action: &str) {
    log_decided(&m.message_id, d, action);
}

fn log_decided(message_id: &str, d: &Decision, action: &str) {
    let meta = d.meta();
    tracing::info!(
        message_id = %message_id,
        original_message_id = %meta.original_message_id,
        attempt = meta.attempt,
        delay_seconds = d.delay_seconds(),
        action,
    );
}
