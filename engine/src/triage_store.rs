//! Where triage's decisions live: each queue's [`Book`] (group states, holds, notes, audit)
//! and the frozen plans (the message ids a pass listed for a group), in DynamoDB.
//!
//! The table is keyed like the circuit table (partition key `queue`, a string), so the
//! circuit table can hold both; items:
//!
//! | `queue` (key)                   | attributes                                         |
//! |---------------------------------|----------------------------------------------------|
//! | `triage#<queue ARN>`            | `version` N (each write conditional on it), `record` S (the book as JSON), `updatedAt` S |
//! | `triage-plan#<plan id>#<chunk>` | `ids` S (newline-separated MessageIds), `chunks` N, `size` N |
//!
//! One queue has one book however it is named, as it has one circuit record: the re-driver (its
//! configured URL), the CLI (a name, an ARN or a URL) and the triage console all reach it under
//! the queue's ARN, rebuilt from the URL ([`crate::circuit::record_key`]). A book written under
//! the URL as given (the key before) is found there when the ARN has none, and copied under the
//! ARN at that first read, its version kept: no hold, acknowledgement or note is lost on an
//! upgrade. The old item is left as it was and read no more.
//!
//! A plan never changes: its id is a digest of the group and its sorted ids. Writers of a book
//! go through [`update`]: load, apply, save on the version read, and on a conflict load again
//! and apply the same change to what the other writer left.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::AttributeValue;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::triage::Group;
use redrive_shared::triage::state::{Alert, Book, GroupRecord, PassFacts, Refused, State};

use crate::aws::port_error;
use crate::circuit::{SaveOutcome, VersionedWrite, s, unreadable_item};
use crate::lock;
use crate::ports::PortError;

/// MessageIds per plan item (SQS ids are 36 characters: about 150 KB of the 400 KB limit).
pub const PLAN_CHUNK: usize = 4000;
/// Loads before an update gives up on a book others keep writing.
pub const UPDATE_TRIES: u32 = 8;

/// The item key of a book stored under `queue` as it is (a URL as given: the key before books
/// were keyed by the queue's ARN; an ARN: the key now).
pub fn book_key(queue: &str) -> String {
    format!("triage#{queue}")
}

fn plan_key(plan_id: &str, chunk: usize) -> String {
    format!("triage-plan#{plan_id}#{chunk}")
}

/// The books and plans of triage.
pub trait TriageStore: Sync {
    /// The book of `queue_url` and its version, `None` when there is none yet.
    fn load(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<Option<(u64, Book)>, PortError>> + Send;

    /// Writes the book if the stored version is still the one expected.
    fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, Book>,
    ) -> impl Future<Output = Result<SaveOutcome, PortError>> + Send;

    /// Stores a plan's ids (idempotent: the same id always names the same ids).
    fn save_plan(
        &self,
        plan_id: &str,
        ids: &[String],
    ) -> impl Future<Output = Result<(), PortError>> + Send;

    /// A plan's ids, `None` when no plan of that id was stored.
    fn load_plan(
        &self,
        plan_id: &str,
    ) -> impl Future<Output = Result<Option<Vec<String>>, PortError>> + Send;
}

/// Why a change to a book did not land.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TriageError {
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("the triage book of {0} kept changing under {UPDATE_TRIES} writes; try again")]
    Contended(String),
}

/// Loads the book of `queue_url` (a new one when there is none), applies `change` and saves on
/// the version read; on a conflict, again on what the other writer left. Returns the change's
/// answer and the book as saved. A refused change saves nothing.
pub async fn update<S: TriageStore, T>(
    store: &S,
    queue_url: &str,
    mut change: impl FnMut(&mut Book) -> Result<T, Refused>,
) -> Result<(T, Book), TriageError> {
    for _ in 0..UPDATE_TRIES {
        let (version, mut book) = match store.load(queue_url).await? {
            Some((v, b)) => (Some(v), b),
            None => (None, Book::new(queue_url)),
        };
        let answer = change(&mut book)?;
        match store
            .save(queue_url, VersionedWrite::new(&book, version))
            .await?
        {
            SaveOutcome::Saved { .. } => return Ok((answer, book)),
            SaveOutcome::Conflict => continue,
        }
    }
    Err(TriageError::Contended(queue_url.to_string()))
}

