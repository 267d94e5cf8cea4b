//! One record of a Lambda SQS event, read on its own so that a malformed record fails alone.
//!
//! Bodies are untyped: the record's `body` is kept as the exact string SQS delivered. Message
//! attributes are converted to the shared attribute model byte for byte (`binaryValue` is
//! base64 in the event).

use aws_lambda_events::event::sqs::{SqsMessage, SqsMessageAttribute};
use redrive_shared::trace_header::AWS_TRACE_HEADER;
use redrive_shared::{AttributeValue, Attributes, MessageAttribute, TraceHeader};
use serde::Deserialize;
use serde_json::Value;

/// A received SQS message as the event source mapping delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub attributes: Attributes,
    /// `attributes.ApproximateReceiveCount` (1 when absent).
    pub receive_count: u32,
    /// `attributes.MessageGroupId` (FIFO queues).
    pub group_id: Option<String>,
    /// The source queue, from `eventSourceARN`.
    pub source: Option<QueueArn>,
    /// `attributes.AWSTraceHeader` (a traced producer's X-Ray header): carried onto the
    /// permanent-failure copy to the DLQ.
    pub trace_header: Option<TraceHeader>,
}

impl Message {
    /// True when the record came from a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.source.as_ref().is_some_and(QueueArn::is_fifo)
    }
}

/// `arn:PARTITION:sqs:REGION:ACCOUNT:NAME`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueArn {
    pub arn: String,
    pub region: String,
    pub account: String,
    pub name: String,
}

impl QueueArn {
    pub fn parse(arn: &str) -> Option<Self> {
        let parts: Vec<&str> = arn.split(':').collect();
        match parts.as_slice() {
            ["arn", partition, "sqs", region, account, name]
                if !partition.is_empty() && !account.is_empty() && !name.is_empty() =>
            {
                Some(Self {
                    arn: arn.to_string(),
                    region: region.to_string(),
                    account: account.to_string(),
                    name: name.to_string(),
                })
            }
            _ => None,
        }
    }

    pub fn is_fifo(&self) -> bool {
        redrive_shared::limits::is_fifo(&self.name)
    }
}

/// Why a record could not be read. `message_id` is known when the record had one, so that the
/// record can still be reported in `batchItemFailures`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed SQS record: {reason}")]
pub struct MalformedRecord {
    pub message_id: Option<String>,
    pub group_id: Option<String>,
    pub reason: String,
}

