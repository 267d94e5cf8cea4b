//! The adaptive circuit (issue 14): the engine on the port fakes through the whole cycle
//! (closed, open by itself, half-open with a canary, watch, closed with a ramp, reopened with a
//! longer cool-down, operator override, a store that fails), and the durable record in
//! DynamoDB on moto (conditional writes, the engine's record after a run).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use redrive_shared::Attributes;
use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Event, Override, State};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_tests::{QueueSet, moto, queue_depth, unique_name};
use redriver::aws::{CloudWatch, SqsQueue};
use redriver::circuit::{
    CircuitStore, DynamoDbCircuitStore, MemoryCircuitStore, SaveOutcome, set_override,
};
use redriver::fake::{FakeCloudWatch, FakeSqs};
use redriver::ports::PortError;
use redriver::{DrainRequest, Engine, Settings, StopReason, Summary};

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";
const T0: i64 = 1_800_000_000_000;
const SEC: i64 = 1000;

thread_local! {
    // `#[tokio::test]` runs each test on its own thread: one clock per test.
    static NOW: Cell<i64> = const { Cell::new(T0) };
}

fn clock() -> i64 {
    NOW.with(Cell::get)
}

fn advance(ms: i64) {
    NOW.with(|c| c.set(c.get() + ms));
}

type FakeEngine =
    Engine<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, Arc<MemoryCircuitStore>>;

/// Window 120 s, cool-down 60 s (up to 240 s), canary 3, opens at 3 bounced copies and half.
const CIRCUIT: &[(&str, &str)] = &[
    ("CIRCUIT_TABLE", "redrive-circuit"),
    ("CIRCUIT_WINDOW_SECONDS", "120"),
    ("CIRCUIT_COOLDOWN_SECONDS", "60"),
    ("CIRCUIT_MAX_COOLDOWN_SECONDS", "240"),
    ("CIRCUIT_CANARY_SIZE", "3"),
    ("CIRCUIT_MIN_BOUNCES", "3"),
    ("CIRCUIT_THRESHOLD", "0.5"),
];

fn config(pairs: &[(&str, &str)]) -> RedriverConfig {
    let mut map: HashMap<String, String> = [
        ("DLQ_URL", DLQ),
        ("SOURCE_QUEUE_URL", SRC),
        ("POISON_QUEUE_URL", POISON),
        // One pipeline, so that batches come in a known order.
        ("MAX_CONCURRENT_BATCHES", "1"),
        ("BACKOFF_BASE_SECONDS", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in pairs {
        map.insert(k.to_string(), v.to_string());
    }
    RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned())).expect("valid test config")
}

fn setup(
    pairs: &[(&str, &str)],
) -> (
    Arc<FakeSqs>,
    Arc<FakeCloudWatch>,
    Arc<MemoryCircuitStore>,
    FakeEngine,
) {
    let sqs = FakeSqs::new();
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    let cw = FakeCloudWatch::new();
    let store = MemoryCircuitStore::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw.clone(), config(pairs))
        .with_settings(Settings {
            retry_base: Duration::from_millis(1),
            receive_wait_seconds: 0,
            ..Settings::default()
        })
        .with_seed(3)
        .with_clock(clock)
        .with_circuit(store.clone());
    (sqs, cw, store, engine)
}

fn request(max: u32) -> DrainRequest {
    DrainRequest {
        max_messages: max,
        dry_run: false,
        deadline: None,
        trigger_alarm: None,
    }
}

/// A copy redriven at `at_ms` (attempt 1) that came back to the DLQ.
fn bounced_attrs(original: &str, at_ms: i64) -> Attributes {
    let mut attrs = Attributes::new();
    RedriveMeta {
        attempt: 1,
        first_redriven_at: Some(rfc3339_from_millis(at_ms)),
        last_redriven_at: Some(rfc3339_from_millis(at_ms)),
        ..RedriveMeta::fresh(original)
    }
    .write_into(&mut attrs);
    attrs
}

fn push_bounced(sqs: &FakeSqs, n: usize, at_ms: i64) {
    for i in 0..n {
        sqs.push(
            DLQ,
            &format!("bounced-{i}"),
            bounced_attrs(&format!("orig-{i}"), at_ms),
            None,
        );
    }
}

fn push_fresh(sqs: &FakeSqs, n: usize) {
    for i in 0..n {
        sqs.push(DLQ, &format!("fresh-{i}"), Attributes::new(), None);
    }
}

