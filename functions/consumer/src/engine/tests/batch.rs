//! The batch-level options against the fakes: the in-memory cache of completed keys, failing
//! the invocation when every record failed, FIFO stop-the-batch, and the metrics line.

use super::*;
use crate::fake::Record;

fn store_calls(store: &FakeStore) -> u64 {
    store.calls.writes() + store.calls.read.load(Ordering::SeqCst)
}

fn with_cache(size: usize) -> ConsumerConfig {
    ConsumerConfig {
        cache_size: size,
        ..pointer_config(true)
    }
}

#[tokio::test]
async fn a_warm_duplicate_is_settled_from_memory_without_a_store_call() {
    // GIVEN a consumer that remembers completed keys, and a batch it processed
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, with_cache(100));
    let batch = event(&[keyed("m-1", "k-1"), keyed("m-2", "k-2")]);
    let first = c.handle(&batch, in_a_minute()).await.unwrap();
    assert_eq!(
        outcomes(&first),
        [("m-1", "processed"), ("m-2", "processed")]
    );
    let calls_before = store_calls(&store);

    // WHEN the same keys come again (SQS redelivered them, or the producer resent)
    let again = handle(&c, &[keyed("m-3", "k-1"), keyed("m-4", "k-2")]).await;

    // THEN both are duplicates, settled with no call to the store and none to SQS
    assert_eq!(
        outcomes(&again),
        [("m-3", "duplicate"), ("m-4", "duplicate")]
    );
    assert!(again.response.batch_item_failures.is_empty());
    assert_eq!(store_calls(&store), calls_before, "no DynamoDB call");
    assert!(queue.calls().is_empty());
    assert_eq!(processor.total_calls(), 2);
}

#[tokio::test]
async fn a_warm_duplicate_gets_the_stored_result_from_memory() {
    // GIVEN a processor that returns a receipt, and a key it processed on this instance
    let (store, queue, processor) = fakes();
    processor.script("k-1", [Step::Return(json!({"receipt": "r-1"}))]);
    let c = consumer(&store, &queue, &processor, with_cache(100));
    handle(&c, &[keyed("m-1", "k-1")]).await;
    let calls_before = store_calls(&store);

    // WHEN a copy comes
    let again = handle(&c, &[keyed("m-2", "k-1")]).await;

    // THEN it is a duplicate answered from memory with the stored result, as the table
    // would have answered it
    assert_eq!(store_calls(&store), calls_before);
    let report = again.report_of("m-2").unwrap();
    assert_eq!(report.outcome, Outcome::Duplicate);
    assert_eq!(report.result.as_deref(), Some(r#"{"receipt":"r-1"}"#));
    assert_eq!(
        processor.duplicates(),
        [("m-2".to_string(), Some(json!({"receipt": "r-1"})))]
    );
}

#[tokio::test]
async fn without_the_cache_every_duplicate_costs_a_claim() {
    let (store, queue, processor) = fakes();
    let c = consumer(&store, &queue, &processor, with_cache(0));
    let batch = event(&[keyed("m-1", "k-1")]);
    c.handle(&batch, in_a_minute()).await.unwrap();
    let claims = store.calls.claim.load(Ordering::SeqCst);

    let again = c.handle(&batch, in_a_minute()).await.unwrap();

    assert_eq!(outcomes(&again), [("m-1", "duplicate")]);
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), claims + 1);
}

#[tokio::test]
async fn a_key_a_claim_found_completed_is_remembered_with_its_expiration() {
    // GIVEN a key another instance completed
    let (store, queue, processor) = fakes();
    let expiration_s = now_ms() / 1000 + 600;
    store.insert(&id_of_key("k-1"), Record::completed(expiration_s));
    let c = consumer(&store, &queue, &processor, with_cache(100));

    // WHEN it comes twice
    let first = handle(&c, &[keyed("m-1", "k-1")]).await;
    let second = handle(&c, &[keyed("m-2", "k-1")]).await;

    // THEN the first asks the store (one claim), the second does not
    assert_eq!(outcomes(&first), [("m-1", "duplicate")]);
    assert_eq!(outcomes(&second), [("m-2", "duplicate")]);
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 1);
    assert_eq!(store.calls.writes(), 1);
    assert_eq!(processor.total_calls(), 0);
    // AND the cache holds the record's own expiration, not one of its own making
    assert_eq!(
        c.completed.as_ref().unwrap().get("k-1", now_ms()),
        Some(CompletedRecord::new(expiration_s))
    );
}

