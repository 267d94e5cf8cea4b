//! `--causes-table`: the consumer's cause records, for the messages that carry no cause.
//!
//! A message SQS moved to the DLQ after `maxReceiveCount` failed receives is the original,
//! untouched: its `x-redrive` (if any) has no `lastError`. The consumer recorded the cause of
//! each failed attempt in its idempotency table under `cause#<record id of the idempotency key>`
//! (`redrive_shared::triage::cause`). A pass with a table computes each such message's key as the
//! consumer does (`--causes-key`, `--causes-namespace`), reads the records with BatchGetItem (100
//! keys a call, unprocessed keys asked again), and groups the message by the recorded cause. The
//! stamp wins over a record; a message with no record stays grouped by what it carries.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use clap::Args;
use serde_json::{Value, json};

use redrive_engine::aws::port_error;
use redrive_engine::ports::Received;
use redrive_shared::key::{IdempotencyKey, KeySource, derive, parse_namespace};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::triage::cause::{CauseItem, attr, item_id};
use redrive_shared::triage::facts::CauseOrigin;
use redrive_shared::triage::{Group, GroupId, RecordedCause};

use super::Read;
use crate::context::{CliError, Ctx};

/// Keys in one BatchGetItem: DynamoDB's limit.
pub const KEYS_PER_CALL: usize = 100;
/// Calls that ask again for the keys DynamoDB left unprocessed, after the first.
const UNPROCESSED_RETRIES: u32 = 8;

/// Where the consumer recorded the causes, and how it keys messages.
#[derive(Debug, Clone, Args)]
pub struct CausesArgs {
    /// The consumer's idempotency table, where it records the cause of each failed attempt:
    /// a message whose x-redrive carries no lastError (SQS moved it after maxReceiveCount) is
    /// grouped by the cause recorded under its idempotency key.
    #[arg(
        long = "causes-table",
        value_name = "TABLE",
        env = "REDRIVE_CAUSES_TABLE"
    )]
    pub causes_table: Option<String>,
    /// The consumer's IDEMPOTENCY_KEY: `message` (originalMessageId from x-redrive, else the
    /// MessageId), `body`, or its fields (`/orderId`, `attribute:tenant`).
    #[arg(
        long = "causes-key",
        value_name = "SOURCE",
        env = "REDRIVE_CAUSES_KEY",
        default_value = "message",
        value_parser = KeySource::parse
    )]
    pub causes_key: KeySource,
    /// The consumer's record namespace: its IDEMPOTENCY_NAMESPACE, else its Lambda function's
    /// name (the deployed consumer's default); none for a consumer run outside Lambda without one.
    #[arg(
        long = "causes-namespace",
        value_name = "NAME",
        env = "REDRIVE_CAUSES_NAMESPACE",
        value_parser = parse_namespace
    )]
    pub causes_namespace: Option<String>,
}

/// The cause records of one table, as the consumer keys them.
pub struct CauseLookup {
    client: aws_sdk_dynamodb::Client,
    table: String,
    key: KeySource,
    namespace: Option<String>,
    /// Messages looked up, and of those, found with a record.
    pub looked_up: usize,
    pub found: usize,
}

impl CauseLookup {
    /// `None` without `--causes-table`.
    pub fn new(ctx: &Ctx, args: &CausesArgs) -> Option<Self> {
        let table = args.causes_table.as_deref().filter(|t| !t.is_empty())?;
        Some(Self {
            client: ctx.clients.dynamodb.clone(),
            table: table.to_string(),
            key: args.causes_key.clone(),
            namespace: args.causes_namespace.clone(),
            looked_up: 0,
            found: 0,
        })
    }

    /// The cause item a message's record would have: none when its stamp already carries a
    /// cause (the stamp wins), or when the consumer's key cannot be derived from it.
    pub fn item_id_of(&self, message: &Received) -> Option<String> {
        item_id_for(&self.key, self.namespace.as_deref(), message)
    }

