//! The batch's order: each record is read and keyed first, then standard queues run one group
//! per key concurrently and FIFO queues run in order, holding a group (or the batch) after a
//! failure. A key's later records in the batch (its twins) take the first one's outcome.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures_util::StreamExt;
use redrive_shared::config::FifoOnFailure;
use redrive_shared::key::{IdempotencyKey, KeyError, PayloadHash, derive};
use redrive_shared::meta::{MetaSource, RedriveMeta};

use crate::message::{MalformedRecord, Message};
use crate::ports::{IdempotencyStore, QueueOps};
use crate::process::{FromBody, Processor};
use crate::record::Record;

use super::{Consumer, Outcome, RecordReport, key_digest, now_ms};

impl<S: IdempotencyStore, Q: QueueOps, P: Processor<T>, T: FromBody> Consumer<S, Q, P, T> {
    /// Reads a record's metadata and derives its key: everything that needs no call.
    pub(super) fn prepare(&self, record: Result<Message, MalformedRecord>) -> Prepared {
        let message = match record {
            Ok(message) => message,
            Err(malformed) => return Prepared::Malformed(malformed),
        };
        let (meta, source) = RedriveMeta::read(&message.attributes, &message.message_id);
        if let MetaSource::Garbled(why) = &source {
            tracing::warn!(
                message_id = %message.message_id,
                problem = %why,
                "unreadable x-redrive attribute; keyed on the MessageId"
            );
        }
        let keyed = derive(
            &self.config.key_source,
            &meta.original_message_id,
            &message.body,
            &message.attributes,
        )
        .and_then(|key| {
            let payload = self
                .config
                .payload
                .as_ref()
                .map(|p| p.hash(&message.body, &message.attributes))
                .transpose()?;
            Ok((key, payload))
        });
        match keyed {
            Ok((key, payload)) => Prepared::Keyed {
                message,
                meta,
                key,
                payload,
            },
            Err(error) => Prepared::Unkeyed {
                message,
                meta,
                error,
            },
        }
    }

