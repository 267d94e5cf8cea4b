//! A group's messages moved over the queue port, printing nothing (the triage console's
//! action function): a walk that sees each visible message once and releases what it did not
//! settle, a replay stage (copies to the source, each original deleted once its copy was
//! acknowledged) and the count of copies that came back.

use std::collections::{BTreeSet, HashMap, HashSet};

use redrive_shared::archive::SystemAttributes;
use redrive_shared::config::QueueUrl;
use redrive_shared::limits::MAX_MESSAGE_BYTES;
use redrive_shared::meta::RedriveMeta;

use super::StageMoved;
use crate::engine::{Holds, Moved, Transfer};
use crate::now_ms;
use crate::ports::{HandleEntry, PortError, Queue, ReceiveRequest, Received};
use crate::replay_copy::replay_entry;

/// How long a walk holds the messages it received (released at its end).
pub const HOLD_SECONDS: i32 = 120;
/// Receives of a walk at most: 10 messages each, some 5,000 messages a walk.
pub const MAX_RECEIVES: usize = 500;

/// A walk over a queue: each visible message returned once, held until [`Walk::release`].
pub struct Walk<'a, Q: Queue> {
    queue: &'a Q,
    url: &'a str,
    /// Message id -> latest receipt handle, for every message received and not settled.
    held: HashMap<String, String>,
    seen: HashSet<String>,
    receives: usize,
    done: bool,
}

impl<'a, Q: Queue> Walk<'a, Q> {
    pub fn new(queue: &'a Q, url: &'a str) -> Self {
        Self {
            queue,
            url,
            held: HashMap::new(),
            seen: HashSet::new(),
            receives: 0,
            done: false,
        }
    }

    /// Up to 10 messages not returned before, each with the system attributes an archive
    /// keeps; empty once nothing new is visible.
    pub async fn next(&mut self) -> Result<Vec<(Received, SystemAttributes)>, PortError> {
        if self.done || self.receives >= MAX_RECEIVES {
            self.done = true;
            return Ok(Vec::new());
        }
        self.receives += 1;
        let batch = self
            .queue
            .receive_with_system(self.url, ReceiveRequest::new(10, 1, HOLD_SECONDS))
            .await?;
        let mut fresh = Vec::new();
        for (m, system) in batch {
            self.held
                .insert(m.message_id.clone(), m.receipt_handle.clone());
            if self.seen.insert(m.message_id.clone()) {
                fresh.push((m, system));
            }
        }
        // Nothing visible, or only messages seen before (the queue was walked round): the end.
        self.done = fresh.is_empty();
        Ok(fresh)
    }

    /// The latest receipt handle of a message received.
    pub fn handle(&self, message_id: &str) -> Option<&str> {
        self.held.get(message_id).map(String::as_str)
    }

    /// A message no longer held by the walk (deleted).
    pub fn settled(&mut self, message_id: &str) {
        self.held.remove(message_id);
    }

    /// Makes every message still held visible again at once.
    pub async fn release(self) {
        let entries = HandleEntry::numbered(self.held.into_values());
        if !entries.is_empty() {
            Transfer::new(self.queue).hold(self.url, entries, 0).await;
        }
    }
}

/// Reads every visible message of `url` once (`each`), then makes them all visible again: a
/// walk that settles nothing.
pub async fn read_each<Q: Queue>(
    queue: &Q,
    url: &str,
    mut each: impl FnMut(&Received),
) -> Result<(), PortError> {
    let mut walk = Walk::new(queue, url);
    let walked: Result<(), PortError> = async {
        loop {
            let batch = walk.next().await?;
            if batch.is_empty() {
                return Ok(());
            }
            for (m, _) in &batch {
                each(m);
            }
        }
    }
    .await;
    walk.release().await;
    walked
}

impl<Q: Queue> Holds for Walk<'_, Q> {
    fn handle(&self, message_id: &str) -> Option<&str> {
        Walk::handle(self, message_id)
    }

    fn settled(&mut self, message_id: &str) {
        Walk::settled(self, message_id);
    }
}

/// Counts, message by message, the copies of `originals` that are not the plan's own messages
/// (a replayed copy that came back).
pub struct CameBack<'p> {
    originals: &'p BTreeSet<String>,
    plan: &'p BTreeSet<String>,
    pub count: u64,
}

impl<'p> CameBack<'p> {
    pub fn new(originals: &'p BTreeSet<String>, plan: &'p BTreeSet<String>) -> Self {
        Self {
            originals,
            plan,
            count: 0,
        }
    }

    pub fn see(&mut self, m: &Received) {
        let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
        if !self.plan.contains(&m.message_id) && self.originals.contains(&meta.original_message_id)
        {
            self.count += 1;
        }
    }
}

