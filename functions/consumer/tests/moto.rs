//! The consumer library against moto (real DynamoDB conditional writes, real SQS queues with a
//! RedrivePolicy, real receipt handles) and a real HTTP downstream on loopback.

use crate::common;

use std::time::Duration;

use common::*;
use redrive_consumer::aws::DynamoDbStore;
use redrive_consumer::fake::{ScriptedProcessor, Step};
use redrive_consumer::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore};
use redrive_consumer::{Consumer, FailedIds, Outcome};
use redrive_shared::MessageAttribute;
use redrive_shared::backoff::{Backoff, Fixed, Jitter};
use redrive_shared::decision::{Decision, Policy, ReceivedMessage, decide};
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use redrive_tests::{Mode, attr_binary, attr_custom, attr_number, attr_string, receive_raw};

#[tokio::test]
async fn the_same_batch_invoked_twice_delivers_once_per_key() {
    // GIVEN three messages really received from the source queue
    let w = World::new(false).await;
    let ids = w
        .send(&[("{\"n\":1}", &[]), ("{\"n\":2}", &[]), ("plain text", &[])])
        .await;
    let received = w.receive(3).await;
    let event = w.event(&received);
    let consumer = w.consumer(w.config(true, &[]));
    let deadline = deadline_in(60);

    // WHEN the same batch is handled twice
    let first = consumer.handle(&event, deadline).await.unwrap();
    let second = consumer.handle(&event, deadline).await.unwrap();

    // THEN each key reached the downstream once, with its body and key header
    assert!(first.response.batch_item_failures.is_empty(), "{first:?}");
    assert!(second.response.batch_item_failures.is_empty(), "{second:?}");
    assert!(
        second
            .records
            .iter()
            .all(|r| r.outcome == Outcome::Duplicate),
        "{second:?}"
    );
    for id in &ids {
        assert_eq!(w.downstream.deliveries(id), 1, "{id}");
    }
    assert_eq!(w.downstream.total_attempts(), 3);
    let plain = w
        .downstream
        .requests()
        .into_iter()
        .find(|r| r.body_text() == "plain text")
        .unwrap();
    assert_eq!(plain.method, "POST");
    assert_eq!(
        plain.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    // AND the records are COMPLETED with the contract's attributes
    for id in &ids {
        let record = w.record(id).await.unwrap();
        assert_eq!(record["status"].as_s().unwrap(), "COMPLETED");
        let ttl = now_ms() / 1000 + redrive_shared::config::DEFAULT_IDEMPOTENCY_TTL_SECONDS as i64;
        assert!((ttl - 5..=ttl).contains(&number(&record, "expiration")));
        assert_eq!(number(&record, "inProgressExpiration"), deadline as i64);
    }
    // AND the happy path made no SQS call: the messages are still in flight until the event
    // source mapping deletes them
    assert_eq!(w.depth(&w.queues.source_url).await, 3);
    w.settle(&received, &first.response).await;
    assert_eq!(w.depth(&w.queues.source_url).await, 0);
}

#[tokio::test]
async fn two_concurrent_invocations_with_the_same_message_deliver_once() {
    // GIVEN a slow downstream and two Lambda instances
    let w = World::new(false).await;
    let ids = w.send(&[("{\"order\":7}", &[])]).await;
    let received = w.receive(1).await;
    let event = w.event(&received);
    w.downstream
        .set_mode(Mode::Slow(Duration::from_millis(800)));
    let a = w.consumer(w.config(true, &[]));
    let b = w.consumer(w.config(true, &[]));

    // WHEN both get the same message at once
    let (ra, rb) = tokio::join!(
        a.handle(&event, deadline_in(60)),
        b.handle(&event, deadline_in(60))
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());

    // THEN it reached the downstream once; the other instance reported it failed
    assert_eq!(w.downstream.attempts(&ids[0]), 1);
    assert_eq!(w.downstream.deliveries(&ids[0]), 1);
    let mut failed: Vec<&str> = ra.response.failed_ids();
    failed.extend(rb.response.failed_ids());
    assert_eq!(failed, [ids[0].as_str()]);
    let mut outcomes = [
        ra.records[0].outcome.as_str(),
        rb.records[0].outcome.as_str(),
    ];
    outcomes.sort();
    assert_eq!(outcomes, ["in-progress", "processed"]);
    assert_eq!(w.status(&ids[0]).await.as_deref(), Some("COMPLETED"));

    // AND when SQS delivers it again (the loser set its visibility to the 1 s backoff), it is
    // a duplicate
    let again = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(10)).await;
    let third = w.handle(&a, &again).await;
    assert_eq!(third.records[0].outcome, Outcome::Duplicate);
    assert_eq!(w.downstream.total_attempts(), 1);
}

