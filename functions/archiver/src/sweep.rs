//! One run of the archiver: every queue swept in turn, old messages put to the store and then
//! deleted, the others released, and the metrics of each queue.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redrive_engine::ports::{
    HandleEntry, MetricUnit, MetricValue, Metrics, PortError, Queue, ReceiveRequest, Received,
};
use redrive_shared::Attributes;
use redrive_shared::archive::{self, SystemAttributes};
use redrive_shared::clock::now_ms;
use redrive_shared::config::QueueUrl;
use serde::Serialize;

use crate::config::{ArchiverConfig, ArchiverInitError, check_threshold};
use crate::digest::{Digest, DigestOutcome};
use crate::index::Index;
use crate::store::{ObjectStore, archive_object};

/// Time kept free before the Lambda deadline and before the visibility of held messages ends:
/// one SDK operation (with its retries) plus a put and a delete still fit.
pub const SWEEP_MARGIN: Duration = Duration::from_secs(10);

/// A message as the archiver receives it: everything needed to restore it exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub attributes: Attributes,
    /// The queue that dead-lettered the message, where SQS says (`DeadLetterQueueSourceArn`).
    pub dead_letter_source_arn: Option<String>,
    /// The system attributes the archive keeps (`SentTimestamp`, `ApproximateReceiveCount`,
    /// group and deduplication ids, ...).
    pub system: SystemAttributes,
}

impl From<(Received, SystemAttributes)> for QueuedMessage {
    fn from((m, system): (Received, SystemAttributes)) -> Self {
        Self {
            message_id: m.message_id,
            receipt_handle: m.receipt_handle,
            body: m.body,
            attributes: m.attributes,
            dead_letter_source_arn: m.dead_letter_source_arn,
            system,
        }
    }
}

impl QueuedMessage {
    /// `SentTimestamp`, epoch milliseconds.
    pub fn sent_timestamp_ms(&self) -> Option<i64> {
        self.system.sent_timestamp_ms()
    }

    fn handle(&self) -> HandleEntry {
        HandleEntry {
            id: self.message_id.clone(),
            receipt_handle: self.receipt_handle.clone(),
        }
    }
}

/// A protected DLQ the archiver leaves alone (an invalid tag, a retention it cannot read or that
/// is not above the threshold): 1 for that queue at every run (Unit Count). The attach stack's
/// `dlq-left-alone` alarm pages on it.
pub const LEFT_ALONE_METRIC: &str = "DlqLeftAlone";

/// The archiver's metrics per queue and run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveCounts {
    /// Messages written to S3 and then deleted from their queue.
    pub archived: u64,
    /// Messages that should have been archived and are still on their queue (put refused, delete
    /// refused, queue unreadable: a receive that failed counts 1).
    pub failures: u64,
    /// The age of the oldest message the sweep received, in seconds since its `SentTimestamp`
    /// (archived ones included: they waited that long); 0 when the queue was empty; `None`
    /// when the sweep could not read the queue at all (`failures` says so).
    pub oldest_message_age_seconds: Option<u64>,
}

impl ArchiveCounts {
    /// `ArchivedMessages` and `ArchiveFailures` (Unit Count), zeros included, and
    /// `OldestMessageAgeSeconds` (Unit Seconds) when known: one PutMetricData per queue and run.
    pub fn values(&self) -> Vec<MetricValue> {
        let mut values = vec![
            MetricValue::count("ArchivedMessages", self.archived),
            MetricValue::count("ArchiveFailures", self.failures),
        ];
        if let Some(age) = self.oldest_message_age_seconds {
            values.push(MetricValue {
                name: "OldestMessageAgeSeconds",
                unit: MetricUnit::Seconds,
                value: age,
            });
        }
        values
    }
}

/// Why a queue's sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepStop {
    QueueEmpty,
    Limit,
    Deadline,
    ReceiveFailed,
    PutFailed,
}

/// What a run did on one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    pub queue: String,
    pub received: u64,
    pub archived: u64,
    /// Not old yet: made visible again.
    pub kept: u64,
    pub failed: u64,
    pub objects: u64,
    /// Seconds since the `SentTimestamp` of the oldest message received (0: none received;
    /// absent: the queue could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_age_seconds: Option<u64>,
    pub stopped_because: SweepStop,
    /// The groups the sweep recorded in the queue's triage book (absent: no index, or the
    /// book could not be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<usize>,
}

/// The run's answer (also logged as one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub archived: u64,
    pub kept: u64,
    pub failed: u64,
    pub objects: u64,
    pub queues: Vec<QueueSummary>,
    /// What the daily digest did (absent: no digest configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestOutcome>,
}