    /// Standard queues: records with the same key form one group, whose first record is
    /// processed and whose twins take its outcome; groups run concurrently.
    pub(super) async fn run_concurrently(
        &self,
        prepared: Vec<Prepared>,
        window: Window,
    ) -> Vec<RecordReport> {
        let mut groups: Vec<Vec<(usize, Prepared)>> = Vec::new();
        let mut group_of_key: HashMap<String, usize> = HashMap::new();
        for (i, p) in prepared.into_iter().enumerate() {
            let existing = p.key().and_then(|k| group_of_key.get(k.as_str()).copied());
            match existing {
                Some(g) => groups[g].push((i, p)),
                None => {
                    if let Some(k) = p.key() {
                        group_of_key.insert(k.as_str().to_string(), groups.len());
                    }
                    groups.push(vec![(i, p)]);
                }
            }
        }
        let mut indexed: Vec<(usize, RecordReport)> = futures_util::stream::iter(groups)
            .map(|group| Box::pin(self.run_group(group, window)))
            .buffer_unordered(self.settings.max_concurrency.max(1))
            .flat_map(futures_util::stream::iter)
            .collect()
            .await;
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, r)| r).collect()
    }

    pub(super) async fn run_group(
        &self,
        group: Vec<(usize, Prepared)>,
        window: Window,
    ) -> Vec<(usize, RecordReport)> {
        let mut reports = Vec::with_capacity(group.len());
        let mut members = group.into_iter();
        let Some((i, leader)) = members.next() else {
            return reports;
        };
        let (report, settled) = Box::pin(self.run_one(leader, window)).await;
        reports.push((i, report));
        for (i, twin) in members {
            let report = if settled.same_payload(&twin) {
                Box::pin(self.run_twin(twin, &settled)).await
            } else {
                // Not a twin: another payload under the key. It claims on its own, after the
                // first record, so that the store decides (a mismatch when that one completed,
                // processed when it was released).
                Box::pin(self.run_one(twin, window)).await.0
            };
            reports.push((i, report));
        }
        reports
    }

    /// FIFO: in order; once a record is reported failed, the later records of its group
    /// (`FIFO_ON_FAILURE=skip-group`) or of the whole batch (`stop-batch`) are reported failed
    /// unprocessed, so that SQS redelivers them in order. A record whose key an earlier record
    /// of the batch already handled takes that record's outcome.
    pub(super) async fn run_in_order(
        &self,
        prepared: Vec<Prepared>,
        window: Window,
    ) -> Vec<RecordReport> {
        let stop_batch = self.config.fifo_on_failure == FifoOnFailure::StopBatch;
        let mut blocked: HashSet<Option<String>> = HashSet::new();
        let mut stopped = false;
        let mut settled_keys: HashMap<String, Settled> = HashMap::new();
        let mut reports = Vec::with_capacity(prepared.len());
        for record in prepared {
            let group = record.group_id();
            let report = if stopped || blocked.contains(&group) {
                let message_id = record.message_id();
                tracing::info!(
                    message_id = message_id.as_deref().unwrap_or(""),
                    group_id = group.as_deref().unwrap_or(""),
                    outcome = "skipped",
                    "{}",
                    if stopped {
                        "an earlier message of this batch failed (FIFO_ON_FAILURE=stop-batch); not processed"
                    } else {
                        "an earlier message of this group failed; not processed"
                    }
                );
                RecordReport::new(message_id, None, Outcome::Skipped)
            } else if let Some(settled) = record
                .key()
                .and_then(|k| settled_keys.get(k.as_str()))
                .filter(|settled| settled.same_payload(&record))
                .cloned()
            {
                Box::pin(self.run_twin(record, &settled)).await
            } else {
                let key = record.key().map(|k| k.as_str().to_string());
                let (report, settled) = Box::pin(self.run_one(record, window)).await;
                if let Some(key) = key {
                    settled_keys.entry(key).or_insert(settled);
                }
                report
            };
            if report.outcome.is_reported() {
                stopped = stop_batch;
                blocked.insert(group);
            }
            reports.push(report);
        }
        reports
    }

    /// True when a record started now can finish before the deadline.
    pub(super) fn may_start(&self, window: Window) -> bool {
        let Some(deadline) = window.deadline else {
            return true;
        };
        let needed =
            self.processor.time_limit().unwrap_or_default() + self.settings.deadline_margin;
        deadline.saturating_sub(now_ms()) >= needed.as_millis() as i64
    }

    pub(super) async fn run_one(
        &self,
        record: Prepared,
        window: Window,
    ) -> (RecordReport, Settled) {
        // A key this process saw completed costs no call, and no time: it settles even when
        // too little is left before the deadline to start a record.
        if let Prepared::Keyed {
            message,
            meta,
            key,
            payload,
        } = &record
            && let Some(found) = self.remembered(key)
        {
            tracing::debug!(
                message_id = %message.message_id,
                key_digest = %key_digest(key.as_str()),
                "completed within this process's memory; no call to the idempotency store"
            );
            let mut settled =
                Box::pin(self.on_completed(message, meta, key, payload.as_ref(), &found)).await;
            settled.payload = payload.clone();
            let report = self.finish(
                message,
                meta,
                Some(key),
                settled.outcome.clone(),
                settled.result.clone(),
            );
            return (report, settled);
        }
        let (message, meta, key, payload) = match record {
            Prepared::Malformed(malformed) => {
                match &malformed.message_id {
                    Some(id) => tracing::warn!(
                        message_id = %id,
                        outcome = "malformed",
                        reason = %malformed.reason,
                        "malformed record; reported failed"
                    ),
                    None => tracing::error!(
                        outcome = "malformed",
                        reason = %malformed.reason,
                        "record without a messageId cannot be reported; skipped"
                    ),
                }
                let report = RecordReport::new(malformed.message_id, None, Outcome::Malformed);
                return (report, Settled::unstarted());
            }
            Prepared::Unkeyed { message, .. } | Prepared::Keyed { message, .. }
                if !self.may_start(window) =>
            {
                tracing::warn!(
                    message_id = %message.message_id,
                    outcome = "unstarted",
                    "too little time left before the deadline to finish this record; reported failed untouched"
                );
                let report =
                    RecordReport::new(Some(message.message_id.clone()), None, Outcome::Unstarted);
                return (report, Settled::unstarted());
            }
            Prepared::Unkeyed {
                message,
                meta,
                error,
            } => {
                // Replaying cannot make a key appear: a permanent failure of this record alone.
                let outcome =
                    Box::pin(self.give_up(&message, &meta, error.code(), &error.to_string())).await;
                let report = self.finish(&message, &meta, None, outcome, None);
                return (report, Settled::unstarted());
            }
            Prepared::Keyed {
                message,
                meta,
                key,
                payload,
            } => (message, meta, key, payload),
        };
        // Boxed: the nested futures (SDK, HTTP client, processor) are too deep for the
        // compiler's layout queries otherwise.
        let mut settled =
            Box::pin(self.run_keyed(&message, &meta, &key, payload.as_ref(), window.claim_until))
                .await;
        settled.payload = payload;
        let report = self.finish(
            &message,
            &meta,
            Some(&key),
            settled.outcome.clone(),
            settled.result.clone(),
        );
        (report, settled)
    }

    /// A record whose key an earlier record of this batch handled: it takes that outcome
    /// (success: settled without a side effect; transient or in progress: reported failed
    /// after the same delay; permanent: the same dead-lettering), and is never processed.
    pub(super) async fn run_twin(&self, record: Prepared, settled: &Settled) -> RecordReport {
        let Prepared::Keyed {
            message, meta, key, ..
        } = record
        else {
            // Only keyed records have twins.
            return Box::pin(self.run_one(record, Window::unbounded())).await.0;
        };
        tracing::info!(
            message_id = %message.message_id,
            key_digest = %key_digest(key.as_str()),
            leader_outcome = settled.outcome.as_str(),
            "a record with the same key in this batch was handled first; taking its outcome"
        );
        let mut result = None;
        let outcome = match &settled.outcome {
            Outcome::Processed | Outcome::Duplicate => {
                result = settled.result.clone();
                let record = Record::with_history(
                    message.clone(),
                    key.clone(),
                    meta.original_message_id.clone(),
                    meta.attempt,
                );
                self.tell_duplicate(&record, result.as_deref()).await;
                Outcome::Duplicate
            }
            Outcome::InProgress => {
                self.retry_later(&message, None).await;
                Outcome::InProgress
            }
            Outcome::Retry {
                code,
                visibility_seconds,
            } => {
                let after = visibility_seconds.map(|s| Duration::from_secs(u64::from(s)));
                let visibility_seconds = self.retry_later(&message, after).await;
                Outcome::Retry {
                    code: code.clone(),
                    visibility_seconds,
                }
            }
            Outcome::DeadLettered { code, .. } | Outcome::Failed { code } => {
                let text = settled.error.as_deref().unwrap_or("permanent failure");
                self.give_up(&message, &meta, code, text).await
            }
            Outcome::PayloadMismatch { .. } => self.payload_mismatch(&message, &meta).await,
            Outcome::Unstarted => Outcome::Unstarted,
            Outcome::Skipped | Outcome::Malformed => Outcome::Skipped,
        };
        self.finish(&message, &meta, Some(&key), outcome, result)
    }

    /// Logs one record's outcome and makes its report.
    pub(super) fn finish(
        &self,
        message: &Message,
        meta: &RedriveMeta,
        key: Option<&IdempotencyKey>,
        outcome: Outcome,
        result: Option<String>,
    ) -> RecordReport {
        let digest = key.map(|k| key_digest(k.as_str())).unwrap_or_default();
        let code = outcome.code().unwrap_or("");
        // One line a record: a warning when it is reported failed, information otherwise.
        macro_rules! settled {
            ($level:ident, $text:literal) => {
                tracing::$level!(
                    message_id = %message.message_id,
                    key_digest = %digest,
                    original_message_id = %meta.original_message_id,
                    attempt = meta.attempt,
                    receive_count = message.receive_count,
                    outcome = outcome.as_str(),
                    code,
                    $text
                )
            };
        }
        if outcome.is_reported() {
            settled!(warn, "record reported failed");
        } else {
            settled!(info, "record settled");
        }
        RecordReport {
            message_id: Some(message.message_id.clone()),
            key: key.map(|k| k.as_str().to_string()),
            outcome,
            result,
        }
    }
}

