//! SDK adapters for the ports: the idempotency table in DynamoDB, and SQS.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use redrive_shared::limits::Outgoing;
use redrive_shared::sdk::{attributes_to_sdk, trace_header_to_sdk};

use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::triage::normalise;

use crate::cause::{FailureCause, attr};
use crate::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, PortError, QueueOps};

/// Attribute names of an idempotency record (see the contract).
pub mod item {
    pub const ID: &str = "id";
    pub const STATUS: &str = "status";
    pub const EXPIRATION: &str = "expiration";
    pub const IN_PROGRESS_EXPIRATION: &str = "inProgressExpiration";
    /// Which claim wrote an IN_PROGRESS record, so that a release removes only its own.
    pub const CLAIM_TOKEN: &str = "claimToken";
    /// The payload's fingerprint, when the payload check is on.
    pub const PAYLOAD_HASH: &str = "payloadHash";
    /// (COMPLETED only) the processor's output, JSON text, when it returned one.
    pub const DATA: &str = "data";
    pub const IN_PROGRESS: &str = "IN_PROGRESS";
    pub const COMPLETED: &str = "COMPLETED";
}

/// The claim's condition: a new key, an expired record (DynamoDB's TTL deletes lazily, so an
/// expired record may still be there), or an IN_PROGRESS record whose claimant's deadline
/// passed.
pub const CLAIM_CONDITION: &str = "attribute_not_exists(id) OR expiration < :now_s OR (#status = :in_progress AND inProgressExpiration < :now_ms)";

/// Maps an SDK error (SQS or DynamoDB: both re-export the same types) to a [`PortError`].
pub fn port_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = match &err {
        SdkError::TimeoutError(_) => "Timeout".to_string(),
        SdkError::DispatchFailure(_) => "DispatchFailure".to_string(),
        SdkError::ResponseError(_) => "ResponseError".to_string(),
        SdkError::ServiceError(se) => se.err().code().unwrap_or("ServiceError").to_string(),
        _ => "ConstructionFailure".to_string(),
    };
    PortError {
        operation,
        code,
        message: DisplayErrorContext(&err).to_string(),
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// What an existing record means for a claim (by `token`) that failed its condition.
///
/// An IN_PROGRESS record carrying this claim's own token is this claim: its write went
/// through but the reply was lost (a timeout or a reset connection), and the SDK's retry of
/// the same PutItem then failed the condition on it. It is claimed, not held by another.
pub fn outcome_of(record: &HashMap<String, AttributeValue>, token: &str) -> ClaimOutcome {
    let status = record.get(item::STATUS).and_then(|v| v.as_s().ok());
    let own = record
        .get(item::CLAIM_TOKEN)
        .and_then(|v| v.as_s().ok())
        .is_some_and(|t| t == token);
    let until_ms = record
        .get(item::IN_PROGRESS_EXPIRATION)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok());
    match status.map(String::as_str) {
        Some(item::COMPLETED) => {
            let expiration_s = record
                .get(item::EXPIRATION)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(i64::MAX);
            let result = record.get(item::DATA).and_then(|v| v.as_s().ok()).cloned();
            let payload_hash = record
                .get(item::PAYLOAD_HASH)
                .and_then(|v| v.as_s().ok())
                .cloned();
            ClaimOutcome::Completed(
                CompletedRecord::new(expiration_s)
                    .with_result(result)
                    .with_payload_hash(payload_hash),
            )
        }
        Some(item::IN_PROGRESS) if own => ClaimOutcome::Claimed,
        // IN_PROGRESS, or a status this version does not know: never run the side effect.
        _ => ClaimOutcome::InProgress { until_ms },
    }
}

/// Adds the claim's `payloadHash` to a record (IN_PROGRESS or COMPLETED) when it has one.
fn with_payload_hash(request: PutItemFluentBuilder, claim: &Claim) -> PutItemFluentBuilder {
    match &claim.payload_hash {
        Some(hash) => request.item(item::PAYLOAD_HASH, s(hash)),
        None => request,
    }
}

/// The update of a cause item: the last failure wins, the first failure's time is kept, one more
/// failed attempt is counted.
pub const CAUSE_UPDATE: &str = "SET #class = :class, #code = :code, #message = :message, #version = :version, #last = :at, #first = if_not_exists(#first, :at), #expiration = :expiration ADD #attempts :one";

