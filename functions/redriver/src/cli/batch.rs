//! Batch sends and deletes that report, per message, what SQS acknowledged.

use std::collections::{HashMap, HashSet};

use redrive_shared::attributes::message_size;
use redrive_shared::limits::split_batches;

use super::scan::retry;
use crate::ports::{HandleEntry, PortError, Queue, SendEntry};

/// Per entry id: acknowledged, or the error of its last try.
#[derive(Debug, Default)]
pub struct Acks {
    pub ok: HashSet<String>,
    pub failed: HashMap<String, String>,
}

/// Entries whose failure is worth another try (not the sender's fault) are retried twice.
const ENTRY_TRIES: usize = 3;

pub async fn send<Q: Queue>(queue: &Q, url: &str, entries: Vec<SendEntry>) -> Acks {
    let mut acks = Acks::default();
    for batch in split_batches(entries, |e| message_size(&e.body, &e.attributes)) {
        let mut pending = batch;
        for _ in 0..ENTRY_TRIES {
            match retry(|| queue.send_batch(url, &pending)).await {
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

pub async fn delete<Q: Queue>(queue: &Q, url: &str, entries: Vec<HandleEntry>) -> Acks {
    let mut acks = Acks::default();
    for chunk in entries.chunks(10) {
        let mut pending = chunk.to_vec();
        for _ in 0..ENTRY_TRIES {
            match retry(|| queue.delete_batch(url, &pending)).await {
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
    failed: Vec<crate::ports::EntryFailure>,
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