    /// The cause items of `ids` (at most [`KEYS_PER_CALL`] distinct ids a call), those that
    /// exist, by id.
    pub async fn fetch(&self, ids: &[String]) -> Result<HashMap<String, CauseItem>, CliError> {
        let mut unique: Vec<&String> = Vec::new();
        let mut seen = HashSet::new();
        for id in ids {
            if seen.insert(id) {
                unique.push(id);
            }
        }
        let mut found = HashMap::new();
        for chunk in unique.chunks(KEYS_PER_CALL) {
            let keys = chunk
                .iter()
                .map(|id| HashMap::from([(attr::ID.to_string(), AttributeValue::S((*id).clone()))]))
                .collect();
            let mut request = Some(self.keys_and_attributes(keys)?);
            let mut tries = 0;
            let mut wait = Duration::from_millis(50);
            while let Some(ask) = request.take() {
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, ask)
                    .send()
                    .await
                    .map_err(|e| CliError::Aws(port_error("BatchGetItem", e)))?;
                for item in out
                    .responses
                    .unwrap_or_default()
                    .remove(&self.table)
                    .unwrap_or_default()
                {
                    if let Some(AttributeValue::S(id)) = item.get(attr::ID) {
                        found.insert(id.clone(), read_item(&item));
                    }
                }
                request = out
                    .unprocessed_keys
                    .unwrap_or_default()
                    .remove(&self.table)
                    .filter(|k| !k.keys().is_empty());
                if request.is_some() {
                    tries += 1;
                    if tries > UNPROCESSED_RETRIES {
                        return Err(CliError::Config(format!(
                            "BatchGetItem on {} left keys unprocessed after {UNPROCESSED_RETRIES} retries (throttled): run triage again, or raise the table's read capacity",
                            self.table
                        )));
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        }
        Ok(found)
    }

    fn keys_and_attributes(
        &self,
        keys: Vec<HashMap<String, AttributeValue>>,
    ) -> Result<KeysAndAttributes, CliError> {
        KeysAndAttributes::builder()
            .set_keys(Some(keys))
            // Strongly consistent: a failure recorded a moment ago is read.
            .consistent_read(true)
            .build()
            .map_err(|e| CliError::Config(format!("BatchGetItem request: {e}")))
    }
}

/// The cause item of `message` for a consumer keyed by `key` under `namespace`: none when its
/// stamp carries a cause, or when the key cannot be derived.
fn item_id_for(key: &KeySource, namespace: Option<&str>, message: &Received) -> Option<String> {
    let (meta, _) = RedriveMeta::read(&message.attributes, &message.message_id);
    if meta.last_error.is_some() {
        return None;
    }
    let key: IdempotencyKey = derive(
        key,
        &meta.original_message_id,
        &message.body,
        &message.attributes,
    )
    .ok()?;
    Some(item_id(&key, namespace))
}

fn read_item(item: &HashMap<String, AttributeValue>) -> CauseItem {
    let s = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    };
    CauseItem {
        class: s(attr::CLASS).unwrap_or_default(),
        code: s(attr::CODE).unwrap_or_default(),
        message: s(attr::MESSAGE).unwrap_or_default(),
        first_failed_at: s(attr::FIRST_FAILED_AT),
        last_failed_at: s(attr::LAST_FAILED_AT),
        attempts: match item.get(attr::ATTEMPTS) {
            Some(AttributeValue::N(n)) => n.parse().ok(),
            _ => None,
        },
    }
}

/// The messages of a pass on their way to grouping: each one that may have a cause record
/// waits until [`KEYS_PER_CALL`] of them can be looked up in one call; any other goes on at once.
pub struct Batcher {
    lookup: Option<CauseLookup>,
    pending: Vec<(Received, String)>,
}

impl Batcher {
    pub fn new(lookup: Option<CauseLookup>) -> Self {
        Self {
            lookup,
            pending: Vec::new(),
        }
    }

    /// Messages waiting for their lookup.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// `message` on its way: what is ready to group now (none while a lookup batch fills).
    pub async fn push(&mut self, message: Received) -> Result<Vec<Read>, CliError> {
        let Some(id) = self.lookup.as_ref().and_then(|l| l.item_id_of(&message)) else {
            return Ok(vec![Read {
                message,
                cause: None,
            }]);
        };
        self.pending.push((message, id));
        if self.pending.len() >= KEYS_PER_CALL {
            return self.flush().await;
        }
        Ok(Vec::new())
    }

