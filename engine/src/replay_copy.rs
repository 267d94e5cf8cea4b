//! The copy a moved message is sent as: `x-redrive` rewritten for a replay, the FIFO group
//! and deduplication id of a copy moved by hand (the CLI's `replay` and `import`, triage's
//! group replay from the CLI and from the console).

use crate::ports::{Received, SendEntry};
use redrive_shared::attributes::message_size;
use redrive_shared::decision::dedup_id;
use redrive_shared::limits::{MAX_ATTRIBUTES, Outgoing};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::{Attributes, TraceHeader};

/// `kind` of the FIFO deduplication id of a replayed copy (the re-driver uses `r` and `p`).
pub const DEDUP_KIND: &str = "manual";

/// The copy `replay` sends for one parked message (entry id left empty). The flag is false
/// when the rewritten `x-redrive` does not fit (10 attributes already, or more than
/// `max_bytes`, the destination's `MaximumMessageSize`): the copy then carries the attributes
/// exactly as received.
pub fn replay_entry(
    m: &Received,
    to_fifo: bool,
    max_bytes: usize,
    now_ms: i64,
) -> (SendEntry, bool) {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    let mut replayed = RedriveMeta {
        attempt: 0,
        last_error: None,
        last_redriven_at: Some(rfc3339_from_millis(now_ms)),
        ..meta.clone()
    };
    replayed.clear_isolation();
    let mut attributes = m.attributes.clone();
    replayed.write_into(&mut attributes);
    let fits =
        attributes.len() <= MAX_ATTRIBUTES && message_size(&m.body, &attributes) <= max_bytes;
    if !fits {
        attributes = m.attributes.clone();
    }
    let group = to_fifo.then(|| fifo_group(m.group_id.as_deref(), &meta));
    let trace = m.trace_header.clone();
    let entry = copy_entry(&m.message_id, &m.body, attributes, group, DEDUP_KIND, trace);
    (entry, fits)
}

/// The FIFO group of a moved message's copy: the message's own, else the one its isolation
/// recorded (a FIFO DLQ's message parked in a standard poison queue), else its chain's.
pub fn fifo_group(group: Option<&str>, meta: &RedriveMeta) -> String {
    group
        .filter(|g| !g.is_empty())
        .or(meta.group_id())
        .map_or_else(|| meta.original_message_id.clone(), str::to_string)
}

/// The copy of a message moved by hand (replayed, imported), entry id left empty. On a FIFO
/// destination it goes in `fifo_group` and is deduplicated on the id of the message being
/// moved, as the re-driver does: a retried move of the same message is deduplicated, a later
/// move of the same chain never is.
pub fn copy_entry(
    moved_id: &str,
    body: &str,
    attributes: Attributes,
    fifo_group: Option<String>,
    dedup_kind: &str,
    trace_header: Option<TraceHeader>,
) -> SendEntry {
    SendEntry {
        id: String::new(),
        message: Outgoing {
            body: body.to_string(),
            attributes,
            delay_seconds: None,
            dedup_id: fifo_group.is_some().then(|| dedup_id(moved_id, dedup_kind)),
            group_id: fifo_group,
            trace_header,
        },
    }
}