#[tokio::test]
async fn a_redriven_copy_of_a_message_that_succeeded_is_not_delivered_again() {
    // GIVEN a message that was processed
    let w = World::new(false).await;
    let first_id = w.send(&[("{\"payment\":\"p-1\"}", &[])]).await.remove(0);
    let consumer = w.consumer(w.config(true, &[]));
    let received = w.receive(1).await;
    let done = w.handle(&consumer, &received).await;
    assert_eq!(done.records[0].outcome, Outcome::Processed);
    w.settle(&received, &done.response).await;

    // WHEN a redriven copy arrives: a new MessageId, x-redrive naming the original
    let meta = RedriveMeta {
        attempt: 1,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        last_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        ..RedriveMeta::fresh(&first_id)
    };
    let copy_id = w
        .send(&[(
            "{\"payment\":\"p-1\"}",
            &[
                ("x-redrive", attr_string(&meta.to_json())),
                ("tenant", attr_string("acme")),
            ],
        )])
        .await
        .remove(0);
    assert_ne!(copy_id, first_id);
    let received = w.receive(1).await;
    let handled = w.handle(&consumer, &received).await;

    // THEN it is a duplicate of the original: no second delivery
    assert_eq!(handled.records[0].outcome, Outcome::Duplicate);
    // Keyed on the chain (originalMessageId) bound to the body's digest.
    let key = handled.records[0].key.as_deref().unwrap_or_default();
    assert!(key.starts_with(&format!("{first_id}:")), "{key}");
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(w.downstream.deliveries(&first_id), 1);
    assert_eq!(w.downstream.total_attempts(), 1);
}

#[tokio::test]
async fn a_crashed_invocations_claim_is_reclaimed_after_its_in_progress_expiry() {
    // GIVEN an invocation that claimed the key and died (its future dropped mid-processing)
    let w = World::new(false).await;
    let (id, received) = w.send_and_receive_one("{\"x\":1}").await;
    let hanging = ScriptedProcessor::new(Step::Hang);
    // A 3 s deadline, so the test waits little for the claim to expire: no start margin.
    let settings = redrive_consumer::Settings::default().with_deadline_margin(Duration::ZERO);
    let crashed = Consumer::with_settings(
        w.store(),
        w.queue_ops(),
        &hanging,
        w.config(true, &[]),
        settings,
    );
    let deadline = deadline_in(3);
    let event = w.event(&received);
    let mut invocation = Box::pin(crashed.handle(&event, deadline));
    // Kill it as soon as its claim is in the table (it would hang forever otherwise).
    let claimed = async {
        while w.record(&id).await.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        finished = &mut invocation => panic!("the hanging invocation finished: {finished:?}"),
        _ = tokio::time::timeout(Duration::from_secs(20), claimed) => {}
    }
    drop(invocation);
    let left = w.record(&id).await.unwrap();
    assert_eq!(left["status"].as_s().unwrap(), "IN_PROGRESS");
    assert_eq!(number(&left, "inProgressExpiration"), deadline as i64);

    // WHEN the message is delivered again before that deadline
    let consumer = w.consumer(w.config(true, &[]));
    let early = w.handle(&consumer, &received).await;

    // THEN it is reported failed, nothing is delivered, and the claim is left alone
    assert_eq!(early.response.failed_ids(), [id.as_str()]);
    assert_eq!(early.records[0].outcome, Outcome::InProgress);
    assert_eq!(w.downstream.total_attempts(), 0);
    assert_eq!(w.status(&id).await.as_deref(), Some("IN_PROGRESS"));

    // WHEN it is delivered again after the deadline
    while now_ms() <= deadline as i64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(10)).await;
    let late = w.handle(&consumer, &again).await;

    // THEN the claim is taken over and the message delivered once
    assert_eq!(late.records[0].outcome, Outcome::Processed);
    assert!(late.response.batch_item_failures.is_empty());
    assert_eq!(w.downstream.deliveries(&id), 1);
    assert_eq!(w.status(&id).await.as_deref(), Some("COMPLETED"));
}