#[tokio::test]
async fn an_expired_entry_is_not_served_and_the_key_is_claimed_again() {
    // GIVEN a consumer whose records expire at the end of the current second (TTL 0, which
    // configuration refuses, but which makes the expiry observable within a test)
    let (store, queue, processor) = fakes();
    let config = ConsumerConfig {
        ttl_seconds: 0,
        ..with_cache(100)
    };
    let c = consumer(&store, &queue, &processor, config);
    handle(&c, &[keyed("m-1", "k-1")]).await;
    assert!(c.completed.as_ref().unwrap().get("k-1", now_ms()).is_some());

    // WHEN the same key comes after its record expired
    tokio::time::sleep(Duration::from_millis((1000 - now_ms() % 1000 + 20) as u64)).await;
    let claims = store.calls.claim.load(Ordering::SeqCst);
    let again = handle(&c, &[keyed("m-2", "k-1")]).await;

    // THEN the cache does not answer for it: the store is asked, and (its record expired
    // too) the key is processed again, as it would be without the cache
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), claims + 1);
    assert_eq!(outcomes(&again), [("m-2", "processed")]);
    assert_eq!(processor.calls("k-1"), 2);
}

#[tokio::test]
async fn only_completed_keys_are_remembered() {
    // GIVEN a key that fails transiently, then succeeds
    let (store, queue, processor) = fakes();
    processor.script("k-1", [transient_503()]);
    let c = consumer(&store, &queue, &processor, with_cache(100));

    let failed = handle(&c, &[keyed("m-1", "k-1")]).await;
    let retried = handle(&c, &[keyed("m-1", "k-1")]).await;

    // THEN the retry is processed (nothing was remembered of the failure) and remembered
    assert_eq!(outcomes(&failed), [("m-1", "retry")]);
    assert_eq!(outcomes(&retried), [("m-1", "processed")]);
    assert_eq!(processor.effects("k-1"), 1);
    assert!(c.completed.as_ref().unwrap().get("k-1", now_ms()).is_some());
}

#[tokio::test]
async fn a_processed_key_is_remembered_even_when_its_completed_write_failed() {
    // GIVEN the COMPLETED write failing through all its tries
    let (store, queue, processor) = fakes();
    for _ in 0..4 {
        store.fail_next("complete");
    }
    let settings = Settings::default().with_complete_retries(3, Duration::from_millis(1));
    let c = Consumer::with_settings(&store, &queue, &processor, with_cache(100), settings);
    handle(&c, &[keyed("m-1", "k-1")]).await;

    // WHEN a copy comes to this process while the claim still stands
    let again = handle(&c, &[keyed("m-2", "k-1")]).await;

    // THEN this process does not repeat the side effect
    assert_eq!(outcomes(&again), [("m-2", "duplicate")]);
    assert_eq!(processor.effects("k-1"), 1);
}

#[tokio::test]
async fn every_record_failed_fails_the_invocation_when_asked() {
    // GIVEN FAIL_WHEN_ALL_FAILED and a downstream that is down
    let (store, queue, processor) = fakes_that(transient_503());
    let config = ConsumerConfig {
        fail_when_all_failed: true,
        ..pointer_config(true)
    };
    let c = consumer(&store, &queue, &processor, config);

    // WHEN a batch of two is handled
    let handled = handle(&c, &[keyed("m-1", "k-1"), keyed("m-2", "k-2")]).await;

    // THEN both records were settled as usual: visibility set, claims released
    assert_eq!(handled.response.failed_ids(), ["m-1", "m-2"]);
    assert_eq!(queue.visibility_changes().len(), 2);
    assert!(store.is_empty(), "claims released");
    // AND the invocation fails, saying why
    let err = handled.into_response().unwrap_err();
    assert_eq!(err.records, 2);
    assert_eq!(err.outcomes, "retry: 2");
    let text = err.to_string();
    assert!(
        text.contains("every record of the batch failed") && text.contains("FAIL_WHEN_ALL_FAILED"),
        "{text}"
    );
}

#[tokio::test]
async fn one_record_settled_keeps_the_partial_batch_response() {
    let (store, queue, processor) = fakes();
    processor.script("k-1", [transient_503()]);
    let config = ConsumerConfig {
        fail_when_all_failed: true,
        ..pointer_config(true)
    };
    let c = consumer(&store, &queue, &processor, config);

    let handled = handle(&c, &[keyed("m-1", "k-1"), keyed("m-2", "k-2")]).await;
    assert_eq!(handled.into_response().unwrap().failed_ids(), ["m-1"]);

    // An empty batch has no record that failed
    let empty = c
        .handle(&json!({"Records": []}), in_a_minute())
        .await
        .unwrap();
    assert!(empty.into_response().is_ok());
}

#[tokio::test]
async fn without_the_option_every_record_failed_is_a_partial_batch_response() {
    let (store, queue, processor) = fakes_that(transient_503());
    let c = consumer(&store, &queue, &processor, pointer_config(true));

    let handled = handle(&c, &[keyed("m-1", "k-1")]).await;

    assert!(handled.every_record_failed());
    assert_eq!(handled.into_response().unwrap().failed_ids(), ["m-1"]);
}

/// `FIFO_ON_FAILURE=stop-batch`.
fn stop_batch() -> ConsumerConfig {
    ConsumerConfig {
        fifo_on_failure: FifoOnFailure::StopBatch,
        ..config(true, KeySource::Message)
    }
}

