//! Triage holds against the emulator (SQS and DynamoDB on moto): a held group stays on the DLQ
//! while the re-driver drains the rest; the hold ends by count or by time, and the group then
//! drains; a book that cannot be read drains nothing.

use std::collections::HashMap;
use std::time::Duration;

use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::engine::TriageBooks;
use redrive_engine::triage_store::{self, DynamoDbTriageStore};
use redrive_engine::{DrainRequest, Engine};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::ATTRIBUTE_NAME;
use redrive_shared::triage::state::State;
use redrive_tests::{QueueSet, attr_string, create_circuit_table, moto, queue_depth, send_raw};

use redrive_tests::{transiently_failed as transient, triage_group as group_of};

struct World {
    sqs: aws_sdk_sqs::Client,
    q: QueueSet,
    store: DynamoDbTriageStore,
    held: String,
}

impl World {
    /// Three messages of the 503 group, two of the 429 group; the book knows both.
    async fn new() -> Self {
        let sqs = moto().sqs().await;
        let ddb = moto().dynamodb().await;
        let q = QueueSet::create(&sqs, false, 3).await;
        let store = DynamoDbTriageStore {
            client: ddb.clone(),
            table: create_circuit_table(&ddb).await,
        };
        let mut ids = HashMap::new();
        for (n, code) in redrive_tests::FAILED_ORDERS {
            let meta = transient(n, code);
            ids.insert(code, group_of(&meta));
            send_raw(
                &sqs,
                &q.dlq_url,
                "{}",
                &[(ATTRIBUTE_NAME, attr_string(&meta.to_json()))],
            )
            .await;
        }
        triage_store::update(&store, &q.dlq_url, |b| {
            for (code, id) in &ids {
                b.observe(id, code, None, 1, None, 0);
            }
            Ok(())
        })
        .await
        .unwrap();
        Self {
            held: ids["HTTP_503"].clone(),
            sqs,
            q,
            store,
        }
    }

    async fn engine(&self, books: Option<TriageBooks>) -> Engine<SqsQueue, CloudWatch, CloudWatch> {
        let map: HashMap<String, String> = self
            .q
            .redriver_env()
            .into_iter()
            .chain([("BACKOFF_BASE_SECONDS".to_string(), "0".to_string())])
            .collect();
        let config = RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned())).unwrap();
        Engine::over_sdk(self.sqs.clone(), moto().cloudwatch().await, config).with_triage(books)
    }

    fn books(&self) -> Option<TriageBooks> {
        Some(TriageBooks::DynamoDb(self.store.clone()))
    }

    async fn state(&self) -> State {
        let (_, book) =
            redrive_engine::triage_store::TriageStore::load(&self.store, &self.q.dlq_url)
                .await
                .unwrap()
                .unwrap();
        book.get(&self.held).unwrap().state
    }
}

fn request() -> DrainRequest {
    DrainRequest::new(100)
}

#[tokio::test]
async fn a_held_group_stays_on_the_dlq_while_the_rest_drains_until_its_count_is_reached() {
    // GIVEN the 503 group held until three of its messages were left
    let w = World::new().await;
    triage_store::update(&w.store, &w.q.dlq_url, |b| {
        b.hold(&w.held, "ops", None, Some(3), 0)
    })
    .await
    .unwrap();
    let engine = w.engine(w.books()).await;

    // WHEN the re-driver drains
    let s = engine.drain(&request()).await.unwrap();

    // THEN the 429s went back to the source, the 503s stayed on the DLQ, untouched
    assert_eq!((s.redriven, s.on_hold, s.isolated), (2, 3, 0), "{s:?}");
    assert_eq!(queue_depth(&w.sqs, &w.q.source_url).await, 2);
    assert_eq!(queue_depth(&w.sqs, &w.q.dlq_url).await, 3);
    // AND three distinct messages were left: the hold ended, audited
    assert_eq!(w.state().await, State::Acknowledged);

    // WHEN it drains again, the group drains too
    let s = engine.drain(&request()).await.unwrap();
    assert_eq!((s.redriven, s.on_hold), (3, 0), "{s:?}");
    assert_eq!(queue_depth(&w.sqs, &w.q.dlq_url).await, 0);
    assert_eq!(queue_depth(&w.sqs, &w.q.source_url).await, 5, "lost 0");
}