    /// Looks up every pending message's record and hands them all on.
    pub async fn flush(&mut self) -> Result<Vec<Read>, CliError> {
        let pending = std::mem::take(&mut self.pending);
        let Some(lookup) = self.lookup.as_mut() else {
            return Ok(Vec::new());
        };
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = pending.iter().map(|(_, id)| id.clone()).collect();
        let items = lookup.fetch(&ids).await?;
        lookup.looked_up += pending.len();
        let reads: Vec<Read> = pending
            .into_iter()
            .map(|(message, id)| Read {
                message,
                cause: items.get(&id).and_then(CauseItem::to_recorded_cause),
            })
            .collect();
        lookup.found += reads.iter().filter(|r| r.cause.is_some()).count();
        Ok(reads)
    }

    /// Messages looked up and found with a record (none without a table).
    pub fn counts(&self) -> Option<(usize, usize)> {
        self.lookup.as_ref().map(|l| (l.looked_up, l.found))
    }
}

/// A recorded cause read from a record completes what a message carries; the stamp wins.
pub fn complete(facts: &mut redrive_shared::triage::Facts, cause: Option<&RecordedCause>) {
    if facts.cause.is_none() {
        facts.cause = cause.cloned();
    }
}

/// Where each group's causes were read: group id -> messages whose cause came from their
/// `x-redrive` stamp, and from a record.
#[derive(Debug, Default)]
pub struct Origins(HashMap<String, (usize, usize)>);

impl Origins {
    pub fn add(&mut self, id: &GroupId, origin: Option<CauseOrigin>) {
        let counts = self.0.entry(id.to_string()).or_default();
        match origin {
            Some(CauseOrigin::Stamp) => counts.0 += 1,
            Some(CauseOrigin::Record) => counts.1 += 1,
            None => {}
        }
    }

    /// `stamp`, `record`, `stamp+record`, or `None` (no recorded cause).
    pub fn of(&self, id: &str) -> Option<&'static str> {
        match self.0.get(id).copied().unwrap_or_default() {
            (0, 0) => None,
            (_, 0) => Some("stamp"),
            (0, _) => Some("record"),
            _ => Some("stamp+record"),
        }
    }

    /// The groups as JSON, each with its `causeOrigin` (null without a recorded cause).
    pub fn annotate(&self, groups: &[Group]) -> Value {
        let groups = groups
            .iter()
            .map(|g| {
                let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
                if let Value::Object(map) = &mut v {
                    map.insert("causeOrigin".into(), json!(self.of(&g.id)));
                }
                v
            })
            .collect();
        Value::Array(groups)
    }
}

