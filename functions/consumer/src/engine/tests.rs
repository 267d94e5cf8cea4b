//! The engine against the in-memory fakes: call counts, faults the emulator cannot produce on
//! demand, and the decision rules. The same cases against moto and a real HTTP downstream are
//! in `tests/`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redrive_shared::config::{FifoOnFailure, QueueUrl};
use redrive_shared::key::{IdempotencyKey, KeySource};
use redrive_shared::meta::ATTRIBUTE_NAME;
use redrive_shared::{Attributes, MessageAttribute, TraceHeader};
use serde_json::{Value, json};

use super::*;
use crate::fake::{
    FAKE_QUEUE_HOST, FIXTURE_DLQ_URL as DLQ, FakeQueue, FakeStore, QueueCall, ScriptedProcessor,
    Status, Step, config, event, handle, in_a_minute, message, outcomes,
};
use crate::message::Message;
use crate::message::QueueArn;
use crate::ports::{Claim, ClaimOutcome, CompletedRecord};
use crate::process::ProcessError;
use redrive_shared::meta::RedriveMeta;

const FIFO_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:orders.fifo";
const SOURCE_URL: &str = "https://sqs.fake/123456789012/orders";

/// The default (`message`) idempotency key of a message with this chain id and body.
fn key_of(original_message_id: &str, body: &str) -> String {
    redrive_shared::key::derive(
        &KeySource::Message,
        original_message_id,
        body,
        &Attributes::new(),
    )
    .unwrap()
    .as_str()
    .to_string()
}

/// The record id of a key (no namespace): the table never holds the key itself.
fn id_of_key(key: &str) -> String {
    IdempotencyKey::try_from(key.to_string())
        .unwrap()
        .record_id(None)
}

/// The record id of the default key of a message with this chain id and body.
fn id_of(original_message_id: &str, body: &str) -> String {
    id_of_key(&key_of(original_message_id, body))
}

fn fifo_message(id: &str, group: &str) -> Message {
    Message {
        group_id: Some(group.into()),
        source: QueueArn::parse(FIFO_ARN),
        ..message(id, "{}")
    }
}

/// Three FIFO groups interleaved: g1 has three records, g2 and g3 two each.
fn fifo_batch() -> [Message; 7] {
    [
        fifo_message("g1-1", "g1"),
        fifo_message("g2-1", "g2"),
        fifo_message("g1-2", "g1"),
        fifo_message("g3-1", "g3"),
        fifo_message("g1-3", "g1"),
        fifo_message("g2-2", "g2"),
        fifo_message("g3-2", "g3"),
    ]
}

/// A store, a queue and a processor, all empty.
fn fakes() -> (FakeStore, FakeQueue, ScriptedProcessor) {
    (
        FakeStore::new(),
        FakeQueue::new(),
        ScriptedProcessor::default(),
    )
}

/// An empty store and queue, and a processor that takes this step for every key.
fn fakes_that(step: Step) -> (FakeStore, FakeQueue, ScriptedProcessor) {
    (
        FakeStore::new(),
        FakeQueue::new(),
        ScriptedProcessor::new(step),
    )
}

/// How many times the processor ran for this key, and how many of those runs took effect.
fn calls_and_effects(processor: &ScriptedProcessor, key: &str) -> (u32, u32) {
    (processor.calls(key), processor.effects(key))
}

type Fakes<'a> = Consumer<&'a FakeStore, &'a FakeQueue, &'a ScriptedProcessor>;

fn consumer<'a>(
    store: &'a FakeStore,
    queue: &'a FakeQueue,
    processor: &'a ScriptedProcessor,
    config: ConsumerConfig,
) -> Fakes<'a> {
    Consumer::new(store, queue, processor, config)
}

/// For the tests of claims that expire within the test: short deadlines, no start margin.
fn consumer_without_margin<'a>(
    store: &'a FakeStore,
    queue: &'a FakeQueue,
    processor: &'a ScriptedProcessor,
    config: ConsumerConfig,
) -> Fakes<'a> {
    let settings = Settings {
        deadline_margin: Duration::ZERO,
        ..Settings::default()
    };
    Consumer::with_settings(store, queue, processor, config, settings)
}

fn transient_503() -> Step {
    Step::Fail(ProcessError::transient(
        "HTTP_503",
        "downstream answered 503",
    ))
}

/// A 429 whose Retry-After asks for `after`.
fn throttled(after: Duration) -> Step {
    Step::Fail(ProcessError::retry_after(
        "HTTP_429",
        "downstream answered 429",
        after,
    ))
}

fn permanent_400() -> Step {
    Step::Fail(ProcessError::permanent(
        "HTTP_400",
        "downstream answered 400",
    ))
}