#[tokio::test]
async fn a_transient_failure_is_released_deferred_by_the_backoff_and_recovers() {
    // GIVEN a downstream answering 503
    let w = World::new(false).await;
    let (id, received) = w.send_and_receive_one("{\"x\":1}").await;
    w.downstream.set_mode(Mode::Status(503));
    let consumer = w.consumer(w.config(true, &[]));

    // WHEN the message is handled
    let first = w.handle(&consumer, &received).await;

    // THEN it is reported failed, its claim released, nothing delivered
    assert_eq!(first.response.failed_ids(), [id.as_str()]);
    assert_eq!(
        first.records[0].outcome,
        Outcome::Retry {
            code: "HTTP_503".into(),
            visibility_seconds: Some(1)
        }
    );
    assert_eq!(w.downstream.attempts(&id), 1);
    assert_eq!(w.downstream.deliveries(&id), 0);
    assert!(w.record(&id).await.is_none());
    // AND its visibility was set to the 1 s backoff (it was received for 300 s): it is back
    let again = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(5)).await;
    assert_eq!(again[0].message_id(), Some(id.as_str()));

    // WHEN the downstream recovers and the redelivery is handled
    w.downstream.set_mode(Mode::Healthy);
    let second = w.handle(&consumer, &again).await;

    // THEN it is delivered once and recorded
    assert!(second.response.batch_item_failures.is_empty());
    assert_eq!(w.downstream.deliveries(&id), 1);
    assert_eq!(w.status(&id).await.as_deref(), Some("COMPLETED"));
    w.settle(&again, &second.response).await;
    assert_eq!(w.depth(&w.queues.source_url).await, 0);
    assert_eq!(w.depth(&w.queues.dlq_url).await, 0);
}

