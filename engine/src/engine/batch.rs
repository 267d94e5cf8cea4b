//! One received batch, decided, as steps over one value: plan the sends, send the copies (to
//! the source, the poison queue, or back to the DLQ to go on waiting), handle the source's
//! rejections (`rejected.rs`), delete from the DLQ exactly the originals whose copy was
//! acknowledged, and settle each message's [`Action`]: counted, logged and, when the request
//! asks, recorded.

use std::collections::HashSet;

use futures_util::future::join3;
use redrive_shared::Attributes;
use redrive_shared::decision::Decision;
use redrive_shared::limits::Outgoing;

use super::Engine;
use super::action::{self, Action, Move};
use super::calls::Sent;
use super::destinations::Route;
use super::drain::Drain;
use crate::circuit::CircuitStore;
use crate::ports::{Alarms, HandleEntry, Metrics, Queue, Received, SendEntry};

/// Deletes of one batch: the first, and those of messages received again meanwhile.
const MAX_DELETE_PASSES: usize = 3;

/// One message of a batch; its position in the batch is its entry id in every call.
pub(super) struct Item {
    pub(super) message_id: String,
    pub(super) receipt_handle: String,
    pub(super) decision: Decision,
    pub(super) attributes: Attributes,
    pub(super) group_id: Option<String>,
    pub(super) receive_count: u32,
}

/// A decided batch and its copies, by destination.
pub(super) struct Batch {
    pub(super) items: Vec<Item>,
    to_source: Vec<SendEntry>,
    to_poison: Vec<SendEntry>,
    to_dlq: Vec<SendEntry>,
}

/// What the first sends came to, by destination.
pub(super) struct Sends {
    pub(super) source: Sent,
    pub(super) poison: Sent,
    pub(super) waits: Sent,
}

/// The entry ids whose copy a destination acknowledged, by what the copy was; and those held
/// back unsent (FIFO).
#[derive(Debug, Default)]
pub(super) struct Acknowledged {
    /// Copied to the source or the poison queue.
    pub(super) copied: HashSet<String>,
    /// Sent back to the DLQ with their count of the source's rejections.
    pub(super) requeued: HashSet<String>,
    /// Sent back to the DLQ to go on waiting.
    pub(super) waited: HashSet<String>,
    pub(super) held: HashSet<String>,
}

impl Acknowledged {
    /// The original may go: its copy was acknowledged somewhere.
    fn any(&self, id: &str) -> bool {
        self.copied.contains(id) || self.requeued.contains(id) || self.waited.contains(id)
    }
}

impl Batch {
    /// Step 1: each message's copy, planned by its decision.
    fn plan(decided: Vec<(Received, Decision)>) -> Self {
        let mut batch = Batch {
            items: Vec::with_capacity(decided.len()),
            to_source: Vec::new(),
            to_poison: Vec::new(),
            to_dlq: Vec::new(),
        };
        for (i, (m, d)) in decided.into_iter().enumerate() {
            let entry = SendEntry {
                id: i.to_string(),
                message: Outgoing {
                    body: m.body,
                    attributes: d.attributes().clone(),
                    delay_seconds: d.delay_seconds(),
                    group_id: d.group_id().map(str::to_string),
                    dedup_id: d.dedup_id().map(str::to_string),
                    // The producer's trace follows the message to wherever its copy goes.
                    trace_header: m.trace_header,
                },
            };
            match Move::of(&d) {
                Move::Redrive => batch.to_source.push(entry),
                Move::Isolate => batch.to_poison.push(entry),
                Move::Wait => batch.to_dlq.push(entry),
            }
            batch.items.push(Item {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle,
                decision: d,
                attributes: m.attributes,
                group_id: m.group_id,
                receive_count: m.receive_count,
            });
        }
        batch
    }