/// Reads one record of the event's `Records` array, through `aws_lambda_events`' typed
/// [`SqsMessage`]. The MessageId and group are read first and loosely, so that a record that
/// does not fit the type can still be reported (and keep its FIFO group blocked) on its own.
pub fn parse_record(record: &Value) -> Result<Message, MalformedRecord> {
    let message_id = record
        .get("messageId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_string);
    let group_id = record
        .get("attributes")
        .and_then(|a| a.get("MessageGroupId"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if message_id.is_none() {
        return Err(MalformedRecord {
            message_id,
            group_id,
            reason: "no messageId".into(),
        });
    }
    let sqs = SqsMessage::deserialize(record).map_err(|_| MalformedRecord {
        message_id,
        group_id,
        reason: mismatch(record),
    })?;
    read_message(&sqs)
}

/// Reads one record of a typed `SqsEvent`: a record without a messageId, receiptHandle or
/// body, or with an attribute, receive count or source ARN that cannot be read, is malformed
/// on its own (the MessageId kept when it has one, so that it is still reported).
pub fn read_message(sqs: &SqsMessage) -> Result<Message, MalformedRecord> {
    let message_id = sqs.message_id.clone().filter(|id| !id.is_empty());
    let group_id = sqs.attributes.get("MessageGroupId").cloned();
    let malformed = |reason: String| MalformedRecord {
        message_id: message_id.clone(),
        group_id: group_id.clone(),
        reason,
    };
    let Some(id) = message_id.clone() else {
        return Err(malformed("no messageId".into()));
    };
    let receipt_handle = match &sqs.receipt_handle {
        Some(h) if !h.is_empty() => h.clone(),
        _ => return Err(malformed("no receiptHandle".into())),
    };
    let Some(body) = sqs.body.clone() else {
        return Err(malformed("no string body".into()));
    };
    let receive_count = match sqs.attributes.get("ApproximateReceiveCount") {
        None => 1,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| malformed(format!("ApproximateReceiveCount {v:?} is not a count")))?,
    };
    let mut attributes = Attributes::new();
    for (name, value) in &sqs.message_attributes {
        let attribute = convert_attribute(value.clone())
            .map_err(|why| malformed(format!("message attribute {name:?}: {why}")))?;
        attributes.insert(name.clone(), attribute);
    }
    // A header that is no trace header is left behind (logged), never a reason to fail the
    // record: the copy would be refused for it.
    let trace_header = sqs.attributes.get(AWS_TRACE_HEADER).and_then(|value| {
        TraceHeader::parse(value)
            .inspect_err(|e| {
                tracing::warn!(message_id = %id, error = %e, "{AWS_TRACE_HEADER} not carried onto a copy");
            })
            .ok()
    });
    let source = match &sqs.event_source_arn {
        None => None,
        Some(arn) => Some(
            QueueArn::parse(arn)
                .ok_or_else(|| malformed(format!("eventSourceARN {arn:?} is not an SQS ARN")))?,
        ),
    };
    Ok(Message {
        message_id: id,
        receipt_handle,
        body,
        attributes,
        receive_count,
        group_id,
        source,
        trace_header,
    })
}

/// Where `record` does not fit [`SqsMessage`]: the field's path, never its value (the body).
fn mismatch(record: &Value) -> String {
    match redrive_shared::json::from_value::<SqsMessage>(record.clone()) {
        Err(e) => format!("not an SQS record: {e}"),
        Ok(_) => "not an SQS record".to_string(),
    }
}

/// `{"dataType": "...", "stringValue": "..."}` or `{"dataType": "Binary...", "binaryValue": "<base64>"}`.
fn convert_attribute(value: SqsMessageAttribute) -> Result<MessageAttribute, String> {
    let data_type = value
        .data_type
        .filter(|t| !t.is_empty())
        .ok_or("no dataType")?;
    let base = data_type.split('.').next().unwrap_or("");
    let value = match (base, value.string_value, value.binary_value) {
        ("Binary", _, Some(bytes)) => AttributeValue::Binary(bytes.0),
        ("Binary", _, None) => return Err("a Binary attribute has no binaryValue".into()),
        (_, Some(s), _) => AttributeValue::String(s),
        (_, None, _) => return Err(format!("a {data_type} attribute has no stringValue")),
    };
    Ok(MessageAttribute { data_type, value })
}

/// The record as a Lambda SQS event carries it: the inverse of [`parse_record`], for tests and
/// for tools that build events from messages they received themselves.
pub fn record_to_event_json(message: &Message, region: &str) -> Value {
    let attributes: serde_json::Map<String, Value> = message
        .attributes
        .iter()
        .map(|(name, a)| {
            let mut v = serde_json::json!({
                "dataType": a.data_type,
                "stringListValues": [],
                "binaryListValues": [],
            });
            match &a.value {
                AttributeValue::String(s) => v["stringValue"] = Value::String(s.clone()),
                AttributeValue::Binary(b) => {
                    v["binaryValue"] = Value::String(aws_smithy_types::base64::encode(b))
                }
            }
            (name.clone(), v)
        })
        .collect();
    let mut system = serde_json::json!({
        "ApproximateReceiveCount": message.receive_count.to_string(),
    });
    if let Some(g) = &message.group_id {
        system["MessageGroupId"] = Value::String(g.clone());
    }
    if let Some(t) = &message.trace_header {
        system[AWS_TRACE_HEADER] = Value::String(t.to_string());
    }
    let mut record = serde_json::json!({
        "messageId": message.message_id,
        "receiptHandle": message.receipt_handle,
        "body": message.body,
        "attributes": system,
        "messageAttributes": attributes,
        "eventSource": "aws:sqs",
        "awsRegion": region,
    });
    if let Some(source) = &message.source {
        record["eventSourceARN"] = Value::String(source.arn.clone());
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/sqs-batch.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn reads_the_shipped_fixture() {
        let event = fixture();
        let m = parse_record(&event["Records"][0]).unwrap();
        assert_eq!(m.message_id, "059f36b4-87a3-44ab-83d2-661975830a7d");
        assert_eq!(m.body, r#"{"orderId":"o-1001","amount":42}"#);
        assert_eq!(m.receive_count, 1);
        assert_eq!(m.group_id, None);
        assert_eq!(m.attributes["tenant"], MessageAttribute::string("acme"));
        assert!(
            m.attributes["x-redrive"]
                .as_str()
                .unwrap()
                .contains("5fea7756")
        );
        let source = m.source.unwrap();
        assert_eq!(
            (
                source.region.as_str(),
                source.account.as_str(),
                source.name.as_str()
            ),
            ("us-east-1", "123456789012", "orders")
        );
        assert!(!source.is_fifo());
    }

    #[test]
    fn the_aws_trace_header_is_read_and_a_garbled_one_is_left_behind_without_failing_the_record() {
        let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let record = |value: &str| {
            json!({
                "messageId": "m-1", "receiptHandle": "h", "body": "{}",
                "attributes": {"ApproximateReceiveCount": "1", "AWSTraceHeader": value},
                "messageAttributes": {}
            })
        };
        let m = parse_record(&record(header)).unwrap();
        assert_eq!(
            m.trace_header.as_ref().map(TraceHeader::as_str),
            Some(header)
        );
        assert_eq!(
            parse_record(&record_to_event_json(&m, "us-east-1")).unwrap(),
            m
        );
        let garbled = parse_record(&record("Root=nonsense")).unwrap();
        assert_eq!(garbled.trace_header, None);
        assert_eq!(
            parse_record(&fixture()["Records"][0]).unwrap().trace_header,
            None
        );
    }

    #[test]
    fn attributes_are_kept_byte_for_byte() {
        let record = json!({
            "messageId": "m-1", "receiptHandle": "h", "body": "not json \u{1F4E6}",
            "attributes": {"ApproximateReceiveCount": "3", "MessageGroupId": "g-7"},
            "messageAttributes": {
                "blob": {"dataType": "Binary", "binaryValue": "AJ+SlgD/"},
                "png": {"dataType": "Binary.png", "binaryValue": "AQ=="},
                "n": {"dataType": "Number.int", "stringValue": "007"},
                "s": {"dataType": "String", "stringValue": "h\u{e9}llo", "stringListValues": []}
            },
            "eventSourceARN": "arn:aws-cn:sqs:cn-north-1:000000000000:orders.fifo"
        });
        let m = parse_record(&record).unwrap();
        assert_eq!(m.body, "not json \u{1F4E6}");
        assert_eq!(m.receive_count, 3);
        assert_eq!(m.group_id.as_deref(), Some("g-7"));
        assert!(m.is_fifo());
        assert_eq!(
            m.attributes["blob"],
            MessageAttribute::binary(vec![0u8, 159, 146, 150, 0, 255])
        );
        assert_eq!(m.attributes["png"].data_type, "Binary.png");
        assert_eq!(
            m.attributes["n"],
            MessageAttribute {
                data_type: "Number.int".into(),
                value: AttributeValue::String("007".into())
            }
        );
        // And back to the event shape, unchanged.
        assert_eq!(
            parse_record(&record_to_event_json(&m, "cn-north-1")).unwrap(),
            m
        );
    }

    #[test]
    fn malformed_records_keep_their_id_when_they_have_one() {
        let base = json!({"messageId": "m-2", "receiptHandle": "h", "body": "b"});
        let mut cases = Vec::new();
        for (field, value) in [
            ("receiptHandle", json!(null)),
            ("body", json!(42)),
            ("attributes", json!({"ApproximateReceiveCount": "many"})),
            ("messageAttributes", json!([])),
            ("messageAttributes", json!({"a": {"dataType": "String"}})),
            ("messageAttributes", json!({"a": {"stringValue": "x"}})),
            (
                "messageAttributes",
                json!({"a": {"dataType": "Binary", "binaryValue": "%%%"}}),
            ),
            ("eventSourceARN", json!("arn:aws:sns:us-east-1:1:topic")),
        ] {
            let mut r = base.clone();
            r[field] = value;
            cases.push(r);
        }
        for record in cases {
            let err = parse_record(&record).unwrap_err();
            assert_eq!(err.message_id.as_deref(), Some("m-2"), "{record}");
        }
        let err = parse_record(&json!({"body": "b"})).unwrap_err();
        assert_eq!(err.message_id, None);
        // The reason names what was wrong.
        for (field, value, named) in [
            ("body", json!(4111111111111111u64), "at `body`"),
            ("messageAttributes", json!([]), "at `messageAttributes`"),
            (
                "attributes",
                json!({"ApproximateReceiveCount": "many"}),
                "\"many\"",
            ),
            ("receiptHandle", json!(""), "no receiptHandle"),
            (
                "messageAttributes",
                json!({"a": {"stringValue": "x"}}),
                "message attribute \"a\": no dataType",
            ),
        ] {
            let mut r = base.clone();
            r[field] = value;
            let reason = parse_record(&r).unwrap_err().reason;
            assert!(reason.contains(named), "{reason:?} should name {named:?}");
            assert!(!reason.contains("4111"), "the body's value in {reason:?}");
        }
        assert!(parse_record(&json!("a string")).is_err());
    }

    #[test]
    fn queue_arns() {
        assert!(QueueArn::parse("arn:aws:sqs:us-east-1:123456789012:q").is_some());
        for bad in [
            "",
            "arn:aws:sqs:us-east-1:123456789012",
            "arn:aws:sqs:r::q",
            "x:aws:sqs:r:1:q",
        ] {
            assert!(QueueArn::parse(bad).is_none(), "{bad}");
        }
    }
}
