//! Typed envelopes on moto: SQS messages whose bodies are SNS notifications (an SNS
//! subscription with raw message delivery off), handled by a processor that names
//! `SnsSqsEnvelope<Order>`, with the DynamoDB store and the SQS failure paths.

use crate::common;

use std::sync::Mutex;

use common::*;
use redrive_consumer::{
    BODY_NOT_PARSED, Consumer, FailedIds, Outcome, ProcessError, Record, SnsSqsEnvelope,
};
use serde_json::json;

#[derive(Debug, serde::Deserialize)]
struct Order {
    order_id: String,
    amount_cents: u64,
}

/// An SQS body as an SNS subscription writes it, for a publish of `message`.
fn notification(sns_message_id: &str, message: &str) -> String {
    json!({
        "Type": "Notification",
        "MessageId": sns_message_id,
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": message,
        "Timestamp": "2026-01-02T03:04:05.678Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLEsignature==",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
        "MessageAttributes": {"tenant": {"Type": "String", "Value": "acme"}}
    })
    .to_string()
}

#[tokio::test]
async fn an_sns_enveloped_message_is_processed_once_and_a_malformed_envelope_is_dead_lettered() {
    // GIVEN one SNS publish delivered twice to the queue (SNS delivers at least once: two SQS
    // messages, two MessageIds, one SNS MessageId); the subscription's confirmation request,
    // which SNS writes into the queue too and which carries no payload; and a message that is
    // the payload alone (as raw message delivery writes it), not an SNS notification
    let w = World::new(false).await;
    let published = notification(
        "5f4b7d2e-sns-0001",
        r#"{"order_id":"o-1","amount_cents":4200}"#,
    );
    let confirmation = json!({
        "Type": "SubscriptionConfirmation",
        "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
        "Token": "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82efd087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": "You have chosen to subscribe to the topic arn:aws:sns:us-east-1:123456789012:orders.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
        "SubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-1:123456789012:orders&Token=2336412f37",
        "Timestamp": "2026-01-02T03:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLEsignature==",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem"
    })
    .to_string();
    let raw = r#"{"order_id":"o-2","amount_cents":99}"#;
    let ids = w
        .send(&[
            (&published, &[]),
            (&published, &[]),
            (&confirmation, &[]),
            (raw, &[]),
        ])
        .await;

    // AND a processor of SNS-enveloped orders, keyed on the SNS MessageId
    let charged = Mutex::new(Vec::new());
    let charged_ref = &charged;
    let consumer = Consumer::new(
        w.store(),
        w.queue_ops(),
        move |sns: SnsSqsEnvelope<Order>, record: Record| async move {
            charged_ref.lock().unwrap().push((
                sns.message.order_id,
                sns.message.amount_cents,
                sns.topic_arn,
                sns.message_attributes["tenant"].value.clone(),
                record.key().as_str().to_string(),
            ));
            Ok::<(), ProcessError>(())
        },
        w.config(true, &[("IDEMPOTENCY_KEY", "/MessageId")]),
    );

    // WHEN the batch of the three is handled, and the event source mapping deletes what was
    // not reported failed
    let received = w.receive(4).await;
    let handled = consumer
        .handle(&w.event(&received), deadline_in(60))
        .await
        .unwrap();
    w.settle(&received, &handled.response).await;

    // THEN the order was charged once, from inside the envelope, under the SNS MessageId
    let charged = charged.into_inner().unwrap();
    assert_eq!(
        charged,
        [(
            "o-1".to_string(),
            4200,
            "arn:aws:sns:us-east-1:123456789012:orders".to_string(),
            "acme".to_string(),
            "5f4b7d2e-sns-0001".to_string()
        )]
    );
    let mut outcomes: Vec<&Outcome> = ids[..2]
        .iter()
        .map(|id| handled.outcome_of(id).unwrap())
        .collect();
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(outcomes, [&Outcome::Duplicate, &Outcome::Processed]);
    assert_eq!(
        w.status("5f4b7d2e-sns-0001").await.as_deref(),
        Some("COMPLETED")
    );

    // AND the two messages that are no SNS notification are permanent failures, fast-tracked
    // to the DLQ byte for byte, each stamped with what was wrong and without the body's
    // content: the confirmation does not parse as a notification; the bare payload has no
    // `MessageId`, so that its key is missing before its body is read
    for (id, code) in [(&ids[2], BODY_NOT_PARSED), (&ids[3], "KEY_MISSING")] {
        assert_eq!(
            handled.outcome_of(id),
            Some(&Outcome::DeadLettered {
                code: code.into(),
                stamped: true
            })
        );
    }
    assert!(handled.response.failed_ids().is_empty(), "{handled:?}");
    let mut dead: Vec<(String, String, String)> = w
        .dead_letters()
        .await
        .into_iter()
        .map(|(copy, meta)| {
            let last = meta.last_error.unwrap();
            (copy.body().unwrap().to_string(), last.code, last.message)
        })
        .collect();
    dead.sort();
    assert_eq!(dead.len(), 2, "{dead:?}");
    let (copy, code, message) = &dead[0];
    assert_eq!(
        (copy.as_str(), code.as_str()),
        (confirmation.as_str(), BODY_NOT_PARSED)
    );
    assert!(
        message.contains("the body is an SNS SubscriptionConfirmation, not a Notification"),
        "{message}"
    );
    let (copy, code, message) = &dead[1];
    assert_eq!((copy.as_str(), code.as_str()), (raw, "KEY_MISSING"));
    assert!(message.contains("/MessageId"), "{message}");
    for (_, _, message) in &dead {
        assert!(
            !message.contains("o-2") && !message.contains("2336412f"),
            "{message}"
        );
    }

    // WHEN a processor keyed on the SQS message (the default key) meets the bare payload
    w.send(&[(raw, &[])]).await;
    let received = w.receive(1).await;
    let by_message = Consumer::new(
        w.store(),
        w.queue_ops(),
        |_sns: SnsSqsEnvelope<Order>, _record: Record| async move {
            Err::<(), ProcessError>(ProcessError::transient("UNREACHED", "never called"))
        },
        w.config(true, &[]),
    );
    let handled = by_message
        .handle(&w.event(&received), deadline_in(60))
        .await
        .unwrap();
    // THEN its body is read and named as no SNS notification, at its top level
    assert!(
        matches!(handled.records[0].outcome, Outcome::DeadLettered { ref code, .. } if code == BODY_NOT_PARSED),
        "{handled:?}"
    );
    let dead = w.dead_letters().await;
    let last = dead[0].1.last_error.as_ref().unwrap();
    assert!(
        last.message
            .starts_with("the body is not an SNS notification: a value that does not fit the type (wrong type, unknown value or missing field) at `.` (line 1"),
        "{}",
        last.message
    );
    assert!(!last.message.contains("o-2"), "{}", last.message);
    // AND nothing is left on the source queue
    assert_eq!(w.depth(&w.queues.source_url).await, 0);
}

