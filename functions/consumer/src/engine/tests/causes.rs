//! The cause of each failed attempt, recorded in the key's cause item: what it keeps, that the
//! last failure wins, and that a failed write changes nothing else.

use super::*;
use crate::cause::ErrorClass;

fn cause_id(original_message_id: &str, body: &str) -> String {
    let key = IdempotencyKey::try_from(key_of(original_message_id, body)).unwrap();
    crate::cause::item_id(&key, None)
}

#[tokio::test]
async fn each_failed_attempt_records_its_cause_the_last_one_wins_and_the_first_time_is_kept() {
    // GIVEN a message that fails transiently (ids in the text), then permanently, no DLQ
    let (store, queue, processor) = fakes();
    let key = key_of("m-1", "a");
    processor.script(
        &key,
        [
            Step::Fail(ProcessError::transient(
                "HTTP_503",
                "POST https://orders.internal/v1/orders/81234 answered 503 (request id 6f1c2a9e-8d7b-4c3a-9f0e-1b2c3d4e5f60)",
            )),
            Step::Fail(ProcessError::permanent(
                "SCHEMA_INVALID",
                "field 'amount' expected number, got string \"12,50\"",
            )),
        ],
    );
    let c = consumer(
        &store,
        &queue,
        &processor,
        config(false, KeySource::Message),
    );
    let mut m = message("m-1", "a");

    // WHEN it fails once
    let before = now_ms();
    let first = handle(&c, &[m.clone(), message("m-2", "b")]).await;
    assert_eq!(first.response.failed_ids(), ["m-1"]);

    // THEN its cause is recorded under the key's cause item, normalised, with no value kept
    let cause = store.cause(&cause_id("m-1", "a")).expect("a cause item");
    assert_eq!(
        (cause.class.clone(), cause.code.as_str(), cause.attempts),
        (ErrorClass::Transient, "HTTP_503", 1)
    );
    assert_eq!(
        cause.message,
        "POST <url> answered <num> (request id <uuid>)"
    );
    assert!(cause.first_failed_ms >= before && cause.first_failed_ms == cause.last_failed_ms);
    // ... expiring with the idempotency TTL (an hour in the fixture)
    assert!((cause.expiration_s - cause.last_failed_ms / 1000 - 3600).abs() <= 1);
    // ... beside the key's records: the claim was released as ever, the success has no cause
    assert!(store.record(&id_of("m-1", "a")).is_none());
    assert!(store.cause(&cause_id("m-2", "b")).is_none());
    assert_eq!(store.calls.cause.load(Ordering::SeqCst), 1);

    // WHEN it fails again, permanently
    tokio::time::sleep(Duration::from_millis(5)).await;
    m.receive_count = 2;
    let second = handle(&c, &[m]).await;
    assert_eq!(outcomes(&second), [("m-1", "failed")]);

    // THEN the last failure wins, the first failure's time is kept, two attempts counted
    let last = store.cause(&cause_id("m-1", "a")).unwrap();
    assert_eq!(
        (last.class, last.code.as_str(), last.attempts),
        (ErrorClass::Permanent, "SCHEMA_INVALID", 2)
    );
    assert_eq!(
        last.message,
        "field <quoted> expected number, got string <quoted>"
    );
    assert_eq!(last.first_failed_ms, cause.first_failed_ms);
    assert!(last.last_failed_ms > cause.last_failed_ms);
}

#[tokio::test]
async fn a_cause_that_cannot_be_written_changes_no_outcome() {
    // GIVEN a store whose cause writes fail
    for (step, outcome, dlq_copies) in [
        (transient_503(), "retry", 0),
        (permanent_400(), "dead-lettered", 1),
    ] {
        let (store, queue, processor) = fakes_that(step);
        store.fail_next("cause");
        let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));

        // WHEN a message fails
        let handled = handle(&c, &[message("m-1", "a")]).await;

        // THEN its outcome is what it would have been, and nothing was recorded
        assert_eq!(outcomes(&handled), [("m-1", outcome)]);
        assert_eq!(queue.sends().len(), dlq_copies);
        assert!(store.cause(&cause_id("m-1", "a")).is_none());
        assert!(store.record(&id_of("m-1", "a")).is_none(), "released");
    }
}

#[tokio::test]
async fn a_namespaced_consumer_records_the_cause_under_its_namespace() {
    let (store, queue, processor) = fakes_that(transient_503());
    let config = ConsumerConfig {
        key_namespace: Some("orders".into()),
        ..config(false, KeySource::Message)
    };
    let c = consumer(&store, &queue, &processor, config);
    handle(&c, &[message("m-1", "a")]).await;
    let key = IdempotencyKey::try_from(key_of("m-1", "a")).unwrap();
    let id = crate::cause::item_id(&key, Some("orders"));
    assert!(id.starts_with("cause#orders#"));
    assert_eq!(store.cause(&id).unwrap().code, "HTTP_503");
}