/// How the text output says where a group's cause was read.
pub fn origin_note(origin: Option<&str>) -> &'static str {
    match origin {
        Some("record") => " (recorded by the consumer, read from --causes-table)",
        Some("stamp+record") => " (from x-redrive stamps and the consumer's records)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use redrive_shared::Attributes;
    use redrive_shared::meta::{ErrorClass, LastError};
    use redrive_shared::triage::Observation;

    use super::*;

    fn received(id: &str, body: &str, meta: Option<RedriveMeta>) -> Received {
        let mut attributes = Attributes::new();
        if let Some(meta) = meta {
            meta.write_into(&mut attributes);
        }
        Received {
            message_id: id.into(),
            receipt_handle: String::new(),
            body: body.into(),
            attributes,
            group_id: None,
            receive_count: 1,
            sent_timestamp_ms: Some(5),
            trace_header: None,
            dead_letter_source_arn: None,
        }
    }

    fn the_consumers_item(
        key: &KeySource,
        original: &str,
        m: &Received,
        ns: Option<&str>,
    ) -> String {
        let key = derive(key, original, &m.body, &m.attributes).unwrap();
        item_id(&key, ns)
    }

    #[test]
    fn the_item_is_the_one_the_consumer_writes_for_its_key_and_namespace() {
        // A message SQS moved: its own MessageId is the chain's
        let moved = received("m-1", "{\"orderId\":\"o-1\"}", None);
        let id = item_id_for(&KeySource::Message, None, &moved).unwrap();
        assert_eq!(
            id,
            the_consumers_item(&KeySource::Message, "m-1", &moved, None)
        );
        // A redriven copy: the originalMessageId of its x-redrive
        let copy = received(
            "m-2",
            "{\"orderId\":\"o-1\"}",
            Some(RedriveMeta::fresh("m-1")),
        );
        assert_eq!(item_id_for(&KeySource::Message, None, &copy).unwrap(), id);
        // A namespace and a field key, as the consumer was configured
        let by_order = KeySource::parse("/orderId").unwrap();
        assert_eq!(
            item_id_for(&by_order, Some("orders-consumer"), &moved).unwrap(),
            the_consumers_item(&by_order, "m-1", &moved, Some("orders-consumer"))
        );
        assert!(
            item_id_for(&by_order, None, &received("m-3", "{}", None)).is_none(),
            "no key, no lookup"
        );
    }

    #[test]
    fn the_stamp_wins_over_a_record() {
        let stamped_meta = RedriveMeta {
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "SCHEMA",
                "bad",
                "2026-11-21T10:00:00Z".into(),
            )),
            ..RedriveMeta::fresh("m-1")
        };
        let stamped = received("m-1", "{}", Some(stamped_meta));
        assert!(item_id_for(&KeySource::Message, None, &stamped).is_none());

        let record = CauseItem {
            class: "transient".into(),
            code: "HTTP_503".into(),
            ..CauseItem::default()
        }
        .to_recorded_cause();
        let observe = |m: &Received| {
            redrive_shared::triage::Facts::read(&Observation {
                message_id: &m.message_id,
                body: &m.body,
                attributes: &m.attributes,
                sent_timestamp_ms: m.sent_timestamp_ms,
                dead_letter_source_arn: None,
            })
        };
        let mut facts = observe(&stamped);
        complete(&mut facts, record.as_ref());
        assert_eq!(facts.cause.as_ref().unwrap().origin, CauseOrigin::Stamp);
        let mut facts = observe(&received("m-2", "{}", None));
        complete(&mut facts, record.as_ref());
        let cause = facts.cause.unwrap();
        assert_eq!(
            (cause.origin, cause.code.as_str()),
            (CauseOrigin::Record, "HTTP_503")
        );
    }

    #[test]
    fn a_groups_origin_says_where_its_causes_were_read() {
        let id = |n: &str| GroupId::Rule(n.into());
        let mut origins = Origins::default();
        origins.add(&id("a"), Some(CauseOrigin::Record));
        origins.add(&id("b"), Some(CauseOrigin::Stamp));
        origins.add(&id("b"), Some(CauseOrigin::Record));
        origins.add(&id("c"), None);
        assert_eq!(origins.of("r-a"), Some("record"));
        assert_eq!(origins.of("r-b"), Some("stamp+record"));
        assert_eq!(origins.of("r-c"), None);
        assert_eq!(origins.of("r-unknown"), None);
    }

    #[test]
    fn an_item_read_back_keeps_what_triage_needs() {
        let item = HashMap::from([
            (attr::ID.to_string(), AttributeValue::S("cause#x".into())),
            (
                attr::CLASS.to_string(),
                AttributeValue::S("permanent".into()),
            ),
            (
                attr::CODE.to_string(),
                AttributeValue::S("BODY_NOT_PARSED".into()),
            ),
            (
                attr::MESSAGE.to_string(),
                AttributeValue::S("line <num>".into()),
            ),
            (
                attr::LAST_FAILED_AT.to_string(),
                AttributeValue::S("2026-11-21T10:00:00Z".into()),
            ),
            (attr::ATTEMPTS.to_string(), AttributeValue::N("2".into())),
        ]);
        let read = read_item(&item);
        assert_eq!(
            (read.attempts, read.message.as_str()),
            (Some(2), "line <num>")
        );
        let cause = read.to_recorded_cause().unwrap();
        assert_eq!(cause.at_ms, Some(1_795_255_200_000));
    }
}
