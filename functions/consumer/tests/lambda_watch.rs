//! The shipped `consumer` binary under `cargo lambda watch`, configured by environment variables
//! as on AWS, invoked with SQS events built from messages really received from moto.

use crate::common;

use common::*;
use redrive_shared::meta::RedriveMeta;
use redrive_tests::{LambdaWatch, attr_binary, attr_string, moto};
use serde_json::{Value, json};

fn env(w: &World, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = moto().env();
    for (k, v) in [
        ("IDEMPOTENCY_TABLE", w.table.as_str()),
        ("DOWNSTREAM_URL", &w.downstream.url()),
        ("DLQ_URL", w.queues.dlq_url.as_str()),
        // Not read by the consumer (its event names the queue): the test's IAM policy is
        // rendered for it (redrive_tests::iam).
        ("SOURCE_QUEUE_URL", w.queues.source_url.as_str()),
        ("RETRY_BASE_SECONDS", "1"),
        ("RETRY_JITTER", "none"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v.to_string()));
    }
    env
}

fn failures(response: &Value) -> Vec<String> {
    response["batchItemFailures"]
        .as_array()
        .unwrap_or_else(|| panic!("not a partial batch response: {response}"))
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_binary_settles_a_real_batch_under_cargo_lambda_watch() {
    // GIVEN the consumer running under cargo lambda watch against moto and a downstream that
    // rejects poison (400) and is unavailable for flaky messages (503)
    let w = World::new(false).await;
    w.reject_poison_and_flaky();
    let watch = LambdaWatch::start(&["consumer"], &env(&w, &[])).await;

    // AND three messages really received from the source queue
    let ids = w
        .send(&[
            (
                "{\"order\":\"good-marker-1\"}",
                &[("tenant", attr_string("acme"))],
            ),
            (
                "{\"order\":\"poison-marker-2\"}",
                &[("blob", attr_binary(&[0, 255, 7]))],
            ),
            ("{\"order\":\"flaky-marker-3\"}", &[]),
        ])
        .await;
    let (good, poison, flaky) = (&ids[0], &ids[1], &ids[2]);
    let received = w.receive(3).await;

    // WHEN the function is invoked with that batch
    let response = watch.invoke("consumer", &w.event(&received)).await.unwrap();

    // THEN only the flaky message is reported failed
    assert_eq!(failures(&response), [flaky.as_str()], "{response}");
    // AND the good one was delivered once, with its key
    assert_eq!(
        w.downstream.deliveries(good),
        1,
        "{:?}\n{}",
        w.downstream
            .requests()
            .iter()
            .map(|r| (r.idempotency_key.clone(), r.status))
            .collect::<Vec<_>>(),
        watch.log()
    );
    assert_eq!(w.downstream.attempts(flaky), 1);
    assert_eq!(w.status(good).await.as_deref(), Some("COMPLETED"));
    assert!(
        w.record(flaky).await.is_none(),
        "the flaky claim is released"
    );
    // AND the poison message is on the DLQ, stamped, its original deleted; the flaky one is
    // back after its 1 s backoff (it was received for 300 s)
    let dlq = drain(&w.sqs, &w.queues.dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some("{\"order\":\"poison-marker-2\"}"));
    let copy = attrs(&dlq[0]);
    assert_eq!(
        copy["blob"],
        redrive_shared::MessageAttribute::binary(vec![0u8, 255, 7])
    );
    let (meta, _) = RedriveMeta::read(&copy, "x");
    assert_eq!(meta.original_message_id, *poison);
    assert_eq!(meta.last_error.unwrap().code, "HTTP_400");
    let back = comes_back(
        &w.sqs,
        &w.queues.source_url,
        1,
        std::time::Duration::from_secs(10),
    )
    .await;
    assert_eq!(back[0].message_id(), Some(flaky.as_str()));
    // (the good one is still in flight for the event source mapping to delete; the poison
    // one is gone)
    assert_eq!(w.depth(&w.queues.source_url).await, 2);

    // WHEN the good message is delivered again together with the flaky one
    let good_again: Vec<_> = received
        .iter()
        .filter(|m| m.message_id() == Some(good.as_str()))
        .cloned()
        .chain(back)
        .collect();
    let response = watch
        .invoke("consumer", &w.event(&good_again))
        .await
        .unwrap();

    // THEN the good one is not delivered a second time
    assert_eq!(failures(&response), [flaky.as_str()]);
    assert_eq!(w.downstream.deliveries(good), 1);
    assert_eq!(w.downstream.attempts(good), 1);
    assert_eq!(w.downstream.attempts(flaky), 2);

    // AND the shipped fixture (a redriven message) is delivered under its originalMessageId
    let fixture = redrive_tests::fixture("sqs-batch.json");
    let response = watch.invoke("consumer", &fixture).await.unwrap();
    assert_eq!(response, json!({"batchItemFailures": []}));
    let original = "5fea7756-0ea4-451a-a703-a558b933e274";
    assert_eq!(w.downstream.deliveries(original), 1);
    let sent = w
        .downstream
        .requests()
        .into_iter()
        .find(|r| {
            r.idempotency_key
                .as_deref()
                .is_some_and(|k| k.starts_with(&format!("{original}:")))
        })
        .unwrap();
    assert_eq!(
        sent.body_text(),
        fixture["Records"][0]["body"].as_str().unwrap()
    );

    // AND the logs are JSON lines with the message id, the key's digest (never the key: a
    // pointer key is body content) and outcome, and no body
    let log = watch.log();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("fields").and_then(|f| f.get("outcome")).is_some())
        .collect();
    let has = |id: &str, outcome: &str| {
        lines.iter().any(|v| {
            v["fields"]["message_id"] == json!(id)
                && v["fields"]["key_digest"]
                    .as_str()
                    .is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_hexdigit()))
                && v["fields"].get("key").is_none()
                && v["fields"]["outcome"] == json!(outcome)
        })
    };
    assert!(has(good, "processed"), "{log}");
    assert!(has(good, "duplicate"), "{log}");
    assert!(has(poison, "dead-lettered"), "{log}");
    assert!(has(flaky, "retry"), "{log}");
    for marker in ["good-marker-1", "poison-marker-2", "flaky-marker-3"] {
        assert!(!log.contains(marker), "a body reached the log: {marker}");
    }
}