/// Records the cause of one failed attempt in the cause item of its idempotency key, in the
/// idempotency table `table`: one UpdateItem (see [`crate::cause`] for the item and why it
/// exists). The consumer calls it on every failed attempt; a consumer of your own calls it the
/// same way, so that `redrive triage --causes-table` can name the cause of a message SQS moved
/// to the DLQ after `maxReceiveCount` failed receives.
///
/// ```
/// use redrive_consumer::IdempotencyKey;
/// use redrive_consumer::aws_sdk_dynamodb::Client;
/// use redrive_consumer::cause::{ErrorClass, FailureCause};
///
/// // The message's idempotency key as the consumer computes it: by default its
/// // originalMessageId (from x-redrive), else its MessageId.
/// let key = IdempotencyKey::try_from("0b7a2f3e-5c1d-4e8f-9a6b-2d3c4e5f6a7b".to_string()).unwrap();
/// let cause = FailureCause::new(
///     &key,
///     None,
///     ErrorClass::Transient,
///     "HTTP_503",
///     "POST /v1/orders/81234 answered 503 after 1500ms",
/// );
/// // The text is kept normalised: no ids, no values.
/// assert_eq!(cause.message, "POST /v1/orders/<num> answered <num> after <duration>");
/// assert_eq!(cause.item_id, format!("cause#{}", key.record_id(None)));
///
/// // On a failed attempt, in your handler (a failed write must not change the message's
/// // outcome: log it and go on).
/// async fn on_failure(client: &Client, cause: &FailureCause) {
///     if let Err(e) = redrive_consumer::aws::record_cause(client, "orders-idempotency", cause).await {
///         eprintln!("the cause was not recorded: {e}");
///     }
/// }
/// ```
pub async fn record_cause(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    cause: &FailureCause,
) -> Result<(), PortError> {
    client
        .update_item()
        .table_name(table)
        .key(attr::ID, s(&cause.item_id))
        .update_expression(CAUSE_UPDATE)
        .expression_attribute_names("#class", attr::CLASS)
        .expression_attribute_names("#code", attr::CODE)
        .expression_attribute_names("#message", attr::MESSAGE)
        .expression_attribute_names("#version", attr::NORMALISER_VERSION)
        .expression_attribute_names("#last", attr::LAST_FAILED_AT)
        .expression_attribute_names("#first", attr::FIRST_FAILED_AT)
        .expression_attribute_names("#expiration", attr::EXPIRATION)
        .expression_attribute_names("#attempts", attr::ATTEMPTS)
        .expression_attribute_values(":class", s(cause.class.as_str()))
        .expression_attribute_values(":code", s(&cause.code))
        .expression_attribute_values(":message", s(&cause.message))
        .expression_attribute_values(":version", n(i64::from(normalise::CURRENT.number())))
        .expression_attribute_values(":at", s(&rfc3339_from_millis(cause.at_ms)))
        .expression_attribute_values(":expiration", n(cause.expiration_s))
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .map_err(|e| port_error("UpdateItem", e))?;
    Ok(())
}

/// The key the init-time warm-up reads (see [`DynamoDbStore::warm_up`]).
pub const WARM_UP_KEY: &str = "redrive:warm-up";

/// The idempotency table through the SDK.
#[derive(Clone, Debug)]
pub struct DynamoDbStore {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
}

impl DynamoDbStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// One eventually consistent GetItem (of [`WARM_UP_KEY`], projecting only the key), made
    /// at init so that resolving credentials and the endpoint and opening the connection are
    /// not paid by the first invocation. It writes nothing, so a record that happens to have
    /// that key is left as it is.
    pub async fn warm_up(&self) -> Result<(), PortError> {
        self.client
            .get_item()
            .table_name(&self.table)
            .key(item::ID, s(WARM_UP_KEY))
            .projection_expression("#id")
            .expression_attribute_names("#id", item::ID)
            .send()
            .await
            .map_err(|e| port_error("GetItem", e))?;
        Ok(())
    }

    /// Only when the service did not return the old item with a failed condition.
    async fn holder(&self, key: &str, token: &str) -> Result<ClaimOutcome, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(item::ID, s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| port_error("GetItem", e))?;
        Ok(match out.item {
            Some(record) => outcome_of(&record, token),
            // Released in between: report it held, so that the message is simply retried.
            None => ClaimOutcome::InProgress { until_ms: None },
        })
    }
}