/// FIFO, message by message in the order received: the message groups in which a message
/// outside `plan` comes before one of the plan, as far as a walk can read them (SQS hands out a
/// message group's head only).
pub struct Interleaved<'p> {
    plan: &'p BTreeSet<String>,
    other_first: BTreeSet<String>,
    mixed: BTreeSet<String>,
}

impl<'p> Interleaved<'p> {
    pub fn new(plan: &'p BTreeSet<String>) -> Self {
        Self {
            plan,
            other_first: BTreeSet::new(),
            mixed: BTreeSet::new(),
        }
    }

    pub fn see(&mut self, m: &Received) {
        let group = m.group_id.clone().unwrap_or_default();
        if !self.plan.contains(&m.message_id) {
            self.other_first.insert(group);
        } else if self.other_first.contains(&group) {
            self.mixed.insert(group);
        }
    }

    pub fn groups(self) -> Vec<String> {
        self.mixed.into_iter().collect()
    }
}

/// Copies of `originals` on `url` that are not the plan's own messages.
pub async fn came_back<Q: Queue>(
    queue: &Q,
    url: &str,
    originals: &BTreeSet<String>,
    plan: &BTreeSet<String>,
) -> Result<u64, PortError> {
    let mut back = CameBack::new(originals, plan);
    read_each(queue, url, |m| back.see(m)).await?;
    Ok(back.count)
}

/// The destination's `MaximumMessageSize`, never above SQS's.
pub async fn max_bytes<Q: Queue>(queue: &Q, url: &str) -> Result<usize, PortError> {
    Ok(queue
        .max_message_size(url)
        .await?
        .unwrap_or(MAX_MESSAGE_BYTES)
        .min(MAX_MESSAGE_BYTES))
}

/// One replay stage from `from` to `to`: up to `n` of `remaining` sent as replayed copies
/// ([`replay_entry`]), each original deleted once its copy was acknowledged. A message without
/// room for `x-redrive` is left where it is (the console never sends one unstamped), and on a
/// FIFO destination nothing later of its group passes it.
pub async fn replay_stage<Q: Queue>(
    queue: &Q,
    from: &QueueUrl,
    to: &QueueUrl,
    to_max_bytes: usize,
    remaining: &BTreeSet<String>,
    n: u64,
) -> Result<StageMoved, PortError> {
    let mut walk = Walk::new(queue, from.as_str());
    let chosen: Result<Vec<Received>, PortError> = async {
        let mut chosen = Vec::new();
        while (chosen.len() as u64) < n {
            let batch = walk.next().await?;
            if batch.is_empty() {
                break;
            }
            for (m, _) in batch {
                if (chosen.len() as u64) < n && remaining.contains(&m.message_id) {
                    chosen.push(m);
                }
            }
        }
        Ok(chosen)
    }
    .await;
    let chosen = match chosen {
        Ok(c) => c,
        Err(e) => {
            walk.release().await;
            return Err(e);
        }
    };
    let not_found = n.min(remaining.len() as u64) - chosen.len() as u64;
    let transfer = Transfer::new(queue);
    let to_fifo = to.is_fifo();
    let now = now_ms();
    let mut entries = Vec::with_capacity(chosen.len());
    let mut refused = 0u64;
    for (i, m) in chosen.iter().enumerate() {
        let (mut entry, stamped) = replay_entry(m, to_fifo, to_max_bytes, now);
        if !stamped {
            transfer.hold_group(entry.message.group_id.as_deref());
            refused += 1;
            continue;
        }
        entry.id = i.to_string();
        let handle = walk.handle(&m.message_id).unwrap_or(&m.receipt_handle);
        entries.push((entry, handle.to_string()));
    }
    let Moved { sent, deleted } = transfer
        .send_then_delete(from.as_str(), to.as_str(), to_fifo, entries)
        .await;
    let mut out = StageMoved::default();
    for (i, m) in chosen.iter().enumerate() {
        let id = i.to_string();
        if deleted.ok.contains(&id) {
            walk.settled(&m.message_id);
            out.deleted += 1;
        }
        if sent.ok.contains(&id) {
            let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
            out.sent
                .push((m.message_id.clone(), meta.original_message_id.clone()));
        }
    }
    let failed = chosen.len() as u64 - refused - out.sent.len() as u64;
    out.shortfall = not_found + refused + failed;
    walk.release().await;
    Ok(out)
}

/// FIFO: the message groups of `url` in which a message outside `plan` comes before one of the
/// plan ([`Interleaved`]).
pub async fn interleaved<Q: Queue>(
    queue: &Q,
    url: &str,
    plan: &BTreeSet<String>,
) -> Result<Vec<String>, PortError> {
    let mut seen = Interleaved::new(plan);
    read_each(queue, url, |m| seen.see(m)).await?;
    Ok(seen.groups())
}
