//! Typed envelopes: a payload that reached the queue through SNS or EventBridge, unwrapped.
//!
//! When an SNS topic delivers to an SQS queue (raw message delivery off, the default), the SQS
//! body is the SNS notification, a JSON object whose `Message` string holds what the publisher
//! sent. When an EventBridge rule targets an SQS queue (no input transformer), the body is the
//! event, whose `detail` object holds the payload. Name the envelope around your payload type
//! as the processor's input, and the processor gets your type, parsed from inside the
//! envelope, with the envelope's metadata beside it:
//!
//! | the queue is fed by | the processor's input | your payload is |
//! |---|---|---|
//! | a producer sending to SQS | `T` | the body |
//! | an SNS subscription | [`SnsSqsEnvelope<T>`] | `.message`, parsed from the notification's `Message` string |
//! | an EventBridge rule | [`EventBridgeEnvelope<T>`] | `.detail`, the event's `detail` object |
//!
//! As Powertools' parser envelopes (`SnsSqsEnvelope`, `EventBridgeEnvelope`) do, but typed at
//! compile time and with the metadata kept (`topic_arn`, `detail_type`, `source`...).
//!
//! ```
//! use redrive_consumer::{FromBody, SnsSqsEnvelope};
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     order_id: String,
//! }
//!
//! // The body of an SQS message delivered by an SNS subscription.
//! let body = r#"{
//!   "Type": "Notification",
//!   "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
//!   "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
//!   "Message": "{\"order_id\":\"o-1\"}",
//!   "Timestamp": "2026-01-02T03:04:05.678Z"
//! }"#;
//! let envelope = SnsSqsEnvelope::<Order>::from_body(body).unwrap();
//! assert_eq!(envelope.message.order_id, "o-1");
//! assert_eq!(envelope.topic_arn, "arn:aws:sns:us-east-1:123456789012:orders");
//!
//! // A body that is not an SNS notification says where it does not fit, never the body.
//! let err = SnsSqsEnvelope::<Order>::from_body(r#"{"order_id":"o-1"}"#).err().unwrap();
//! assert!(err.starts_with("the body is not an SNS notification: "), "{err}");
//! assert!(!err.contains("o-1"), "{err}");
//! ```
//!
//! **A body that is not the envelope's shape** (raw message delivery turned on, an input
//! transformer on the rule, a producer writing to the queue directly) or whose payload does
//! not parse as `T` is a permanent failure with code [`crate::BODY_NOT_PARSED`], as any body
//! that does not parse: the processor is not called, and the message is fast-tracked to
//! `DLQ_URL`. The `lastError` message names the envelope, the path of the field that does not
//! fit, serde's error category and the line and column ([`redrive_shared::json::JsonError`]),
//! and never quotes the body: `the SNS notification's Message does not parse: a value that
//! does not fit the type (wrong type, unknown value or missing field) at `amount_cents` (line
//! 1 column 51)`.
//!
//! **The idempotency key is the SQS message's**, as for any other body: `IDEMPOTENCY_KEY`
//! applies to the message as SQS delivered it, envelope included. The key is derived and
//! claimed before the body is parsed, so one table and one configuration serve every input
//! type, a body that is not the envelope's shape is dead-lettered once like any other, and
//! the default key (`message`: `originalMessageId`, else the SQS MessageId) survives a redrive
//! as it does for a plain body. SNS and EventBridge deliver at least once: the same
//! notification or event can arrive as two SQS messages with two MessageIds. To have those
//! processed once too, key on the envelope's own id with a JSON pointer into the body:
//! `IDEMPOTENCY_KEY=/MessageId` (SNS) or `/id` (EventBridge); a field of an EventBridge
//! payload is `/detail/orderId`. A field of an SNS payload cannot be a key (the `Message` is a
//! string, not an object): the SNS `MessageId` is the one that stands for the publish.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use redrive_shared::json;

use crate::process::{FromBody, RawBody};