#[tokio::test]
async fn happy_path_costs_two_writes_no_read_and_no_sqs_call() {
    // GIVEN three new messages
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let batch = [
        message("m-1", "a"),
        message("m-2", "b"),
        message("m-3", "c"),
    ];
    let deadline = in_a_minute();

    // WHEN the batch is handled
    let handled = c.handle(&event(&batch), deadline).await.unwrap();

    // THEN all succeed, each with one claim and one complete, and no SQS call at all
    assert_eq!(handled.response, BatchResponse::default());
    assert_eq!(
        outcomes(&handled),
        [
            ("m-1", "processed"),
            ("m-2", "processed"),
            ("m-3", "processed")
        ]
    );
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 3);
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 3);
    assert_eq!(store.calls.writes(), 6);
    assert_eq!(store.calls.read.load(Ordering::SeqCst), 0);
    assert!(queue.calls().is_empty(), "{:?}", queue.calls());
    let record = store.record(&id_of("m-1", "a")).unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.in_progress_expiration_ms, deadline as i64);
    let expected_expiry = now_ms() / 1000 + 3600;
    assert!((expected_expiry - 2..=expected_expiry).contains(&record.expiration_s));
    assert_eq!(
        serde_json::to_value(&handled.response).unwrap(),
        json!({"batchItemFailures": []})
    );
}

#[tokio::test]
async fn the_same_batch_twice_reaches_the_side_effect_once_per_key() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let batch = event(&[message("m-1", "a"), message("m-2", "b")]);

    c.handle(&batch, in_a_minute()).await.unwrap();
    let again = c.handle(&batch, in_a_minute()).await.unwrap();

    assert_eq!(
        outcomes(&again),
        [("m-1", "duplicate"), ("m-2", "duplicate")]
    );
    assert!(again.response.batch_item_failures.is_empty());
    assert_eq!(
        (
            processor.effects(&key_of("m-1", "a")),
            processor.effects(&key_of("m-2", "b"))
        ),
        (1, 1)
    );
    assert_eq!(processor.total_calls(), 2);
    // The duplicate cost one failed conditional write each, no read and no other write.
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 4);
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn two_concurrent_invocations_with_the_same_message_deliver_once() {
    // GIVEN two Lambda instances sharing the table, and a slow side effect
    let (store, queue_a, queue_b) = (FakeStore::new(), FakeQueue::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(300));
    let a = consumer(
        &store,
        &queue_a,
        &processor,
        config(true, KeySource::Message),
    );
    let b = consumer(
        &store,
        &queue_b,
        &processor,
        config(true, KeySource::Message),
    );
    let batch = event(&[message("m-1", "a")]);

    // WHEN both handle the same message at once
    let (ra, rb) = tokio::join!(
        a.handle(&batch, in_a_minute()),
        b.handle(&batch, in_a_minute())
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());

    // THEN one processed it, the other reported it failed without calling the side effect
    let mut got = vec![
        ra.records[0].outcome.as_str(),
        rb.records[0].outcome.as_str(),
    ];
    got.sort();
    assert_eq!(got, ["in-progress", "processed"]);
    assert_eq!(processor.calls(&key_of("m-1", "a")), 1);
    assert_eq!(processor.effects(&key_of("m-1", "a")), 1);
    let loser = if ra.records[0].outcome == Outcome::InProgress {
        (&ra, &queue_a)
    } else {
        (&rb, &queue_b)
    };
    assert_eq!(loser.0.response.failed_ids(), ["m-1"]);
    // ... and deferred it by the retry backoff (base 2, receive count 1, no jitter)
    assert_eq!(
        loser.1.visibility_changes(),
        [("handle-m-1".to_string(), 2)]
    );
    // The winner's record is COMPLETED: the loser did not release it.
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_redriven_copy_of_a_processed_message_is_a_duplicate() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    handle(&c, &[message("first-id", "order")]).await;

    // A redriven copy: new MessageId, x-redrive names the original.
    let mut copy = message("second-id", "order");
    let meta = RedriveMeta {
        attempt: 1,
        ..RedriveMeta::fresh("first-id")
    };
    meta.write_into(&mut copy.attributes);
    let handled = handle(&c, &[copy]).await;

    assert_eq!(outcomes(&handled), [("second-id", "duplicate")]);
    assert_eq!(
        handled.records[0].key.as_deref(),
        Some(key_of("first-id", "order").as_str())
    );
    assert_eq!(processor.effects(&key_of("first-id", "order")), 1);
    assert_eq!(processor.total_calls(), 1);
}