    /// The action of entry `id`, from what its sends and its delete came to.
    fn action_of(&self, i: usize, acked: &Acknowledged, deleted: &HashSet<String>) -> Action {
        let id = i.to_string();
        let gone = deleted.contains(&id);
        if gone && acked.requeued.contains(&id) {
            Action::Requeued
        } else if gone && acked.waited.contains(&id) {
            Action::Waiting
        } else if gone {
            match &self.items[i].decision {
                Decision::Redrive(_) => Action::Redriven,
                Decision::Isolate(p) => Action::Isolated(p.reason.clone()),
                Decision::Wait(_) => Action::Waiting,
            }
        } else if acked.any(&id) {
            Action::DeleteFailed
        } else if acked.held.contains(&id) {
            Action::HeldForOrder
        } else {
            Action::SendFailed
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Handles one decided batch bound for `route` (`None`: messages whose source is unknown,
    /// all of them isolated).
    pub(super) async fn process_decided(
        &self,
        drain: &Drain<'_>,
        route: Option<&Route>,
        decided: Vec<(Received, Decision)>,
        dry_run: bool,
    ) {
        if dry_run {
            self.plan_only(drain, route, decided);
            return;
        }
        // A source that refused this run's sends is not tried again in this run: its copies
        // stay on the DLQ (isolations and waits of the same batch go on).
        let decided = match route {
            Some(r) if drain.ungranted(&r.url) => {
                let (left, rest): (Vec<_>, Vec<_>) = decided
                    .into_iter()
                    .partition(|(_, d)| matches!(d, Decision::Redrive(_)));
                let mut entries = Vec::with_capacity(left.len());
                for (m, d) in left {
                    self.settle_one(drain, route, &m.message_id, &d, &Action::Ungranted);
                    entries.push(HandleEntry {
                        id: m.message_id,
                        receipt_handle: m.receipt_handle,
                    });
                }
                drain.leave_ungranted(entries);
                rest
            }
            _ => decided,
        };
        if decided.is_empty() {
            return;
        }
        let mut batch = Batch::plan(decided);
        let mut sends = self.send(drain, route, &mut batch).await;
        let ungranted = Self::refused_by_source(drain, route, &mut sends);
        let acked = self
            .handle_rejections(drain, route, &mut batch, sends)
            .await;
        let deleted = self.delete_acknowledged(drain, &batch, &acked).await;
        self.settle(drain, route, &batch, &acked, &deleted, &ungranted);
    }

    /// When a protected DLQ's source refused the sender itself (AccessDenied, its KMS key: a
    /// source added after the deploy, which the role does not name yet), the entries of the
    /// copies it did not take, which are left on the DLQ; the source is marked for the rest of
    /// the run and named in an ERROR log, once per run. A configured source (`SOURCE_QUEUE_URL`,
    /// granted by its own stack) that refuses is a send failure as ever: `RedriveFailures`
    /// pages.
    fn refused_by_source(
        drain: &Drain<'_>,
        route: Option<&Route>,
        sends: &mut Sends,
    ) -> HashSet<String> {
        let Some(route) = route.filter(|r| r.arn.is_some()) else {
            return HashSet::new();
        };
        let Some(e) = sends.source.denied.take() else {
            return HashSet::new();
        };
        let ids: HashSet<String> = sends
            .source
            .failed
            .drain()
            .map(|(id, _)| id)
            .chain(sends.source.held.drain(..))
            .collect();
        if drain.deny(&route.url) {
            tracing::error!(
                source = %route.url,
                source_arn = route.arn.as_deref().unwrap_or_default(),
                code = %e.code,
                error = %e,
                reason = "ungranted-source",
                action = "left-alone:ungranted-source",
                "the re-driver may not send to this source (its role or the queue's KMS key does not grant it: a source added after the deploy?): its messages stay on the DLQ untouched and the other sources are drained; DlqLeftAlone is published; make deploy grants it"
            );
        }
        ids
    }

    /// A dry run: each message's plan, counted and logged; the message held until the end.
    fn plan_only(
        &self,
        drain: &Drain<'_>,
        route: Option<&Route>,
        decided: Vec<(Received, Decision)>,
    ) {
        let mut held = Vec::with_capacity(decided.len());
        for (i, (m, d)) in decided.into_iter().enumerate() {
            let action = Action::Plan(Move::of(&d), d.action());
            self.settle_one(drain, route, &m.message_id, &d, &action);
            held.push(HandleEntry {
                id: i.to_string(),
                receipt_handle: m.receipt_handle,
            });
        }
        drain.hold(held);
    }

    /// Step 2: the copies, to the source, the poison queue and (waits) the DLQ.
    async fn send(&self, drain: &Drain<'_>, route: Option<&Route>, batch: &mut Batch) -> Sends {
        let source_url = route.map_or("", |r| r.url.as_str());
        let poison_url = self.config.poison_queue_url.as_str();
        let calls = self.calls(drain.calls_end);
        let to_source = std::mem::take(&mut batch.to_source);
        let to_poison = std::mem::take(&mut batch.to_poison);
        let to_dlq = std::mem::take(&mut batch.to_dlq);
        if self.fifo() {
            let held_groups = &drain.held_groups;
            let source = calls
                .send_fifo(&self.queue, source_url, to_source, held_groups)
                .await;
            let poison = calls
                .send_fifo(&self.queue, poison_url, to_poison, held_groups)
                .await;
            return Sends {
                source,
                poison,
                waits: Sent::default(),
            };
        }
        let (source, poison, waits) = join3(
            calls.send_all(&self.queue, source_url, to_source),
            calls.send_all(&self.queue, poison_url, to_poison),
            // A waiting message goes back to the DLQ; one the DLQ does not take stays where
            // it is, received again when its visibility lapses.
            calls.send_all(&self.queue, self.config.dlq_url.as_str(), to_dlq),
        )
        .await;
        Sends {
            source,
            poison,
            waits,
        }
    }

    /// Step 4: delete only what a destination acknowledged, each with its latest receipt
    /// handle (a message received again meanwhile has a new one, and a delete with an older
    /// one deletes nothing); the ids deleted.
    async fn delete_acknowledged(
        &self,
        drain: &Drain<'_>,
        batch: &Batch,
        acked: &Acknowledged,
    ) -> HashSet<String> {
        let mut pending: Vec<(usize, String)> = batch
            .items
            .iter()
            .enumerate()
            .filter(|(i, _)| acked.any(&i.to_string()))
            .map(|(i, item)| {
                (
                    i,
                    drain.latest_handle(&item.message_id, &item.receipt_handle),
                )
            })
            .collect();
        let mut deleted = HashSet::new();
        // A message received again while its delete was on the way: again, with that handle.
        for _ in 0..MAX_DELETE_PASSES {
            if pending.is_empty() {
                break;
            }
            let entries = pending
                .iter()
                .map(|(i, handle)| HandleEntry {
                    id: i.to_string(),
                    receipt_handle: handle.clone(),
                })
                .collect();
            let ok = self.delete_from_dlq(drain, entries).await;
            pending = pending
                .into_iter()
                .filter(|(i, _)| ok.contains(&i.to_string()))
                .filter_map(|(i, used)| {
                    let latest = drain.latest_handle(&batch.items[i].message_id, &used);
                    (latest != used).then_some((i, latest))
                })
                .collect();
            deleted.extend(ok);
        }
        deleted
    }

    /// Step 5: each message's action, counted, logged and recorded.
    fn settle(
        &self,
        drain: &Drain<'_>,
        route: Option<&Route>,
        batch: &Batch,
        acked: &Acknowledged,
        deleted: &HashSet<String>,
        ungranted: &HashSet<String>,
    ) {
        let mut left = Vec::new();
        for (i, item) in batch.items.iter().enumerate() {
            if ungranted.contains(&i.to_string()) {
                // Still claimed: a receive of it again in this run does not try it again.
                self.settle_one(
                    drain,
                    route,
                    &item.message_id,
                    &item.decision,
                    &Action::Ungranted,
                );
                left.push(HandleEntry {
                    id: item.message_id.clone(),
                    receipt_handle: drain.latest_handle(&item.message_id, &item.receipt_handle),
                });
                continue;
            }
            drain.settled(&item.message_id, acked.any(&i.to_string()));
            let action = batch.action_of(i, acked, deleted);
            self.settle_one(drain, route, &item.message_id, &item.decision, &action);
        }
        if !left.is_empty() {
            drain.leave_ungranted(left);
        }
    }

    fn settle_one(
        &self,
        drain: &Drain<'_>,
        route: Option<&Route>,
        message_id: &str,
        d: &Decision,
        action: &Action,
    ) {
        action::log(message_id, d, action);
        if drain.is_hop(d) {
            // Counted, and logged, but no record each: a round's answer stays bounded however
            // many hops it sends on (the wait's start has its record).
            drain.tally.count_hop(action);
            return;
        }
        drain.tally.count(action);
        if drain.keeps_records() {
            drain.record(action::record(
                route,
                self.config.poison_queue_url.name(),
                self.config.dlq_url.name(),
                message_id,
                d,
                action,
            ));
        }
    }
}
