//! SQS resources and inspection helpers for assertions.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::send_message::builders::SendMessageFluentBuilder;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

use serde_json::{Map, Value, json};

use crate::{REGION, unique_name};

/// 14 days, the SQS maximum: the retention of the terminal queues (DLQ, poison).
pub const TERMINAL_RETENTION_SECONDS: &str = "1209600";

/// Every system attribute, for `message_system_attribute_names`.
pub const SYSTEM_ATTRIBUTES_ALL: MessageSystemAttributeName = MessageSystemAttributeName::All;

/// Visibility timeout `drain_all` uses, long enough that nothing reappears mid-drain.
const DRAIN_VISIBILITY_SECONDS: i32 = 300;

/// A source queue with a RedrivePolicy to its DLQ, and a poison queue; the DLQ and the poison
/// queue are terminal (no RedrivePolicy, 14-day retention), as in the contract.
#[derive(Clone, Debug)]
pub struct QueueSet {
    pub fifo: bool,
    pub max_receive_count: i32,
    pub source_url: String,
    pub source_name: String,
    pub source_arn: String,
    pub dlq_url: String,
    pub dlq_name: String,
    pub dlq_arn: String,
    pub poison_url: String,
    pub poison_name: String,
    pub poison_arn: String,
}

impl QueueSet {
    /// The CLI's drain of this set: `drain --dlq … --source … --poison …`.
    pub fn drain_args(&self) -> Vec<&str> {
        vec![
            "drain",
            "--dlq",
            &self.dlq_url,
            "--source",
            &self.source_url,
            "--poison",
            &self.poison_url,
        ]
    }

    /// Creates the three queues under a fresh unique base name (`qs-<uuid>`, `…-dlq`,
    /// `…-poison`, each with `.fifo` when `fifo`; FIFO queues have ContentBasedDeduplication
    /// off).
    pub async fn create(sqs: &Client, fifo: bool, max_receive_count: i32) -> QueueSet {
        let base = unique_name("qs");
        let suffix = if fifo { ".fifo" } else { "" };
        let source_name = format!("{base}{suffix}");
        let dlq_name = format!("{base}-dlq{suffix}");
        let poison_name = format!("{base}-poison{suffix}");

        let terminal = |name: &str| {
            let mut attributes = fifo_attributes(fifo);
            attributes.insert(
                QueueAttributeName::MessageRetentionPeriod,
                TERMINAL_RETENTION_SECONDS.to_string(),
            );
            create_queue(sqs, name.to_string(), attributes)
        };
        let dlq_url = terminal(&dlq_name).await;
        let poison_url = terminal(&poison_name).await;
        let dlq_arn = queue_arn(sqs, &dlq_url).await;
        let poison_arn = queue_arn(sqs, &poison_url).await;

        let mut source_attributes = fifo_attributes(fifo);
        source_attributes.insert(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({
                "deadLetterTargetArn": dlq_arn,
                "maxReceiveCount": max_receive_count.to_string(),
            })
            .to_string(),
        );
        let source_url = create_queue(sqs, source_name.clone(), source_attributes).await;
        let source_arn = queue_arn(sqs, &source_url).await;

        QueueSet {
            fifo,
            max_receive_count,
            source_url,
            source_name,
            source_arn,
            dlq_url,
            dlq_name,
            dlq_arn,
            poison_url,
            poison_name,
            poison_arn,
        }
    }

    /// The account the queues live in (from the DLQ's ARN): moto's 123456789012, LocalStack's
    /// 000000000000.
    pub fn account(&self) -> &str {
        self.dlq_arn.split(':').nth(4).unwrap_or_default()
    }

