//! The Lambda SQS event source mapping (ReportBatchItemFailures) in front of the consumer,
//! which, like SQS, sometimes delivers a batch twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_sqs::types::Message;
use redrive_tests::event_source::{self, Function};
use redrive_tests::sqs_event;
use serde_json::Value;

use crate::{DUPLICATE_EVERY, Demo};

/// One poller of the event source mapping: receive up to 10, invoke the consumer with the
/// Lambda SQS event, delete what was not reported in batchItemFailures.
pub async fn poller(demo: Arc<Demo>) {
    let consumer = Consumer {
        demo: &demo,
        batch_no: AtomicU64::new(0),
    };
    event_source::poll(&demo.source, &consumer, || demo.stopped()).await;
}

/// The consumer under `cargo lambda watch`, as one poller invokes it.
struct Consumer<'a> {
    demo: &'a Demo,
    /// The number of this poller's batch in the event source's count.
    batch_no: AtomicU64,
}

impl Function<Message> for Consumer<'_> {
    async fn invoke(&self, batch: &[Message]) -> Option<HashSet<String>> {
        let counters = &self.demo.counters;
        let batch_no = counters.batches.fetch_add(1, Ordering::SeqCst) + 1;
        self.batch_no.store(batch_no, Ordering::SeqCst);
        invoke_consumer(self.demo, batch).await
    }

    async fn settled(&self, succeeded: &[&Message]) {
        let demo = self.demo;
        for m in succeeded {
            if redrive_attempt(m) > 0 && !is_malformed(m) {
                demo.counters
                    .delivered_after_redrive
                    .fetch_add(1, Ordering::SeqCst);
            }
        }
        // Only records whose side effect happened: a duplicate of a permanent failure would
        // be fast-tracked to the DLQ a second time, harmless but confusing in a report.
        let delivered: Vec<&Message> = succeeded
            .iter()
            .copied()
            .filter(|m| demo.downstream.deliveries(&idempotency_key(m)) > 0)
            .collect();
        let batch_no = self.batch_no.load(Ordering::SeqCst);
        if !delivered.is_empty() && batch_no.is_multiple_of(DUPLICATE_EVERY) {
            deliver_again(demo, &delivered).await;
        }
    }

    fn source_failed(&self, error: &str) {
        self.demo.counters.errors.fetch_add(1, Ordering::SeqCst);
        self.demo.console.event(&format!("event source: {error}"));
    }
}

/// Invokes the consumer; returns the messageIds it reported failed, `None` if the invocation
/// itself failed.
async fn invoke_consumer(demo: &Demo, messages: &[Message]) -> Option<HashSet<String>> {
    let event = sqs_event(messages, &demo.stack.source_arn);
    demo.counters.invocations.fetch_add(1, Ordering::SeqCst);
    match demo.watch.invoke("consumer", &event).await {
        Ok(response) => Some(
            response["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                .collect(),
        ),
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console
                .event(&format!("event source: the consumer failed: {e}"));
            None
        }
    }
}

/// SQS is at-least-once: hand the consumer records it already processed, as a second
/// delivery would. Its idempotency record must answer them without a second side effect.
async fn deliver_again(demo: &Demo, succeeded: &[&Message]) {
    let copies: Vec<Message> = succeeded.iter().map(|m| (*m).clone()).collect();
    let before: Vec<usize> = copies
        .iter()
        .map(|m| demo.downstream.deliveries(&idempotency_key(m)))
        .collect();
    demo.counters
        .duplicate_deliveries
        .fetch_add(copies.len() as u64, Ordering::SeqCst);
    let Some(failed) = invoke_consumer(demo, &copies).await else {
        return;
    };
    for (m, before) in copies.iter().zip(before) {
        let after = demo.downstream.deliveries(&idempotency_key(m));
        let reported_ok = !failed.contains(m.message_id().unwrap_or_default());
        if reported_ok && after == before {
            demo.counters
                .duplicates_suppressed
                .fetch_add(1, Ordering::SeqCst);
        } else if after > before {
            demo.counters
                .duplicates_not_suppressed
                .fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The `x-redrive` metadata of a message, if any.
pub fn redrive_meta(m: &Message) -> Option<Value> {
    let text = m.message_attributes()?.get("x-redrive")?.string_value()?;
    serde_json::from_str(text).ok()
}

fn redrive_attempt(m: &Message) -> u64 {
    redrive_meta(m)
        .and_then(|v| v["attempt"].as_u64())
        .unwrap_or(0)
}

/// What the consumer keys on by default: `originalMessageId`, else the MessageId.
fn idempotency_key(m: &Message) -> String {
    redrive_meta(m)
        .and_then(|v| v["originalMessageId"].as_str().map(str::to_string))
        .unwrap_or_else(|| m.message_id().unwrap_or_default().to_string())
}

fn is_malformed(m: &Message) -> bool {
    m.body().is_some_and(|b| b.contains("\"amount\":-"))
}

pub fn order_id_of(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get("orderId")?
        .as_str()
        .map(str::to_string)
}
