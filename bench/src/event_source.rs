//! The harness's event source mapping ([`redrive_tests::event_source`]) in front of the
//! consumer engine in process, as the circuit simulation and the soak run it: SQS messages
//! read as the consumer's [`Message`]s, and a [`Function`] that hands them to
//! [`Consumer::handle`] as the Lambda SQS event.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use redrive_consumer::message::{QueueArn, record_to_event_json};
use redrive_consumer::ports::{IdempotencyStore, QueueOps};
use redrive_consumer::{Consumer, FailedIds, Message, Processor};
use redrive_shared::sdk::attributes_from_sdk;
use redrive_shared::sync::lock;
use redrive_tests::event_source::{Function, Source, SqsSource, receive_count};
use serde_json::{Value, json};

/// The region of the simulations' queue ARNs and events.
pub const REGION: &str = "us-east-1";
/// The consumer invocation's deadline: a 15 s Lambda timeout.
pub const CONSUMER_TIMEOUT_MS: u64 = 15_000;

/// Wall-clock epoch milliseconds (the consumer's deadlines are wall-clock, as Lambda's are).
pub fn wall_ms() -> u64 {
    u64::try_from(redrive_shared::clock::now_ms()).unwrap_or(0)
}

/// An SQS source queue whose messages are read as the consumer reads a Lambda SQS event's
/// records, from `source_arn`.
pub struct SqsRecords {
    pub sqs: SqsSource,
    pub source_arn: QueueArn,
}

impl SqsRecords {
    /// `queue_url` polled with this visibility timeout, pausing `idle` after an empty poll.
    pub fn new(
        client: aws_sdk_sqs::Client,
        queue_url: &str,
        source_arn: QueueArn,
        visibility: Duration,
        idle: Duration,
    ) -> Self {
        Self {
            sqs: SqsSource {
                visibility_timeout: Some(visibility.as_secs() as i32),
                idle,
                ..SqsSource::new(client, queue_url)
            },
            source_arn,
        }
    }
}

impl Source for SqsRecords {
    type Message = Message;

    async fn receive(&self) -> Result<Vec<Message>, String> {
        let received = self.sqs.receive_messages().await?;
        Ok(received
            .into_iter()
            .map(|m| Message {
                attributes: attributes_from_sdk(m.message_attributes.as_ref()),
                receive_count: receive_count(&m),
                message_id: m.message_id.unwrap_or_default(),
                receipt_handle: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
                group_id: None,
                source: Some(self.source_arn.clone()),
                trace_header: None,
            })
            .collect())
    }

    async fn delete(&self, settled: &[&Message]) -> Result<(), String> {
        let receipts: Vec<&str> = settled.iter().map(|m| m.receipt_handle.as_str()).collect();
        self.sqs.delete_receipts(&receipts).await
    }

    fn message_id(message: &Message) -> &str {
        &message.message_id
    }

    fn idle(&self) -> Duration {
        self.sqs.idle
    }
}

/// The consumer engine, invoked in process with the Lambda SQS event of each batch; it panics
/// on an event the consumer rejects (the simulations build every event themselves).
pub struct InProcess<'a, S, Q, P> {
    pub consumer: &'a Consumer<S, Q, P>,
    /// Where to count the records' outcomes, by name.
    pub outcomes: Option<&'a Mutex<BTreeMap<String, u64>>>,
}

impl<S, Q, P> Function<Message> for InProcess<'_, S, Q, P>
where
    S: IdempotencyStore,
    Q: QueueOps,
    P: Processor,
    Consumer<S, Q, P>: Sync,
{
    async fn invoke(&self, batch: &[Message]) -> Option<HashSet<String>> {
        let records: Vec<Value> = batch
            .iter()
            .map(|m| record_to_event_json(m, REGION))
            .collect();
        let handled = self
            .consumer
            .handle(
                &json!({ "Records": records }),
                wall_ms() + CONSUMER_TIMEOUT_MS,
            )
            .await
            .unwrap_or_else(|e| panic!("the consumer rejected an SQS event: {e}"));
        if let Some(outcomes) = self.outcomes {
            let mut outcomes = lock(outcomes);
            for r in &handled.records {
                *outcomes.entry(r.outcome.as_str().to_string()).or_default() += 1;
            }
        }
        Some(
            handled
                .response
                .failed_ids()
                .into_iter()
                .map(str::to_string)
                .collect(),
        )
    }
}