#[tokio::test]
async fn a_crashed_invocations_claim_is_reclaimed_after_its_deadline() {
    // GIVEN an invocation that claimed the key and then hung until it was killed
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let hanging = ScriptedProcessor::new(Step::Hang);
    let crashed =
        consumer_without_margin(&store, &queue, &hanging, config(true, KeySource::Message));
    let batch = event(&[message("m-1", "a")]);
    let deadline = now_ms() + 700;
    let killed = tokio::time::timeout(
        Duration::from_millis(100),
        crashed.handle(&batch, deadline as u64),
    )
    .await;
    assert!(killed.is_err(), "the hanging invocation must not finish");
    let left = store.record(&id_of("m-1", "a")).unwrap();
    assert_eq!(
        (left.status, left.in_progress_expiration_ms),
        (Status::InProgress, deadline)
    );

    // WHEN the message comes back before that deadline
    let healthy = ScriptedProcessor::default();
    let next = consumer(&store, &queue, &healthy, config(true, KeySource::Message));
    let early = next.handle(&batch, in_a_minute()).await.unwrap();
    // THEN it is reported failed and not processed
    assert_eq!(outcomes(&early), [("m-1", "in-progress")]);
    assert_eq!(healthy.calls(&key_of("m-1", "a")), 0);

    // WHEN it comes back after the deadline
    tokio::time::sleep(Duration::from_millis(800)).await;
    let late = next.handle(&batch, in_a_minute()).await.unwrap();
    // THEN the claim is taken over and the message processed once
    assert_eq!(outcomes(&late), [("m-1", "processed")]);
    assert_eq!(healthy.effects(&key_of("m-1", "a")), 1);
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::Completed
    );
}

/// A claim of key `k` made at `now` with this token, held until `until_ms`.
fn claim_of_k(token: &str, now: i64, until_ms: i64) -> Claim {
    Claim {
        key: "k".into(),
        token: token.into(),
        now_ms: now,
        expiration_s: now / 1000 + 100,
        in_progress_expiration_ms: until_ms,
        payload_hash: None,
    }
}

#[tokio::test]
async fn a_release_never_removes_a_claim_someone_else_took_over() {
    let store = FakeStore::new();
    let now = now_ms();
    let first = claim_of_k("first", now, now - 1); // already expired
    assert_eq!(store.claim(&first).await.unwrap(), ClaimOutcome::Claimed);
    let second = Claim {
        token: "second".into(),
        in_progress_expiration_ms: now + 60_000,
        ..first.clone()
    };
    assert_eq!(store.claim(&second).await.unwrap(), ClaimOutcome::Claimed);
    store.release(&first).await.unwrap();
    assert_eq!(store.record("k").unwrap().token.as_deref(), Some("second"));
    store.release(&second).await.unwrap();
    assert!(store.record("k").is_none());
}