pub struct Archiver<Q, S, M> {
    queue: Q,
    store: S,
    metrics: M,
    config: ArchiverConfig,
    /// A DLQ's own threshold, from its `redrive:archive-after-days` tag.
    thresholds: HashMap<QueueUrl, Duration>,
    /// DLQs left alone: their `redrive:archive-after-days` tag is invalid.
    skipped: HashSet<QueueUrl>,
    /// The daily digest, when `ALERTS_TOPIC_ARN` names its topic.
    digest: Option<Digest>,
    /// The live triage index, when `TRIAGE_TABLE` names the books' table.
    index: Option<Index>,
}

impl<Q: Queue, S: ObjectStore, M: Metrics> Archiver<Q, S, M> {
    /// Reads every queue's retention and refuses a threshold that is not below it. Nothing is
    /// received before this succeeds.
    pub async fn init(
        queue: Q,
        store: S,
        metrics: M,
        config: ArchiverConfig,
    ) -> Result<Self, ArchiverInitError> {
        let mut thresholds = HashMap::new();
        let mut skipped = HashSet::new();
        // A protected DLQ's owners may set its own threshold on the queue (the poison queue is
        // ours, and a DLQ the install created takes the install's).
        for url in config.queues.iter().skip(1).filter(|_| config.protected) {
            let tag = redrive_shared::config::tags::ARCHIVE_AFTER_DAYS_TAG;
            match queue.tags(url.as_str()).await {
                Ok(tags) => {
                    if let Some(value) = tags.get(tag) {
                        match redrive_shared::config::tags::archive_after_days(value) {
                            Ok(days) => {
                                thresholds
                                    .insert(url.clone(), Duration::from_secs_f64(days * 86_400.0));
                            }
                            Err(problem) => {
                                tracing::error!(queue = url.name(), tag, value = %value, action = "left-alone:bad-tag", "queue {}: invalid tag {tag}={value:?}: {problem}; this DLQ is not archived until the tag is fixed", url.name());
                                skipped.insert(url.clone());
                            }
                        }
                    }
                }
                Err(e) if e.code == "Unsupported" => {}
                Err(e) => {
                    tracing::warn!(queue = url.name(), error = %e, "cannot read the DLQ's tags: the install's threshold applies");
                }
            }
        }
        for (index, url) in config.queues.iter().enumerate() {
            if skipped.contains(url) {
                continue;
            }
            // A protected DLQ is the user's queue: one whose retention cannot be read, or is not
            // above its threshold, is left alone (logged, and `DlqLeftAlone` at every run), never
            // the others. Our own queues (the poison queue, a DLQ the install created) stop init.
            let protected_dlq = config.protected && index > 0;
            let retention = match queue.retention_seconds(url.as_str()).await {
                Ok(seconds) => seconds,
                Err(e) if protected_dlq => {
                    tracing::error!(queue = url.name(), action = "left-alone:unreadable", error = %e, "queue {}: its MessageRetentionPeriod cannot be read; this DLQ is not archived until it can be", url.name());
                    skipped.insert(url.clone());
                    continue;
                }
                Err(source) => {
                    return Err(ArchiverInitError::RetentionUnreadable {
                        queue: url.to_string(),
                        source,
                    });
                }
            };
            match thresholds.get(url) {
                Some(own) => {
                    let tagged = ArchiverConfig {
                        archive_after: *own,
                        archive_after_variable:
                            redrive_shared::config::tags::ARCHIVE_AFTER_DAYS_TAG,
                        ..config.clone()
                    };
                    // A tag that would let SQS delete first leaves that DLQ alone, not the others.
                    if let Err(e) = check_threshold(&tagged, url, retention) {
                        tracing::error!(queue = url.name(), action = "left-alone:bad-tag", "{e}");
                        skipped.insert(url.clone());
                    }
                }
                None if protected_dlq => {
                    if let Err(e) = check_threshold(&config, url, retention) {
                        tracing::error!(queue = url.name(), action = "left-alone:retention", "{e}");
                        skipped.insert(url.clone());
                    }
                }
                None => check_threshold(&config, url, retention)?,
            }
        }
        Ok(Self {
            queue,
            store,
            metrics,
            config,
            thresholds,
            skipped,
            digest: None,
            index: None,
        })
    }

    /// Sends the daily digest at the reminder hour ([`crate::digest`]).
    pub fn with_digest(mut self, digest: Option<Digest>) -> Self {
        self.digest = digest;
        self
    }

    /// Records each sweep's groups in the queue's triage book ([`crate::index`]).
    pub fn with_index(mut self, index: Option<Index>) -> Self {
        self.index = index;
        self
    }

    /// The DLQs this archiver serves (every queue but the poison queue).
    fn dlqs(&self) -> &[QueueUrl] {
        &self.config.queues[1..]
    }

    pub fn config(&self) -> &ArchiverConfig {
        &self.config
    }

