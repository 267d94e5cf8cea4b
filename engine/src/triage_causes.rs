//! The consumer's cause records, for the messages that carry no cause.
//!
//! A message SQS moved to the DLQ after `maxReceiveCount` failed receives is the original,
//! untouched: its `x-redrive` (if any) has no `lastError`. The consumer recorded the cause of
//! each failed attempt in its idempotency table under `cause#<record id of the idempotency key>`
//! (`redrive_shared::triage::cause`). A reader that knows how the consumer keys messages (its
//! `IDEMPOTENCY_KEY` and namespace) computes each such message's item id as the consumer does,
//! and reads the records with BatchGetItem (100 keys a call, unprocessed keys asked again). The
//! stamp wins over a record. `redrive triage --causes-table` and the archiver's live index read
//! them through [`CauseRecords`].

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use redrive_shared::Attributes;
use redrive_shared::key::{IdempotencyKey, KeySource, derive};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::triage::cause::{CauseItem, attr, item_id};
use redrive_shared::triage::{Facts, RecordedCause};

use crate::aws::port_error;
use crate::ports::PortError;

/// Keys in one BatchGetItem: DynamoDB's limit.
pub const KEYS_PER_CALL: usize = 100;
/// Calls that ask again for the keys DynamoDB left unprocessed, after the first.
pub const UNPROCESSED_RETRIES: u32 = 8;

/// Why cause records could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CauseError {
    #[error(transparent)]
    Port(PortError),
    #[error(
        "BatchGetItem on {0} left keys unprocessed after {UNPROCESSED_RETRIES} retries (throttled): run triage again, or raise the table's read capacity"
    )]
    Throttled(String),
    #[error("BatchGetItem request: {0}")]
    Request(String),
}

/// The cause records of one table, as the consumer keys them.
#[derive(Debug, Clone)]
pub struct CauseRecords {
    client: aws_sdk_dynamodb::Client,
    table: String,
    key: KeySource,
    namespace: Option<String>,
}

impl CauseRecords {
    /// The records of `table`, for a consumer keyed by `key` under `namespace`.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: &str,
        key: KeySource,
        namespace: Option<String>,
    ) -> Self {
        Self {
            client,
            table: table.to_string(),
            key,
            namespace,
        }
    }

    /// The cause item a message's record would have: none when its stamp already carries a
    /// cause (the stamp wins), or when the consumer's key cannot be derived from it.
    pub fn item_id_of(
        &self,
        message_id: &str,
        body: &str,
        attributes: &Attributes,
    ) -> Option<String> {
        item_id_for(
            &self.key,
            self.namespace.as_deref(),
            message_id,
            body,
            attributes,
        )
    }

    /// The cause items of `ids` (at most [`KEYS_PER_CALL`] distinct ids a call), those that
    /// exist, by id.
    pub async fn fetch(&self, ids: &[String]) -> Result<HashMap<String, CauseItem>, CauseError> {
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
                    .map_err(|e| CauseError::Port(port_error("BatchGetItem", e)))?;
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
                        return Err(CauseError::Throttled(self.table.clone()));
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
    ) -> Result<KeysAndAttributes, CauseError> {
        KeysAndAttributes::builder()
            .set_keys(Some(keys))
            // Strongly consistent: a failure recorded a moment ago is read.
            .consistent_read(true)
            .build()
            .map_err(|e| CauseError::Request(e.to_string()))
    }
}

/// A recorded cause read from a record completes what a message carries; the stamp wins.
pub fn complete(facts: &mut Facts, cause: Option<&RecordedCause>) {
    if facts.cause.is_none() {
        facts.cause = cause.cloned();
    }
}

/// The cause item of a message (`message_id`, `body`, `attributes`) for a consumer keyed by
/// `key` under `namespace`: none when its stamp carries a cause, or when the key cannot be
/// derived.
pub fn item_id_for(
    key: &KeySource,
    namespace: Option<&str>,
    message_id: &str,
    body: &str,
    attributes: &Attributes,
) -> Option<String> {
    let (meta, _) = RedriveMeta::read(attributes, message_id);
    if meta.last_error.is_some() {
        return None;
    }
    let key: IdempotencyKey = derive(key, &meta.original_message_id, body, attributes).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A message's id, body and attributes (with `meta` as its `x-redrive`).
    fn received(id: &str, body: &str, meta: Option<RedriveMeta>) -> (String, String, Attributes) {
        let mut attributes = Attributes::new();
        if let Some(meta) = meta {
            meta.write_into(&mut attributes);
        }
        (id.into(), body.into(), attributes)
    }

    fn the_consumers_item(
        key: &KeySource,
        original: &str,
        m: &(String, String, Attributes),
        ns: Option<&str>,
    ) -> String {
        let key = derive(key, original, &m.1, &m.2).unwrap();
        item_id(&key, ns)
    }

    #[test]
    fn the_item_is_the_one_the_consumer_writes_for_its_key_and_namespace() {
        // A message SQS moved: its own MessageId is the chain's
        let moved = received("m-1", "{\"orderId\":\"o-1\"}", None);
        let id = item_id_for(&KeySource::Message, None, &moved.0, &moved.1, &moved.2).unwrap();
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
        assert_eq!(
            item_id_for(&KeySource::Message, None, &copy.0, &copy.1, &copy.2).unwrap(),
            id
        );
        // A namespace and a field key, as the consumer was configured
        let by_order = KeySource::parse("/orderId").unwrap();
        assert_eq!(
            item_id_for(
                &by_order,
                Some("orders-consumer"),
                &moved.0,
                &moved.1,
                &moved.2
            )
            .unwrap(),
            the_consumers_item(&by_order, "m-1", &moved, Some("orders-consumer"))
        );
        assert!(
            item_id_for(&by_order, None, "m-3", "{}", &Attributes::new()).is_none(),
            "no key, no lookup"
        );
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
