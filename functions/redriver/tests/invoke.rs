//! One DLQ's invocations on the port fake: the event the re-driver is sent decides the drain
//! (a manual event's overrides), a bad event touches nothing, and a DLQ that cannot be read
//! fails the invocation with `errorType` `DlqUnreadable` and says so in a metric.

use crate::common::{DLQ, setup};
use redrive_engine::fake::{FakeSqs, throttled};
use redrive_engine::ports::PortError;
use redrive_engine::{DrainError, StopReason};
use redrive_redriver::{InvocationError, handle};
use redrive_shared::Attributes;
use serde_json::json;

fn fill(sqs: &FakeSqs, n: usize) {
    for i in 0..n {
        sqs.push(DLQ, &format!("body-{i}"), Attributes::new(), None);
    }
}

fn access_denied() -> PortError {
    PortError::new(
        "ReceiveMessage",
        "AccessDenied",
        "not authorized to perform sqs:receivemessage",
        false,
    )
}

#[tokio::test]
async fn handle_rejects_bad_events_without_touching_anything() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 2);
    let err = handle(&engine, &json!({"maxMesages": 5}), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("maxMesages"));
    assert_eq!(
        sqs.calls.receive.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(cw.published.lock().unwrap().is_empty());
    assert_eq!(sqs.len(DLQ), 2);
}

#[tokio::test]
async fn a_manual_drain_overrides_the_batch_and_dry_run() {
    let (sqs, _cw, engine) = setup(&[("MAX_MESSAGES_PER_INVOCATION", "100")]);
    fill(&sqs, 20);
    let s = handle(&engine, &json!({"maxMessages": 5}), None)
        .await
        .unwrap();
    assert_eq!((s.redriven, s.stopped_because), (5, StopReason::Limit));
    let s = handle(&engine, &json!({"dryRun": true}), None)
        .await
        .unwrap();
    assert!(s.dry_run);
    assert_eq!((s.received, s.redriven), (15, 15));
    assert_eq!(sqs.len(DLQ), 15);
}

#[tokio::test]
async fn a_dlq_that_cannot_be_read_fails_the_invocation_and_says_so_in_a_metric() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 2);
    sqs.fail_next("ReceiveMessage", access_denied());
    let err = handle(&engine, &json!({}), None).await.unwrap_err();
    let InvocationError::Drain(DrainError::DlqUnreadable { reason, summary }) = &err else {
        panic!("{err}")
    };
    assert_eq!(err.error_type(), "DlqUnreadable");
    assert_eq!(reason.code, "AccessDenied", "{reason}");
    assert_eq!(summary.received, 0);
    assert!(err.to_string().contains("DLQ cannot be read"), "{err}");
    let published = cw.published.lock().unwrap().clone();
    assert_eq!(published.len(), 1, "one PutMetricData");
    assert_eq!(published[0].2.dlq_receive_failures, 1);
    assert_eq!(sqs.len(DLQ), 2);
    // A readable DLQ publishes the metric as zero.
    let s = handle(&engine, &json!({}), None).await.unwrap();
    assert_eq!(s.redriven, 2);
    assert_eq!(cw.published.lock().unwrap()[1].2.dlq_receive_failures, 0);
}

#[tokio::test]
async fn a_receive_that_keeps_being_throttled_fails_the_invocation_too() {
    let (sqs, cw, engine) = setup(&[("MAX_CONCURRENT_BATCHES", "1")]);
    fill(&sqs, 2);
    for _ in 0..3 {
        sqs.fail_next("ReceiveMessage", throttled("ReceiveMessage"));
    }
    let err = handle(&engine, &json!({}), None).await.unwrap_err();
    assert!(
        matches!(
            err,
            InvocationError::Drain(DrainError::DlqUnreadable { .. })
        ),
        "{err}"
    );
    assert_eq!(cw.published.lock().unwrap()[0].2.dlq_receive_failures, 1);
}
