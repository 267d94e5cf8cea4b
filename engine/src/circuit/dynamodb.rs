//! The circuit's store in DynamoDB ([`DynamoDbCircuitStore`]), the key every front end reads a
//! DLQ's record under ([`record_key`]), and the conditional write and item reading the triage
//! books share with it.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use redrive_shared::circuit::CircuitRecord;

use super::{CircuitStore, SaveOutcome, Stored, VersionedWrite, item};
use crate::aws::port_error;
use crate::ports::PortError;

/// The circuit table in DynamoDB (AWS, or moto via `AWS_ENDPOINT_URL`).
#[derive(Clone, Debug)]
pub struct DynamoDbCircuitStore {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
}

/// The key of a DLQ's circuit record: the queue's ARN, `arn:<partition>:sqs:<region>:<account>:<name>`,
/// whichever form names it. An ARN is the key as it is; a URL's region is its host's
/// (`sqs.<region>.amazonaws.com`, `<region>.queue.amazonaws.com`, `sqs.<region>.api.aws`; the
/// legacy `queue.amazonaws.com` is us-east-1), else `default_region` (an emulator's
/// `http://127.0.0.1:4566/...` is in the client's region). Anything else (a bare name, a URL
/// without a 12-digit account) is its own key.
pub fn record_key(queue: &str, default_region: &str) -> String {
    if queue.starts_with("arn:") {
        return queue.to_string();
    }
    let Some((_, rest)) = queue.split_once("://") else {
        return queue.to_string();
    };
    let location = redrive_shared::event::QueueLocation::from_url(queue);
    let Some(account) = location.account.as_deref() else {
        return queue.to_string();
    };
    if location.name.is_empty() {
        return queue.to_string();
    }
    let host = rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    let from_host = match labels.as_slice() {
        ["queue", "amazonaws", "com"] => Some("us-east-1"),
        ["sqs" | "sqs-fips", region, "amazonaws" | "api", ..] => Some(*region),
        [region, "queue", "amazonaws", ..] => Some(*region),
        _ => None,
    };
    let region = from_host.unwrap_or(default_region);
    let partition = if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    };
    format!("arn:{partition}:sqs:{region}:{account}:{}", location.name)
}

/// [`record_key`] of `queue` in `client`'s region (us-east-1 when it has none): the key of a
/// DLQ's circuit record, and the ARN in a triage book's key.
pub(crate) fn client_record_key(client: &aws_sdk_dynamodb::Client, queue: &str) -> String {
    let region = client.config().region().map_or("us-east-1", |r| r.as_ref());
    record_key(queue, region)
}

/// A string attribute of a stored item (the circuit records, the triage books).
pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A stored item that does not read as what it should be: `code` names the kind of item,
/// `what` the item; never retried.
pub(crate) fn unreadable_item(code: &str, what: String, problem: String) -> PortError {
    PortError::new("GetItem", code, format!("{what}: {problem}"), false)
}

fn bad_item(queue_url: &str, problem: String) -> PortError {
    unreadable_item(
        "BadCircuitItem",
        format!("the circuit item of {queue_url}"),
        problem,
    )
}

/// Sends `put` (an item whose partition key is `queue`, with its `version`) on condition that
/// the stored item is still at `expected` (`None`: that there is none yet): `Saved` at
/// `version`, or `Conflict` when another writer came first. The circuit's records and
/// triage's books are written this way.
pub(crate) async fn put_if_version(
    put: aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder,
    expected: Option<u64>,
    version: u64,
) -> Result<SaveOutcome, PortError> {
    let put = put.expression_attribute_names("#k", item::QUEUE);
    let put = match expected {
        None => put.condition_expression("attribute_not_exists(#k)"),
        Some(v) => put
            .condition_expression("attribute_exists(#k) AND #v = :v")
            .expression_attribute_names("#v", item::VERSION)
            .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
    };
    match put.send().await {
        Ok(_) => Ok(SaveOutcome::Saved { version }),
        Err(SdkError::ServiceError(se))
            if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            Ok(SaveOutcome::Conflict)
        }
        Err(e) => Err(port_error("PutItem", e)),
    }
}

/// Reads an item's version and record.
pub fn stored_from_item(
    queue_url: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<Stored, PortError> {
    let version = item
        .get(item::VERSION)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| bad_item(queue_url, format!("{} is not a number", item::VERSION)))?;
    let text = item
        .get(item::RECORD)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| bad_item(queue_url, format!("{} is missing", item::RECORD)))?;
    let record = serde_json::from_str(text).map_err(|e| {
        bad_item(
            queue_url,
            format!("{} is not a circuit record: {e}", item::RECORD),
        )
    })?;
    Ok(Stored { version, record })
}

impl DynamoDbCircuitStore {
    /// The key of `queue`'s record ([`record_key`], in the client's region).
    pub fn key(&self, queue: &str) -> String {
        client_record_key(&self.client, queue)
    }

    /// The item under `key`, read consistently.
    async fn get(&self, key: &str, queue: &str) -> Result<Option<Stored>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(item::QUEUE, s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error("GetItem", e))?;
        out.item.map(|i| stored_from_item(queue, &i)).transpose()
    }

    /// `record` under `key` at `version`, if the item there is still at `expected`.
    async fn put(
        &self,
        key: &str,
        record: &CircuitRecord,
        expected: Option<u64>,
        version: u64,
    ) -> Result<SaveOutcome, PortError> {
        let json = serde_json::to_string(record).map_err(|e| {
            PortError::new("PutItem", "Serialization", e.to_string(), false).with_source(e)
        })?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(item::QUEUE, s(key))
            .item(item::VERSION, AttributeValue::N(version.to_string()))
            .item(item::STATE, s(record.state.as_str()))
            .item(item::OPERATOR, s(record.operator.as_str()))
            .item(item::RECORD, AttributeValue::S(json))
            .item(
                item::UPDATED_AT,
                s(redrive_shared::timefmt::rfc3339_from_millis(now_ms)),
            );
        put_if_version(put, expected, version).await
    }
}

impl CircuitStore for DynamoDbCircuitStore {
    /// The record under the queue's ARN; when there is none, the one an earlier version wrote
    /// under `queue_url` as given, copied under the ARN (its version kept) before it is returned.
    async fn load(&self, queue_url: &str) -> Result<Option<Stored>, PortError> {
        let key = self.key(queue_url);
        if let Some(stored) = self.get(&key, queue_url).await? {
            return Ok(Some(stored));
        }
        if key == queue_url {
            return Ok(None);
        }
        let Some(old) = self.get(queue_url, queue_url).await? else {
            return Ok(None);
        };
        match self.put(&key, &old.record, None, old.version).await? {
            SaveOutcome::Saved { .. } => {
                tracing::info!(
                    queue = queue_url,
                    key = %key,
                    version = old.version,
                    "circuit record found under the queue's URL: copied under its ARN, where every front end reads it"
                );
                Ok(Some(old))
            }
            // Another writer made the record under the ARN meanwhile: that one is the truth.
            SaveOutcome::Conflict => self.get(&key, queue_url).await,
        }
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> Result<SaveOutcome, PortError> {
        let version = write.next_version();
        self.put(&self.key(queue_url), write.record, write.expected, version)
            .await
    }
}