#[tokio::test]
async fn retry_after_from_the_downstream_wins_over_the_backoff() {
    // GIVEN a 600 s backoff and a downstream answering 429 with Retry-After: 1
    let w = World::new(false).await;
    let (id, received) = w.send_and_receive_one("{\"x\":1}").await;
    w.downstream.set_mode(Mode::TooManyRequests {
        retry_after_secs: 1,
    });
    let consumer = w.consumer(w.config(true, &[("RETRY_BASE_SECONDS", "600")]));

    let handled = w.handle(&consumer, &received).await;

    // THEN the message is back after about a second, not ten minutes
    assert_eq!(
        handled.records[0].outcome,
        Outcome::Retry {
            code: "HTTP_429".into(),
            visibility_seconds: Some(1)
        }
    );
    let again = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(5)).await;
    assert_eq!(again[0].message_id(), Some(id.as_str()));

    // AND with a 503 (no Retry-After) the backoff for receive count 2 applies (600 * 3,
    // capped at 900): it stays away
    w.downstream.set_mode(Mode::Status(503));
    let handled = w.handle(&consumer, &again).await;
    assert!(matches!(
        handled.records[0].outcome,
        Outcome::Retry {
            visibility_seconds: Some(900),
            ..
        }
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        receive_raw(&w.sqs, &w.queues.source_url, 300)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_permanent_failure_is_fast_tracked_to_the_dlq_with_the_stamp_and_the_original_deleted() {
    // GIVEN a downstream rejecting poison with 400, and a batch of a good message, a redriven
    // poison message with attributes of every type, and a poison message at the attribute limit
    let w = World::new(false).await;
    w.downstream.reject_bodies_containing("poison", 400);
    let prior = RedriveMeta {
        attempt: 2,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        last_redriven_at: Some("2026-11-21T10:04:00Z".into()),
        ..RedriveMeta::fresh("5fea7756-0ea4-451a-a703-a558b933e274")
    };
    let blob = [0u8, 159, 146, 150, 255];
    let rich: Vec<(&str, aws_sdk_sqs::types::MessageAttributeValue)> = vec![
        ("x-redrive", attr_string(&prior.to_json())),
        ("tenant", attr_string("acme")),
        ("amount", attr_number("42.50")),
        ("blob", attr_binary(&blob)),
        ("count", attr_custom("Number.int", "007")),
    ];
    let names: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    let full: Vec<(&str, aws_sdk_sqs::types::MessageAttributeValue)> = names
        .iter()
        .map(|n| (n.as_str(), attr_string("v")))
        .collect();
    let ids = w
        .send(&[
            ("{\"ok\":true}", &[]),
            ("poison \u{1F4E6} not json", &rich),
            ("poison at the limit", &full),
        ])
        .await;
    let received = w.receive(3).await;
    let consumer = w.consumer(w.config(true, &[]));

    // WHEN the batch is handled
    let handled = w.handle(&consumer, &received).await;

    // THEN nothing is reported failed: the poison messages are settled
    assert!(
        handled.response.batch_item_failures.is_empty(),
        "{handled:?}"
    );
    assert_eq!(handled.outcome_of(&ids[0]), Some(&Outcome::Processed));
    assert_eq!(
        handled.outcome_of(&ids[1]),
        Some(&Outcome::DeadLettered {
            code: "HTTP_400".into(),
            stamped: true
        })
    );
    assert_eq!(
        handled.outcome_of(&ids[2]),
        Some(&Outcome::DeadLettered {
            code: "HTTP_400".into(),
            stamped: false
        })
    );
    // AND the originals are gone from the source queue (only the good one is in flight, for
    // the event source mapping to delete), their claims released
    assert_eq!(w.depth(&w.queues.source_url).await, 1);
    assert!(w.record(&prior.original_message_id).await.is_none());
    assert!(w.record(&ids[2]).await.is_none());

    // AND the DLQ holds the copies: same bodies, every attribute byte for byte, the stamp
    let dlq = drain(&w.sqs, &w.queues.dlq_url).await;
    assert_eq!(dlq.len(), 2);
    let copy = dlq
        .iter()
        .find(|m| m.body() == Some("poison \u{1F4E6} not json"))
        .unwrap();
    let copy_attrs = attrs(copy);
    let sent_attrs = attrs(
        received
            .iter()
            .find(|m| m.message_id() == Some(&ids[1]))
            .unwrap(),
    );
    for name in ["tenant", "amount", "blob", "count"] {
        assert_eq!(copy_attrs[name], sent_attrs[name], "{name}");
    }
    assert_eq!(copy_attrs["blob"], MessageAttribute::binary(blob.to_vec()));
    assert_eq!(copy_attrs.len(), 5);
    let (meta, _) = RedriveMeta::read(&copy_attrs, copy.message_id().unwrap());
    assert_eq!(meta.attempt, 2);
    assert_eq!(meta.original_message_id, prior.original_message_id);
    assert_eq!(meta.first_redriven_at, prior.first_redriven_at);
    let last = meta.last_error.clone().unwrap();
    assert_eq!(serde_json::to_value(&last).unwrap()["class"], "permanent");
    assert_eq!(last.code, "HTTP_400");
    assert_eq!(last.message, "downstream answered 400");
    assert!(redrive_shared::timefmt::millis_from_rfc3339(&last.at).is_some());
    let unstamped = dlq
        .iter()
        .find(|m| m.body() == Some("poison at the limit"))
        .unwrap();
    let unstamped_attrs = attrs(unstamped);
    assert_eq!(unstamped_attrs.len(), 10);
    assert!(!unstamped_attrs.contains_key("x-redrive"));

    // AND the re-driver's decision isolates both instead of replaying them
    let policy = Policy::standard(5, Backoff::new(60.0, 2.0, 900, Jitter::None).unwrap());
    for (m, want) in [
        (copy, IsolationReason::PermanentFailure),
        (unstamped, IsolationReason::AttributeLimit),
    ] {
        let a = attrs(m);
        let received = ReceivedMessage {
            message_id: m.message_id().unwrap(),
            body: m.body().unwrap(),
            attributes: &a,
            group_id: None,
        };
        match decide(&received, &policy, now_ms(), &mut Fixed(0.5)) {
            Decision::Isolate(plan) => assert_eq!(plan.reason, want),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(w.downstream.deliveries(&ids[0]), 1);
}

#[tokio::test]
async fn a_permanent_failure_without_a_dlq_url_is_reported_failed() {
    let w = World::new(false).await;
    w.downstream.set_mode(Mode::Status(422));
    let (id, received) = w.send_and_receive_one("{\"x\":1}").await;
    let consumer = w.consumer(w.config(false, &[]));
    let handled = w.handle(&consumer, &received).await;
    assert_eq!(handled.response.failed_ids(), [id.as_str()]);
    assert_eq!(
        handled.records[0].outcome,
        Outcome::Failed {
            code: "HTTP_422".into()
        }
    );
    assert_eq!(w.depth(&w.queues.dlq_url).await, 0);
    assert_eq!(w.depth(&w.queues.source_url).await, 1);
    assert!(w.record(&id).await.is_none());
}

#[tokio::test]
async fn a_json_pointer_key_that_is_missing_or_a_body_that_is_not_json_fails_that_record_only() {
    let w = World::new(false).await;
    let ids = w
        .send(&[
            ("{\"paymentId\":\"p-77\",\"amount\":3}", &[]),
            ("{\"amount\":4}", &[]),
            ("paymentId=p-78", &[]),
        ])
        .await;

    // Without a DLQ: the two bad records are reported failed, the good one delivered.
    let received = w.receive(3).await;
    let no_dlq = w.consumer(w.config(false, &[("IDEMPOTENCY_KEY", "/paymentId")]));
    let handled = w.handle(&no_dlq, &received).await;
    let mut failed = handled.response.failed_ids();
    failed.sort();
    let mut want = vec![ids[1].as_str(), ids[2].as_str()];
    want.sort();
    assert_eq!(failed, want);
    assert_eq!(w.downstream.deliveries("p-77"), 1);
    assert_eq!(w.downstream.total_attempts(), 1);
    assert_eq!(w.status("p-77").await.as_deref(), Some("COMPLETED"));

    // With a DLQ: the same two (sent again) go there, stamped with the key error's code.
    w.settle(&received, &redrive_consumer::BatchResponse::default())
        .await; // clear the first round
    w.send(&[
        ("{\"paymentId\":\"p-77\",\"amount\":3}", &[]),
        ("{\"amount\":4}", &[]),
        ("paymentId=p-78", &[]),
    ])
    .await;
    let again = w.receive(3).await;
    let with_dlq = w.consumer(w.config(true, &[("IDEMPOTENCY_KEY", "/paymentId")]));
    let handled = w.handle(&with_dlq, &again).await;
    assert!(
        handled.response.batch_item_failures.is_empty(),
        "{handled:?}"
    );
    // The good one is a duplicate of the first round's p-77; the other two left the source.
    assert_eq!(
        handled
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Duplicate)
            .count(),
        1
    );
    assert_eq!(w.depth(&w.queues.source_url).await, 1);
    let mut codes: Vec<(String, String)> = w
        .dead_letters()
        .await
        .into_iter()
        .map(|(m, meta)| (m.body().unwrap().to_string(), meta.last_error.unwrap().code))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            (
                "paymentId=p-78".to_string(),
                "KEY_BODY_NOT_JSON".to_string()
            ),
            ("{\"amount\":4}".to_string(), "KEY_MISSING".to_string()),
        ]
    );
    assert_eq!(w.downstream.total_attempts(), 1);
}

#[tokio::test]
async fn dynamodb_unavailable_reports_every_record_failed_and_loses_or_repeats_nothing() {
    // GIVEN DynamoDB that refuses connections (a port nobody listens on), SQS on moto
    let w = World::new(false).await;
    let ids = w
        .send(&[("{\"n\":1}", &[]), ("{\"n\":2}", &[]), ("{\"n\":3}", &[])])
        .await;
    let received = w.receive(3).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let sdk = redrive_tests::moto().sdk_config().await;
    let dead_ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .endpoint_url(dead_endpoint)
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    );
    let down = Consumer::new(
        DynamoDbStore::new(dead_ddb, w.table.clone()),
        w.queue_ops(),
        w.http(),
        w.config(true, &[]),
    );

    // WHEN the batch is handled
    let handled = w.handle(&down, &received).await;

    // THEN every record is reported failed, none reached the downstream, none was lost
    let mut failed = handled.response.failed_ids();
    failed.sort();
    let mut all: Vec<&str> = ids.iter().map(String::as_str).collect();
    all.sort();
    assert_eq!(failed, all);
    assert!(handled.records.iter().all(|r| matches!(
        &r.outcome,
        Outcome::Retry { code, visibility_seconds: Some(1) } if code == "IDEMPOTENCY_STORE_UNAVAILABLE"
    )));
    assert_eq!(w.downstream.total_attempts(), 0);
    assert_eq!(w.depth(&w.queues.source_url).await, 3);
    assert_eq!(w.depth(&w.queues.dlq_url).await, 0);

    // WHEN DynamoDB is back and SQS redelivers them (twice over, for good measure)
    let again = comes_back(&w.sqs, &w.queues.source_url, 3, Duration::from_secs(5)).await;
    let up = w.consumer(w.config(true, &[]));
    let first = w.handle(&up, &again).await;
    let second = w.handle(&up, &again).await;

    // THEN each is delivered exactly once
    assert!(first.response.batch_item_failures.is_empty());
    assert!(second.response.batch_item_failures.is_empty());
    for id in &ids {
        assert_eq!(w.downstream.deliveries(id), 1, "{id}");
    }
    assert_eq!(w.downstream.total_attempts(), 3);
    w.settle(&again, &first.response).await;
    assert_eq!(w.depth(&w.queues.source_url).await, 0);
}