/// The invocation's time: how long claims last, and the deadline records must finish by
/// (`None` when the invocation has no usable deadline).
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) claim_until: i64,
    pub(super) deadline: Option<i64>,
}

impl Window {
    pub(super) fn unbounded() -> Self {
        Self {
            claim_until: now_ms(),
            deadline: None,
        }
    }
}

/// A record read and keyed, before any call.
pub(super) enum Prepared {
    Malformed(MalformedRecord),
    /// The key could not be derived: a permanent failure of this record alone.
    Unkeyed {
        message: Message,
        meta: RedriveMeta,
        error: KeyError,
    },
    Keyed {
        message: Message,
        meta: RedriveMeta,
        key: IdempotencyKey,
        /// The payload's fingerprint, when the payload check is on.
        payload: Option<PayloadHash>,
    },
}

impl Prepared {
    pub(super) fn message(&self) -> Option<&Message> {
        match self {
            Self::Malformed(_) => None,
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => Some(message),
        }
    }

    pub(super) fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Self::Keyed { key, .. } => Some(key),
            _ => None,
        }
    }

    pub(super) fn payload(&self) -> Option<&PayloadHash> {
        match self {
            Self::Keyed { payload, .. } => payload.as_ref(),
            _ => None,
        }
    }

    pub(super) fn message_id(&self) -> Option<String> {
        match self {
            Self::Malformed(m) => m.message_id.clone(),
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => {
                Some(message.message_id.clone())
            }
        }
    }

    pub(super) fn group_id(&self) -> Option<String> {
        match self {
            Self::Malformed(m) => m.group_id.clone(),
            Self::Unkeyed { message, .. } | Self::Keyed { message, .. } => message.group_id.clone(),
        }
    }
}

/// How a key's first record in the batch ended: its twins take this outcome.
#[derive(Debug, Clone)]
pub(super) struct Settled {
    pub(super) outcome: Outcome,
    /// The permanent failure's text, for the twins' `lastError` stamps.
    pub(super) error: Option<String>,
    /// The stored output (JSON text), for the twins of a success.
    pub(super) result: Option<String>,
    /// The first record's payload fingerprint (payload check on).
    pub(super) payload: Option<PayloadHash>,
}

impl Settled {
    pub(super) fn unstarted() -> Self {
        Outcome::Unstarted.into()
    }

    /// True when `record` carries the payload of the record that settled its key (always, when
    /// the payload check is off): only then is it a twin that takes that outcome.
    pub(super) fn same_payload(&self, record: &Prepared) -> bool {
        self.payload.as_ref() == record.payload()
    }
}

impl From<Outcome> for Settled {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            error: None,
            payload: None,
            result: None,
        }
    }
}
