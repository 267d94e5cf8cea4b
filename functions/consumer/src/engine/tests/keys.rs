//! Key sources, record ids and the payload check, against the in-memory fakes.

use super::*;
use crate::fake::Record;

/// The configuration with these `IDEMPOTENCY_KEY` and `IDEMPOTENCY_PAYLOAD` values.
fn keyed_by(dlq: bool, key: &str, payload: Option<&str>) -> ConsumerConfig {
    ConsumerConfig {
        payload: payload.map(|p| redrive_shared::key::PayloadSource::parse(p).unwrap()),
        ..config(dlq, KeySource::parse(key).unwrap())
    }
}

/// Keyed on `/orderId`, with the payload check on `/amount`, and a DLQ.
fn amount_checked() -> ConsumerConfig {
    keyed_by(true, "/orderId", Some("/amount"))
}

fn with_attribute(mut m: Message, name: &str, value: MessageAttribute) -> Message {
    m.attributes.insert(name.into(), value);
    m
}

fn order(id: &str, customer: &str, order: &str, amount: u32) -> Message {
    message(
        id,
        &json!({"customerId": customer, "orderId": order, "amount": amount, "sentBy": id})
            .to_string(),
    )
}

/// Order o-1 again: for an amount of 7 (m-2), then for 5 from another customer (m-3).
fn order_o1_again_for_7_then_5() -> [Message; 2] {
    [order("m-2", "c-1", "o-1", 7), order("m-3", "c-9", "o-1", 5)]
}

fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[tokio::test]
async fn twins_are_processed_once_with_every_key_source() {
    // GIVEN for each key source a batch of two keys, one of them sent twice by different
    // messages (whose bodies differ beyond the key, except for `body`, where twins are
    // byte-identical bodies)
    let attr = |m: Message, v: &str| with_attribute(m, "OrderId", MessageAttribute::string(v));
    let cases: [(&str, [Message; 3], &str); 3] = [
        (
            "/customerId,/orderId",
            [
                order("m-1", "c-1", "o-1", 5),
                order("m-2", "c-1", "o-2", 5),
                order("m-3", "c-1", "o-1", 5),
            ],
            r#"["c-1","o-1"]"#,
        ),
        (
            "attribute:OrderId",
            [
                attr(message("m-1", "one"), "o-1"),
                attr(message("m-2", "two"), "o-2"),
                attr(message("m-3", "three"), "o-1"),
            ],
            "o-1",
        ),
        (
            "body",
            [
                message("m-1", r#"{"order":1}"#),
                message("m-2", r#"{"order":2}"#),
                message("m-3", r#"{"order":1}"#),
            ],
            &redrive_shared::key::sha256_hex(br#"{"order":1}"#, 64),
        ),
    ];
    for (source, batch, twin_key) in cases {
        let (store, queue) = (FakeStore::new(), FakeQueue::new());
        let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(20));
        let c = consumer(&store, &queue, &processor, keyed_by(true, source, None));

        // WHEN the batch is handled
        let handled = handle(&c, &batch).await;

        // THEN each key reached the side effect once, and the twin is a duplicate
        assert_eq!(
            outcomes(&handled),
            [
                ("m-1", "processed"),
                ("m-2", "processed"),
                ("m-3", "duplicate")
            ],
            "{source}"
        );
        assert_eq!(
            handled.records[2].key.as_deref(),
            Some(twin_key),
            "{source}"
        );
        assert_eq!(processor.calls(twin_key), 1, "{source}");
        assert_eq!(processor.total_calls(), 2, "{source}");
        assert_eq!(store.calls.claim.load(Ordering::SeqCst), 2, "{source}");
        assert_eq!(
            store.record(&id_of_key(twin_key)).unwrap().status,
            Status::Completed
        );
    }
}

#[tokio::test]
async fn a_missing_or_binary_key_attribute_is_a_permanent_failure_of_its_own() {
    // GIVEN messages keyed on attribute:OrderId, one without it and one with a Binary value
    let (store, queue, processor) = fakes();
    let c = consumer(
        &store,
        &queue,
        &processor,
        keyed_by(true, "attribute:OrderId", None),
    );
    let batch = [
        with_attribute(
            message("m-1", "a"),
            "OrderId",
            MessageAttribute::number("17"),
        ),
        message("m-2", "b"),
        with_attribute(
            message("m-3", "c"),
            "OrderId",
            MessageAttribute::binary(*b"17"),
        ),
    ];

    // WHEN the batch is handled
    let handled = handle(&c, &batch).await;

    // THEN the good one is processed and the others go to the DLQ with their own codes
    assert_eq!(handled.outcome_of("m-1"), Some(&Outcome::Processed));
    for (id, code) in [
        ("m-2", "KEY_ATTRIBUTE_MISSING"),
        ("m-3", "KEY_ATTRIBUTE_BINARY"),
    ] {
        assert_eq!(
            handled.outcome_of(id),
            Some(&Outcome::DeadLettered {
                code: code.into(),
                stamped: true
            })
        );
    }
    let codes: Vec<String> = queue
        .sends()
        .iter()
        .map(|(_, copy)| {
            let (meta, _) = RedriveMeta::read(&copy.attributes, "x");
            meta.last_error.unwrap().code
        })
        .collect();
    assert_eq!(codes.len(), 2);
    assert!(codes.contains(&"KEY_ATTRIBUTE_MISSING".to_string()));
    assert!(codes.contains(&"KEY_ATTRIBUTE_BINARY".to_string()));
    assert_eq!(processor.total_calls(), 1);
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_store_holds_hashes_of_keys_never_the_keys() {
    // GIVEN a compound key of personal data, with and without a namespace
    for namespace in [None, Some("orders-consumer")] {
        let (store, queue, processor) = fakes();
        let config = ConsumerConfig {
            key_namespace: namespace.map(str::to_string),
            ..keyed_by(true, "/customerId,/orderId", Some("/amount"))
        };
        let c = consumer(&store, &queue, &processor, config);

        // WHEN a message is processed
        let batch = [order("m-1", "alice@example.com", "o-1", 5)];
        handle(&c, &batch).await;

        // THEN the record's id is the documented hash, after the namespace
        let key = r#"["alice@example.com","o-1"]"#;
        let ids = store.ids();
        assert_eq!(ids.len(), 1);
        let want = match namespace {
            Some(ns) => format!("{ns}#{}", id_of_key(key)),
            None => id_of_key(key),
        };
        assert_eq!(ids[0], want);
        assert!(is_hash(ids[0].rsplit('#').next().unwrap()));
        assert!(!ids[0].contains("alice"));
        // AND the processing step still gets the key itself (for the downstream's header)
        assert_eq!(processor.effects(key), 1);
    }
}

#[tokio::test]
async fn a_different_payload_under_a_completed_key_is_a_payload_mismatch_not_a_duplicate() {
    // GIVEN a key processed for an amount of 5, with the payload check on /amount
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, amount_checked());
    let first = handle(&c, &[order("m-1", "c-1", "o-1", 5)]).await;
    assert_eq!(first.outcome_of("m-1"), Some(&Outcome::Processed));
    assert!(
        store
            .record(&id_of_key("o-1"))
            .unwrap()
            .payload_hash
            .is_some()
    );

    // WHEN the same key comes again for 7, and again for 5 (another sender, same payload)
    let handled = handle(&c, &order_o1_again_for_7_then_5()).await;

    // THEN the different payload is its own permanent failure, dead-lettered with its stamp,
    // and the side effect is not repeated; the same payload is a duplicate
    assert_eq!(
        handled.outcome_of("m-2"),
        Some(&Outcome::PayloadMismatch {
            dead_lettered: true,
            stamped: true
        })
    );
    assert_eq!(handled.outcome_of("m-3"), Some(&Outcome::Duplicate));
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(processor.total_calls(), 1);
    let sends = queue.sends();
    assert_eq!(sends.len(), 1);
    let (meta, _) = RedriveMeta::read(&sends[0].1.attributes, "x");
    let last = meta.last_error.unwrap();
    assert_eq!(last.code, PAYLOAD_MISMATCH);
    assert_eq!(last.code, "IDEMPOTENCY_PAYLOAD_MISMATCH");
    assert!(
        last.message.contains("IDEMPOTENCY_PAYLOAD=/amount"),
        "{}",
        last.message
    );
    assert_eq!(queue.deletes(), ["handle-m-2"]);
    assert_eq!(
        store.record(&id_of_key("o-1")).unwrap().status,
        Status::Completed,
        "the record is left as it was"
    );

    // AND without a DLQ the mismatch is reported failed
    let (queue, processor) = (FakeQueue::new(), ScriptedProcessor::default());
    let c = consumer(
        &store,
        &queue,
        &processor,
        keyed_by(false, "/orderId", Some("/amount")),
    );
    let handled = handle(&c, &[order("m-4", "c-1", "o-1", 8)]).await;
    assert_eq!(
        handled.outcome_of("m-4"),
        Some(&Outcome::PayloadMismatch {
            dead_lettered: false,
            stamped: false
        })
    );
    assert_eq!(handled.response.failed_ids(), ["m-4"]);
    assert_eq!(processor.total_calls(), 0);
}

#[tokio::test]
async fn without_the_payload_check_a_different_payload_is_a_duplicate() {
    // GIVEN the default: no payload check
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, keyed_by(true, "/orderId", None));
    handle(&c, &[order("m-1", "c-1", "o-1", 5)]).await;

    // WHEN the key comes again with another amount
    let handled = handle(&c, &[order("m-2", "c-1", "o-1", 7)]).await;

    // THEN it is a duplicate, as before, and no payload hash was stored
    assert_eq!(handled.outcome_of("m-2"), Some(&Outcome::Duplicate));
    assert_eq!(store.record(&id_of_key("o-1")).unwrap().payload_hash, None);
}

#[tokio::test]
async fn records_that_cannot_be_compared_are_duplicates() {
    // GIVEN COMPLETED records written before the check was on, and under another definition
    let (store, queue, processor) = fakes();
    let completed = |payload_hash: Option<String>| Record {
        payload_hash,
        ..Record::completed(now_ms() / 1000 + 3600)
    };
    store.insert(&id_of_key("o-1"), completed(None));
    let other_definition = redrive_shared::key::PayloadSource::parse("/amount,/currency")
        .unwrap()
        .hash(r#"{"amount":5}"#, &Attributes::new())
        .unwrap();
    store.insert(
        &id_of_key("o-2"),
        completed(Some(other_definition.to_string())),
    );
    let c = consumer(&store, &queue, &processor, amount_checked());

    // WHEN the keys come with any payload
    let handled = handle(
        &c,
        &[order("m-1", "c-1", "o-1", 7), order("m-2", "c-1", "o-2", 7)],
    )
    .await;

    // THEN they are duplicates: nothing proves the payload differs
    assert_eq!(
        outcomes(&handled),
        [("m-1", "duplicate"), ("m-2", "duplicate")]
    );
    assert!(queue.calls().is_empty());
}

#[tokio::test]
async fn a_different_payload_under_an_in_progress_key_is_retried_not_failed() {
    // GIVEN another invocation holding the key for an amount of 5
    let (store, queue, processor) = fakes();
    let config = amount_checked();
    let theirs = config
        .payload
        .as_ref()
        .unwrap()
        .hash(r#"{"amount":5}"#, &Attributes::new())
        .unwrap();
    store.insert(
        &id_of_key("o-1"),
        Record {
            status: Status::InProgress,
            expiration_s: now_ms() / 1000 + 3600,
            in_progress_expiration_ms: now_ms() + 600_000,
            token: Some("theirs".into()),
            payload_hash: Some(theirs.to_string()),
            result: None,
        },
    );
    let c = consumer(&store, &queue, &processor, config);

    // WHEN a message for 7 arrives
    let handled = handle(&c, &[order("m-1", "c-1", "o-1", 7)]).await;

    // THEN it waits like any message whose key is held: the other side effect may still fail
    // and be released, and then this payload is the one to process
    assert_eq!(handled.outcome_of("m-1"), Some(&Outcome::InProgress));
    assert_eq!(handled.response.failed_ids(), ["m-1"]);
    assert!(queue.sends().is_empty());
}

#[tokio::test]
async fn a_twin_with_another_payload_claims_on_its_own_after_the_first() {
    // GIVEN a batch where one key comes with two payloads (twice the first one)
    let batch = [
        order("m-1", "c-1", "o-1", 5),
        order("m-2", "c-1", "o-1", 7),
        order("m-3", "c-2", "o-1", 5),
    ];
    // (after a success, the other payload is a mismatch and the same one a duplicate)
    let after_a_success = [
        ("m-1", "processed"),
        ("m-2", "payload-mismatch"),
        ("m-3", "duplicate"),
    ];

    // WHEN the first one succeeds
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(20));
    let c = consumer(&store, &queue, &processor, amount_checked());
    let handled = handle(&c, &batch).await;

    // THEN the other payload is a mismatch, the same one a duplicate; one side effect
    assert_eq!(outcomes(&handled), after_a_success);
    assert_eq!(processor.total_calls(), 1);

    // WHEN instead the first one fails transiently (and its claim is released)
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default();
    processor.script("o-1", [transient_503()]);
    let c = consumer(&store, &queue, &processor, amount_checked());
    let handled = handle(&c, &batch).await;

    // THEN the other payload is processed in its place, and the first payload's twin takes
    // the first's retry
    assert_eq!(
        outcomes(&handled),
        [("m-1", "retry"), ("m-2", "processed"), ("m-3", "retry")]
    );
    assert_eq!((processor.calls("o-1"), processor.effects("o-1")), (2, 1));

    // AND in a FIFO batch the same holds, in order
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default();
    let c = consumer(&store, &queue, &processor, amount_checked());
    let fifo: Vec<Message> = batch
        .iter()
        .enumerate()
        .map(|(i, m)| Message {
            group_id: Some(format!("g-{i}")),
            source: QueueArn::parse(FIFO_ARN),
            ..m.clone()
        })
        .collect();
    let handled = handle(&c, &fifo).await;
    assert_eq!(outcomes(&handled), after_a_success);
    assert_eq!(processor.total_calls(), 1);
}

#[tokio::test]
async fn a_warm_instance_checks_the_payload_of_a_key_it_remembers() {
    // GIVEN a consumer that remembers completed keys, with the payload check on, that
    // processed an order for 5
    let (store, queue, processor) = fakes();
    let config = ConsumerConfig {
        cache_size: 100,
        ..amount_checked()
    };
    let c = consumer(&store, &queue, &processor, config);
    handle(&c, &[order("m-1", "c-1", "o-1", 5)]).await;
    let claims = store.calls.claim.load(Ordering::SeqCst);

    // WHEN the order comes again for 7, then for 5
    let handled = handle(&c, &order_o1_again_for_7_then_5()).await;

    // THEN memory answers both without a call, and the other payload is still a mismatch
    assert_eq!(
        outcomes(&handled),
        [("m-2", "payload-mismatch"), ("m-3", "duplicate")]
    );
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), claims);
    assert_eq!(processor.total_calls(), 1);
}