#[tokio::test]
async fn a_claim_repeated_after_its_reply_was_lost_is_still_its_own() {
    let store = FakeStore::new();
    let now = now_ms();
    let claim = claim_of_k("mine", now, now + 60_000);
    assert_eq!(store.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
    // the retry of the same write (same token) finds its own IN_PROGRESS record
    assert_eq!(store.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
    // anyone else still finds it held
    let other = Claim {
        token: "theirs".into(),
        ..claim.clone()
    };
    assert_eq!(
        store.claim(&other).await.unwrap(),
        ClaimOutcome::InProgress {
            until_ms: Some(now + 60_000)
        }
    );
}

#[tokio::test]
async fn a_transient_failure_releases_defers_and_reports_then_recovers() {
    let (store, queue, processor) = fakes();
    processor.script(&key_of("m-1", "a"), [transient_503()]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let mut m = message("m-1", "a");

    let first = handle(&c, &[m.clone(), message("m-2", "b")]).await;
    assert_eq!(first.response.failed_ids(), ["m-1"]);
    assert_eq!(
        first.outcome_of("m-1"),
        Some(&Outcome::Retry {
            code: "HTTP_503".into(),
            visibility_seconds: Some(2)
        })
    );
    assert!(
        store.record(&id_of("m-1", "a")).is_none(),
        "the claim is released"
    );
    assert_eq!(
        queue.calls(),
        [
            QueueCall::QueueUrl {
                name: "orders".into(),
                account: "123456789012".into()
            },
            QueueCall::ChangeVisibility {
                queue_url: SOURCE_URL.into(),
                receipt_handle: "handle-m-1".into(),
                seconds: 2
            }
        ]
    );

    // The redelivery (receive count 2) succeeds.
    m.receive_count = 2;
    let second = handle(&c, &[m]).await;
    assert_eq!(outcomes(&second), [("m-1", "processed")]);
    assert_eq!(calls_and_effects(&processor, &key_of("m-1", "a")), (2, 1));
}

#[tokio::test]
async fn retry_visibility_follows_the_receive_count_and_honours_retry_after_capped() {
    let (store, queue, processor) = fakes();
    processor.script(&key_of("m-3", "x"), [transient_503()]);
    processor.script(&key_of("m-4", "x"), [throttled(Duration::from_secs(17))]);
    processor.script(&key_of("m-5", "x"), [throttled(Duration::from_secs(3600))]);
    processor.script(&key_of("m-6", "x"), [throttled(Duration::from_millis(1))]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let third_receive = Message {
        receive_count: 3,
        ..message("m-3", "x")
    };
    let batch = [
        third_receive,
        message("m-4", "x"),
        message("m-5", "x"),
        message("m-6", "x"),
    ];
    let handled = handle(&c, &batch).await;
    assert_eq!(handled.response.failed_ids(), ["m-3", "m-4", "m-5", "m-6"]);
    let mut got = queue.visibility_changes();
    got.sort();
    assert_eq!(
        got,
        [
            ("handle-m-3".to_string(), 18), // 2 * 3^2
            ("handle-m-4".to_string(), 17),
            ("handle-m-5".to_string(), 900),
            ("handle-m-6".to_string(), 1),
        ]
    );
    // The queue URL was resolved once for the four messages of one queue.
    let lookups = queue
        .calls()
        .iter()
        .filter(|c| matches!(c, QueueCall::QueueUrl { .. }))
        .count();
    assert_eq!(lookups, 1);
}

#[tokio::test]
async fn a_permanent_failure_goes_to_the_dlq_stamped_and_the_original_is_deleted() {
    // GIVEN a redriven message (attempt 2) with other attributes, failing permanently
    let (store, queue, processor) = fakes();
    processor.script(&key_of("orig-1", "not json \u{1F4E6}"), [permanent_400()]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let mut m = message("m-1", "not json \u{1F4E6}");
    m.attributes
        .insert("tenant".into(), MessageAttribute::string("acme"));
    m.attributes
        .insert("blob".into(), MessageAttribute::binary(vec![0u8, 255]));
    let meta = RedriveMeta {
        attempt: 2,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        ..RedriveMeta::fresh("orig-1")
    };
    meta.write_into(&mut m.attributes);

    let handled = handle(&c, &[m.clone()]).await;

    // THEN it is settled (not reported), the copy is on the DLQ and the original deleted
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(
        handled.outcome_of("m-1"),
        Some(&Outcome::DeadLettered {
            code: "HTTP_400".into(),
            stamped: true
        })
    );
    let sends = queue.sends();
    assert_eq!(sends.len(), 1);
    let (url, copy) = &sends[0];
    assert_eq!(url, DLQ);
    assert_eq!(copy.body, m.body);
    assert_eq!(copy.group_id, None);
    assert_eq!(copy.attributes["tenant"], m.attributes["tenant"]);
    assert_eq!(copy.attributes["blob"], m.attributes["blob"]);
    assert_eq!(copy.attributes.len(), 3);
    let (stamp, _) = RedriveMeta::read(&copy.attributes, "ignored");
    assert!(stamp.is_permanent_failure());
    assert_eq!(
        (stamp.attempt, stamp.original_message_id.as_str()),
        (2, "orig-1")
    );
    assert_eq!(
        stamp.first_redriven_at.as_deref(),
        Some("2026-11-21T10:00:00Z")
    );
    let last = stamp.last_error.unwrap();
    assert_eq!(
        (last.code.as_str(), last.message.as_str()),
        ("HTTP_400", "downstream answered 400")
    );
    assert!(redrive_shared::timefmt::millis_from_rfc3339(&last.at).is_some());
    assert_eq!(queue.deletes(), ["handle-m-1"]);
    // Send before delete.
    let order: Vec<&str> = queue
        .calls()
        .iter()
        .filter_map(|c| match c {
            QueueCall::Send { .. } => Some("send"),
            QueueCall::Delete { .. } => Some("delete"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["send", "delete"]);
    assert!(
        store
            .record(&id_of("orig-1", "not json \u{1F4E6}"))
            .is_none(),
        "the claim is released"
    );
}

#[tokio::test]
async fn a_permanent_failure_copy_carries_the_producers_trace_header() {
    // GIVEN a message of a traced producer (its record's attributes.AWSTraceHeader), failing
    // permanently
    let (store, queue, processor) = fakes();
    processor.script(&key_of("m-1", "{}"), [permanent_400()]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let m = Message {
        trace_header: Some(TraceHeader::parse(header).unwrap()),
        ..message("m-1", "{}")
    };

    // WHEN the batch is handled
    handle(&c, &[m]).await;

    // THEN the DLQ copy carries that header, so the trace follows it through the DLQ
    let sends = queue.sends();
    assert_eq!(sends.len(), 1);
    assert_eq!(
        sends[0].1.trace_header.as_ref().map(TraceHeader::as_str),
        Some(header)
    );
}

#[tokio::test]
async fn a_permanent_failure_without_a_dlq_is_reported_failed() {
    let (store, queue, processor) = fakes_that(permanent_400());
    let c = consumer(
        &store,
        &queue,
        &processor,
        config(false, KeySource::Message),
    );
    let handled = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(handled.response.failed_ids(), ["m-1"]);
    assert_eq!(
        handled.outcome_of("m-1"),
        Some(&Outcome::Failed {
            code: "HTTP_400".into()
        })
    );
    assert!(queue.calls().is_empty());
    assert!(store.record(&id_of("m-1", "a")).is_none());
}

#[tokio::test]
async fn a_message_at_the_attribute_limit_goes_to_the_dlq_unstamped() {
    let (store, queue, processor) = fakes_that(permanent_400());
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let mut full = message("m-1", "a");
    for i in 0..10 {
        full.attributes
            .insert(format!("a{i}"), MessageAttribute::string("v"));
    }
    // Nine attributes plus a legacy counter: the stamp replaces the legacy slot.
    let mut legacy = message("m-2", "b");
    for i in 0..9 {
        legacy
            .attributes
            .insert(format!("a{i}"), MessageAttribute::string("v"));
    }
    legacy
        .attributes
        .insert("x-redrive-attempt".into(), MessageAttribute::number("3"));

    let handled = handle(&c, &[full.clone(), legacy]).await;

    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(
        handled.outcome_of("m-1"),
        Some(&Outcome::DeadLettered {
            code: "HTTP_400".into(),
            stamped: false
        })
    );
    assert_eq!(
        handled.outcome_of("m-2"),
        Some(&Outcome::DeadLettered {
            code: "HTTP_400".into(),
            stamped: true
        })
    );
    let sends = queue.sends();
    let copy_of = |body: &str| {
        sends
            .iter()
            .find(|(_, m)| m.body == body)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(copy_of("a").attributes, full.attributes);
    let stamped = copy_of("b");
    assert_eq!(stamped.attributes.len(), 10);
    assert!(!stamped.attributes.contains_key("x-redrive-attempt"));
    let (meta, _) = RedriveMeta::read(&stamped.attributes, "m-2");
    assert_eq!(meta.attempt, 3);
    assert!(meta.is_permanent_failure());
}

#[tokio::test]
async fn an_unacknowledged_dlq_copy_never_deletes_the_original() {
    let (store, queue, processor) = fakes_that(permanent_400());
    queue.fail_next("SendMessage");
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let handled = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(handled.response.failed_ids(), ["m-1"]);
    assert!(queue.deletes().is_empty());
    assert!(store.record(&id_of("m-1", "a")).is_none());
}

#[tokio::test]
async fn a_failed_delete_after_the_dlq_copy_still_settles_the_record() {
    let (store, queue, processor) = fakes_that(permanent_400());
    queue.fail_next("DeleteMessage");
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let handled = handle(&c, &[message("m-1", "a")]).await;
    // Reporting it would put a second copy on the DLQ; the event source mapping deletes it.
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(queue.sends().len(), 1);
}

#[tokio::test]
async fn pointer_key_errors_fail_only_their_record() {
    let pointer = KeySource::pointer("/paymentId").unwrap();
    let batch = [
        message("good", r#"{"paymentId":"p-1"}"#),
        message("missing", r#"{"other":1}"#),
        message("not-json", "paymentId=p-2"),
    ];

    // With a DLQ: the two are fast-tracked there with the key error's code.
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, pointer.clone()));
    let handled = handle(&c, &batch).await;
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(handled.outcome_of("good"), Some(&Outcome::Processed));
    assert_eq!(handled.records[0].key.as_deref(), Some("p-1"));
    assert_eq!(
        handled.outcome_of("missing"),
        Some(&Outcome::DeadLettered {
            code: "KEY_MISSING".into(),
            stamped: true
        })
    );
    assert_eq!(
        handled.outcome_of("not-json"),
        Some(&Outcome::DeadLettered {
            code: "KEY_BODY_NOT_JSON".into(),
            stamped: true
        })
    );
    assert_eq!((processor.total_calls(), processor.effects("p-1")), (1, 1));
    assert_eq!(
        store.calls.claim.load(Ordering::SeqCst),
        1,
        "no claim without a key"
    );
    let mut deleted = queue.deletes();
    deleted.sort();
    assert_eq!(deleted, ["handle-missing", "handle-not-json"]);

    // Without a DLQ: the two are reported failed, the good one is not.
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(false, pointer));
    let handled = handle(&c, &batch).await;
    assert_eq!(handled.response.failed_ids(), ["missing", "not-json"]);
    assert_eq!(processor.effects("p-1"), 1);
}

#[tokio::test]
async fn store_unavailable_reports_every_record_and_processes_none() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let batch = event(&[message("m-1", "a"), message("m-2", "b")]);

    store.set_down(true);
    let down = c.handle(&batch, in_a_minute()).await.unwrap();
    assert_eq!(down.response.failed_ids(), ["m-1", "m-2"]);
    assert_eq!(
        down.outcome_of("m-1"),
        Some(&Outcome::Retry {
            code: STORE_UNAVAILABLE.into(),
            visibility_seconds: Some(2)
        })
    );
    assert_eq!(processor.total_calls(), 0);
    assert_eq!(queue.visibility_changes().len(), 2);

    store.set_down(false);
    let up = c.handle(&batch, in_a_minute()).await.unwrap();
    assert!(up.response.batch_item_failures.is_empty());
    assert_eq!(
        (
            processor.effects(&key_of("m-1", "a")),
            processor.effects(&key_of("m-2", "b"))
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn a_failed_complete_after_the_side_effect_is_still_success() {
    let (store, queue, processor) = fakes();
    // the write and its three retries all fail
    for _ in 0..4 {
        store.fail_next("complete");
    }
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let handled = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 4);
    // Reporting it would repeat the side effect as soon as the claim expires.
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(processor.effects(&key_of("m-1", "a")), 1);
    // The claim still guards the key until its deadline.
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::InProgress
    );
    let again = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(outcomes(&again), [("m-1", "in-progress")]);
    assert_eq!(processor.total_calls(), 1);
}

#[tokio::test]
async fn a_claim_written_but_answered_with_an_error_is_released_for_the_retry() {
    let (store, queue, processor) = fakes();
    store.lose_next_claim_reply();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let first = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(first.response.failed_ids(), ["m-1"]);
    assert_eq!(processor.total_calls(), 0);
    // the claim that did land was released with its token: nothing holds the key
    assert!(store.record(&id_of("m-1", "a")).is_none());
    let retry = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(outcomes(&retry), [("m-1", "processed")]);
    assert_eq!(processor.effects(&key_of("m-1", "a")), 1);
}

#[tokio::test]
async fn a_failed_complete_is_retried_until_it_lands() {
    let (store, queue, processor) = fakes();
    store.fail_next("complete");
    store.fail_next("complete");
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let handled = handle(&c, &[message("m-1", "a")]).await;
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 3);
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::Completed
    );
    // a duplicate copy is now recognised at once, whenever it comes
    let again = handle(&c, &[message("m-1", "a")]).await;
    assert_eq!(outcomes(&again), [("m-1", "duplicate")]);
    assert_eq!(processor.effects(&key_of("m-1", "a")), 1);
}

#[tokio::test]
async fn a_complete_is_not_retried_past_the_claim() {
    let (store, queue, processor) = fakes();
    store.fail_next("complete");
    let c = consumer_without_margin(&store, &queue, &processor, config(true, KeySource::Message));
    // 50 ms left: less than the first retry's 100 ms wait
    let handled = c
        .handle(&event(&[message("m-1", "a")]), (now_ms() + 50) as u64)
        .await
        .unwrap();
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 1);
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::InProgress
    );
}

#[tokio::test]
async fn a_failed_release_keeps_the_key_until_the_claim_expires() {
    let (store, queue, processor) = fakes();
    processor.script(&key_of("m-1", "a"), [transient_503()]);
    store.fail_next("release");
    let c = consumer_without_margin(&store, &queue, &processor, config(true, KeySource::Message));
    let batch = event(&[message("m-1", "a")]);
    let deadline = now_ms() + 400;
    let first = c.handle(&batch, deadline as u64).await.unwrap();
    assert_eq!(first.response.failed_ids(), ["m-1"]);
    assert_eq!(
        store.record(&id_of("m-1", "a")).unwrap().status,
        Status::InProgress
    );

    let early = c.handle(&batch, in_a_minute()).await.unwrap();
    assert_eq!(outcomes(&early), [("m-1", "in-progress")]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = c.handle(&batch, in_a_minute()).await.unwrap();
    assert_eq!(outcomes(&late), [("m-1", "processed")]);
    assert_eq!(calls_and_effects(&processor, &key_of("m-1", "a")), (2, 1));
}

#[tokio::test]
async fn a_panicking_step_fails_its_record_only() {
    let (store, queue, processor) = fakes();
    processor.script(&key_of("m-1", "a"), [Step::Panic]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let handled = handle(&c, &[message("m-1", "a"), message("m-2", "b")]).await;
    assert_eq!(handled.response.failed_ids(), ["m-1"]);
    assert!(
        matches!(handled.outcome_of("m-1"), Some(Outcome::Retry { code, .. }) if code == PROCESSOR_PANIC)
    );
    assert!(store.record(&id_of("m-1", "a")).is_none(), "released");
    assert_eq!(processor.effects(&key_of("m-2", "b")), 1);
}

#[tokio::test]
async fn a_malformed_record_fails_alone() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let mut batch = event(&[
        message("m-1", "a"),
        message("m-2", "b"),
        message("m-3", "c"),
    ]);
    batch["Records"][1]["messageAttributes"] =
        json!({"bad": {"dataType": "Binary", "binaryValue": "%%"}});
    batch["Records"][2] = json!({"body": "no id"});

    let handled = c.handle(&batch, in_a_minute()).await.unwrap();

    assert_eq!(handled.response.failed_ids(), ["m-2"]);
    assert_eq!(
        outcomes(&handled),
        [
            ("m-1", "processed"),
            ("m-2", "malformed"),
            ("", "malformed")
        ]
    );
    assert_eq!(processor.total_calls(), 1);

    assert!(
        c.handle(&json!({"detail-type": "Scheduled Event"}), in_a_minute())
            .await
            .is_err()
    );
    let empty = c
        .handle(&json!({"Records": []}), in_a_minute())
        .await
        .unwrap();
    assert!(empty.response.batch_item_failures.is_empty());
}

#[tokio::test]
async fn a_garbled_x_redrive_keys_on_the_message_id() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let mut m = message("m-1", "a");
    m.attributes
        .insert(ATTRIBUTE_NAME.into(), MessageAttribute::string("{not json"));
    let handled = handle(&c, &[m]).await;
    assert_eq!(
        handled.records[0].key.as_deref(),
        Some(key_of("m-1", "a").as_str())
    );
    assert_eq!(processor.effects(&key_of("m-1", "a")), 1);
}

#[tokio::test]
async fn fifo_stops_a_group_at_its_first_reported_failure() {
    let (store, queue, processor) = fakes();
    processor.script(&key_of("g1-2", "{}"), [transient_503()]);
    processor.script(&key_of("g3-1", "{}"), [permanent_400()]);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    let batch = fifo_batch();

    let handled = handle(&c, &batch).await;

    assert_eq!(
        outcomes(&handled),
        [
            ("g1-1", "processed"),
            ("g2-1", "processed"),
            ("g1-2", "retry"),
            // dead-lettered is settled: the group goes on
            ("g3-1", "dead-lettered"),
            ("g1-3", "skipped"),
            ("g2-2", "processed"),
            ("g3-2", "processed"),
        ]
    );
    assert_eq!(handled.response.failed_ids(), ["g1-2", "g1-3"]);
    assert_eq!(processor.calls(&key_of("g1-3", "{}")), 0);
    assert!(store.record(&id_of("g1-3", "{}")).is_none());
}

#[tokio::test]
async fn a_fifo_dlq_copy_keeps_the_group_and_dedups_on_the_message_id() {
    let (store, queue, processor) = fakes_that(permanent_400());
    let mut cfg = config(true, KeySource::Message);
    cfg.dlq_url = Some(
        QueueUrl::parse("https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo")
            .unwrap(),
    );
    let c = consumer(&store, &queue, &processor, cfg);
    handle(&c, &[fifo_message("m-1", "g-9")]).await;
    let (url, copy) = &queue.sends()[0];
    assert!(url.ends_with("orders-dlq.fifo"));
    assert_eq!(
        (copy.group_id.as_deref(), copy.dedup_id.as_deref()),
        (Some("g-9"), Some("m-1"))
    );
    assert_eq!(queue.deletes(), ["handle-m-1"]);
    assert!(matches!(&queue.calls()[1], QueueCall::QueueUrl { name, .. } if name == "orders.fifo"));
    assert!(queue.calls().iter().any(|c| matches!(c, QueueCall::Delete { queue_url, .. } if queue_url == &format!("{FAKE_QUEUE_HOST}/123456789012/orders.fifo"))));
}

#[tokio::test]
async fn claims_last_until_the_deadline_or_the_fallback_when_there_is_none() {
    let (store, queue, processor) = fakes_that(Step::Hang);
    let c = consumer(&store, &queue, &processor, config(true, KeySource::Message));
    // cargo lambda watch reports the constant deadline 600000 (1970).
    let _ = tokio::time::timeout(
        Duration::from_millis(50),
        c.handle(&event(&[message("m-1", "a")]), 600_000),
    )
    .await;
    let until = store
        .record(&id_of("m-1", "a"))
        .unwrap()
        .in_progress_expiration_ms;
    let expected = now_ms() + 900_000;
    assert!(
        (expected - 2_000..=expected).contains(&until),
        "{until} vs {expected}"
    );
}

fn pointer_config(dlq: bool) -> ConsumerConfig {
    config(dlq, KeySource::pointer("/id").unwrap())
}

fn keyed(id: &str, key: &str) -> Message {
    message(id, &json!({"id": key, "from": id}).to_string())
}

#[tokio::test]
async fn records_are_not_started_when_the_deadline_is_too_close() {
    // GIVEN a downstream that may take 10 s and an invocation with 5 s left
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_time_limit(Duration::from_secs(10));
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let batch = [
        keyed("m-1", "k-1"),
        keyed("m-2", "k-2"),
        keyed("m-3", "k-3"),
    ];
    let deadline = (now_ms() + 5_000) as u64;

    // WHEN the batch is handled
    let handled = c.handle(&event(&batch), deadline).await.unwrap();

    // THEN no record was started: nothing claimed, processed or called, all reported failed
    assert_eq!(
        outcomes(&handled),
        [
            ("m-1", "unstarted"),
            ("m-2", "unstarted"),
            ("m-3", "unstarted")
        ]
    );
    assert_eq!(handled.response.failed_ids(), ["m-1", "m-2", "m-3"]);
    assert_eq!(processor.total_calls(), 0);
    assert_eq!(store.calls.writes(), 0);
    assert!(store.is_empty());
    assert!(queue.calls().is_empty(), "{:?}", queue.calls());
}

#[tokio::test]
async fn the_margin_alone_guards_a_step_without_a_time_limit_and_fifo_too() {
    // GIVEN a step that states no time limit, FIFO records, and 1 s left (below the margin)
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let batch = [fifo_message("f-1", "g1"), fifo_message("f-2", "g2")];
    let deadline = (now_ms() + 1_000) as u64;

    let handled = c.handle(&event(&batch), deadline).await.unwrap();

    // THEN neither was started (a malformed key is not dead-lettered either)
    assert_eq!(handled.response.failed_ids(), ["f-1", "f-2"]);
    assert_eq!(outcomes(&handled)[0], ("f-1", "unstarted"));
    assert_eq!(processor.total_calls(), 0);
    assert!(queue.calls().is_empty(), "{:?}", queue.calls());

    // AND with enough time left the same batch is handled
    let handled = handle(&c, &[keyed("m-9", "k-9")]).await;
    assert_eq!(outcomes(&handled), [("m-9", "processed")]);
}

#[tokio::test]
async fn twins_in_one_batch_are_processed_once_and_share_success() {
    // GIVEN two records with the same key in one batch, and a side effect that takes a while
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(100));
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let batch = [
        keyed("m-1", "k-1"),
        keyed("m-2", "k-2"),
        keyed("m-3", "k-1"),
    ];

    // WHEN the batch is handled
    let handled = handle(&c, &batch).await;

    // THEN the key reached the side effect once and no twin is reported failed
    assert_eq!(handled.response, BatchResponse::default());
    assert_eq!(
        outcomes(&handled),
        [
            ("m-1", "processed"),
            ("m-2", "processed"),
            ("m-3", "duplicate")
        ]
    );
    assert_eq!(processor.calls("k-1"), 1);
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 2);
    assert!(queue.calls().is_empty(), "{:?}", queue.calls());
}

#[tokio::test]
async fn twins_share_a_transient_failure_and_its_delay() {
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(50));
    processor.script("k-1", [throttled(Duration::from_secs(42))]);
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let batch = [keyed("m-1", "k-1"), keyed("m-2", "k-1")];

    let handled = handle(&c, &batch).await;

    assert_eq!(handled.response.failed_ids(), ["m-1", "m-2"]);
    assert_eq!(processor.calls("k-1"), 1);
    let mut delays = queue.visibility_changes();
    delays.sort();
    assert_eq!(
        delays,
        [
            ("handle-m-1".to_string(), 42),
            ("handle-m-2".to_string(), 42)
        ]
    );
    assert!(store.is_empty(), "the claim was released");
}

#[tokio::test]
async fn twins_share_a_permanent_failure() {
    // With a DLQ: each twin goes there stamped, the side effect ran once.
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(50));
    processor.script("k-1", [permanent_400()]);
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let batch = [keyed("m-1", "k-1"), keyed("m-2", "k-1")];

    let handled = handle(&c, &batch).await;

    assert_eq!(
        outcomes(&handled),
        [("m-1", "dead-lettered"), ("m-2", "dead-lettered")]
    );
    assert_eq!(processor.calls("k-1"), 1);
    let sends = queue.sends();
    assert_eq!(sends.len(), 2);
    for (_, copy) in &sends {
        let (meta, _) = RedriveMeta::read(&copy.attributes, "x");
        let last = meta.last_error.unwrap();
        assert_eq!(last.code, "HTTP_400");
        assert_eq!(last.message, "downstream answered 400");
    }
    let mut deletes = queue.deletes();
    deletes.sort();
    assert_eq!(deletes, ["handle-m-1", "handle-m-2"]);

    // Without a DLQ: both reported failed, still one call.
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::new(permanent_400()).with_delay(Duration::from_millis(50));
    let c = consumer(&store, &queue, &processor, pointer_config(false));
    let handled = handle(&c, &batch).await;
    assert_eq!(handled.response.failed_ids(), ["m-1", "m-2"]);
    assert_eq!(processor.calls("k-1"), 1);
}

#[tokio::test]
async fn fifo_twins_in_other_groups_take_the_first_outcome() {
    // GIVEN a FIFO batch whose key k-1 appears in two groups and fails transiently first
    let (store, queue, processor) = fakes();
    processor.script("k-1", [transient_503()]);
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let fifo = |id: &str, group: &str, key: &str| Message {
        group_id: Some(group.into()),
        source: QueueArn::parse(FIFO_ARN),
        ..keyed(id, key)
    };
    let batch = [
        fifo("f-1", "g1", "k-1"),
        fifo("f-2", "g2", "k-2"),
        fifo("f-3", "g2", "k-1"),
        fifo("f-4", "g3", "k-3"),
    ];

    let handled = handle(&c, &batch).await;

    // THEN k-1 was tried once in this batch; its twin is reported failed with it
    assert_eq!(
        outcomes(&handled),
        [
            ("f-1", "retry"),
            ("f-2", "processed"),
            ("f-3", "retry"),
            ("f-4", "processed"),
        ]
    );
    assert_eq!(processor.calls("k-1"), 1);
    assert_eq!(handled.response.failed_ids(), ["f-1", "f-3"]);
}

mod batch;
mod causes;
mod keys;