/// A pass's groups recorded in the queue's book, as `redrive triage --table` and the archiver's
/// sweeps record them: each group's plan stored, each group observed (a new group and a
/// regression raise an alert), its pass facts kept; a complete pass (every message on the
/// queue was read) marks the groups it did not find resolved; holds whose time ran out end.
pub async fn record_pass<S: TriageStore>(
    store: &S,
    queue_url: &str,
    groups: &[Group],
    complete: bool,
    now: i64,
) -> Result<PassRecorded, TriageError> {
    for g in groups {
        store.save_plan(&g.plan_id, &g.message_ids).await?;
    }
    let ((alerts, trends, gone), book) = update(store, queue_url, |b| {
        let trends: BTreeMap<String, String> = groups
            .iter()
            .map(|g| (g.id.clone(), trend(b.groups.get(&g.id), g.count as u64)))
            .collect();
        let gone: Vec<String> = if complete {
            b.groups
                .iter()
                .filter(|(id, r)| r.state != State::Resolved && !trends.contains_key(*id))
                .map(|(id, _)| id.clone())
                .collect()
        } else {
            Vec::new()
        };
        let mut alerts = Vec::new();
        for g in groups {
            let plan = Some((g.plan_id.as_str(), g.message_ids.len() as u64));
            alerts.extend(b.observe(
                &g.id,
                &g.title,
                g.source.as_deref(),
                g.count as u64,
                plan,
                now,
            ));
            b.keep_pass_facts(&g.id, PassFacts::of(g), now)?;
        }
        b.passed(now);
        if complete {
            b.absent(groups.iter().map(|g| g.id.as_str()), now);
        }
        b.expire(now);
        Ok((alerts, trends, gone))
    })
    .await?;
    Ok(PassRecorded {
        alerts,
        trends,
        gone,
        book,
    })
}

/// What recording a pass did: its alerts, each group's trend against the pass before it, the
/// groups a complete pass no longer found, and the book as saved.
#[derive(Debug, Clone)]
pub struct PassRecorded {
    pub alerts: Vec<Alert>,
    /// Group id -> `new` (the book did not know it), `back` (it was resolved: a regression),
    /// `+n` or `-n` (its count against the last pass that recorded it), or `=`.
    pub trends: BTreeMap<String, String>,
    /// Groups not resolved before a complete pass that did not find them (now resolved).
    pub gone: Vec<String>,
    pub book: Book,
}

/// A group's trend: what the book knew of it (`previous`) against its `count` now.
fn trend(previous: Option<&GroupRecord>, count: u64) -> String {
    match previous {
        None => "new".into(),
        Some(r) if r.state == State::Resolved => "back".into(),
        Some(r) if count > r.last_count => format!("+{}", count - r.last_count),
        Some(r) if count < r.last_count => format!("-{}", r.last_count - count),
        Some(_) => "=".into(),
    }
}

/// The book of `queue_url`, a new empty one when there is none.
pub async fn load_or_new<S: TriageStore>(store: &S, queue_url: &str) -> Result<Book, PortError> {
    Ok(store
        .load(queue_url)
        .await?
        .map_or_else(|| Book::new(queue_url), |(_, b)| b))
}

/// The triage table in DynamoDB (AWS, or moto via `AWS_ENDPOINT_URL`).
#[derive(Clone, Debug)]
pub struct DynamoDbTriageStore {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
}

impl DynamoDbTriageStore {
    pub fn new(sdk: &aws_config::SdkConfig, table: &str) -> Self {
        Self {
            client: aws_sdk_dynamodb::Client::new(sdk),
            table: table.to_string(),
        }
    }
}

fn bad_item(key: &str, problem: String) -> PortError {
    unreadable_item("BadTriageItem", format!("the triage item {key}"), problem)
}

impl DynamoDbTriageStore {
    /// The key of `queue`'s book: `triage#` and the queue's ARN ([`crate::circuit::record_key`],
    /// in the client's region), whichever form names it.
    pub fn key(&self, queue: &str) -> String {
        book_key(&crate::circuit::client_record_key(&self.client, queue))
    }

    /// The book an item holds, with its version.
    fn book_of(
        key: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<(u64, Book), PortError> {
        let version = number(item, key, "version")?;
        let text = item
            .get("record")
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| bad_item(key, "record is missing".into()))?;
        let book = serde_json::from_str(text)
            .map_err(|e| bad_item(key, format!("record is not a triage book: {e}")))?;
        Ok((version, book))
    }

    /// The PutItem of `book` under `key` at `version` (for [`crate::circuit::put_if_version`]).
    fn put_book(
        &self,
        key: &str,
        book: &Book,
        version: u64,
    ) -> Result<aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder, PortError>
    {
        let json = serde_json::to_string(book).map_err(|e| {
            PortError::new("PutItem", "Serialization", e.to_string(), false).with_source(e)
        })?;
        Ok(self
            .client
            .put_item()
            .table_name(&self.table)
            .item("queue", s(key))
            .item("version", AttributeValue::N(version.to_string()))
            .item("record", s(json))
            .item("updatedAt", s(rfc3339_from_millis(crate::now_ms()))))
    }

