//! The drain's send and delete path for a caller outside a drain: the operator CLI's replay,
//! import, discard and export.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use redrive_shared::limits::HeldGroups;

use super::Settings;
use super::calls::{Calls, Sent};
use crate::lock;
use crate::ports::{HandleEntry, Queue, Received, SendEntry};

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
        lock(&self.held_groups).hold(group);
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

/// A walk over a queue that holds what it received: the latest receipt handle of each message
/// (one received again since it was returned has a new one), and that a message is settled
/// (deleted: nothing to release).
pub trait Holds {
    fn handle(&self, message_id: &str) -> Option<&str>;
    fn settled(&mut self, message_id: &str);
}

/// What [`delete_held`] came to: how many were deleted, and each message not deleted with why.
#[derive(Debug, Default)]
pub struct HeldDeletes {
    pub deleted: usize,
    pub failed: Vec<(String, String)>,
}

/// Deletes `stored` (copied or archived elsewhere first), each by the latest handle `holds`
/// has for it, once its hold could be renewed for `hold_seconds`: SQS answers a delete with a
/// stale handle with success and deletes nothing, whereas it refuses to renew one. Each
/// message deleted is settled in `holds`.
pub async fn delete_held<Q: Queue>(
    queue: &Q,
    holds: &mut impl Holds,
    url: &str,
    stored: &[Received],
    hold_seconds: i32,
) -> HeldDeletes {
    let entries = HandleEntry::numbered(stored.iter().map(|m| {
        holds
            .handle(&m.message_id)
            .unwrap_or(&m.receipt_handle)
            .to_string()
    }));
    let transfer = Transfer::new(queue);
    let held = transfer.hold(url, entries.clone(), hold_seconds).await;
    let current: Vec<HandleEntry> = entries
        .into_iter()
        .filter(|e| held.ok.contains(&e.id))
        .collect();
    let acks = transfer.delete(url, current).await;
    let mut out = HeldDeletes::default();
    for (i, m) in stored.iter().enumerate() {
        let id = i.to_string();
        if acks.ok.contains(&id) {
            holds.settled(&m.message_id);
            out.deleted += 1;
        } else if let Some(why) = held.failed.get(&id) {
            out.failed.push((
                m.message_id.clone(),
                format!(
                    "its hold ran out before the delete (it may have been received again): {why}"
                ),
            ));
        } else {
            let why = acks.failed.get(&id).cloned().unwrap_or_default();
            out.failed.push((m.message_id.clone(), why));
        }
    }
    out
}
