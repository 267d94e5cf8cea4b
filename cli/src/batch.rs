//! Batch sends and deletes that report, per message, what SQS acknowledged.

use std::collections::{HashMap, HashSet};

use redrive_shared::attributes::message_size;
use redrive_shared::limits::{HeldGroups, split_batches, split_fifo_batches};

use super::scan::retry;
use redrive_engine::ports::{HandleEntry, PortError, Queue, SendEntry};

/// Per entry id: acknowledged, the error of its last try, or (FIFO) held back unsent because
/// an earlier entry of its group was not acknowledged.
#[derive(Debug, Default)]
pub struct Acks {
    pub ok: HashSet<String>,
    pub failed: HashMap<String, String>,
    pub held: HashSet<String>,
}

/// Entries whose failure is worth another try (not the sender's fault) are retried twice.
const ENTRY_TRIES: usize = 3;

/// Sends in valid batches. With `order` (a FIFO destination) the batches are the engine's FIFO
/// batches, one entry per group each, and a group with an entry that was not acknowledged is
/// held for the rest of the run, so that a failed entry is never retried after a later entry
/// of its group went through.
pub async fn send<Q: Queue>(
    queue: &Q,
    url: &str,
    entries: Vec<SendEntry>,
    mut order: Option<&mut HeldGroups>,
) -> Acks {
    let mut acks = Acks::default();
    let size = |e: &SendEntry| message_size(&e.body, &e.attributes);
    let batches = if order.is_some() {
        split_fifo_batches(entries, size, |e| e.group_id.as_deref())
    } else {
        split_batches(entries, size)
    };
    for batch in batches {
        let batch = match order.as_deref() {
            Some(held) => {
                let (send, hold) = held.partition(batch, |e| e.group_id.as_deref());
                acks.held.extend(hold.into_iter().map(|e| e.id));
                send
            }
            None => batch,
        };
        if batch.is_empty() {
            continue;
        }
        let groups: Vec<(String, Option<String>)> = batch
            .iter()
            .map(|e| (e.id.clone(), e.group_id.clone()))
            .collect();
        send_one(queue, url, batch, &mut acks).await;
        if let Some(held) = order.as_deref_mut() {
            for (id, group) in groups {
                if !acks.ok.contains(&id) {
                    held.hold(group.as_deref());
                }
            }
        }
    }
    acks
}

/// One batch, its retryable failures retried.
async fn send_one<Q: Queue>(queue: &Q, url: &str, batch: Vec<SendEntry>, acks: &mut Acks) {
    let mut pending = batch;
    for _ in 0..ENTRY_TRIES {
        match retry(|| queue.send_batch(url, &pending)).await {
            Ok(outcome) => {
                let retry_ids = record(acks, outcome.succeeded, outcome.failed);
                pending.retain(|e| retry_ids.contains(&e.id));
            }
            Err(e) => {
                fail_all(acks, pending.iter().map(|e| e.id.clone()), &e);
                pending.clear();
            }
        }
        if pending.is_empty() {
            break;
        }
    }
}

pub async fn delete<Q: Queue>(queue: &Q, url: &str, entries: Vec<HandleEntry>) -> Acks {
    by_handle(entries, |batch| async move {
        queue.delete_batch(url, &batch).await
    })
    .await
}

/// Sets the visibility of held messages. SQS acknowledges an entry only while its handle is
/// the message's latest and the message is in flight: a handle acknowledged here deletes its
/// message for certain within the new timeout, whereas a delete with a stale handle is
/// answered with success and deletes nothing.
pub async fn hold<Q: Queue>(
    queue: &Q,
    url: &str,
    entries: Vec<HandleEntry>,
    visibility_seconds: i32,
) -> Acks {
    by_handle(entries, |batch| async move {
        queue
            .change_visibility_batch(url, &batch, visibility_seconds)
            .await
    })
    .await
}

/// One call per 10 handles, its retryable failures retried.
async fn by_handle<F, Fut>(entries: Vec<HandleEntry>, mut call: F) -> Acks
where
    F: FnMut(Vec<HandleEntry>) -> Fut,
    Fut: Future<Output = Result<redrive_engine::ports::BatchOutcome, PortError>>,
{
    let mut acks = Acks::default();
    for chunk in entries.chunks(10) {
        let mut pending = chunk.to_vec();
        for _ in 0..ENTRY_TRIES {
            match retry(|| call(pending.clone())).await {
                Ok(outcome) => {
                    let retry_ids = record(&mut acks, outcome.succeeded, outcome.failed);
                    pending.retain(|e| retry_ids.contains(&e.id));
                }
                Err(e) => {
                    fail_all(&mut acks, pending.iter().map(|e| e.id.clone()), &e);
                    pending.clear();
                }
            }
            if pending.is_empty() {
                break;
            }
        }
    }
    acks
}

/// Records one answer; returns the ids worth another try.
fn record(
    acks: &mut Acks,
    succeeded: Vec<String>,
    failed: Vec<redrive_engine::ports::EntryFailure>,
) -> HashSet<String> {
    for id in succeeded {
        acks.failed.remove(&id);
        acks.ok.insert(id);
    }
    let mut again = HashSet::new();
    for f in failed {
        if !f.sender_fault {
            again.insert(f.id.clone());
        }
        acks.failed
            .insert(f.id, format!("{}: {}", f.code, f.message));
    }
    again
}

fn fail_all(acks: &mut Acks, ids: impl Iterator<Item = String>, e: &PortError) {
    for id in ids {
        acks.failed.insert(id, e.to_string());
    }
}
