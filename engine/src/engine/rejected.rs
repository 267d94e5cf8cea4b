//! The source's rejections of a batch's copies: a copy the source keeps rejecting as the
//! sender's fault is isolated `send-rejected` instead of looping until retention; a message
//! neither the source nor the poison queue takes stays on the DLQ for a human.

use std::collections::HashSet;

use redrive_shared::decision::ReceivedMessage;
use redrive_shared::limits::{MAX_DELAY_SECONDS, Outgoing, split_batches, split_fifo_batches};
use redrive_shared::meta::RedriveMeta;

use super::Engine;
use super::batch::{Acknowledged, Batch, Sends};
use super::calls::entry_size;
use super::destinations::Route;
use super::drain::Drain;
use crate::circuit::CircuitStore;
use crate::ports::{Alarms, Metrics, Queue, SendEntry};

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

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Step 3: the source's rejections, each requeued on the DLQ with its count (or, at the
    /// [`SEND_REJECTED_AFTER`]-th, isolated `send-rejected`); what was acknowledged in all.
    pub(super) async fn handle_rejections(
        &self,
        drain: &Drain<'_>,
        route: Option<&Route>,
        batch: &mut Batch,
        sends: Sends,
    ) -> Acknowledged {
        let Sends {
            mut source,
            mut poison,
            waits,
        } = sends;
        let fifo = self.fifo();
        let poison_url = self.config.poison_queue_url.as_str();
        let dlq_fifo = self.config.dlq_url.is_fifo();
        let mut second = Vec::new();
        let mut requeue = Vec::new();
        for (entry, failure) in std::mem::take(&mut source.rejected) {
            let Ok(i) = entry.id.parse::<usize>() else {
                continue;
            };
            let item = &batch.items[i];
            let message_id = item.message_id.clone();
            let receive_count = item.receive_count;
            let (mut history, _) = RedriveMeta::read(&item.attributes, &message_id);
            let rejections = history
                .extra
                .get(SEND_REJECTIONS_FIELD)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                + 1;
            let count = if dlq_fifo {
                u64::from(receive_count)
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
                let mut counted = item.attributes.clone();
                history.write_into(&mut counted);
                requeue.push(SendEntry {
                    id: entry.id,
                    message: Outgoing {
                        body: entry.message.body,
                        attributes: counted,
                        // Hidden as long as the original would have stayed in flight, so that
                        // this drain does not take it up again at once.
                        delay_seconds: Some(
                            self.settings
                                .visibility_seconds
                                .clamp(0, MAX_DELAY_SECONDS as i32)
                                as u32,
                        ),
                        group_id: item.group_id.clone(),
                        dedup_id: None,
                        trace_header: entry.message.trace_header,
                    },
                });
                continue;
            }
            let view = ReceivedMessage {
                message_id: &message_id,
                body: &entry.message.body,
                attributes: &item.attributes,
                group_id: item.group_id.as_deref(),
            };
            let decision = self.isolate_send_rejected(&view, route);
            tracing::warn!(message_id = %message_id, code = %failure.code, error = %failure.message, receive_count, rejections, action = "isolate:send-rejected", "the source queue keeps rejecting the copy as the sender's fault");
            second.push(SendEntry {
                id: entry.id,
                message: Outgoing {
                    body: entry.message.body,
                    attributes: decision.attributes().clone(),
                    delay_seconds: None,
                    group_id: decision.group_id().map(str::to_string),
                    dedup_id: decision.dedup_id().map(str::to_string),
                    trace_header: entry.message.trace_header,
                },
            });
            batch.items[i].decision = decision;
        }
        let calls = self.calls(drain.calls_end);
        // The count's copies; one the DLQ refuses leaves the original where it is.
        let requeued: HashSet<String> = calls
            .send_all(&self.queue, self.config.dlq_url.as_str(), requeue)
            .await
            .acked
            .into_iter()
            .collect();
        if !second.is_empty() {
            // Straight to the poison queue, in FIFO batches where needed: the group was held
            // back from the source for this invocation, which does not apply to the isolation.
            let batches = if fifo {
                split_fifo_batches(second, entry_size, |e| e.message.group_id.as_deref())
            } else {
                split_batches(second, entry_size)
            };
            for b in batches {
                poison.merge(calls.send_batch(&self.queue, poison_url, b).await);
            }
        }
        source.merge(poison);
        for (entry, failure) in &source.rejected {
            let message_id = entry
                .id
                .parse::<usize>()
                .ok()
                .and_then(|i| batch.items.get(i))
                .map_or("?", |item| item.message_id.as_str());
            tracing::error!(message_id = %message_id, code = %failure.code, error = %failure.message, action = "unplaceable:left-on-dlq", "the poison queue rejects this message too: it stays on the DLQ for a human");
            drain.tally.unplaceable();
        }
        Acknowledged {
            copied: source.acked.into_iter().collect(),
            requeued,
            waited: waits.acked.into_iter().collect(),
            held: source.held.into_iter().collect(),
        }
    }
}