#[tokio::test]
async fn fifo_stops_a_group_after_its_first_failure() {
    // GIVEN a FIFO source with group g1: ok, flaky (503), ok; group g2: ok
    let w = World::new(true).await;
    w.downstream.reject_bodies_containing("flaky", 503);
    let url = w.queues.source_url.clone();
    let mut ids = Vec::new();
    for (i, (body, group)) in [
        ("g1 first", "g1"),
        ("g1 flaky", "g1"),
        ("g1 third", "g1"),
        ("g2 only", "g2"),
    ]
    .iter()
    .enumerate()
    {
        ids.push(redrive_tests::send_fifo(&w.sqs, &url, body, group, &format!("d{i}"), &[]).await);
    }
    let received = w.receive(4).await;
    let consumer = w.consumer(w.config(true, &[]));

    let handled = w.handle(&consumer, &received).await;

    // THEN the flaky message and the one after it in its group are reported, in order; the
    // third was never sent downstream; the other group went on
    assert_eq!(
        handled.response.failed_ids(),
        [ids[1].as_str(), ids[2].as_str()]
    );
    assert_eq!(handled.outcome_of(&ids[2]), Some(&Outcome::Skipped));
    assert_eq!(w.downstream.attempts(&ids[2]), 0);
    assert_eq!(w.downstream.deliveries(&ids[0]), 1);
    assert_eq!(w.downstream.deliveries(&ids[3]), 1);
}