    /// The book of `queue` as it is stored, read only: under the queue's ARN, else under
    /// `queue` as given (the key before), which is not copied (a reader that may only read,
    /// such as the archiver's daily digest). `None` when there is none.
    pub async fn read(&self, queue: &str) -> Result<Option<Book>, PortError> {
        let key = self.key(queue);
        let old_key = book_key(queue);
        let keys = if key == old_key {
            vec![key]
        } else {
            vec![key, old_key]
        };
        for key in keys {
            if let Some(item) = self.get(&key).await? {
                return Self::book_of(&key, &item).map(|(_, book)| Some(book));
            }
        }
        Ok(None)
    }

    async fn get(&self, key: &str) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("queue", s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error("GetItem", e))?;
        Ok(out.item)
    }
}

fn number(item: &HashMap<String, AttributeValue>, key: &str, name: &str) -> Result<u64, PortError> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| bad_item(key, format!("{name} is not a number")))
}

impl TriageStore for DynamoDbTriageStore {
    /// The book under the queue's ARN; when there is none, the one an earlier version wrote
    /// under `queue_url` as given, copied under the ARN (its version kept) before it is returned.
    async fn load(&self, queue_url: &str) -> Result<Option<(u64, Book)>, PortError> {
        let key = self.key(queue_url);
        if let Some(item) = self.get(&key).await? {
            return Self::book_of(&key, &item).map(Some);
        }
        let old_key = book_key(queue_url);
        if key == old_key {
            return Ok(None);
        }
        let Some(item) = self.get(&old_key).await? else {
            return Ok(None);
        };
        let (version, book) = Self::book_of(&old_key, &item)?;
        let put = self.put_book(&key, &book, version)?;
        match crate::circuit::put_if_version(put, None, version).await? {
            SaveOutcome::Saved { .. } => {
                tracing::info!(
                    queue = queue_url,
                    key = %key,
                    version,
                    "triage book found under the queue's URL: copied under its ARN, where every reader finds it"
                );
                Ok(Some((version, book)))
            }
            // Another reader or writer made the book under the ARN meanwhile: that one is the
            // truth.
            SaveOutcome::Conflict => match self.get(&key).await? {
                Some(item) => Self::book_of(&key, &item).map(Some),
                None => Ok(None),
            },
        }
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, Book>,
    ) -> Result<SaveOutcome, PortError> {
        let version = write.next_version();
        let put = self.put_book(&self.key(queue_url), write.record, version)?;
        crate::circuit::put_if_version(put, write.expected, version).await
    }

    async fn save_plan(&self, plan_id: &str, ids: &[String]) -> Result<(), PortError> {
        let chunks: Vec<&[String]> = if ids.is_empty() {
            vec![&[]]
        } else {
            ids.chunks(PLAN_CHUNK).collect()
        };
        for (n, chunk) in chunks.iter().enumerate() {
            self.client
                .put_item()
                .table_name(&self.table)
                .item("queue", s(plan_key(plan_id, n)))
                .item("ids", s(chunk.join("\n")))
                .item("chunks", AttributeValue::N(chunks.len().to_string()))
                .item("size", AttributeValue::N(ids.len().to_string()))
                .send()
                .await
                .map_err(|e| port_error("PutItem", e))?;
        }
        Ok(())
    }

    async fn load_plan(&self, plan_id: &str) -> Result<Option<Vec<String>>, PortError> {
        let first = plan_key(plan_id, 0);
        let Some(item) = self.get(&first).await? else {
            return Ok(None);
        };
        let chunks = number(&item, &first, "chunks")? as usize;
        let size = number(&item, &first, "size")? as usize;
        let mut ids = Vec::with_capacity(size);
        let mut item = Some(item);
        for n in 0..chunks {
            let key = plan_key(plan_id, n);
            let this = match item.take() {
                Some(i) => i,
                None => self
                    .get(&key)
                    .await?
                    .ok_or_else(|| bad_item(&key, "a chunk of the plan is missing".into()))?,
            };
            let text = this
                .get("ids")
                .and_then(|v| v.as_s().ok())
                .ok_or_else(|| bad_item(&key, "ids is missing".into()))?;
            ids.extend(
                text.split('\n')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
        }
        if ids.len() != size {
            return Err(bad_item(
                &first,
                format!("the plan lists {} ids, its size says {size}", ids.len()),
            ));
        }
        Ok(Some(ids))
    }
}

/// An in-memory store: for the engine's tests on the port fakes and the bench. Its clones
/// share one store, as two runs share a table.
#[derive(Debug, Default, Clone)]
pub struct MemoryTriageStore {
    books: Arc<Mutex<HashMap<String, (u64, Book)>>>,
    plans: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

impl TriageStore for MemoryTriageStore {
    async fn load(&self, queue_url: &str) -> Result<Option<(u64, Book)>, PortError> {
        Ok(lock(&self.books).get(queue_url).cloned())
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, Book>,
    ) -> Result<SaveOutcome, PortError> {
        let mut books = lock(&self.books);
        let current = books.get(queue_url).map(|(v, _)| *v);
        if current != write.expected {
            return Ok(SaveOutcome::Conflict);
        }
        let version = write.next_version();
        books.insert(queue_url.to_string(), (version, write.record.clone()));
        Ok(SaveOutcome::Saved { version })
    }