#[tokio::test]
async fn a_hold_by_time_ends_when_its_time_runs_out() {
    let w = World::new().await;
    let until = redrive_engine::now_ms() + 4_000;
    triage_store::update(&w.store, &w.q.dlq_url, |b| {
        b.hold(&w.held, "ops", Some(until), None, redrive_engine::now_ms())
    })
    .await
    .unwrap();
    let engine = w.engine(w.books()).await;
    let s = engine.drain(&request()).await.unwrap();
    assert_eq!((s.redriven, s.on_hold), (2, 3), "{s:?}");
    assert_eq!(
        w.state().await,
        State::Held,
        "a hold by time is not ended by count"
    );
    tokio::time::sleep(Duration::from_millis(
        (until - redrive_engine::now_ms()).max(0) as u64 + 200,
    ))
    .await;
    let s = engine.drain(&request()).await.unwrap();
    assert_eq!((s.redriven, s.on_hold), (3, 0), "{s:?}");
}

#[tokio::test]
async fn a_book_that_cannot_be_read_drains_nothing() {
    let w = World::new().await;
    let missing = TriageBooks::DynamoDb(DynamoDbTriageStore {
        client: w.store.client.clone(),
        table: "no-such-table".into(),
    });
    let s = w
        .engine(Some(missing))
        .await
        .drain(&request())
        .await
        .unwrap();
    assert_eq!((s.received, s.redriven), (0, 0), "{s:?}");
    assert_eq!(queue_depth(&w.sqs, &w.q.dlq_url).await, 5);
    // Without triage, the same DLQ drains whole.
    let s = w.engine(None).await.drain(&request()).await.unwrap();
    assert_eq!(s.redriven, 5, "{s:?}");
}

#[tokio::test]
async fn a_book_kept_under_the_dlqs_url_is_found_and_copied_under_its_arn() {
    // GIVEN the 503 group held in a book stored under the DLQ's URL (the key before), at
    // version 4, and none under its ARN
    let w = World::new().await;
    let text = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
    let arn_key = format!("triage#{}", w.q.dlq_arn);
    let (_, mut book) = redrive_engine::triage_store::TriageStore::load(&w.store, &w.q.dlq_url)
        .await
        .unwrap()
        .unwrap();
    book.hold(&w.held, "ops", None, Some(3), 0).unwrap();
    w.store
        .client
        .delete_item()
        .table_name(&w.store.table)
        .key("queue", text(&arn_key))
        .send()
        .await
        .expect("DeleteItem");
    let url_key = format!("triage#{}", w.q.dlq_url);
    w.store
        .client
        .put_item()
        .table_name(&w.store.table)
        .item("queue", text(&url_key))
        .item(
            "version",
            aws_sdk_dynamodb::types::AttributeValue::N("4".into()),
        )
        .item("record", text(&serde_json::to_string(&book).unwrap()))
        .item("updatedAt", text("2026-01-01T00:00:00Z"))
        .send()
        .await
        .expect("PutItem");

    // WHEN the upgraded re-driver drains
    let s = w.engine(w.books()).await.drain(&request()).await.unwrap();

    // THEN the hold is honoured: the 503s stay on the DLQ, the 429s drain
    assert_eq!((s.redriven, s.on_hold), (2, 3), "{s:?}");
    assert_eq!(queue_depth(&w.sqs, &w.q.dlq_url).await, 3);
    // AND the book is under the ARN now, written on from version 4 (the count reached ended
    // the hold), found by the ARN as by the URL; the old item is left as it was
    let (version, book) = redrive_engine::triage_store::TriageStore::load(&w.store, &w.q.dlq_arn)
        .await
        .unwrap()
        .expect("copied under the ARN");
    assert!(
        version > 4,
        "written on from the copy's version 4: {version}"
    );
    assert_eq!(book.get(&w.held).unwrap().state, State::Acknowledged);
    assert_eq!(w.state().await, State::Acknowledged);
    let old = w
        .store
        .client
        .get_item()
        .table_name(&w.store.table)
        .key("queue", text(&url_key))
        .send()
        .await
        .unwrap()
        .item
        .expect("the old item is left");
    assert_eq!(
        old.get("version")
            .and_then(|v| v.as_n().ok())
            .map(String::as_str),
        Some("4")
    );
}