#[tokio::test]
async fn the_init_warm_up_reads_the_table_and_writes_nothing() {
    let w = World::new(false).await;
    // on the real table: answers, and leaves the table as it was (empty)
    w.store().warm_up().await.expect("the table answers");
    assert!(w.record(redrive_consumer::aws::WARM_UP_KEY).await.is_none());
    let scanned = w.ddb.scan().table_name(&w.table).send().await.unwrap();
    assert_eq!(scanned.count(), 0);
    // on a table that does not exist: an error naming the operation, for init to log
    let missing = redrive_consumer::aws::DynamoDbStore::new(w.ddb.clone(), "no-such-table");
    let err = missing.warm_up().await.expect_err("no such table");
    assert_eq!(err.operation, "GetItem");
    assert_eq!(err.code, "ResourceNotFoundException");
}

#[tokio::test]
async fn the_dynamodb_store_keeps_the_contract_record() {
    let w = World::new(false).await;
    let store = w.store();
    let now = now_ms();
    let claim = |token: &str, now_ms: i64, until: i64| Claim {
        key: "k-1".into(),
        token: token.into(),
        now_ms,
        expiration_s: now_ms / 1000 + 100,
        in_progress_expiration_ms: until,
        payload_hash: None,
    };

    // A new key is claimed; a second claim sees it in progress until the first's deadline.
    assert_eq!(
        store.claim(&claim("a", now, now + 60_000)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    let record = w.record("k-1").await.unwrap();
    assert_eq!(record["status"].as_s().unwrap(), "IN_PROGRESS");
    assert_eq!(number(&record, "expiration"), now / 1000 + 100);
    assert_eq!(number(&record, "inProgressExpiration"), now + 60_000);
    assert_eq!(
        store.claim(&claim("b", now, now + 60_000)).await.unwrap(),
        ClaimOutcome::InProgress {
            until_ms: Some(now + 60_000)
        }
    );
    // The same claim again (its first reply was lost, the SDK retried the PutItem) is ours.
    assert_eq!(
        store.claim(&claim("a", now, now + 60_000)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // A release by someone else's token leaves it; the owner's release removes it.
    store.release(&claim("b", now, 0)).await.unwrap();
    assert!(w.record("k-1").await.is_some());
    store.release(&claim("a", now, 0)).await.unwrap();
    assert!(w.record("k-1").await.is_none());

    // An IN_PROGRESS record past its deadline is reclaimed; the stale owner's release then
    // leaves the new claim alone.
    assert_eq!(
        store.claim(&claim("a", now, now - 1)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        store.claim(&claim("c", now, now + 60_000)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    store.release(&claim("a", now, 0)).await.unwrap();
    assert_eq!(
        w.record("k-1").await.unwrap()["claimToken"].as_s().unwrap(),
        "c"
    );

    // COMPLETED blocks claims until it expires (TTL deletion is lazy: the record may linger).
    store
        .complete(&claim("c", now, now + 60_000), now / 1000 + 100, None)
        .await
        .unwrap();
    assert_eq!(w.status("k-1").await.as_deref(), Some("COMPLETED"));
    assert_eq!(
        store.claim(&claim("d", now, now + 60_000)).await.unwrap(),
        ClaimOutcome::Completed(CompletedRecord::new(now / 1000 + 100)),
        "the found record's expiration comes with it (what the cache of completed keys keeps)"
    );
    // ... even after the in-progress deadline
    assert_eq!(
        store
            .claim(&claim("d", now + 120_000 - 50_000, now + 200_000))
            .await
            .unwrap(),
        ClaimOutcome::Completed(CompletedRecord::new(now / 1000 + 100))
    );
    let later = now + 101_000;
    assert_eq!(
        store.claim(&claim("e", later, later + 1000)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // A release after a COMPLETED overwrote the claim never deletes the COMPLETED record.
    store
        .complete(&claim("e", later, later + 1000), later / 1000 + 100, None)
        .await
        .unwrap();
    store.release(&claim("e", later, 0)).await.unwrap();
    assert_eq!(w.status("k-1").await.as_deref(), Some("COMPLETED"));

    // The payload check: the claim and the COMPLETED record carry `payloadHash`, and a failed
    // claim gets it back with the old record (ReturnValuesOnConditionCheckFailure = ALL_OLD).
    let hashed = |token: &str, hash: &str| Claim {
        key: "k-2".into(),
        payload_hash: Some(hash.into()),
        ..claim(token, now, now + 60_000)
    };
    store.claim(&hashed("f", "h-5")).await.unwrap();
    assert_eq!(
        w.record("k-2").await.unwrap()["payloadHash"]
            .as_s()
            .unwrap(),
        "h-5"
    );
    store
        .complete(&hashed("f", "h-5"), now / 1000 + 100, None)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&hashed("g", "h-7")).await.unwrap(),
        ClaimOutcome::Completed(
            CompletedRecord::new(now / 1000 + 100).with_payload_hash(Some("h-5".into()))
        )
    );
}

#[tokio::test]
async fn the_dynamodb_store_returns_the_stored_result_with_the_failed_claim() {
    // GIVEN a key completed with a result
    let w = World::new(false).await;
    let store = w.store();
    let now = now_ms();
    let claim = |token: &str| Claim {
        key: "k-r".into(),
        token: token.into(),
        now_ms: now,
        expiration_s: now / 1000 + 100,
        in_progress_expiration_ms: now + 60_000,
        payload_hash: None,
    };
    assert_eq!(
        store.claim(&claim("a")).await.unwrap(),
        ClaimOutcome::Claimed
    );
    let result = r#"{"receipt":"r-1","amountCents":4200}"#;
    store
        .complete(&claim("a"), now / 1000 + 100, Some(result))
        .await
        .unwrap();

    // THEN the record carries it as the `data` attribute (JSON text)
    let record = w.record("k-r").await.unwrap();
    assert_eq!(record["data"].as_s().unwrap(), result);
    assert!(!record.contains_key("claimToken"));

    // WHEN the key is claimed again
    let again = store.claim(&claim("b")).await.unwrap();

    // THEN the claim's failed condition brings the result back (ALL_OLD: no read)
    assert_eq!(
        again,
        ClaimOutcome::Completed(
            CompletedRecord::new(now / 1000 + 100).with_result(Some(result.to_string()))
        )
    );
}

#[tokio::test]
async fn each_failed_attempt_records_its_cause_beside_the_record_and_the_last_one_wins() {
    // GIVEN the shipped consumer without a DLQ and a downstream answering 503
    let w = World::new(false).await;
    let (id, received) = w.send_and_receive_one("{\"x\":1}").await;
    w.downstream.set_mode(Mode::Status(503));
    let consumer = w.consumer(w.config(false, &[]));

    // WHEN the message fails
    let first = w.handle(&consumer, &received).await;
    assert_eq!(first.response.failed_ids(), [id.as_str()]);

    // THEN the key's cause item holds the cause, and the claim was released as ever
    assert!(w.record(&id).await.is_none());
    let cause = w.cause(&id).await.expect("a cause item");
    let s = |name: &str| cause[name].as_s().unwrap().clone();
    let n = |name: &str| cause[name].as_n().unwrap().parse::<i64>().unwrap();
    assert_eq!(
        (s("class"), s("code"), s("message")),
        (
            "transient".to_string(),
            "HTTP_503".to_string(),
            "downstream answered <num>".to_string()
        )
    );
    assert_eq!((n("attempts"), n("normaliserVersion")), (1, 2));
    assert_eq!(s("firstFailedAt"), s("lastFailedAt"));
    let first_at = s("firstFailedAt");
    // ... expiring with the idempotency TTL, in the table's TTL attribute
    let at_s = redrive_shared::timefmt::millis_from_rfc3339(&first_at).unwrap() / 1000;
    let ttl = redrive_shared::config::DEFAULT_IDEMPOTENCY_TTL_SECONDS as i64;
    assert!((n("expiration") - at_s - ttl).abs() <= 1);
    assert!(!cause.contains_key("status"), "never an idempotency record");

    // WHEN it comes back and the downstream now rejects it (400, permanent)
    let again = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    w.downstream.set_mode(Mode::Status(400));
    let second = w.handle(&consumer, &again).await;
    assert_eq!(second.response.failed_ids(), [id.as_str()]);

    // THEN the last failure wins and the first failure's time is kept
    let cause = w.cause(&id).await.unwrap();
    let s = |name: &str| cause[name].as_s().unwrap().clone();
    assert_eq!(
        (s("class"), s("code")),
        ("permanent".to_string(), "HTTP_400".to_string())
    );
    assert_eq!(cause["attempts"].as_n().unwrap(), "2");
    assert_eq!(s("firstFailedAt"), first_at);
    assert!(s("lastFailedAt") > first_at);

    // WHEN its visibility times out (no DLQ: a permanent failure is only reported) and the
    // downstream recovers
    w.sqs
        .change_message_visibility()
        .queue_url(&w.queues.source_url)
        .receipt_handle(again[0].receipt_handle().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let third = comes_back(&w.sqs, &w.queues.source_url, 1, Duration::from_secs(5)).await;
    w.downstream.set_mode(Mode::Healthy);
    let done = w.handle(&consumer, &third).await;

    // THEN the claim protocol went on undisturbed beside the cause item
    assert!(done.response.batch_item_failures.is_empty());
    assert_eq!(w.status(&id).await.as_deref(), Some("COMPLETED"));
    assert_eq!(w.downstream.deliveries(&id), 1);
    assert_eq!(w.scan().await.len(), 2, "the record and the cause item");
}