    /// The shipped CloudWatch alarm notification over SNS (`sns-cloudwatch-alarm.json`) of the
    /// alarm `alarm` in `state` with one `QueueName` dimension, `queue`, sent from the account of
    /// these queues (`AWSAccountId`, `AlarmArn`): on AWS an alarm on a queue lives in the
    /// queue's account, and the re-driver ignores one from another account.
    pub fn alarm_notification(&self, alarm: &str, state: &str, queue: &str) -> Value {
        let mut event = crate::fixture("sns-cloudwatch-alarm.json");
        let message = event["Records"][0]["Sns"]["Message"]
            .as_str()
            .expect("the fixture's Message is a string")
            .to_string();
        let mut m: Value = serde_json::from_str(&message).expect("the fixture's Message is JSON");
        let account = self.account();
        m["AlarmName"] = json!(alarm);
        m["NewStateValue"] = json!(state);
        m["AWSAccountId"] = json!(account);
        m["AlarmArn"] = json!(format!(
            "arn:aws:cloudwatch:{REGION}:{account}:alarm:{alarm}"
        ));
        m["Trigger"]["Dimensions"] = json!([{"value": queue, "name": "QueueName"}]);
        event["Records"][0]["Sns"]["Message"] = json!(m.to_string());
        event
    }

    /// Environment for the re-driver Lambda: `DLQ_URL`, `SOURCE_QUEUE_URL`, `POISON_QUEUE_URL`.
    pub fn redriver_env(&self) -> Vec<(String, String)> {
        vec![
            ("DLQ_URL".to_string(), self.dlq_url.clone()),
            ("SOURCE_QUEUE_URL".to_string(), self.source_url.clone()),
            ("POISON_QUEUE_URL".to_string(), self.poison_url.clone()),
        ]
    }
}

fn fifo_attributes(fifo: bool) -> HashMap<QueueAttributeName, String> {
    let mut attributes = HashMap::new();
    if fifo {
        attributes.insert(QueueAttributeName::FifoQueue, "true".to_string());
        attributes.insert(
            QueueAttributeName::ContentBasedDeduplication,
            "false".to_string(),
        );
    }
    attributes
}

async fn create_queue(
    sqs: &Client,
    name: String,
    attributes: HashMap<QueueAttributeName, String>,
) -> String {
    let out = sqs
        .create_queue()
        .queue_name(&name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue {name}: {e:?}"));
    out.queue_url
        .unwrap_or_else(|| panic!("CreateQueue {name} returned no QueueUrl"))
}

async fn queue_arn(sqs: &Client, url: &str) -> String {
    queue_attributes(sqs, url)
        .await
        .remove(&QueueAttributeName::QueueArn)
        .unwrap_or_else(|| panic!("{url} has no QueueArn"))
}

/// All attributes of a queue (GetQueueAttributes `All`).
pub async fn queue_attributes(sqs: &Client, url: &str) -> HashMap<QueueAttributeName, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetQueueAttributes {url}: {e:?}"))
        .attributes
        .unwrap_or_default()
}

/// Messages in a queue: visible + in flight (not visible) + delayed.
pub async fn queue_depth(sqs: &Client, url: &str) -> u64 {
    let attributes = queue_attributes(sqs, url).await;
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .map(|name| {
        attributes
            .get(name)
            .map(|v| {
                v.parse::<u64>()
                    .unwrap_or_else(|_| panic!("{url}: {name:?} = {v:?} is not a count"))
            })
            .unwrap_or(0)
    })
    .sum()
}