#[tokio::test]
async fn every_log_line_of_an_invocation_carries_its_request_and_trace_ids() {
    // GIVEN the consumer under cargo lambda watch and a downstream that rejects poison
    let w = World::new(false).await;
    w.downstream.reject_bodies_containing("poison", 400);
    let watch = LambdaWatch::start(&["consumer"], &env(&w, &[])).await;

    // WHEN it is invoked twice, with a batch that logs on every path it takes
    let mut seen = Vec::new();
    for round in 0..2 {
        let (good, poison) = (
            format!("{{\"order\":\"good-{round}\"}}"),
            format!("{{\"order\":\"poison-{round}\"}}"),
        );
        w.send(&[(good.as_str(), &[]), (poison.as_str(), &[])])
            .await;
        let received = w.receive(2).await;
        let (response, lines) = watch.invoke_logged("consumer", &w.event(&received)).await;
        response.unwrap();

        // THEN every line it logged during the invocation carries the invocation's requestId
        // and xrayTraceId (a cold start's init lines, before it, carry none)
        let ids = redrive_tests::invocation_ids(&lines).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            lines
                .iter()
                .filter(|l| l.get("requestId").is_some())
                .count()
                >= 2,
            "a line per record: {lines:?}"
        );
        seen.push(ids);
    }
    // AND each invocation has its own
    assert_ne!(seen[0].0, seen[1].0);
    assert_ne!(seen[0].1, seen[1].1);
}