/// The downstream is still down: every copy on the source is consumed, fails, and comes back
/// to the DLQ as it was sent (SQS's own move keeps the attributes). Returns how many.
async fn bounce_back(sqs: &Arc<FakeSqs>) -> usize {
    use redriver::ports::{HandleEntry, Queue};
    let mut moved = 0;
    loop {
        let got = sqs.receive(SRC, 10, 0, 30).await.expect("receive");
        if got.is_empty() {
            return moved;
        }
        let entries: Vec<HandleEntry> = got
            .iter()
            .enumerate()
            .map(|(i, m)| HandleEntry {
                id: i.to_string(),
                receipt_handle: m.receipt_handle.clone(),
            })
            .collect();
        for m in &got {
            sqs.push(DLQ, &m.body, m.attributes.clone(), None);
        }
        sqs.delete_batch(SRC, &entries).await.expect("delete");
        moved += got.len();
    }
}

fn attempts_on_dlq(sqs: &FakeSqs) -> Vec<u32> {
    let mut a: Vec<u32> = sqs
        .messages(DLQ)
        .iter()
        .map(|m| RedriveMeta::read(&m.attributes, &m.message_id).0.attempt)
        .collect();
    a.sort();
    a
}

fn circuit_of(s: &Summary) -> (State, &'static str, u64) {
    let c = s
        .circuit
        .as_ref()
        .expect("the response carries the circuit");
    (c.state, c.plan, c.bounced)
}

// ---------------------------------------------------------------- the engine on the fakes

#[tokio::test]
async fn bounced_copies_open_the_circuit_and_every_message_stays_on_the_dlq_unspent() {
    let (sqs, cw, store, engine) = setup(CIRCUIT);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    push_fresh(&sqs, 4);
    let s = engine.run(&request(100)).await;
    assert_eq!(s.redriven + s.isolated, 0, "{s:?}");
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(circuit_of(&s).0, State::Open);
    assert_eq!(sqs.len(SRC), 0, "nothing redriven");
    assert_eq!(
        sqs.depth_visible(DLQ),
        10,
        "released at once, not left invisible"
    );
    assert_eq!(
        attempts_on_dlq(&sqs),
        [0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
        "no attempt spent"
    );
    let stored = store.get(DLQ).expect("the record was written");
    assert_eq!(stored.record.state, State::Open);
    assert_eq!(stored.record.history.len(), 1);
    assert!(
        stored.record.history[0].reason.contains("bounce-back rate"),
        "{:?}",
        stored.record.history
    );
    let published = cw.published.lock().unwrap();
    let c = published
        .last()
        .unwrap()
        .2
        .circuit
        .expect("circuit metrics");
    assert!(c.open);
    assert_eq!((c.transitions, c.bounced), (1, 6));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["circuit"]["state"], "open");
    assert_eq!(json["stoppedBecause"], "circuit-open");
}

