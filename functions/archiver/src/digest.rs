//! The daily digest: once a day, at the reminder hour (UTC), one SNS message for the whole
//! fleet listing each DLQ that has messages or groups not resolved, with its groups as triage's
//! books know them. Never a message body: group titles are normalised error texts, as in
//! triage's alerts.
//!
//! The day is claimed first, with a conditional PutItem of `redrive:digest:<YYYY-MM-DD>` in the
//! books' table: one digest goes out a day whatever the schedule and however many archivers
//! run. A run that cannot claim, read or publish logs an ERROR and goes on archiving.

use aws_sdk_dynamodb::types::AttributeValue;
use redrive_engine::aws::port_error;
use redrive_engine::ports::{PortError, Queue};
use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::config::QueueUrl;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::triage::state::{Book, State};
use serde::Serialize;

use crate::config::DigestConfig;

/// Groups listed per DLQ, the largest first; the others are counted in `moreGroups`.
pub const DIGEST_GROUPS_PER_QUEUE: usize = 20;
/// The largest digest published, in bytes of JSON: below SNS's 256 KiB, with room for the
/// subject and attributes. DLQs beyond it are counted in `moreQueues`.
pub const DIGEST_MAX_BYTES: usize = 240 * 1024;
/// How long a day's claim is kept (its `expiration`, the table's TTL attribute).
const CLAIM_KEPT_SECONDS: i64 = 7 * 86_400;

/// The partition key of the claim of the day of `now_ms` (UTC).
pub fn claim_key(now_ms: i64) -> String {
    format!("redrive:digest:{}", &rfc3339_from_millis(now_ms)[..10])
}

/// The hour of the day (UTC) of `now_ms`.
pub fn hour_utc(now_ms: i64) -> u32 {
    u32::try_from(now_ms.max(0) / 3_600_000 % 24).unwrap_or(0)
}

/// One group of a DLQ as the digest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DigestGroup {
    pub group: String,
    pub title: String,
    pub state: State,
    pub count: u64,
    pub last_seen: String,
    /// When the group's hold ends (RFC 3339), while it holds with an end time; else null.
    pub held_until: Option<String>,
}

/// One DLQ of the digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DigestQueue {
    pub queue: String,
    /// Messages on the DLQ (visible, in flight and delayed); null when it could not be read.
    pub depth: Option<u64>,
    /// Its groups not resolved, the largest first, at most [`DIGEST_GROUPS_PER_QUEUE`].
    pub groups: Vec<DigestGroup>,
    /// Groups not resolved beyond those listed ("and N more").
    pub more_groups: usize,
    /// The book could not be read (the ERROR log says why): its groups are unknown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub book_unreadable: bool,
}

/// The whole message: `{"kind":"daily-digest","at":...,"queues":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DailyDigest {
    pub kind: &'static str,
    pub at: String,
    pub queues: Vec<DigestQueue>,
    /// DLQs left out to keep the message within SNS's size.
    #[serde(skip_serializing_if = "is_zero")]
    pub more_queues: usize,
    /// Groups not resolved on every DLQ (listed or not).
    pub groups: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What a DLQ's entry is made of: its depth and book as read (`Err`: could not be read).
pub struct QueueFacts {
    pub queue: String,
    pub depth: Option<u64>,
    pub book: Result<Option<Book>, ()>,
}

/// The entry of one DLQ, `None` when it has neither messages nor groups not resolved.
pub fn queue_entry(facts: &QueueFacts, now_ms: i64) -> Option<(DigestQueue, usize)> {
    let mut groups: Vec<DigestGroup> = match &facts.book {
        Ok(Some(book)) => book
            .largest_first(false)
            .into_iter()
            .map(|(id, r)| DigestGroup {
                group: id.clone(),
                title: r.title.clone(),
                state: r.state,
                count: r.last_count,
                last_seen: r.last_seen.clone(),
                held_until: r
                    .hold
                    .as_ref()
                    .filter(|h| h.holds(now_ms))
                    .and_then(|h| h.until_ms)
                    .map(rfc3339_from_millis),
            })
            .collect(),
        _ => Vec::new(),
    };
    let unreadable = facts.book.is_err();
    // Listed: groups not resolved, messages waiting, or nothing known at all (neither the book
    // nor the depth could be read).
    let waiting = facts.depth.is_some_and(|d| d > 0);
    let unknown = unreadable && facts.depth.is_none();
    if groups.is_empty() && !waiting && !unknown {
        return None;
    }
    let total = groups.len();
    groups.truncate(DIGEST_GROUPS_PER_QUEUE);
    let more_groups = total - groups.len();
    Some((
        DigestQueue {
            queue: facts.queue.clone(),
            depth: facts.depth,
            groups,
            more_groups,
            book_unreadable: unreadable,
        },
        total,
    ))
}