#[tokio::test]
async fn a_permanent_failure_copy_on_the_dlq_keeps_the_producers_aws_trace_header() {
    // GIVEN a message of a traced producer (AWSTraceHeader) that the downstream rejects for good
    let w = World::new(false).await;
    w.downstream.reject_bodies_containing("poison", 400);
    let watch = LambdaWatch::start(&["consumer"], &env(&w, &[])).await;
    let header = redrive_tests::producer_trace_header();
    let id = redrive_tests::send_traced(
        &w.sqs,
        &w.queues.source_url,
        "{\"order\":\"poison\"}",
        &[],
        &header,
    )
    .await;
    let received = w.receive(1).await;
    assert_eq!(
        redrive_tests::trace_header_of(&received[0]),
        Some(header.as_str())
    );

    // WHEN the consumer fast-tracks it to the DLQ
    let response = watch.invoke("consumer", &w.event(&received)).await.unwrap();
    assert_eq!(failures(&response), Vec::<String>::new());

    // THEN the copy on the DLQ carries the producer's header, not the consumer's own trace
    let dlq = w.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    let (copy, meta) = &dlq[0];
    assert_eq!(meta.original_message_id, id);
    assert_eq!(redrive_tests::trace_header_of(copy), Some(header.as_str()));
}

#[tokio::test]
async fn an_invalid_configuration_fails_init_naming_the_variable() {
    let w = World::new(false).await;
    let watch =
        LambdaWatch::start(&["consumer"], &env(&w, &[("IDEMPOTENCY_TTL_SECONDS", "0")])).await;
    let err = watch
        .invoke("consumer", &json!({"Records": []}))
        .await
        .unwrap_err();
    assert!(err.contains("IDEMPOTENCY_TTL_SECONDS"), "{err}");
    assert_eq!(w.downstream.total_attempts(), 0);
}

/// The Embedded Metric Format lines the function printed: JSON objects on lines of their own
/// with an `_aws` member, as CloudWatch Logs extracts them.
fn emf_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect()
}

#[tokio::test]
async fn each_invocation_prints_one_emf_line_with_the_batch_counts() {
    // GIVEN the consumer under cargo lambda watch with its own metric namespace, and a batch
    // that is processed, duplicated (the same message twice), dead-lettered and retried
    let w = World::new(false).await;
    w.reject_poison_and_flaky();
    let namespace = redrive_tests::unique_name("Consumer");
    let watch = LambdaWatch::start(
        &["consumer"],
        &env(&w, &[("METRIC_NAMESPACE", namespace.as_str())]),
    )
    .await;
    w.send(&[
        ("{\"order\":\"good\"}", &[]),
        ("{\"order\":\"poison\"}", &[]),
        ("{\"order\":\"flaky\"}", &[]),
    ])
    .await;
    let mut received = w.receive(3).await;
    received.push(received[0].clone());

    // WHEN the function is invoked with it
    let response = watch.invoke("consumer", &w.event(&received)).await.unwrap();
    assert_eq!(failures(&response).len(), 1, "{response}");

    // THEN its output holds exactly one EMF line, with the batch's counts under the source
    // queue's name, zeros included
    let log = watch.log();
    let lines = emf_lines(&log);
    assert_eq!(lines.len(), 1, "{log}");
    let line = &lines[0];
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], json!(namespace));
    assert_eq!(directive["Dimensions"], json!([["QueueName"]]));
    assert!(line["_aws"]["Timestamp"].as_i64().unwrap() > 1_700_000_000_000);
    let queue_name = w.queues.source_url.rsplit('/').next().unwrap();
    assert_eq!(line["QueueName"], json!(queue_name));
    for (metric, count) in [
        ("Records", 4),
        ("BatchItemFailures", 1),
        ("Processed", 1),
        ("Duplicate", 1),
        ("DeadLettered", 1),
        ("Retried", 1),
        ("InProgress", 0),
        ("Failed", 0),
        ("PayloadMismatch", 0),
        ("Skipped", 0),
        ("Malformed", 0),
        ("Unstarted", 0),
    ] {
        assert_eq!(line[metric], json!(count), "{metric}: {line}");
        assert!(
            directive["Metrics"]
                .as_array()
                .unwrap()
                .contains(&json!({"Name": metric, "Unit": "Count"})),
            "{metric} is declared"
        );
    }

    // AND a second invocation prints a second line of its own
    watch
        .invoke("consumer", &w.event(&received[..1]))
        .await
        .unwrap();
    let lines = emf_lines(&watch.log());
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["Duplicate"], json!(1));
    assert_eq!(lines[1]["Records"], json!(1));
}

