//! A group's plan discarded over the queue port and S3, printing nothing (the triage console's
//! action function): each message of the plan archived (an object in the archive format
//! `redrive import` restores, its put verified against its SHA-256), then its hold renewed and
//! it deleted; a message is deleted only once its object was acknowledged, and one whose hold
//! could not be renewed (it was received again) is left on the queue and reported.

use std::collections::BTreeSet;

use redrive_shared::archive::{ArchivedMessage, S3Location, object_key, to_line};
use redrive_shared::config::QueueUrl;

use super::sqs::{HOLD_SECONDS, Walk};
use crate::engine::Transfer;
use crate::now_ms;
use crate::ports::{HandleEntry, PortError, Queue, Received};

/// Messages per object at most; an object is written (and its messages deleted) as soon as it
/// is full.
const OBJECT_MESSAGES: usize = 100;
/// Bytes per object at most (lines of up to 1 MiB messages).
const OBJECT_BYTES: usize = 16 * 1024 * 1024;

/// What a discard did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discarded {
    /// MessageIds archived (their object acknowledged).
    pub archived: Vec<String>,
    /// Of those, deleted from the queue.
    pub deleted: u64,
    /// Archived and left on the queue: (MessageId, why).
    pub delete_failed: Vec<(String, String)>,
    /// Every object written, `s3://bucket/key`.
    pub objects: Vec<String>,
    /// Messages of the plan not found on the queue.
    pub not_found: u64,
}

impl Discarded {
    /// Messages of the plan left on the queue: archived and not deleted.
    pub fn left(&self) -> u64 {
        self.delete_failed.len() as u64
    }
}

/// Archives to `location` each message of `plan` on `queue_url`, then deletes it.
pub async fn discard_plan<Q: Queue>(
    queue: &Q,
    s3: &aws_sdk_s3::Client,
    queue_url: &QueueUrl,
    location: &S3Location,
    plan: &BTreeSet<String>,
) -> Result<Discarded, PortError> {
    let url = queue_url.as_str();
    let mut walk = Walk::new(queue, url);
    let mut out = Discarded::default();
    let walked: Result<(), PortError> = async {
        let mut pending: Vec<(String, Received)> = Vec::new();
        let mut bytes = 0;
        loop {
            let batch = walk.next().await?;
            let end = batch.is_empty();
            let now = now_ms();
            for (m, system) in batch {
                if !plan.contains(&m.message_id) {
                    continue;
                }
                let line = to_line(&ArchivedMessage {
                    queue: url.to_string(),
                    archived_at_ms: now,
                    message_id: m.message_id.clone(),
                    body: m.body.clone(),
                    attributes: m.attributes.clone(),
                    system,
                });
                bytes += line.len() + 1;
                pending.push((line, m));
            }
            let full = pending.len() >= OBJECT_MESSAGES || bytes >= OBJECT_BYTES;
            if !pending.is_empty() && (full || end) {
                let stored = put_object(s3, location, queue_url, &mut pending, &mut out).await?;
                bytes = 0;
                settle(queue, &mut walk, url, stored, &mut out).await;
            }
            if end || out.archived.len() >= plan.len() {
                return Ok(());
            }
        }
    }
    .await;
    walk.release().await;
    walked?;
    out.not_found = (plan.len() - out.archived.len()) as u64;
    Ok(out)
}

async fn put_object(
    s3: &aws_sdk_s3::Client,
    location: &S3Location,
    queue: &QueueUrl,
    pending: &mut Vec<(String, Received)>,
    out: &mut Discarded,
) -> Result<Vec<Received>, PortError> {
    let first = &pending[0].1.message_id;
    let key = object_key(
        &location.prefix,
        queue.name(),
        now_ms(),
        first,
        pending.len(),
    );
    let mut body = String::new();
    for (line, _) in pending.iter() {
        body.push_str(line);
        body.push('\n');
    }
    crate::s3::put_verified(s3, &location.bucket, &key, body.into_bytes()).await?;
    out.objects.push(format!("s3://{}/{key}", location.bucket));
    let stored: Vec<Received> = std::mem::take(pending)
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    out.archived
        .extend(stored.iter().map(|m| m.message_id.clone()));
    Ok(stored)
}

/// Deletes the archived messages whose hold the walk could renew: SQS answers a delete with a
/// stale handle with success and deletes nothing, whereas it refuses to renew one.
async fn settle<Q: Queue>(
    queue: &Q,
    walk: &mut Walk<'_, Q>,
    url: &str,
    stored: Vec<Received>,
    out: &mut Discarded,
) {
    let entries = HandleEntry::numbered(stored.iter().map(|m| {
        walk.handle(&m.message_id)
            .unwrap_or(&m.receipt_handle)
            .to_string()
    }));
    let transfer = Transfer::new(queue);
    let held = transfer.hold(url, entries.clone(), HOLD_SECONDS).await;
    let current: Vec<HandleEntry> = entries
        .into_iter()
        .filter(|e| held.ok.contains(&e.id))
        .collect();
    let acks = transfer.delete(url, current).await;
    for (i, m) in stored.iter().enumerate() {
        let id = i.to_string();
        if acks.ok.contains(&id) {
            walk.settled(&m.message_id);
            out.deleted += 1;
        } else if let Some(why) = held.failed.get(&id) {
            out.delete_failed.push((
                m.message_id.clone(),
                format!(
                    "its hold ran out before the delete (it may have been received again): {why}"
                ),
            ));
        } else {
            let why = acks.failed.get(&id).cloned().unwrap_or_default();
            out.delete_failed.push((m.message_id.clone(), why));
        }
    }
}