#[tokio::test]
async fn fifo_stop_batch_reports_the_failed_record_and_every_later_one_untouched() {
    // GIVEN FIFO_ON_FAILURE=stop-batch and the third record failing transiently
    let (store, queue, processor) = fakes();
    processor.script(&key_of("g1-2", "{}"), [transient_503()]);
    let c = consumer(&store, &queue, &processor, stop_batch());

    // WHEN the batch is handled
    let handled = handle(&c, &fifo_batch()).await;

    // THEN the records before it are processed, and it and every later one, whatever its
    // group, are reported
    assert_eq!(
        outcomes(&handled),
        [
            ("g1-1", "processed"),
            ("g2-1", "processed"),
            ("g1-2", "retry"),
            ("g3-1", "skipped"),
            ("g1-3", "skipped"),
            ("g2-2", "skipped"),
            ("g3-2", "skipped"),
        ]
    );
    assert_eq!(
        handled.response.failed_ids(),
        ["g1-2", "g3-1", "g1-3", "g2-2", "g3-2"]
    );
    // AND the later ones were not touched: no processing, no claim, no SQS call
    for id in ["g3-1", "g1-3", "g2-2", "g3-2"] {
        assert_eq!(processor.calls(&key_of(id, "{}")), 0, "{id}");
        assert!(store.record(&id_of(id, "{}")).is_none(), "{id}");
    }
    assert_eq!(store.calls.claim.load(Ordering::SeqCst), 3);
    assert_eq!(
        queue.visibility_changes().len(),
        1,
        "only the failed record's"
    );
}

#[tokio::test]
async fn fifo_stop_batch_goes_on_past_a_settled_permanent_failure() {
    // A record dead-lettered is settled (deleted, not reported): nothing to keep in order.
    let (store, queue, processor) = fakes();
    processor.script(&key_of("g3-1", "{}"), [permanent_400()]);
    let c = consumer(&store, &queue, &processor, stop_batch());

    let handled = handle(&c, &fifo_batch()).await;

    assert_eq!(
        handled.outcome_of("g3-1").unwrap().as_str(),
        "dead-lettered"
    );
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(processor.effects(&key_of("g3-2", "{}")), 1);
}

#[test]
fn every_outcome_has_its_metric() {
    let outcomes = [
        Outcome::Processed,
        Outcome::Duplicate,
        Outcome::InProgress,
        Outcome::Retry {
            code: "X".into(),
            visibility_seconds: None,
        },
        Outcome::DeadLettered {
            code: "X".into(),
            stamped: true,
        },
        Outcome::Failed { code: "X".into() },
        Outcome::PayloadMismatch {
            dead_lettered: true,
            stamped: true,
        },
        Outcome::Skipped,
        Outcome::Malformed,
        Outcome::Unstarted,
    ];
    let names: Vec<&str> = outcomes.iter().map(Outcome::metric_name).collect();
    assert_eq!(names, crate::metrics::OUTCOME_METRICS);
}

#[tokio::test]
async fn the_metrics_line_counts_each_outcome_of_the_batch() {
    // GIVEN a batch that takes several paths: processed, duplicate (a twin), retried,
    // dead-lettered, malformed
    let (store, queue, processor) = fakes();
    processor.script("k-2", [transient_503()]);
    processor.script("k-3", [permanent_400()]);
    let c = consumer(&store, &queue, &processor, pointer_config(true));
    let mut batch = event(&[
        keyed("m-1", "k-1"),
        keyed("m-2", "k-1"),
        keyed("m-3", "k-2"),
        keyed("m-4", "k-3"),
        keyed("m-5", "k-4"),
    ]);
    batch["Records"][4]["messageAttributes"] =
        json!({"bad": {"dataType": "Binary", "binaryValue": "%%"}});
    let handled = c.handle(&batch, in_a_minute()).await.unwrap();

    // WHEN its metrics are rendered
    let lines = crate::metrics::document(&handled, "Team/Orders")
        .unwrap()
        .lines(1_764_000_000_000);

    // THEN one EMF line carries every count, zeros included, under the source queue's name
    assert_eq!(lines.len(), 1);
    let line: Value = serde_json::from_str(&lines[0]).unwrap();
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "Team/Orders");
    assert_eq!(directive["Dimensions"], json!([["QueueName"]]));
    assert!(
        directive["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["Unit"] == "Count")
    );
    assert_eq!(line["QueueName"], "orders");
    let expected = [
        ("Records", 5),
        ("BatchItemFailures", 2),
        ("Processed", 1),
        ("Duplicate", 1),
        ("InProgress", 0),
        ("Retried", 1),
        ("DeadLettered", 1),
        ("Failed", 0),
        ("PayloadMismatch", 0),
        ("Skipped", 0),
        ("Malformed", 1),
        ("Unstarted", 0),
    ];
    let counts: Vec<(&str, u64)> = expected
        .iter()
        .map(|(n, _)| {
            (
                *n,
                line[*n].as_u64().unwrap_or_else(|| panic!("{n}: {line}")),
            )
        })
        .collect();
    assert_eq!(counts, expected);
    assert_eq!(directive["Metrics"].as_array().unwrap().len(), counts.len());
}