    async fn save_plan(&self, plan_id: &str, ids: &[String]) -> Result<(), PortError> {
        lock(&self.plans).insert(plan_id.to_string(), ids.to_vec());
        Ok(())
    }

    async fn load_plan(&self, plan_id: &str) -> Result<Option<Vec<String>>, PortError> {
        Ok(lock(&self.plans).get(plan_id).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_764_000_000_000;

    /// One pass's groups: `n` messages of each body shape (no recorded cause: a group a shape).
    fn pass(shapes: &[(&str, usize)]) -> Vec<Group> {
        use redrive_shared::triage::{Grouper, GroupingConfig, Observation};
        let mut grouper = Grouper::new(GroupingConfig::default());
        let attributes = redrive_shared::Attributes::new();
        for (body, n) in shapes {
            for i in 0..*n {
                let id = format!("{body}-{i}");
                grouper.add(&Observation {
                    message_id: &id,
                    body,
                    attributes: &attributes,
                    sent_timestamp_ms: Some(T0),
                    dead_letter_source_arn: None,
                });
            }
        }
        grouper.finish()
    }

    #[tokio::test]
    async fn each_recorded_pass_says_each_groups_trend_and_what_a_complete_pass_no_longer_found() {
        let store = MemoryTriageStore::default();
        let first = pass(&[(r#"{"a":1}"#, 3), (r#"{"b":"x"}"#, 2)]);
        let id =
            |groups: &[Group], n: usize| groups.iter().find(|g| g.count == n).unwrap().id.clone();
        let (a, b) = (id(&first, 3), id(&first, 2));
        let r = record_pass(&store, "q", &first, true, T0).await.unwrap();
        assert_eq!(
            (r.trends[&a].as_str(), r.trends[&b].as_str()),
            ("new", "new")
        );
        assert_eq!(r.alerts.len(), 2);
        // A complete pass: a grew, b is gone (and resolved)
        let r = record_pass(&store, "q", &pass(&[(r#"{"a":1}"#, 5)]), true, T0 + 1)
            .await
            .unwrap();
        assert_eq!(r.trends[&a], "+2");
        assert_eq!(r.gone, vec![b.clone()]);
        assert_eq!(r.book.groups[&b].state, State::Resolved);
        // A sample: a shrank, and nothing is said gone
        let r = record_pass(&store, "q", &pass(&[(r#"{"a":1}"#, 1)]), false, T0 + 2)
            .await
            .unwrap();
        assert_eq!(r.trends[&a], "-4");
        assert!(r.gone.is_empty());
        // b again: back from resolved (a regression), a the same
        let again = pass(&[(r#"{"a":1}"#, 1), (r#"{"b":"x"}"#, 2)]);
        let r = record_pass(&store, "q", &again, true, T0 + 3)
            .await
            .unwrap();
        assert_eq!(
            (r.trends[&a].as_str(), r.trends[&b].as_str()),
            ("=", "back")
        );
        assert_eq!(r.alerts.len(), 1, "{:?}", r.alerts);
        assert_eq!(r.alerts[0].kind, "regressed");
    }

    #[tokio::test]
    async fn an_update_on_a_moved_version_applies_the_change_to_what_the_other_writer_left() {
        let store = MemoryTriageStore::default();
        update(&store, "q", |b| {
            Ok(b.observe("g2-a", "t", None, 1, None, T0))
        })
        .await
        .unwrap();
        // Another writer observes a second group between this writer's load and save.
        let (v, mut other) = store.load("q").await.unwrap().unwrap();
        other.observe("g2-b", "u", None, 1, None, T0);
        let mut raced = false;
        let ((), book) = update(&store, "q", |b| {
            if !raced {
                raced = true;
                let mut books = lock(&store.books);
                books.insert("q".into(), (v + 1, other.clone()));
            }
            b.acknowledge("g2-a", "ops", T0)?;
            Ok(())
        })
        .await
        .unwrap();
        assert!(
            book.groups.contains_key("g2-b"),
            "the other writer's group is kept"
        );
        assert_eq!(
            book.get("g2-a").unwrap().state,
            redrive_shared::triage::state::State::Acknowledged
        );
        let refused = update(&store, "q", |b| b.release("g2-a", "ops", T0)).await;
        assert!(matches!(refused, Err(TriageError::Refused(_))));
    }
}