/// The payload of an SQS message delivered by an SNS subscription (raw message delivery off):
/// the SNS notification's `Message` parsed as `T`, with the notification's metadata.
///
/// `T` is any `serde::de::DeserializeOwned` type (the `Message` read as JSON) or [`RawBody`]
/// (the `Message` string as published, not necessarily JSON).
///
/// ```no_run
/// use redrive_consumer::{ProcessError, Record, SnsSqsEnvelope};
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     order_id: String,
///     amount_cents: u64,
/// }
///
/// # async fn charge(_: &str, _: u64) -> Result<(), String> { Ok(()) }
/// #[tokio::main]
/// async fn main() -> Result<(), redrive_consumer::Error> {
///     redrive_consumer::run(|sns: SnsSqsEnvelope<Order>, _rec: Record| async move {
///         tracing::info!(topic = %sns.topic_arn, "order published");
///         let order = sns.message;
///         charge(&order.order_id, order.amount_cents)
///             .await
///             .map_err(|e| ProcessError::transient("PAYMENTS_DOWN", e))
///     })
///     .await
/// }
/// ```
#[doc(alias = "SnsEnvelope")]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnsSqsEnvelope<T> {
    /// The notification's `Message`, parsed as `T`.
    pub message: T,
    /// `MessageId`: SNS's id of the publish, the same on every delivery of it (a key that
    /// drops SNS's own duplicates: `IDEMPOTENCY_KEY=/MessageId`).
    pub message_id: String,
    /// `TopicArn`: the topic it was published to.
    pub topic_arn: String,
    /// `Subject`, when the publisher gave one.
    pub subject: Option<String>,
    /// `Timestamp`: when SNS accepted the publish (ISO 8601, UTC), as SNS wrote it.
    pub timestamp: String,
    /// `MessageAttributes`: the publish's message attributes, by name.
    pub message_attributes: BTreeMap<String, SnsMessageAttribute>,
    /// `SequenceNumber` (FIFO topics).
    pub sequence_number: Option<String>,
}

/// One of an SNS notification's `MessageAttributes`: `{"Type": "String", "Value": "..."}`.
/// A `Binary` attribute's value is base64, as SNS writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct SnsMessageAttribute {
    /// `Type`: `String`, `String.Array`, `Number` or `Binary`.
    #[serde(rename = "Type")]
    pub data_type: String,
    /// `Value`, as a string.
    #[serde(rename = "Value")]
    pub value: String,
}

/// The payload of an SQS message delivered by an EventBridge rule (no input transformer): the
/// event's `detail` parsed as `T`, with the event's metadata.
///
/// ```no_run
/// use redrive_consumer::{EventBridgeEnvelope, ProcessError, Record};
///
/// #[derive(serde::Deserialize)]
/// struct Shipped {
///     order_id: String,
/// }
///
/// # async fn notify(_: &str) -> Result<(), String> { Ok(()) }
/// #[tokio::main]
/// async fn main() -> Result<(), redrive_consumer::Error> {
///     redrive_consumer::run(|event: EventBridgeEnvelope<Shipped>, _rec: Record| async move {
///         if event.detail_type != "OrderShipped" {
///             return Err(ProcessError::permanent("UNEXPECTED_EVENT", "not an OrderShipped event"));
///         }
///         notify(&event.detail.order_id)
///             .await
///             .map_err(|e| ProcessError::transient("NOTIFY_DOWN", e))
///     })
///     .await
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventBridgeEnvelope<T> {
    /// `detail`, parsed as `T`.
    pub detail: T,
    /// `id`: EventBridge's id of the event, the same on every delivery of it (a key that
    /// drops EventBridge's own duplicates: `IDEMPOTENCY_KEY=/id`).
    pub id: String,
    /// `detail-type`.
    pub detail_type: String,
    /// `source`.
    pub source: String,
    /// `account`: the account the event came from.
    pub account: String,
    /// `time`: the event's time (ISO 8601, UTC), as EventBridge wrote it.
    pub time: String,
    /// `region`.
    pub region: String,
    /// `resources`: the ARNs the event concerns (often empty).
    pub resources: Vec<String>,
    /// `version` (`"0"`).
    pub version: String,
    /// `replay-name`: set when the event was replayed from an archive.
    pub replay_name: Option<String>,
}