#[tokio::test]
async fn with_fail_when_all_failed_a_batch_that_all_failed_fails_the_invocation() {
    // GIVEN FAIL_WHEN_ALL_FAILED and a downstream that answers 503 to every message
    let w = World::new(false).await;
    w.downstream.reject_bodies_containing("flaky", 503);
    let watch =
        LambdaWatch::start(&["consumer"], &env(&w, &[("FAIL_WHEN_ALL_FAILED", "true")])).await;
    let ids = w
        .send(&[
            ("{\"order\":\"flaky-1\"}", &[]),
            ("{\"order\":\"flaky-2\"}", &[]),
        ])
        .await;
    let received = w.receive(2).await;

    // WHEN the function is invoked with the batch
    let err = watch
        .invoke("consumer", &w.event(&received))
        .await
        .unwrap_err();

    // THEN the invocation reports an error (Lambda's Errors metric counts it), naming why
    let document: Value = serde_json::from_str(&err).unwrap_or_else(|_| panic!("{err}"));
    let message = document["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("every record of the batch failed (2 of 2; retry: 2)"),
        "{document}"
    );
    // AND each record was settled as without the option: its claim released, its visibility
    // set to the 1 s backoff (it was received for 300 s), so both come back soon
    for id in &ids {
        assert!(
            w.record(id).await.is_none(),
            "the claim of {id} is released"
        );
    }
    let back = comes_back(
        &w.sqs,
        &w.queues.source_url,
        2,
        std::time::Duration::from_secs(10),
    )
    .await;
    assert_eq!(back.len(), 2);
    // AND the metrics of the failed invocation were printed all the same
    let lines = emf_lines(&watch.log());
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["Retried"], json!(2));

    // WHEN one record of the next batch succeeds
    w.send(&[("{\"order\":\"good\"}", &[])]).await;
    let mut batch = back;
    batch.extend(w.receive(1).await);
    let response = watch.invoke("consumer", &w.event(&batch)).await.unwrap();

    // THEN it is the partial batch response, as without the option
    assert_eq!(failures(&response).len(), 2, "{response}");
}