    /// The queue port (tests read what a fault-injecting port recorded).
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// One run now: [`Self::run_at`] on the wall clock.
    pub async fn run(&self, deadline: Option<tokio::time::Instant>) -> RunSummary {
        self.run_at(deadline, now_ms()).await
    }

    /// One run at `now_ms` (the hour of the daily digest): the digest first when it is due
    /// (a few reads and one publish, which a long sweep must not crowd out), then every queue
    /// in turn, each within the deadline (if any).
    pub async fn run_at(&self, deadline: Option<tokio::time::Instant>, now_ms: i64) -> RunSummary {
        let digest = match &self.digest {
            Some(d) => Some(d.run(&self.queue, self.dlqs(), now_ms).await),
            None => None,
        };
        let mut summary = RunSummary {
            archived: 0,
            kept: 0,
            failed: 0,
            objects: 0,
            queues: Vec::new(),
            digest,
        };
        for url in &self.config.queues {
            if self.skipped.contains(url) {
                // Left alone at init: said at every run, so that the fleet's alarm pages.
                let left_alone = [MetricValue::count(LEFT_ALONE_METRIC, 1)];
                if let Err(e) = self
                    .metrics
                    .put(&self.config.metric_namespace, url.name(), &left_alone)
                    .await
                {
                    tracing::error!(queue = url.name(), error = %e, "publishing DlqLeftAlone failed");
                }
                continue;
            }
            let q = self.sweep(url, deadline).await;
            let counts = ArchiveCounts {
                archived: q.archived,
                failures: q.failed,
                oldest_message_age_seconds: q.oldest_age_seconds,
            };
            if let Err(e) = self
                .metrics
                .put(&self.config.metric_namespace, url.name(), &counts.values())
                .await
            {
                tracing::error!(queue = url.name(), error = %e, "publishing the archive metrics failed");
            }
            summary.archived += q.archived;
            summary.kept += q.kept;
            summary.failed += q.failed;
            summary.objects += q.objects;
            summary.queues.push(q);
        }
        summary
    }

    async fn sweep(&self, url: &QueueUrl, deadline: Option<tokio::time::Instant>) -> QueueSummary {
        let started = tokio::time::Instant::now();
        // Held messages are hidden for the visibility timeout: the sweep ends before it, so none
        // comes back while it runs, and before the Lambda deadline.
        let visibility = Duration::from_secs(u64::from(self.config.visibility_timeout_seconds));
        let mut stop_at = started + visibility.saturating_sub(SWEEP_MARGIN);
        if let Some(d) = deadline {
            stop_at = stop_at.min(d.checked_sub(SWEEP_MARGIN).unwrap_or(started));
        }
        let threshold_ms = self
            .thresholds
            .get(url)
            .unwrap_or(&self.config.archive_after)
            .as_millis() as i64;
        let mut summary = QueueSummary {
            queue: url.name().to_string(),
            received: 0,
            archived: 0,
            kept: 0,
            failed: 0,
            objects: 0,
            oldest_age_seconds: None,
            stopped_because: SweepStop::QueueEmpty,
            groups: None,
        };
        let mut pass = self.index.as_ref().map(|_| Index::pass());
        let mut oldest_age_ms: Option<i64> = None;
        let mut held: Vec<HandleEntry> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let budget = u64::from(self.config.max_messages_per_invocation);
        let stop = loop {
            if summary.received >= budget {
                break SweepStop::Limit;
            }
            if tokio::time::Instant::now() >= stop_at {
                break SweepStop::Deadline;
            }
            let max = (budget - summary.received).min(10) as i32;
            // A 1 s long poll asks every SQS server, so a standard queue's sample is not empty
            // while messages wait.
            let batch = match self
                .queue
                .receive_with_system(
                    url.as_str(),
                    ReceiveRequest::new(max, 1, self.config.visibility_timeout_seconds as i32),
                )
                .await
            {
                Ok(batch) => batch
                    .into_iter()
                    .map(QueuedMessage::from)
                    .collect::<Vec<_>>(),
                Err(e) => {
                    tracing::error!(queue = url.name(), action = "receive-failed", error = %e, "the archiver cannot read the queue");
                    summary.failed += 1;
                    break SweepStop::ReceiveFailed;
                }
            };
            if batch.is_empty() {
                break SweepStop::QueueEmpty;
            }
            summary.received += batch.len() as u64;
            let now = now_ms();
            let mut old = Vec::new();
            let mut kept_now = Vec::new();
            let mut fresh = 0usize;
            for m in batch {
                let first_time = seen.insert(m.message_id.clone());
                fresh += usize::from(first_time);
                let age_ms = m.sent_timestamp_ms().map(|sent| now - sent);
                oldest_age_ms = oldest_age_ms.max(age_ms);
                if first_time && age_ms.is_some_and(|age| age >= threshold_ms) {
                    old.push(m);
                } else {
                    if age_ms.is_none() {
                        tracing::warn!(queue = url.name(), message_id = %m.message_id, "no SentTimestamp: the age is unknown, kept");
                    }
                    held.push(m.handle());
                    if first_time {
                        summary.kept += 1;
                        kept_now.push(m);
                    }
                }
            }
            if let (Some(index), Some(p)) = (&self.index, pass.as_mut())
                && let Err(e) = index.add(p, &kept_now).await
            {
                tracing::error!(queue = url.name(), action = "index-causes-unreadable", error = %e, "the consumer's cause records could not be read: this sweep records no groups");
                pass = None;
            }
            if !old.is_empty() {
                match self.archive_batch(url, &old).await {
                    Ok(outcome) => {
                        summary.objects += 1;
                        summary.archived += outcome.0;
                        summary.failed += outcome.1;
                    }
                    Err(e) => {
                        tracing::error!(queue = url.name(), action = "archive-failed", messages = old.len(), error = %e, "the archive put failed; every message stays on its queue");
                        summary.failed += old.len() as u64;
                        held.extend(old.iter().map(QueuedMessage::handle));
                        break SweepStop::PutFailed;
                    }
                }
            }
            if fresh == 0 {
                // Only messages this sweep already saw: it has been round the queue.
                break SweepStop::QueueEmpty;
            }
        };
        summary.stopped_because = stop;
        // Unknown only when the queue could not be read at all; an empty queue is 0.
        let unread = stop == SweepStop::ReceiveFailed && summary.received == 0;
        summary.oldest_age_seconds =
            (!unread).then(|| u64::try_from(oldest_age_ms.unwrap_or(0).max(0) / 1000).unwrap_or(0));
        self.release(url, &held).await;
        if let (Some(index), Some(pass)) = (&self.index, pass)
            && !unread
        {
            let complete = stop == SweepStop::QueueEmpty;
            summary.groups = index
                .record(url.name(), url.as_str(), pass, complete, now_ms())
                .await;
        }
        tracing::info!(
            queue = url.name(),
            received = summary.received,
            archived = summary.archived,
            kept = summary.kept,
            failed = summary.failed,
            objects = summary.objects,
            oldest_age_seconds = summary.oldest_age_seconds,
            stopped_because = ?summary.stopped_because,
            groups = summary.groups,
            "sweep"
        );
        summary
    }

