//! A group's plan discarded over the queue port and S3, printing nothing (the triage console's
//! action function): each message of the plan archived (an object in the archive format
//! `redrive import` restores, its put verified against its SHA-256), then its hold renewed and
//! it deleted; a message is deleted only once its object was acknowledged, and one whose hold
//! could not be renewed (it was received again) is left on the queue and reported.

use std::collections::BTreeSet;

use redrive_shared::archive::S3Location;
use redrive_shared::config::QueueUrl;

use super::sqs::{HOLD_SECONDS, Walk};
use crate::engine::delete_held;
use crate::now_ms;
use crate::ports::{PortError, Queue};
use crate::s3::ArchiveLines;

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
        let mut pending = ArchiveLines::default();
        loop {
            let batch = walk.next().await?;
            let end = batch.is_empty();
            let now = now_ms();
            for (m, system) in batch {
                if plan.contains(&m.message_id) {
                    pending.push(url, now, m, system);
                }
            }
            if !pending.is_empty() && (pending.is_full() || end) {
                let (object, stored) = pending.put(s3, location, queue_url).await?;
                out.objects.push(object);
                out.archived
                    .extend(stored.iter().map(|m| m.message_id.clone()));
                let deletes = delete_held(queue, &mut walk, url, &stored, HOLD_SECONDS).await;
                out.deleted += deletes.deleted as u64;
                out.delete_failed.extend(deletes.failed);
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