/// An SQS body as an EventBridge rule writes it, for an event of `detail`.
fn eventbridge_event(id: &str, detail: serde_json::Value) -> String {
    json!({
        "version": "0",
        "id": id,
        "detail-type": "OrderPlaced",
        "source": "com.example.orders",
        "account": "123456789012",
        "time": "2026-01-02T03:04:05Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail
    })
    .to_string()
}

#[tokio::test]
async fn an_eventbridge_payload_field_keys_the_record_through_the_envelope() {
    use redrive_consumer::EventBridgeEnvelope;
    use redrive_consumer::fake::{self, FakeQueue, FakeStore, handle, message};
    use redrive_shared::key::KeySource;

    // GIVEN two events (two EventBridge ids) for the same order, and one for another order,
    // keyed on the payload's field through the envelope: `/detail/order_id`
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let charged = Mutex::new(Vec::new());
    let charged_ref = &charged;
    let consumer = Consumer::new(
        &store,
        &queue,
        move |event: EventBridgeEnvelope<Order>, record: Record| async move {
            charged_ref.lock().unwrap().push((
                event.detail.order_id,
                event.detail.amount_cents,
                event.id,
                record.key().as_str().to_string(),
            ));
            Ok::<(), ProcessError>(())
        },
        fake::config(true, KeySource::parse("/detail/order_id").unwrap()),
    );
    let batch = [
        message(
            "m-1",
            &eventbridge_event("ev-1", json!({"order_id": "o-1", "amount_cents": 4200})),
        ),
        message(
            "m-2",
            &eventbridge_event("ev-2", json!({"order_id": "o-1", "amount_cents": 4200})),
        ),
        message(
            "m-3",
            &eventbridge_event("ev-3", json!({"order_id": "o-3", "amount_cents": 7})),
        ),
    ];

    // WHEN the batch is handled
    let handled = handle(&consumer, &batch).await;

    // THEN each order was charged once, with the detail typed and the event's id beside it
    let mut charged = charged.into_inner().unwrap();
    charged.sort();
    assert_eq!(
        charged,
        [
            (
                "o-1".to_string(),
                4200,
                "ev-1".to_string(),
                "o-1".to_string()
            ),
            ("o-3".to_string(), 7, "ev-3".to_string(), "o-3".to_string()),
        ]
    );
    assert_eq!(handled.outcome_of("m-2"), Some(&Outcome::Duplicate));
    assert!(handled.response.failed_ids().is_empty(), "{handled:?}");
}