#[tokio::test]
async fn the_binary_keys_on_several_fields_and_checks_the_payload() {
    // GIVEN the consumer under cargo lambda watch, keyed on two fields of the body, with the
    // payload check on the amount
    let w = World::new(false).await;
    let watch = LambdaWatch::start(
        &["consumer"],
        &env(
            &w,
            &[
                ("IDEMPOTENCY_KEY", "/customerId,/orderId"),
                ("IDEMPOTENCY_PAYLOAD", "/amount"),
            ],
        ),
    )
    .await;
    let order = |order: &str, amount: u32, sender: &str| {
        json!({"customerId": "cust-marker-1", "orderId": order, "amount": amount, "sentBy": sender})
            .to_string()
    };
    let key = |order: &str| format!(r#"["cust-marker-1","{order}"]"#);

    // WHEN a batch holds one order twice (from two senders) and another once
    let first = order("ord-marker-1", 5, "a");
    w.send(&[
        (first.as_str(), &[]),
        (&order("ord-marker-2", 5, "a"), &[]),
        (&order("ord-marker-1", 5, "b"), &[]),
    ])
    .await;
    let received = w.receive(3).await;
    let response = watch.invoke("consumer", &w.event(&received)).await.unwrap();

    // THEN each order reached the downstream once, keyed by the JSON array of the two fields
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");
    assert_eq!(w.downstream.deliveries(&key("ord-marker-1")), 1);
    assert_eq!(w.downstream.deliveries(&key("ord-marker-2")), 1);
    assert_eq!(w.downstream.total_attempts(), 2);
    w.settle(&received, &redrive_consumer::BatchResponse::default())
        .await;

    // WHEN the first order comes again for another amount
    let changed = w.send(&[(&order("ord-marker-1", 7, "c"), &[])]).await;
    let received = w.receive(1).await;
    let response = watch.invoke("consumer", &w.event(&received)).await.unwrap();

    // THEN it is not delivered: it is on the DLQ, stamped as a payload mismatch
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");
    assert_eq!(w.downstream.total_attempts(), 2);
    let dlq = w.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    let (_, meta) = &dlq[0];
    assert_eq!(meta.original_message_id, changed[0]);
    assert_eq!(
        meta.last_error.as_ref().unwrap().code,
        "IDEMPOTENCY_PAYLOAD_MISMATCH"
    );
    assert_eq!(w.depth(&w.queues.source_url).await, 0);

    // AND the table holds two records, under the function's name and the SHA-256 of the key
    let items = w.scan().await;
    let mut ids: Vec<String> = items
        .iter()
        .map(|i| i["id"].as_s().unwrap().clone())
        .collect();
    ids.sort();
    let mut want: Vec<String> = ["ord-marker-1", "ord-marker-2"]
        .iter()
        .map(|o| {
            redrive_shared::key::IdempotencyKey::try_from(key(o))
                .unwrap()
                .record_id(Some("consumer"))
        })
        .collect();
    want.sort();
    assert_eq!(ids, want);
    assert!(!format!("{items:?}").contains("marker"), "{items:?}");

    // AND the log says payload-mismatch, with the key's digest, never the key
    let log = watch.log();
    assert!(
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["fields"]["message_id"] == json!(changed[0])
                && v["fields"]["outcome"] == json!("payload-mismatch")
                && v["fields"]["code"] == json!("IDEMPOTENCY_PAYLOAD_MISMATCH")),
        "{log}"
    );
    assert!(
        !log.contains("marker"),
        "a key or body reached the log:\n{log}"
    );
}

