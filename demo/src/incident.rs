//! The incident: the functions warmed up, the producer's orders, the downstream's outage.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use redrive_tests::Mode;
use serde_json::json;

use crate::alarm::alarm_notification;
use crate::{
    Demo, HEALTHY_AT_MOST, HEALTHY_DELIVERIES, MALFORMED_EVERY, ORDERS, OUTAGE, Order,
    PRODUCE_PER_SECOND,
};

/// Starts one instance of each function before the clock matters (a cold start runs
/// `cargo run`), with events that touch nothing.
pub async fn warm_up(demo: &Demo) {
    let empty = json!({"Records": []});
    if let Err(e) = demo.watch.invoke("consumer", &empty).await {
        demo.console.event(&format!("consumer warm-up: {e}"));
    }
    let other_queue = alarm_notification(demo, "OK", 0, "some-other-queue");
    match demo.watch.invoke("redriver", &other_queue).await {
        Ok(r) => demo.console.event(&format!(
            "both functions answer; an alarm about another queue is ignored by the re-driver (stoppedBecause {})",
            r["stoppedBecause"].as_str().unwrap_or("?")
        )),
        Err(e) => demo.console.event(&format!("re-driver warm-up: {e}")),
    }
}

pub async fn produce(demo: &Demo) -> Vec<Order> {
    let mut orders = Vec::with_capacity(ORDERS);
    let pause = Duration::from_secs_f64(10.0 / PRODUCE_PER_SECOND as f64);
    for chunk_start in (0..ORDERS).step_by(10) {
        let mut entries = Vec::new();
        let mut batch = Vec::new();
        for i in chunk_start..(chunk_start + 10).min(ORDERS) {
            let order_id = format!("o-{:04}", i + 1);
            let malformed = (i + 1) % MALFORMED_EVERY == 0;
            let amount = if malformed {
                -1.0
            } else {
                10.0 + (i % 17) as f64 * 3.5
            };
            let body = json!({"orderId": order_id, "customer": format!("c-{}", i % 23), "amount": amount, "currency": "EUR"}).to_string();
            entries.push(
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_attributes("tenant", string_attr("String", "acme"))
                    .message_attributes("schemaVersion", string_attr("Number", "2"))
                    .message_attributes(
                        "traceparent",
                        MessageAttributeValue::builder()
                            .data_type("Binary")
                            .binary_value(aws_sdk_sqs::primitives::Blob::new(
                                (i as u64).to_be_bytes().to_vec(),
                            ))
                            .build()
                            .expect("data type is set"),
                    )
                    .build()
                    .expect("id and body are set"),
            );
            batch.push((i.to_string(), order_id, malformed));
        }
        let out = demo
            .sqs
            .send_message_batch()
            .queue_url(&demo.stack.source_url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("SendMessageBatch to the source queue");
        assert!(
            out.failed.is_empty(),
            "the producer's sends failed: {:?}",
            out.failed
        );
        let ids: HashMap<String, String> = out
            .successful
            .into_iter()
            .map(|s| (s.id, s.message_id))
            .collect();
        for (entry, order_id, malformed) in batch {
            orders.push(Order {
                order_id,
                message_id: ids[&entry].clone(),
                malformed,
            });
        }
        demo.produced.store(orders.len() as u64, Ordering::SeqCst);
        tokio::time::sleep(pause).await;
    }
    demo.console
        .event(&format!("producer: {} orders sent", orders.len()));
    orders
}

pub fn string_attr(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .expect("data type is set")
}

pub async fn outage(demo: Arc<Demo>) {
    let started = Instant::now();
    while demo.downstream.total() < HEALTHY_DELIVERIES && started.elapsed() < HEALTHY_AT_MOST {
        if demo.stopped() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    demo.downstream.set_mode(Mode::Status(503));
    demo.set_phase("OUTAGE");
    demo.console.event(&format!(
        "downstream DOWN: 503 for every order for {}s (after {} deliveries)",
        OUTAGE.as_secs(),
        demo.downstream.total()
    ));
    tokio::time::sleep(OUTAGE).await;
    demo.downstream.set_mode(Mode::Healthy);
    demo.set_phase("recovery");
    demo.console.event("downstream RECOVERED: 200 again");
}