    /// Puts one object holding `old`, then deletes them. `Err` when the put failed (nothing was
    /// deleted); else (deleted, left on the queue).
    async fn archive_batch(
        &self,
        url: &QueueUrl,
        old: &[QueuedMessage],
    ) -> Result<(u64, u64), PortError> {
        let archived_at = now_ms();
        let key = archive::object_key(
            &self.config.prefix,
            url.name(),
            archived_at,
            &old[0].message_id,
            old.len(),
        );
        let body = archive_object(url, archived_at, old);
        self.store.put(&self.config.bucket, &key, body).await?;
        // S3 acknowledged the bytes: only now may the messages leave their queue.
        let handles: Vec<HandleEntry> = old.iter().map(QueuedMessage::handle).collect();
        let (deleted, failed) = match self.queue.delete_batch(url.as_str(), &handles).await {
            Ok(outcome) => {
                for f in &outcome.failed {
                    tracing::error!(queue = url.name(), message_id = %f.id, key = %key, code = %f.code, action = "delete-failed", "archived but not deleted: it stays on its queue and will be archived again");
                }
                (outcome.succeeded, outcome.failed.len() as u64)
            }
            Err(e) => {
                tracing::error!(queue = url.name(), key = %key, error = %e, action = "delete-failed", "archived but not deleted: the messages stay on their queue and will be archived again");
                (Vec::new(), old.len() as u64)
            }
        };
        for id in &deleted {
            tracing::info!(queue = url.name(), message_id = %id, key = %key, action = "archived");
        }
        Ok((deleted.len() as u64, failed))
    }

    async fn release(&self, url: &QueueUrl, held: &[HandleEntry]) {
        for chunk in held.chunks(10) {
            match self
                .queue
                .change_visibility_batch(url.as_str(), chunk, 0)
                .await
            {
                Ok(outcome) if outcome.failed.is_empty() => {}
                Ok(outcome) => tracing::warn!(
                    queue = url.name(),
                    failed = outcome.failed.len(),
                    "some kept messages could not be released; they come back when their visibility ends"
                ),
                Err(e) => {
                    tracing::warn!(queue = url.name(), error = %e, "kept messages could not be released; they come back when their visibility ends")
                }
            }
        }
    }
}