/// A queue's (visible, in flight, delayed) counts; `None` when GetQueueAttributes failed.
pub async fn queue_counts(sqs: &Client, url: &str) -> Option<(u64, u64, u64)> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .ok()?
        .attributes
        .unwrap_or_default();
    let count = |name: QueueAttributeName| -> u64 {
        attributes
            .get(&name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((
        count(QueueAttributeName::ApproximateNumberOfMessages),
        count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// Polls `queue_depth` until it equals `expected`; panics with the last depth after `timeout`.
pub async fn wait_for_depth(sqs: &Client, url: &str, expected: u64, timeout: Duration) {
    let started = Instant::now();
    loop {
        let depth = queue_depth(sqs, url).await;
        if depth == expected {
            return;
        }
        if started.elapsed() > timeout {
            panic!("{url}: depth {depth}, expected {expected} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One ReceiveMessage (up to 10, no wait) with every message attribute and system attribute.
/// Nothing is deleted.
pub async fn receive_raw(sqs: &Client, url: &str, visibility_timeout: i32) -> Vec<Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(0)
        .visibility_timeout(visibility_timeout)
        .message_attribute_names("All")
        .message_system_attribute_names(SYSTEM_ATTRIBUTES_ALL)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ReceiveMessage {url}: {e:?}"))
        .messages
        .unwrap_or_default()
}

/// Receives every visible message of a queue, with all message and system attributes, and
/// deletes them: afterwards the queue holds only what was in flight or delayed before.
///
/// On a queue with a RedrivePolicy, remember that this counts as a receive (moto moves a
/// message past maxReceiveCount to the DLQ instead of returning it).
pub async fn drain_all(sqs: &Client, url: &str) -> Vec<Message> {
    let mut drained = Vec::new();
    loop {
        let batch = receive_raw(sqs, url, DRAIN_VISIBILITY_SECONDS).await;
        if batch.is_empty() {
            return drained;
        }
        let entries: Vec<_> = batch
            .iter()
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().expect("a received message has a handle"))
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        let out = sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap_or_else(|e| panic!("DeleteMessageBatch {url}: {e:?}"));
        assert!(
            out.failed.is_empty(),
            "DeleteMessageBatch {url} failed for {:?}",
            out.failed
        );
        drained.extend(batch);
    }
}

/// One SendMessageBatch of up to ten bodies; their MessageIds, in the order of the bodies.
/// Panics on a failed call or entry.
pub async fn send_batch(sqs: &Client, url: &str, bodies: &[String]) -> Vec<String> {
    let entries = bodies.iter().enumerate().map(|(i, body)| {
        SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(body)
            .build()
            .expect("id and body are set")
    });
    send_entries(sqs, url, entries.collect()).await
}

/// One SendMessageBatch of up to ten entries whose ids are their indexes; their MessageIds,
/// in order. Panics on a failed call or entry.
pub async fn send_entries(
    sqs: &Client,
    url: &str,
    entries: Vec<SendMessageBatchRequestEntry>,
) -> Vec<String> {
    let out = sqs
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessageBatch {url}: {e:?}"));
    assert!(
        out.failed.is_empty(),
        "SendMessageBatch {url}: {:?}",
        out.failed
    );
    let mut ids: Vec<(usize, String)> = out
        .successful
        .into_iter()
        .map(|s| (s.id.parse().expect("the ids sent"), s.message_id))
        .collect();
    ids.sort();
    ids.into_iter().map(|(_, id)| id).collect()
}

/// Sends one message with the given attributes and returns its MessageId. On a `.fifo`
/// queue it uses group `default` and a fresh deduplication id (see `send_fifo` to choose).
pub async fn send_raw(
    sqs: &Client,
    url: &str,
    body: &str,
    attributes: &[(&str, MessageAttributeValue)],
) -> String {
    if url.ends_with(".fifo") {
        let dedup = uuid::Uuid::new_v4().simple().to_string();
        return send_fifo(sqs, url, body, "default", &dedup, attributes).await;
    }
    let request = sqs.send_message().queue_url(url).message_body(body);
    send_with(request, url, attributes).await
}

/// Sends one message to a FIFO queue and returns its MessageId.
pub async fn send_fifo(
    sqs: &Client,
    url: &str,
    body: &str,
    group_id: &str,
    deduplication_id: &str,
    attributes: &[(&str, MessageAttributeValue)],
) -> String {
    let request = sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group_id)
        .message_deduplication_id(deduplication_id);
    send_with(request, url, attributes).await
}

/// Adds the message attributes, sends, and returns the MessageId; a failure names the queue.
async fn send_with(
    mut request: SendMessageFluentBuilder,
    url: &str,
    attributes: &[(&str, MessageAttributeValue)],
) -> String {
    for (name, value) in attributes {
        request = request.message_attributes(*name, value.clone());
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage {url}: {e:?}"))
        .message_id
        .expect("SendMessage returns a MessageId")
}

/// A fresh X-Ray trace header, as the `AWSTraceHeader` of a traced producer's message
/// carries it (`Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=1`), unique per call.
pub fn producer_trace_header() -> String {
    let root = uuid::Uuid::new_v4().simple().to_string();
    let parent = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "Root=1-{}-{};Parent={};Sampled=1",
        &root[..8],
        &root[8..],
        &parent[..16]
    )
}

/// [`send_raw`] as a traced producer does it: with the `AWSTraceHeader` system attribute
/// (SendMessage's `MessageSystemAttributes`). Returns its MessageId.
pub async fn send_traced(
    sqs: &Client,
    url: &str,
    body: &str,
    attributes: &[(&str, MessageAttributeValue)],
    trace_header: &str,
) -> String {
    let header = MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(trace_header)
        .build()
        .expect("data type is set");
    let mut request = sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, header);
    if url.ends_with(".fifo") {
        let dedup = uuid::Uuid::new_v4().simple().to_string();
        request = request
            .message_group_id("default")
            .message_deduplication_id(dedup);
    }
    send_with(request, url, attributes).await
}

/// Whether this run's SQS keeps a SendMessageBatch entry's `MessageSystemAttributes`, as SQS
/// does. moto 5.2.5's does not (its SendMessageBatch drops them; its SendMessage keeps them);
/// LocalStack's does. A test of a batched copy's `AWSTraceHeader` proves it on LocalStack
/// (`REDRIVE_SQS_EMULATOR=localstack`, `make test-localstack`) and says so on moto.
pub fn batch_sends_keep_trace_headers() -> bool {
    let keeps = crate::sqs_emulator().is_some();
    if !keeps {
        eprintln!(
            "moto's SendMessageBatch drops MessageSystemAttributes: the AWSTraceHeader of batched copies is checked on LocalStack (make test-localstack)"
        );
    }
    keeps
}

/// A received message's `AWSTraceHeader` (received with `All` system attributes, as
/// `receive_raw` and `drain_all` do).
pub fn trace_header_of(m: &Message) -> Option<&str> {
    m.attributes()?
        .get(&MessageSystemAttributeName::AwsTraceHeader)
        .map(String::as_str)
}

/// A `String` message attribute.
pub fn attr_string(value: &str) -> MessageAttributeValue {
    attr_custom("String", value)
}

/// A `Number` message attribute (SQS carries numbers as strings, byte for byte).
pub fn attr_number(value: &str) -> MessageAttributeValue {
    attr_custom("Number", value)
}

/// A `Binary` message attribute.
pub fn attr_binary(value: &[u8]) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(value))
        .build()
        .expect("data type is set")
}

/// A string-valued attribute of any data type, custom ones included (`Number.int`,
/// `String.json`).
pub fn attr_custom(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .expect("data type is set")
}

/// The Lambda SQS event for received messages, as the event source mapping builds it: records
/// with their system attributes, message attributes (binary values in base64) and checksums.
pub fn sqs_event(messages: &[Message], source_arn: &str) -> Value {
    let records: Vec<Value> = messages.iter().map(|m| sqs_record(m, source_arn)).collect();
    json!({ "Records": records })
}

fn sqs_record(m: &Message, source_arn: &str) -> Value {
    let system: Map<String, Value> = m
        .attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().to_string(), Value::String(v.clone())))
        .collect();
    let attributes: Map<String, Value> = m
        .message_attributes()
        .into_iter()
        .flatten()
        .map(|(name, v)| {
            let mut a = json!({
                "dataType": v.data_type(),
                "stringListValues": [],
                "binaryListValues": [],
            });
            if let Some(s) = v.string_value() {
                a["stringValue"] = Value::String(s.to_string());
            }
            if let Some(b) = v.binary_value() {
                a["binaryValue"] = Value::String(aws_smithy_types::base64::encode(b.as_ref()));
            }
            (name.clone(), a)
        })
        .collect();
    let mut record = json!({
        "messageId": m.message_id(),
        "receiptHandle": m.receipt_handle(),
        "body": m.body(),
        "attributes": system,
        "messageAttributes": attributes,
        "md5OfBody": m.md5_of_body(),
        "eventSource": "aws:sqs",
        "eventSourceARN": source_arn,
        "awsRegion": REGION,
    });
    if let Some(md5) = m.md5_of_message_attributes() {
        record["md5OfMessageAttributes"] = json!(md5);
    }
    record
}