#[tokio::test]
async fn a_full_outage_cycle_open_canary_watch_close_and_ramp() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    // Closed: drains fresh messages (no bounced copies), counts what it redrove.
    push_fresh(&sqs, 10);
    let s = engine.run(&request(100)).await;
    assert_eq!(
        (s.redriven, circuit_of(&s)),
        (10, (State::Closed, "drain", 0))
    );
    // The downstream is down: they all come back.
    advance(20 * SEC);
    assert_eq!(bounce_back(&sqs).await, 10);
    let s = engine.run(&request(100)).await;
    assert_eq!(circuit_of(&s), (State::Open, "drain", 10));
    assert_eq!(s.redriven, 0);
    assert_eq!(
        attempts_on_dlq(&sqs),
        [1; 10],
        "the second attempt was not spent"
    );

    // Open: nothing received at all during the cool-down.
    advance(30 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(
        (s.received, s.stopped_because),
        (0, StopReason::CircuitOpen)
    );
    assert_eq!(circuit_of(&s).1, "hold");

    // Cool-down over: a canary of 3, nothing else.
    advance(31 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(
        (s.redriven, circuit_of(&s)),
        (3, (State::HalfOpen, "canary", 3)),
        "copies from before the open are bounced, not canary, copies"
    );
    assert_eq!(sqs.len(SRC), 3);
    assert_eq!(s.circuit.as_ref().unwrap().budget, Some(3));
    let canary = store.get(DLQ).unwrap().record.canary.expect("canary out");
    assert_eq!(canary.sent, 3);

    // The downstream recovered: the canary is consumed. Watch runs redrive nothing.
    let _ = sqs.messages(SRC);
    advance(10 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!((s.received, s.redriven), (7, 0));
    assert_eq!(
        circuit_of(&s),
        (State::HalfOpen, "watch", 7),
        "old bounced copies are seen, none of the canary's"
    );
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(sqs.depth_visible(DLQ), 7, "watched messages are released");

    // The window passes with no canary copy back: closed, and the ramp starts at 2 x 3.
    advance(120 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(
        (s.redriven, circuit_of(&s)),
        (6, (State::Closed, "drain", 0))
    );
    assert_eq!(s.circuit.as_ref().unwrap().budget, Some(6));
    let s = engine.run(&request(100)).await;
    assert_eq!(s.circuit.as_ref().unwrap().budget, Some(12));
    assert_eq!(s.redriven, 1, "the rest");
    assert_eq!(sqs.len(DLQ), 0);
    let history: Vec<(State, State)> = store
        .get(DLQ)
        .unwrap()
        .record
        .history
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        history,
        [
            (State::Closed, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Closed)
        ]
    );
}

#[tokio::test]
async fn a_canary_that_bounces_reopens_the_circuit_with_a_doubled_cool_down() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    let mut open = CircuitRecord::new(&CircuitSettings::default(), T0 - 200 * SEC);
    open.state = State::Open;
    open.cooldown_ms = 60 * SEC;
    store.put(DLQ, open);
    push_fresh(&sqs, 8);
    let s = engine.run(&request(100)).await;
    assert_eq!((s.redriven, circuit_of(&s).1), (3, "canary"));
    // Still down: the canary comes back.
    advance(15 * SEC);
    assert_eq!(bounce_back(&sqs).await, 3);
    let s = engine.run(&request(100)).await;
    assert_eq!((circuit_of(&s).0, s.redriven), (State::Open, 0));
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    let record = store.get(DLQ).unwrap().record;
    assert_eq!(record.cooldown_ms, 120 * SEC, "doubled");
    assert!(
        record
            .history
            .last()
            .unwrap()
            .reason
            .contains("canary bounced")
    );
    assert_eq!(sqs.len(DLQ), 8, "everything still on the DLQ");
    // The first cool-down length is not enough any more.
    advance(61 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(circuit_of(&s).1, "hold");
    advance(60 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(circuit_of(&s).1, "canary");
}

#[tokio::test]
async fn the_operator_holds_it_open_and_closes_it_whatever_the_measurements() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    let settings = engine.config.circuit.as_ref().unwrap().settings;
    set_override(&store, DLQ, &settings, Override::Open, clock())
        .await
        .unwrap();
    push_fresh(&sqs, 5);
    advance(3600 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!((s.received, circuit_of(&s).1), (0, "hold"));
    assert_eq!(s.circuit.as_ref().unwrap().operator, Override::Open);
    // Forced closed: bounced copies are redriven and the circuit stays closed.
    set_override(&store, DLQ, &settings, Override::Closed, clock())
        .await
        .unwrap();
    push_bounced(&sqs, 5, clock() - 10 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!((s.redriven, circuit_of(&s).0), (10, State::Closed));
}

#[tokio::test]
async fn an_operator_write_during_a_run_is_kept_and_the_run_applied_on_top() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    push_fresh(&sqs, 4);
    store.interfere_once(Event::Override {
        now: clock(),
        mode: Override::Open,
    });
    let s = engine.run(&request(100)).await;
    assert_eq!(s.redriven, 4);
    let record = store.get(DLQ).unwrap().record;
    assert_eq!(
        record.operator,
        Override::Open,
        "the operator's write survives"
    );
    assert_eq!(record.counts().0, 4, "and the run's copies are counted");
    assert_eq!(circuit_of(&s).0, State::Open);
}

#[tokio::test]
async fn a_circuit_record_that_cannot_be_read_keeps_the_circuit_open() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    push_fresh(&sqs, 4);
    for _ in 0..3 {
        store.fail_next(PortError {
            operation: "GetItem",
            code: "AccessDeniedException".into(),
            message: "injected".into(),
            retryable: false,
        });
    }
    let s = engine.run(&request(100)).await;
    assert_eq!(
        (s.received, s.stopped_because),
        (0, StopReason::CircuitOpen)
    );
    assert_eq!(sqs.len(DLQ), 4);
}

#[tokio::test]
async fn without_circuit_table_the_drain_is_todays() {
    // A store but no CIRCUIT_TABLE: off; the response has no circuit field.
    let (sqs, cw, store, engine) = setup(&[]);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!((s.redriven, s.stopped_because), (6, StopReason::QueueEmpty));
    assert!(s.circuit.is_none());
    assert!(serde_json::to_value(&s).unwrap().get("circuit").is_none());
    assert!(store.get(DLQ).is_none());
    assert!(cw.published.lock().unwrap()[0].2.circuit.is_none());
    // CIRCUIT_TABLE but no store (an engine built without one): off too.
    let sqs = FakeSqs::new();
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    let cw = FakeCloudWatch::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw, config(CIRCUIT)).with_clock(clock);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    let s = engine.run(&request(100)).await;
    assert_eq!(s.redriven, 6);
    assert!(s.circuit.is_none());
}

#[tokio::test]
async fn a_dry_run_reports_the_circuit_but_writes_nothing() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    let s = engine
        .run(&DrainRequest {
            dry_run: true,
            ..request(100)
        })
        .await;
    assert_eq!(circuit_of(&s).0, State::Open, "what would happen");
    assert!(store.get(DLQ).is_none(), "nothing durable");
    assert_eq!(sqs.depth_visible(DLQ), 6);
}