#[tokio::test]
async fn the_documented_example_charges_each_order_once_and_dead_letters_a_bad_body() {
    // GIVEN the crate documentation's example (examples/charge_orders.rs, a typed processor
    // under `redrive_consumer::run`) under cargo lambda watch against moto, its payments
    // service the test's downstream
    let w = World::new(false).await;
    let payments_url = w.downstream.url();
    let watch = LambdaWatch::start(
        &["charge_orders"],
        &env(&w, &[("PAYMENTS_URL", payments_url.as_str())]),
    )
    .await;
    // AND two orders and a body that is no order, really received from the source queue
    let ids = w
        .send(&[
            (r#"{"order_id":"o-1","amount_cents":4200}"#, &[]),
            (r#"{"order_id":"o-2","amount_cents":990}"#, &[]),
            (r#"{"order_id":"o-3","amount_cents":"lots"}"#, &[]),
        ])
        .await;
    let (first, second, bad) = (&ids[0], &ids[1], &ids[2]);
    let received = w.receive(3).await;

    // WHEN the function is invoked with that batch, and then with the two orders again (SQS
    // delivers at least once; the bad body's original was deleted)
    let response = watch
        .invoke("charge_orders", &w.event(&received))
        .await
        .unwrap();
    let orders: Vec<_> = received
        .iter()
        .filter(|m| m.message_id() != Some(bad.as_str()))
        .cloned()
        .collect();
    let again = watch
        .invoke("charge_orders", &w.event(&orders))
        .await
        .unwrap();

    // THEN nothing is reported failed, and each order was charged once, with its key
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");
    assert_eq!(failures(&again), Vec::<String>::new(), "{again}");
    for id in [first, second] {
        assert_eq!(w.downstream.deliveries(id), 1, "{id}\n{}", watch.log());
        assert_eq!(w.status(id).await.as_deref(), Some("COMPLETED"));
    }
    assert_eq!(w.downstream.attempts(bad), 0, "a bad body reaches no one");
    let charged: Value = serde_json::from_str(
        &w.downstream
            .requests()
            .into_iter()
            .find(|r| {
                r.idempotency_key
                    .as_deref()
                    .is_some_and(|k| k.starts_with(first.as_str()))
            })
            .unwrap()
            .body_text(),
    )
    .unwrap();
    assert_eq!(charged, json!({"orderId": "o-1", "amountCents": 4200}));
    // AND the bad body is a permanent failure: on the DLQ with its code, the original deleted
    let dlq = drain(&w.sqs, &w.queues.dlq_url).await;
    assert_eq!(dlq.len(), 1, "{}", watch.log());
    assert_eq!(
        dlq[0].body(),
        Some(r#"{"order_id":"o-3","amount_cents":"lots"}"#)
    );
    let (meta, _) = RedriveMeta::read(&attrs(&dlq[0]), "x");
    assert_eq!(meta.original_message_id, *bad);
    let last = meta.last_error.unwrap();
    assert_eq!(last.code, "BODY_NOT_PARSED");
    assert!(!last.message.contains("lots"), "{}", last.message);
    assert_eq!(w.depth(&w.queues.source_url).await, 2);
    // AND the logs carry no body
    let log = watch.log();
    for content in ["o-1", "o-2", "lots"] {
        assert!(!log.contains(content), "a body reached the log: {content}");
    }
}

#[tokio::test]
async fn the_example_fails_init_naming_a_missing_variable() {
    let w = World::new(false).await;
    let mut env = env(&w, &[]);
    env.retain(|(name, _)| name != "IDEMPOTENCY_TABLE");
    let watch = LambdaWatch::start(&["charge_orders"], &env).await;
    let err = watch
        .invoke("charge_orders", &json!({"Records": []}))
        .await
        .unwrap_err();
    assert!(err.contains("missing IDEMPOTENCY_TABLE"), "{err}");
}

#[tokio::test]
async fn an_unreadable_record_fails_alone_in_the_typed_event() {
    // GIVEN the shipped binary, and four messages really received
    let w = World::new(false).await;
    let watch = LambdaWatch::start(&["consumer"], &env(&w, &[])).await;
    let ids = w
        .send(&[
            ("{\"n\":1}", &[]),
            ("{\"n\":2}", &[]),
            ("{\"n\":3}", &[]),
            ("{\"n\":4}", &[]),
        ])
        .await;
    let received = w.receive(4).await;
    let position = |id: &String| {
        received
            .iter()
            .position(|m| m.message_id() == Some(id.as_str()))
            .unwrap()
    };
    // AND, in the event, one record without its receipt handle and one without its body
    let mut event = w.event(&received);
    let records = event["Records"].as_array_mut().unwrap();
    records[position(&ids[1])]
        .as_object_mut()
        .unwrap()
        .remove("receiptHandle");
    records[position(&ids[2])]
        .as_object_mut()
        .unwrap()
        .remove("body");

    // WHEN the function is invoked with it
    let response = watch.invoke("consumer", &event).await.unwrap();

    // THEN only those two are reported failed, and the others were delivered
    let mut failed = failures(&response);
    failed.sort();
    let mut unreadable = vec![ids[1].clone(), ids[2].clone()];
    unreadable.sort();
    assert_eq!(failed, unreadable, "{response}");
    assert_eq!(w.downstream.deliveries(&ids[0]), 1);
    assert_eq!(w.downstream.deliveries(&ids[3]), 1);
    assert_eq!(w.downstream.attempts(&ids[1]), 0);
    assert_eq!(w.downstream.attempts(&ids[2]), 0);

    // AND a record whose fields do not fit the SqsEvent types at all (AWS never sends one)
    // fails the invocation before any record is touched: the runtime cannot deserialize it
    let mut mistyped = w.event(&received[..1]);
    mistyped["Records"][0]["body"] = json!(42);
    let err = watch.invoke("consumer", &mistyped).await.unwrap_err();
    assert!(err.contains("errorType"), "{err}");
    assert_eq!(w.downstream.total_attempts(), 2);
}