/// The SNS notification as it is written into the SQS body.
#[derive(Deserialize)]
struct SnsNotification {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "MessageId")]
    message_id: String,
    #[serde(rename = "TopicArn")]
    topic_arn: String,
    #[serde(rename = "Subject", default)]
    subject: Option<String>,
    #[serde(rename = "Message")]
    message: String,
    #[serde(rename = "Timestamp")]
    timestamp: String,
    #[serde(rename = "MessageAttributes", default)]
    message_attributes: BTreeMap<String, SnsMessageAttribute>,
    #[serde(rename = "SequenceNumber", default)]
    sequence_number: Option<String>,
}

impl SnsNotification {
    fn read(body: &str) -> Result<Self, String> {
        let notification: Self = json::from_str(body)
            .map_err(|e| format!("the body is not an SNS notification: {e}"))?;
        match notification.kind.as_str() {
            "Notification" => Ok(notification),
            // SNS's own vocabulary; anything else is body content and not quoted.
            kind @ ("SubscriptionConfirmation" | "UnsubscribeConfirmation") => Err(format!(
                "the body is an SNS {kind}, not a Notification (confirm the subscription; there is no payload to process)"
            )),
            _ => {
                Err("the body is not an SNS notification: its `Type` is not `Notification`".into())
            }
        }
    }

    fn into_envelope<T>(self, message: T) -> SnsSqsEnvelope<T> {
        SnsSqsEnvelope {
            message,
            message_id: self.message_id,
            topic_arn: self.topic_arn,
            subject: self.subject,
            timestamp: self.timestamp,
            message_attributes: self.message_attributes,
            sequence_number: self.sequence_number,
        }
    }
}

impl<T: DeserializeOwned + Send> FromBody for SnsSqsEnvelope<T> {
    fn from_body(body: &str) -> Result<Self, String> {
        let notification = SnsNotification::read(body)?;
        let message = json::from_str(&notification.message)
            .map_err(|e| format!("the SNS notification's Message does not parse: {e}"))?;
        Ok(notification.into_envelope(message))
    }
}

impl FromBody for SnsSqsEnvelope<RawBody> {
    fn from_body(body: &str) -> Result<Self, String> {
        let mut notification = SnsNotification::read(body)?;
        let message = RawBody(std::mem::take(&mut notification.message));
        Ok(notification.into_envelope(message))
    }
}

/// The EventBridge event as it is written into the SQS body.
#[derive(Deserialize)]
struct EventBridgeEvent {
    version: String,
    id: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    account: String,
    time: String,
    region: String,
    resources: Vec<String>,
    #[serde(rename = "replay-name", default)]
    replay_name: Option<String>,
    detail: Value,
}

