//! The library's public API as a user's own Lambda uses it, against the in-memory fakes
//! (feature `fake`): typed processors (closures and impls), bodies that do not parse, the
//! typed `SqsEvent`, and the processor's result stored and handed back to duplicates.

use std::sync::Mutex;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use redrive_consumer::fake::{
    self, FakeQueue, FakeStore, ScriptedProcessor, Status, Step, event, handle, in_a_minute,
    message, outcomes,
};
use redrive_consumer::{
    BODY_NOT_PARSED, Consumer, FailedIds, MAX_STORED_RESULT_BYTES, Outcome, ProcessError,
    Processor, Record,
};
use redrive_shared::config::ConsumerConfig;
use redrive_shared::key::KeySource;
use redrive_shared::meta::RedriveMeta;
use serde::{Deserialize, Serialize};
use serde_json::json;

fn config(key_source: KeySource) -> ConsumerConfig {
    fake::config(true, key_source)
}

fn pointer(path: &str) -> KeySource {
    KeySource::parse(path).unwrap()
}

#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    receipt_id: String,
}

#[tokio::test]
async fn a_closure_gets_the_parsed_body_and_a_body_that_does_not_parse_is_a_permanent_failure() {
    // GIVEN a typed closure processor that records what it charged
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let charged = Mutex::new(Vec::new());
    let charged_ref = &charged;
    let c = Consumer::new(
        &store,
        &queue,
        move |order: Order, record: Record| async move {
            let key = record.key().as_str().to_string();
            charged_ref
                .lock()
                .unwrap()
                .push((order.order_id, order.amount_cents, key));
            Ok::<(), ProcessError>(())
        },
        config(KeySource::Message),
    );
    // AND one good order, and one whose amount is a card number in the wrong field type
    let good = message("m-1", r#"{"order_id":"o-1","amount_cents":4200}"#);
    let bad = message(
        "m-2",
        r#"{"order_id":"o-2","amount_cents":"4111111111111111"}"#,
    );

    // WHEN the batch is handled
    let handled = handle(&c, &[good, bad]).await;

    // THEN the good order was charged once with its parsed fields and its key
    let charged = charged.lock().unwrap().clone();
    assert_eq!(charged.len(), 1, "{charged:?}");
    assert_eq!((charged[0].0.as_str(), charged[0].1), ("o-1", 4200));
    assert_eq!(
        Some(charged[0].2.as_str()),
        handled.report_of("m-1").unwrap().key.as_deref()
    );
    // AND the bad one is a permanent failure with its own code, fast-tracked to the DLQ
    assert_eq!(
        handled.outcome_of("m-2"),
        Some(&Outcome::DeadLettered {
            code: BODY_NOT_PARSED.into(),
            stamped: true
        })
    );
    assert!(handled.response.batch_item_failures.is_empty());
    let sends = queue.sends();
    assert_eq!(sends.len(), 1);
    let (stamp, _) = RedriveMeta::read(&sends[0].1.attributes, "m-2");
    let last = stamp.last_error.unwrap();
    assert_eq!(last.code, BODY_NOT_PARSED);
    // naming the field's path and serde's error category, never the body's content
    assert!(
        last.message.starts_with(
            "the body does not parse: a value that does not fit the type (wrong type, unknown value or missing field) at `amount_cents` (line 1 column"
        ),
        "{}",
        last.message
    );
    assert!(!last.message.contains("4111"), "{}", last.message);
    assert_eq!(queue.deletes(), ["handle-m-2"]);
}

#[tokio::test]
async fn a_typed_event_record_without_receipt_handle_or_body_fails_alone() {
    // GIVEN an SqsEvent as the runtime deserializes it: one good record, one without a
    // receipt handle, one without a body, one without a messageId
    let (store, queue, processor) = (
        FakeStore::new(),
        FakeQueue::new(),
        ScriptedProcessor::default(),
    );
    let c = Consumer::new(&store, &queue, &processor, config(KeySource::Message));
    let mut records = event(&[
        message("m-1", "a"),
        message("m-2", "b"),
        message("m-3", "c"),
        message("m-4", "d"),
    ]);
    records["Records"][1]
        .as_object_mut()
        .unwrap()
        .remove("receiptHandle");
    records["Records"][2]
        .as_object_mut()
        .unwrap()
        .remove("body");
    records["Records"][3]
        .as_object_mut()
        .unwrap()
        .remove("messageId");
    let typed: SqsEvent = serde_json::from_value(records).unwrap();

    // WHEN it is handled
    let handled = c.handle_event(&typed, in_a_minute()).await;

    // THEN only the records that cannot be read are malformed; those with an id are reported
    assert_eq!(
        outcomes(&handled),
        [
            ("m-1", "processed"),
            ("m-2", "malformed"),
            ("m-3", "malformed"),
            ("", "malformed")
        ]
    );
    assert_eq!(handled.response.failed_ids(), ["m-2", "m-3"]);
    assert_eq!(processor.total_calls(), 1);
}

/// A processor with a result, implemented by hand, that records what its duplicates got.
#[derive(Default)]
struct IssueReceipts {
    issued: Mutex<Vec<String>>,
    duplicates: Mutex<Vec<(String, Option<Receipt>)>>,
}

impl Processor<Order> for IssueReceipts {
    type Output = Receipt;

    async fn process(&self, order: Order, _record: &Record) -> Result<Receipt, ProcessError> {
        let receipt_id = format!("r-{}-{}", order.order_id, order.amount_cents);
        self.issued.lock().unwrap().push(receipt_id.clone());
        Ok(Receipt { receipt_id })
    }

    async fn duplicate(&self, stored: Option<Receipt>, record: &Record) {
        self.duplicates
            .lock()
            .unwrap()
            .push((record.message_id().to_string(), stored));
    }
}

#[tokio::test]
async fn a_duplicate_gets_the_stored_result() {
    // GIVEN an order processed once, its receipt returned
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = std::sync::Arc::new(IssueReceipts::default());
    let c = Consumer::new(
        &store,
        &queue,
        processor.clone(),
        config(pointer("/order_id")),
    );
    let first = handle(
        &c,
        &[message("m-1", r#"{"order_id":"o-1","amount_cents":7}"#)],
    )
    .await;
    let receipt = Receipt {
        receipt_id: "r-o-1-7".into(),
    };
    assert_eq!(
        first.report_of("m-1").unwrap().result.as_deref(),
        Some(r#"{"receipt_id":"r-o-1-7"}"#)
    );
    // stored with the COMPLETED record
    let key = first.report_of("m-1").unwrap().key.clone().unwrap();
    let record = store.record_of_key(&key).unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(
        record.result.as_deref(),
        Some(r#"{"receipt_id":"r-o-1-7"}"#)
    );

    // WHEN the same order comes again in another message
    let again = handle(
        &c,
        &[message("m-9", r#"{"order_id":"o-1","amount_cents":7}"#)],
    )
    .await;

    // THEN it is not processed again, and its duplicate hook and report get the receipt
    assert_eq!(again.outcome_of("m-9"), Some(&Outcome::Duplicate));
    assert_eq!(processor.issued.lock().unwrap().len(), 1);
    assert_eq!(
        *processor.duplicates.lock().unwrap(),
        [("m-9".to_string(), Some(receipt))]
    );
    assert_eq!(
        again.report_of("m-9").unwrap().result.as_deref(),
        Some(r#"{"receipt_id":"r-o-1-7"}"#)
    );
}

#[tokio::test]
async fn a_twin_in_the_same_batch_gets_the_first_records_result() {
    // GIVEN two records of one key in one batch, the step returning a value
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(50));
    processor.script("o-1", [Step::Return(json!({"receipt": "r-1"}))]);
    let c = Consumer::new(&store, &queue, &processor, config(pointer("/id")));
    let batch = [
        message("m-1", r#"{"id":"o-1"}"#),
        message("m-2", r#"{"id":"o-1","copy":true}"#),
    ];

    // WHEN the batch is handled
    let handled = handle(&c, &batch).await;

    // THEN the key was processed once and the twin got its result
    assert_eq!(
        outcomes(&handled),
        [("m-1", "processed"), ("m-2", "duplicate")]
    );
    assert_eq!(processor.calls("o-1"), 1);
    assert_eq!(
        processor.duplicates(),
        [("m-2".to_string(), Some(json!({"receipt": "r-1"})))]
    );
    assert_eq!(
        handled.report_of("m-2").unwrap().result.as_deref(),
        Some(r#"{"receipt":"r-1"}"#)
    );
}

#[tokio::test]
async fn no_result_and_a_result_too_large_store_nothing_and_the_key_still_completes() {
    // GIVEN a step that returns nothing for one key and an oversized value for another
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default();
    let huge = "x".repeat(MAX_STORED_RESULT_BYTES);
    processor.script("big", [Step::Return(json!({ "blob": huge }))]);
    let c = Consumer::new(&store, &queue, &processor, config(pointer("/id")));
    let batch = [
        message("m-1", r#"{"id":"none"}"#),
        message("m-2", r#"{"id":"big"}"#),
    ];

    // WHEN they are processed, and delivered again
    let first = handle(&c, &batch).await;
    let again = handle(&c, &batch).await;

    // THEN both are COMPLETED without a stored result, and the duplicates get none
    assert_eq!(
        outcomes(&first),
        [("m-1", "processed"), ("m-2", "processed")]
    );
    for report in &first.records {
        let record = store.record_of_key(report.key.as_deref().unwrap()).unwrap();
        assert_eq!(record.status, Status::Completed, "{report:?}");
        assert_eq!(record.result, None, "{report:?}");
    }
    assert!(first.records.iter().all(|r| r.result.is_none()));
    assert_eq!(
        outcomes(&again),
        [("m-1", "duplicate"), ("m-2", "duplicate")]
    );
    let mut duplicates = processor.duplicates();
    duplicates.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        duplicates,
        [("m-1".to_string(), None), ("m-2".to_string(), None)]
    );
    assert_eq!(processor.total_calls(), 2);
}

#[tokio::test]
async fn a_raw_body_processor_gets_the_string_as_delivered() {
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let seen = Mutex::new(Vec::new());
    let seen_ref = &seen;
    let c = Consumer::new(
        &store,
        &queue,
        move |body: redrive_consumer::RawBody, _record: Record| async move {
            seen_ref.lock().unwrap().push(body.into_string());
            Ok::<(), ProcessError>(())
        },
        config(KeySource::Message),
    );
    let handled = handle(&c, &[message("m-1", "not json \u{1F4E6}")]).await;
    assert_eq!(outcomes(&handled), [("m-1", "processed")]);
    assert_eq!(*seen.lock().unwrap(), ["not json \u{1F4E6}"]);
}
