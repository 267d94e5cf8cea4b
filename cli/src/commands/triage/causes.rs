//! `--causes-table`: the consumer's cause records, for the messages that carry no cause.
//!
//! A pass with a table computes, for each message whose `x-redrive` carries no `lastError` (SQS
//! moved it after `maxReceiveCount`), its item id as the consumer does (`--causes-key`,
//! `--causes-namespace`), reads the records in batches ([`redrive_engine::triage_causes`]), and
//! groups the message by the recorded cause. The stamp wins over a record; a message with no
//! record stays grouped by what it carries.

use std::collections::HashMap;

use clap::Args;
use serde_json::{Value, json};

use redrive_engine::ports::Received;
use redrive_engine::triage_causes::{CauseError, CauseRecords, KEYS_PER_CALL};
use redrive_shared::key::{KeySource, parse_namespace};
use redrive_shared::triage::cause::CauseItem;
use redrive_shared::triage::facts::CauseOrigin;
use redrive_shared::triage::{Group, GroupId};

use super::Read;
use crate::context::{CliError, Ctx};

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

/// The cause records of one table, as the consumer keys them, and what a pass found there.
pub struct CauseLookup {
    records: CauseRecords,
    /// Messages looked up, and of those, found with a record.
    pub looked_up: usize,
    pub found: usize,
}

impl CauseLookup {
    /// `None` without `--causes-table`.
    pub fn new(ctx: &Ctx, args: &CausesArgs) -> Option<Self> {
        let table = args.causes_table.as_deref().filter(|t| !t.is_empty())?;
        Some(Self {
            records: CauseRecords::new(
                ctx.clients.dynamodb.clone(),
                table,
                args.causes_key.clone(),
                args.causes_namespace.clone(),
            ),
            looked_up: 0,
            found: 0,
        })
    }

    /// The cause item a message's record would have: none when its stamp already carries a
    /// cause (the stamp wins), or when the consumer's key cannot be derived from it.
    pub fn item_id_of(&self, m: &Received) -> Option<String> {
        self.records
            .item_id_of(&m.message_id, &m.body, &m.attributes)
    }

    async fn fetch(&self, ids: &[String]) -> Result<HashMap<String, CauseItem>, CliError> {
        self.records.fetch(ids).await.map_err(|e| match e {
            CauseError::Port(p) => CliError::Aws(p),
            other => CliError::Config(other.to_string()),
        })
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

pub use redrive_engine::triage_causes::complete;

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
    use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
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
}