impl IdempotencyStore for DynamoDbStore {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, PortError> {
        let result = with_payload_hash(self.client.put_item(), claim)
            .table_name(&self.table)
            .item(item::ID, s(&claim.key))
            .item(item::STATUS, s(item::IN_PROGRESS))
            .item(item::EXPIRATION, n(claim.expiration_s))
            .item(
                item::IN_PROGRESS_EXPIRATION,
                n(claim.in_progress_expiration_ms),
            )
            .item(item::CLAIM_TOKEN, s(&claim.token))
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#status", item::STATUS)
            .expression_attribute_values(":now_s", n(claim.now_ms.div_euclid(1000)))
            .expression_attribute_values(":now_ms", n(claim.now_ms))
            .expression_attribute_values(":in_progress", s(item::IN_PROGRESS))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(ClaimOutcome::Claimed),
            Err(SdkError::ServiceError(se)) => match se.err() {
                PutItemError::ConditionalCheckFailedException(failed) => match failed.item() {
                    Some(record) => Ok(outcome_of(record, &claim.token)),
                    None => self.holder(&claim.key, &claim.token).await,
                },
                _ => Err(port_error("PutItem", SdkError::ServiceError(se))),
            },
            Err(e) => Err(port_error("PutItem", e)),
        }
    }

    async fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> Result<(), PortError> {
        let mut put = with_payload_hash(self.client.put_item(), claim)
            .table_name(&self.table)
            .item(item::ID, s(&claim.key))
            .item(item::STATUS, s(item::COMPLETED))
            .item(item::EXPIRATION, n(expiration_s))
            .item(
                item::IN_PROGRESS_EXPIRATION,
                n(claim.in_progress_expiration_ms),
            );
        if let Some(result) = result {
            put = put.item(item::DATA, s(result));
        }
        put.send().await.map_err(|e| port_error("PutItem", e))?;
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), PortError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(item::ID, s(&claim.key))
            .condition_expression("#token = :token")
            .expression_attribute_names("#token", item::CLAIM_TOKEN)
            .expression_attribute_values(":token", s(&claim.token))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    DeleteItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(port_error("DeleteItem", e)),
        }
    }

    async fn record_cause(&self, cause: &FailureCause) -> Result<(), PortError> {
        record_cause(&self.client, &self.table, cause).await
    }
}

/// SQS through the SDK (AWS, or moto via `AWS_ENDPOINT_URL`).
#[derive(Clone, Debug)]
pub struct SqsOps {
    pub client: aws_sdk_sqs::Client,
}

impl QueueOps for SqsOps {
    async fn queue_url(&self, name: &str, owner_account: &str) -> Result<String, PortError> {
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(owner_account)
            .send()
            .await
            .map_err(|e| port_error("GetQueueUrl", e))?;
        out.queue_url.ok_or_else(|| PortError {
            operation: "GetQueueUrl",
            code: "NoQueueUrl".into(),
            message: format!("GetQueueUrl {name} returned no QueueUrl"),
        })
    }

    async fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        visibility_seconds: u32,
    ) -> Result<(), PortError> {
        self.client
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(visibility_seconds.min(i32::MAX as u32) as i32)
            .send()
            .await
            .map_err(|e| port_error("ChangeMessageVisibility", e))?;
        Ok(())
    }

    async fn send(&self, queue_url: &str, message: &Outgoing) -> Result<String, PortError> {
        let out = self
            .client
            .send_message()
            .queue_url(queue_url)
            .message_body(&message.body)
            .set_message_attributes(
                (!message.attributes.is_empty()).then(|| attributes_to_sdk(&message.attributes)),
            )
            .set_delay_seconds(message.delay_seconds.map(|d| d as i32))
            .set_message_group_id(message.group_id.clone())
            .set_message_deduplication_id(message.dedup_id.clone())
            .set_message_system_attributes(trace_header_to_sdk(message.trace_header.as_ref()))
            .send()
            .await
            .map_err(|e| port_error("SendMessage", e))?;
        Ok(out.message_id.unwrap_or_default())
    }

    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), PortError> {
        self.client
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| port_error("DeleteMessage", e))?;
        Ok(())
    }
}