// ---------------------------------------------------------------- DynamoDB on moto

async fn circuit_table(ddb: &aws_sdk_dynamodb::Client) -> String {
    let name = unique_name("circuit");
    ddb.create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("queue")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("queue")
                .key_type(KeyType::Hash)
                .build()
                .expect("name and key type are set"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateTable {name}: {e:?}"));
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_the_record_is_written_only_on_the_version_read() {
    let ddb = moto().dynamodb().await;
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: circuit_table(&ddb).await,
    };
    let settings = CircuitSettings::default();
    let q = "https://sqs.us-east-1.amazonaws.com/000000000000/some-dlq";
    assert_eq!(store.load(q).await.unwrap(), None);
    let mut record = CircuitRecord::new(&settings, T0);
    assert_eq!(
        store.save(q, &record, None).await.unwrap(),
        SaveOutcome::Saved { version: 1 }
    );
    // A second creator loses.
    assert_eq!(
        store.save(q, &record, None).await.unwrap(),
        SaveOutcome::Conflict
    );
    record.record_redriven(&settings, T0, 5);
    assert_eq!(
        store.save(q, &record, Some(1)).await.unwrap(),
        SaveOutcome::Saved { version: 2 }
    );
    // A writer that read version 1 loses.
    assert_eq!(
        store.save(q, &record, Some(1)).await.unwrap(),
        SaveOutcome::Conflict
    );
    let stored = store.load(q).await.unwrap().unwrap();
    assert_eq!((stored.version, stored.record), (2, record));
    // The operator's override through the same path, readable in the item.
    let (r, t) = set_override(&store, q, &settings, Override::Open, T0 + 1000)
        .await
        .unwrap();
    assert_eq!((r.state, t.len()), (State::Open, 1));
    let item = ddb
        .get_item()
        .table_name(&store.table)
        .key(
            "queue",
            aws_sdk_dynamodb::types::AttributeValue::S(q.into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    assert_eq!(text("state").as_deref(), Some("open"));
    assert_eq!(text("operator").as_deref(), Some("open"));
    assert_eq!(
        item.get("version")
            .and_then(|v| v.as_n().ok())
            .map(String::as_str),
        Some("3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_the_engine_opens_the_circuit_and_the_table_says_so() {
    use aws_sdk_sqs::types::MessageAttributeValue;
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let cw = moto().cloudwatch().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let table = circuit_table(&ddb).await;
    let mut env: HashMap<String, String> = queues.redriver_env().into_iter().collect();
    env.insert("METRIC_NAMESPACE".into(), unique_name("ns"));
    for (k, v) in CIRCUIT {
        env.insert(k.to_string(), v.to_string());
    }
    env.insert("CIRCUIT_TABLE".into(), table.clone());
    let config = RedriverConfig::from_env(&Env(move |k: &str| env.get(k).cloned())).unwrap();
    let cloudwatch = CloudWatch { client: cw };
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table,
    };
    let engine = Engine::new(
        SqsQueue {
            client: sqs.clone(),
        },
        cloudwatch.clone(),
        cloudwatch,
        config,
    )
    .with_settings(Settings {
        retry_base: Duration::from_millis(10),
        ..Settings::default()
    })
    .with_circuit(Some(store.clone()));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for i in 0..5 {
        let meta = RedriveMeta {
            attempt: 2,
            last_redriven_at: Some(rfc3339_from_millis(now - 20 * SEC)),
            ..RedriveMeta::fresh(&format!("orig-{i}"))
        };
        sqs.send_message()
            .queue_url(&queues.dlq_url)
            .message_body(format!("b-{i}"))
            .message_attributes(
                "x-redrive",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(meta.to_json())
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    let s = engine.run(&request(100)).await;
    assert_eq!(s.redriven, 0, "{s:?}");
    assert_eq!(circuit_of(&s).0, State::Open);
    assert_eq!(queue_depth(&sqs, &queues.source_url).await, 0);
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 5, "all kept");
    let stored = store
        .load(&queues.dlq_url)
        .await
        .unwrap()
        .expect("the record is in DynamoDB");
    assert_eq!((stored.version, stored.record.state), (1, State::Open));
    // The next run holds: nothing received.
    let s = engine.run(&request(100)).await;
    assert_eq!((s.received, circuit_of(&s).1), (0, "hold"));
}