/// The digest of `facts` (in order) and its SNS subject, `None` when nothing is to be listed.
pub fn compose(facts: &[QueueFacts], now_ms: i64) -> Option<(String, String)> {
    let mut queues = Vec::new();
    let mut groups = 0;
    for f in facts {
        if let Some((entry, total)) = queue_entry(f, now_ms) {
            groups += total;
            queues.push(entry);
        }
    }
    if queues.is_empty() {
        return None;
    }
    let dlqs = queues.len();
    let mut digest = DailyDigest {
        kind: "daily-digest",
        at: rfc3339_from_millis(now_ms),
        queues,
        more_queues: 0,
        groups,
    };
    let mut json = serde_json::to_string(&digest).unwrap_or_default();
    while json.len() > DIGEST_MAX_BYTES && digest.queues.len() > 1 {
        digest.queues.pop();
        digest.more_queues += 1;
        json = serde_json::to_string(&digest).unwrap_or_default();
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let subject = format!(
        "redrive: {} on {}",
        plural(groups, "group", "groups"),
        plural(dlqs, "DLQ", "DLQs")
    );
    Some((subject, json))
}

/// What the digest did at a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestOutcome {
    /// Not the reminder hour.
    NotTheHour,
    /// Another run claimed the day first.
    AlreadySent,
    /// The day is claimed; no DLQ had anything to list.
    NothingToList,
    /// Published.
    Sent,
    /// The claim or the publish failed (logged).
    Failed,
}

/// The digest's clients and settings.
#[derive(Clone, Debug)]
pub struct Digest {
    pub sns: aws_sdk_sns::Client,
    pub books: DynamoDbTriageStore,
    pub config: DigestConfig,
}

impl Digest {
    pub fn new(sdk: &aws_config::SdkConfig, config: DigestConfig) -> Self {
        Self {
            sns: aws_sdk_sns::Client::new(sdk),
            books: DynamoDbTriageStore::new(sdk, &config.table),
            config,
        }
    }

    /// Claims the day of `now_ms`: `Ok(true)` when this run is the first to.
    async fn claim(&self, now_ms: i64) -> Result<bool, PortError> {
        let out = self
            .books
            .client
            .put_item()
            .table_name(&self.config.table)
            .item("queue", AttributeValue::S(claim_key(now_ms)))
            .item("at", AttributeValue::S(rfc3339_from_millis(now_ms)))
            .item(
                "expiration",
                AttributeValue::N((now_ms / 1000 + CLAIM_KEPT_SECONDS).to_string()),
            )
            .condition_expression("attribute_not_exists(#q)")
            .expression_attribute_names("#q", "queue")
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(port_error("PutItem", e)),
        }
    }

    /// The digest of the run at `now_ms` over `dlqs`: claimed, composed, published.
    pub async fn run<Q: Queue>(&self, queue: &Q, dlqs: &[QueueUrl], now_ms: i64) -> DigestOutcome {
        if hour_utc(now_ms) != self.config.hour_utc {
            return DigestOutcome::NotTheHour;
        }
        match self.claim(now_ms).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    key = claim_key(now_ms),
                    "daily digest: the day is already claimed"
                );
                return DigestOutcome::AlreadySent;
            }
            Err(e) => {
                tracing::error!(table = %self.config.table, action = "digest-failed", error = %e, "daily digest: the day could not be claimed; no digest is sent by this run");
                return DigestOutcome::Failed;
            }
        }
        let mut facts = Vec::with_capacity(dlqs.len());
        for url in dlqs {
            let depth = match queue.depth(url.as_str()).await {
                Ok(d) => Some(d.total()),
                Err(e) => {
                    tracing::error!(queue = url.name(), action = "digest-depth-unreadable", error = %e, "daily digest: the DLQ's depth cannot be read");
                    None
                }
            };
            let book = self.books.read(url.as_str()).await.map_err(|e| {
                tracing::error!(queue = url.name(), table = %self.config.table, action = "digest-book-unreadable", error = %e, "daily digest: the DLQ's triage book cannot be read; it is listed without its groups");
            });
            facts.push(QueueFacts {
                queue: url.name().to_string(),
                depth,
                book,
            });
        }
        let Some((subject, message)) = compose(&facts, now_ms) else {
            tracing::info!("daily digest: nothing to list");
            return DigestOutcome::NothingToList;
        };
        match self
            .sns
            .publish()
            .topic_arn(&self.config.topic_arn)
            .subject(&subject)
            .message(message)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(topic = %self.config.topic_arn, subject = %subject, action = "digest-sent", "daily digest published");
                DigestOutcome::Sent
            }
            Err(e) => {
                let e = port_error("Publish", e);
                tracing::error!(topic = %self.config.topic_arn, action = "digest-failed", error = %e, "daily digest: the publish failed; the day stays claimed");
                DigestOutcome::Failed
            }
        }
    }
}