impl<T: DeserializeOwned + Send> FromBody for EventBridgeEnvelope<T> {
    fn from_body(body: &str) -> Result<Self, String> {
        let event: EventBridgeEvent = json::from_str(body)
            .map_err(|e| format!("the body is not an EventBridge event: {e}"))?;
        let detail = json::from_value(event.detail)
            .map_err(|e| format!("the EventBridge event's detail does not parse: {e}"))?;
        Ok(EventBridgeEnvelope {
            detail,
            id: event.id,
            detail_type: event.detail_type,
            source: event.source,
            account: event.account,
            time: event.time,
            region: event.region,
            resources: event.resources,
            version: event.version,
            replay_name: event.replay_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A payload with a secret in it, delivered raw (no envelope).
    const DOES_NOT_FIT: &str =
        "a value that does not fit the type (wrong type, unknown value or missing field)";

    const RAW_SECRET: &str = r#"{"order_id":"o-secret","amount_cents":4200}"#;

    /// `good` without its `field`, as a body.
    fn without(good: &Value, field: &str) -> String {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(field);
        body.to_string()
    }

    /// `good` with its `field` set to `value`, as a body.
    fn with_field(good: &Value, field: &str, value: Value) -> String {
        let mut body = good.clone();
        body[field] = value;
        body.to_string()
    }

    /// `good` without each of `fields` in turn, and what its refusal says: `{not_a}: ` a value
    /// that does not fit, at the top level.
    fn missing_field_cases(good: &Value, not_a: &str, fields: &[&str]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|field| {
                let named = format!("{not_a}: {DOES_NOT_FIT} at `.`");
                (without(good, field), named)
            })
            .collect()
    }

    /// Each body is refused with a reason that names what is wrong and quotes none of `secrets`.
    fn assert_refused_unquoted(
        refuse: &impl Fn(&str) -> Option<String>,
        cases: Vec<(String, impl AsRef<str>)>,
        secrets: &[&str],
    ) {
        for (body, named) in cases {
            let named = named.as_ref();
            let reason = refuse(&body).unwrap();
            assert!(reason.contains(named), "{reason:?} should name {named:?}");
            for secret in secrets {
                assert!(!reason.contains(secret), "{secret} in {reason:?}");
            }
        }
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Order {
        order_id: String,
        amount_cents: u64,
    }

    /// The order the well-formed bodies carry.
    fn order_o1() -> Order {
        Order {
            order_id: "o-1".into(),
            amount_cents: 4200,
        }
    }

    /// The body of an SQS message from an SNS subscription with raw message delivery off, as
    /// AWS documents it (signature fields shortened).
    fn sns_body(message: &str) -> String {
        json!({
            "Type": "Notification",
            "MessageId": "d7a5c7e2-6f1a-5b8e-9c3d-2a1b0c9d8e7f",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
            "Subject": "New order",
            "Message": message,
            "Timestamp": "2026-01-02T03:04:05.678Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=",
            "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
            "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-east-1:123456789012:orders:2bcfbf39-05c3-41de-beaa-fcfcc21c8f55",
            "MessageAttributes": {
                "tenant": {"Type": "String", "Value": "acme"},
                "priority": {"Type": "Number", "Value": "3"},
                "blob": {"Type": "Binary", "Value": "AJ+SlgD/"}
            }
        })
        .to_string()
    }

    /// The body of an SQS message from an EventBridge rule, as AWS documents an event.
    fn eventbridge_body(detail: Value) -> String {
        json!({
            "version": "0",
            "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
            "detail-type": "OrderPlaced",
            "source": "com.example.orders",
            "account": "123456789012",
            "time": "2026-01-02T03:04:05Z",
            "region": "us-east-1",
            "resources": ["arn:aws:dynamodb:us-east-1:123456789012:table/orders"],
            "detail": detail
        })
        .to_string()
    }

    #[test]
    fn an_sns_notification_gives_the_typed_message_and_its_metadata() {
        let body = sns_body(r#"{"order_id":"o-1","amount_cents":4200}"#);
        let sns = SnsSqsEnvelope::<Order>::from_body(&body).unwrap();
        assert_eq!(sns.message, order_o1());
        assert_eq!(sns.message_id, "d7a5c7e2-6f1a-5b8e-9c3d-2a1b0c9d8e7f");
        assert_eq!(sns.topic_arn, "arn:aws:sns:us-east-1:123456789012:orders");
        assert_eq!(sns.subject.as_deref(), Some("New order"));
        assert_eq!(sns.timestamp, "2026-01-02T03:04:05.678Z");
        assert_eq!(sns.message_attributes["tenant"].value, "acme");
        assert_eq!(sns.message_attributes["priority"].data_type, "Number");
        assert_eq!(sns.message_attributes["blob"].value, "AJ+SlgD/");
        assert_eq!(sns.sequence_number, None);
    }

    #[test]
    fn a_minimal_fifo_notification_and_a_raw_message_are_read() {
        // A FIFO topic's notification: no subject, no attributes, a sequence number, no
        // signature fields.
        let body = json!({
            "Type": "Notification",
            "MessageId": "m-fifo",
            "SequenceNumber": "10000000000000003000",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders.fifo",
            "Message": "not json \u{1F4E6}",
            "Timestamp": "2026-01-02T03:04:05.678Z",
            "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe"
        })
        .to_string();
        let sns = SnsSqsEnvelope::<RawBody>::from_body(&body).unwrap();
        assert_eq!(sns.message.as_str(), "not json \u{1F4E6}");
        assert_eq!(sns.sequence_number.as_deref(), Some("10000000000000003000"));
        assert_eq!(sns.subject, None);
        assert!(sns.message_attributes.is_empty());
        // A JSON string message is a JSON `String` payload; the same text as RawBody is quoted.
        let quoted = SnsSqsEnvelope::<String>::from_body(&sns_body("\"hello\"")).unwrap();
        assert_eq!(quoted.message, "hello");
        // A null Subject (as some deliveries write it) is no subject.
        let mut with_null: Value = serde_json::from_str(&sns_body("{}")).unwrap();
        with_null["Subject"] = Value::Null;
        let sns = SnsSqsEnvelope::<Value>::from_body(&with_null.to_string()).unwrap();
        assert_eq!(sns.subject, None);
    }

    #[test]
    fn a_body_that_is_not_an_sns_notification_names_what_is_wrong_and_never_quotes_it() {
        let good: Value =
            serde_json::from_str(&sns_body(r#"{"order_id":"o-1","amount_cents":4200}"#)).unwrap();
        let cases = vec![
            // Raw message delivery on: the body is the payload itself.
            (
                RAW_SECRET.to_string(),
                format!("the body is not an SNS notification: {DOES_NOT_FIT} at `.`"),
            ),
            (
                "o-secret, not json".to_string(),
                "the body is not an SNS notification: not valid JSON at `.` (line 1 column 1)"
                    .into(),
            ),
            (
                with_field(&good, "Message", json!({"order_id": "o-secret"})),
                format!("the body is not an SNS notification: {DOES_NOT_FIT} at `Message`"),
            ),
            (
                with_field(&good, "Type", json!("SubscriptionConfirmation")),
                "the body is an SNS SubscriptionConfirmation, not a Notification".into(),
            ),
            (
                with_field(&good, "Type", json!("o-secret")),
                "its `Type` is not `Notification`".into(),
            ),
            // The envelope is right, the payload inside it is not an Order.
            (
                sns_body(r#"{"order_id":"o-secret"}"#),
                format!(
                    "the SNS notification's Message does not parse: {DOES_NOT_FIT} at `.` (line 1 column"
                ),
            ),
            (
                sns_body(r#"{"order_id":"o-secret","amount_cents":"4111111111111111"}"#),
                format!(
                    "the SNS notification's Message does not parse: {DOES_NOT_FIT} at `amount_cents`"
                ),
            ),
            (
                sns_body("o-secret"),
                "the SNS notification's Message does not parse: not valid JSON at `.`".into(),
            ),
        ];
        let refuse = |body: &str| SnsSqsEnvelope::<Order>::from_body(body).err();
        let not_a = "the body is not an SNS notification";
        let missing = missing_field_cases(&good, not_a, &["Message", "TopicArn", "MessageId"]);
        let secrets = ["o-secret", "4111", "acme"];
        assert_refused_unquoted(&refuse, missing, &secrets);
        assert_refused_unquoted(&refuse, cases, &secrets);
        // The raw envelope holds its payload to the same shape rules.
        let reason = SnsSqsEnvelope::<RawBody>::from_body(&without(&good, "Timestamp"))
            .err()
            .unwrap();
        assert_eq!(
            reason,
            format!(
                "the body is not an SNS notification: {DOES_NOT_FIT} at `.` (line 1 column 845)"
            )
        );
    }

    #[test]
    fn the_documented_messages_are_the_ones_given() {
        // The crate's README and this module's documentation quote these two.
        assert_eq!(
            SnsSqsEnvelope::<Order>::from_body(r#"{"order_id":"o-2","amount_cents":99}"#)
                .err()
                .unwrap(),
            format!(
                "the body is not an SNS notification: {DOES_NOT_FIT} at `.` (line 1 column 36)"
            )
        );
        assert_eq!(
            SnsSqsEnvelope::<Order>::from_body(&sns_body(
                r#"{"order_id":"o-1","amount_cents":"4111111111111111"}"#
            ))
            .err()
            .unwrap(),
            format!(
                "the SNS notification's Message does not parse: {DOES_NOT_FIT} at `amount_cents` (line 1 column 51)"
            )
        );
    }

    #[test]
    fn an_eventbridge_event_gives_the_typed_detail_and_its_metadata() {
        let body = eventbridge_body(json!({"order_id": "o-1", "amount_cents": 4200}));
        let event = EventBridgeEnvelope::<Order>::from_body(&body).unwrap();
        assert_eq!(event.detail, order_o1());
        assert_eq!(event.id, "6a7e8feb-b491-4cf7-a9f1-bf3703467718");
        assert_eq!(event.detail_type, "OrderPlaced");
        assert_eq!(event.source, "com.example.orders");
        assert_eq!(event.account, "123456789012");
        assert_eq!(event.time, "2026-01-02T03:04:05Z");
        assert_eq!(event.region, "us-east-1");
        assert_eq!(
            event.resources,
            ["arn:aws:dynamodb:us-east-1:123456789012:table/orders"]
        );
        assert_eq!(event.version, "0");
        assert_eq!(event.replay_name, None);
        // A replayed event names its replay; a detail can be read untyped.
        let mut replayed: Value = serde_json::from_str(&body).unwrap();
        replayed["replay-name"] = json!("orders-2026-01-02");
        let event = EventBridgeEnvelope::<Value>::from_body(&replayed.to_string()).unwrap();
        assert_eq!(event.replay_name.as_deref(), Some("orders-2026-01-02"));
        assert_eq!(event.detail["order_id"], "o-1");
    }

    #[test]
    fn a_body_that_is_not_an_eventbridge_event_names_what_is_wrong_and_never_quotes_it() {
        let good: Value = serde_json::from_str(&eventbridge_body(
            json!({"order_id": "o-1", "amount_cents": 1}),
        ))
        .unwrap();
        let cases = vec![
            (
                RAW_SECRET.to_string(),
                format!("the body is not an EventBridge event: {DOES_NOT_FIT} at `.`"),
            ),
            (
                with_field(&good, "resources", json!("o-secret")),
                format!("the body is not an EventBridge event: {DOES_NOT_FIT} at `resources`"),
            ),
            (
                eventbridge_body(json!({"order_id": "o-secret"})),
                format!("the EventBridge event's detail does not parse: {DOES_NOT_FIT} at `.`"),
            ),
            (
                eventbridge_body(
                    json!({"order_id": "o-secret", "amount_cents": "4111111111111111"}),
                ),
                format!(
                    "the EventBridge event's detail does not parse: {DOES_NOT_FIT} at `amount_cents`"
                ),
            ),
            (
                eventbridge_body(json!(null)),
                format!("the EventBridge event's detail does not parse: {DOES_NOT_FIT} at `.`"),
            ),
        ];
        let refuse = |body: &str| EventBridgeEnvelope::<Order>::from_body(body).err();
        let not_a = "the body is not an EventBridge event";
        let missing = missing_field_cases(&good, not_a, &["detail", "detail-type", "source"]);
        assert_refused_unquoted(&refuse, missing, &["o-secret", "4111"]);
        assert_refused_unquoted(&refuse, cases, &["o-secret", "4111"]);
    }
}
