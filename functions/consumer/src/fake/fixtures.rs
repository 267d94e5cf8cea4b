//! Fixtures: a configuration, messages and events of the standard queue `orders`, and the
//! handling of one event.

use redrive_shared::Attributes;
use redrive_shared::backoff::{Backoff, Jitter};
use redrive_shared::config::{
    ConsumerConfig, DEFAULT_CONSUMER_METRIC_NAMESPACE, FifoOnFailure, QueueUrl,
};
use redrive_shared::key::KeySource;
use serde_json::Value;

use crate::engine::{Consumer, Handled};
use crate::message::{Message, QueueArn, record_to_event_json};
use crate::ports::{IdempotencyStore, QueueOps};
use crate::process::{FromBody, Processor};

/// The standard queue the fixture messages come from.
pub const FIXTURE_SOURCE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:orders";

/// The DLQ of the fixture configuration.
pub const FIXTURE_DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";

/// A fixture: the configuration of table `idempotency`, keyed by `key_source`, records kept an
/// hour, the fixture DLQ when `dlq`, retries after 2 s times 3 per receive (no jitter, at most
/// 900 s), no cache, a FIFO group held after a failure.
pub fn config(dlq: bool, key_source: KeySource) -> ConsumerConfig {
    ConsumerConfig {
        idempotency_table: "idempotency".into(),
        key_source,
        key_namespace: None,
        payload: None,
        ttl_seconds: 3600,
        dlq_url: dlq.then(|| QueueUrl::parse(FIXTURE_DLQ_URL).expect("the fixture DLQ URL parses")),
        retry: Backoff::new(2.0, 3.0, 900, Jitter::None).expect("the fixture backoff is valid"),
        cache_size: 0,
        fail_when_all_failed: false,
        fifo_on_failure: FifoOnFailure::SkipGroup,
        metric_namespace: DEFAULT_CONSUMER_METRIC_NAMESPACE.into(),
    }
}

/// A fixture: a message of the standard queue `orders`, received once, handle `handle-<id>`.
pub fn message(id: &str, body: &str) -> Message {
    Message {
        message_id: id.into(),
        receipt_handle: format!("handle-{id}"),
        body: body.into(),
        attributes: Attributes::new(),
        receive_count: 1,
        group_id: None,
        source: QueueArn::parse(FIXTURE_SOURCE_ARN),
        trace_header: None,
    }
}

/// A fixture: the Lambda SQS event of these messages (region `us-east-1`).
pub fn event(messages: &[Message]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| record_to_event_json(m, "us-east-1"))
        .collect();
    serde_json::json!({ "Records": records })
}

/// A fixture: the deadline of an invocation a minute from now, in epoch milliseconds.
pub fn in_a_minute() -> u64 {
    (crate::engine::now_ms() + 60_000) as u64
}

/// A fixture: `consumer` handles these messages as one event, a minute before its deadline.
pub async fn handle<S, Q, P, T>(consumer: &Consumer<S, Q, P, T>, messages: &[Message]) -> Handled
where
    S: IdempotencyStore,
    Q: QueueOps,
    P: Processor<T>,
    T: FromBody,
{
    consumer
        .handle(&event(messages), in_a_minute())
        .await
        .expect("a fixture event has a Records array")
}

/// Each record's message id and outcome, in the batch's order.
pub fn outcomes(handled: &Handled) -> Vec<(&str, &str)> {
    handled
        .records
        .iter()
        .map(|r| (r.message_id.as_deref().unwrap_or(""), r.outcome.as_str()))
        .collect()
}
