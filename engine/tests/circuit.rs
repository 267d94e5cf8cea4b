//! The adaptive circuit: the engine on the port fakes through the whole cycle
//! (closed, open by itself, half-open with a canary, watch, closed with a ramp, reopened with a
//! longer cool-down, operator override, a store that fails), and the durable record in
//! DynamoDB on moto (conditional writes, the engine's record after a run).

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use common::{DLQ, POISON, SRC, queues, settings};
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::circuit::{
    CircuitStore, DynamoDbCircuitStore, MemoryCircuitStore, SaveOutcome, Stored, VersionedWrite,
    acquire_lease, set_override,
};
use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::ports::PortError;
use redrive_engine::{DrainRequest, Engine, Settings, StopReason, Summary};
use redrive_shared::Attributes;
use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Event, Override, State};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_tests::{
    QueueSet, attr_string, create_circuit_table, moto, queue_depth, send_raw, unique_name,
};

use redrive_engine::fake::clock::{START as T0, advance, now as clock};

const SEC: i64 = 1000;

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

/// One pipeline, so that batches come in a known order; no backoff; then `pairs`.
fn config(pairs: &[(&str, &str)]) -> RedriverConfig {
    let base = [
        ("MAX_CONCURRENT_BATCHES", "1"),
        ("BACKOFF_BASE_SECONDS", "0"),
    ];
    common::config(&[&base[..], pairs].concat())
}

fn setup(
    pairs: &[(&str, &str)],
) -> (
    Arc<FakeSqs>,
    Arc<FakeCloudWatch>,
    Arc<MemoryCircuitStore>,
    FakeEngine,
) {
    let config = config(pairs);
    let sqs = queues(&config);
    let cw = FakeCloudWatch::new();
    let store = MemoryCircuitStore::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw.clone(), config)
        .with_settings(settings())
        .with_seed(3)
        .with_clock(clock)
        .with_circuit(store.clone());
    (sqs, cw, store, engine)
}

fn request(max: u32) -> DrainRequest {
    DrainRequest::new(max)
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
    use redrive_engine::ports::{HandleEntry, Queue, ReceiveRequest};
    let mut moved = 0;
    loop {
        let got = sqs
            .receive(SRC, ReceiveRequest::new(10, 0, 30))
            .await
            .expect("receive");
        if got.is_empty() {
            return moved;
        }
        let entries = HandleEntry::numbered(got.iter().map(|m| m.receipt_handle.clone()));
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

// The engine on the fakes.

#[tokio::test]
async fn bounced_copies_open_the_circuit_and_every_message_stays_on_the_dlq_unspent() {
    let (sqs, cw, store, engine) = setup(CIRCUIT);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    push_fresh(&sqs, 4);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (0, 0, 0, 0),
        "{s:?}"
    );
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(
        (s.redriven, circuit_of(&s)),
        (10, (State::Closed, "drain", 0))
    );
    // The downstream is down: they all come back.
    advance(20 * SEC);
    assert_eq!(bounce_back(&sqs).await, 10);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(circuit_of(&s), (State::Open, "drain", 10));
    assert_eq!(s.redriven, 0);
    assert_eq!(
        attempts_on_dlq(&sqs),
        [1; 10],
        "the second attempt was not spent"
    );

    // Open: nothing received at all during the cool-down.
    advance(30 * SEC);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(
        (s.received, s.stopped_because),
        (0, StopReason::CircuitOpen)
    );
    assert_eq!(circuit_of(&s).1, "hold");

    // Cool-down over: a canary of 3, nothing else.
    advance(31 * SEC);
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(
        (s.received, s.redriven),
        (0, 0),
        "watched messages are not received: received = redriven + isolated + failed"
    );
    assert_eq!(
        circuit_of(&s),
        (State::HalfOpen, "watch", 7),
        "old bounced copies are seen, none of the canary's"
    );
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(sqs.depth_visible(DLQ), 7, "watched messages are released");

    // The window passes with no canary copy back: closed, and the ramp starts at 2 x 3.
    advance(120 * SEC);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(
        (s.redriven, circuit_of(&s)),
        (6, (State::Closed, "drain", 0))
    );
    assert_eq!(s.circuit.as_ref().unwrap().budget, Some(6));
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!((s.redriven, circuit_of(&s).1), (3, "canary"));
    // Still down: the canary comes back.
    advance(15 * SEC);
    assert_eq!(bounce_back(&sqs).await, 3);
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(circuit_of(&s).1, "hold");
    advance(60 * SEC);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(circuit_of(&s).1, "canary");
}

#[tokio::test]
async fn a_canarys_copies_go_out_without_their_backoff_delay_so_the_window_can_judge_them() {
    // A backoff of 600 s (the window is 120 s): a delayed canary copy could not come back
    // within the window, and the canary would pass untried.
    let mut pairs = CIRCUIT.to_vec();
    pairs.push(("BACKOFF_BASE_SECONDS", "600"));
    pairs.push(("BACKOFF_JITTER", "none"));
    let (sqs, _cw, store, engine) = setup(&pairs);
    let mut open = CircuitRecord::new(&CircuitSettings::default(), T0 - 200 * SEC);
    open.state = State::Open;
    open.cooldown_ms = 60 * SEC;
    store.put(DLQ, open);
    push_fresh(&sqs, 5);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!((s.redriven, circuit_of(&s).1), (3, "canary"));
    let delays: Vec<Option<u32>> = sqs.messages(SRC).iter().map(|m| m.delay_seconds).collect();
    assert_eq!(delays, [Some(0); 3], "canary copies are not delayed");
    // A closed circuit's drain keeps the backoff.
    let (sqs, _cw, _store, engine) = setup(&pairs);
    push_fresh(&sqs, 2);
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!((s.redriven, circuit_of(&s).1), (2, "drain"));
    assert!(
        sqs.messages(SRC)
            .iter()
            .all(|m| m.delay_seconds.is_some_and(|d| d >= 600)),
        "{:?}",
        sqs.messages(SRC)
            .iter()
            .map(|m| m.delay_seconds)
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_canary_by_hand_sends_its_copies_undelayed_and_the_next_drain_delays_again() {
    // `redrive drain --canary N` (DrainRequest::canary), with or without the circuit.
    let pairs = [("BACKOFF_BASE_SECONDS", "600"), ("BACKOFF_JITTER", "none")];
    let (sqs, _cw, _store, engine) = setup(&pairs);
    push_fresh(&sqs, 5);
    let s = engine.run(&request(5).canary(2)).await.unwrap();
    assert_eq!(s.redriven, 2);
    let delays: Vec<Option<u32>> = sqs.messages(SRC).iter().map(|m| m.delay_seconds).collect();
    assert_eq!(delays, [Some(0); 2], "the canary's copies are not delayed");
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(s.redriven, 3);
    let delays: Vec<Option<u32>> = sqs.messages(SRC).iter().map(|m| m.delay_seconds).collect();
    assert_eq!(
        delays,
        [Some(0), Some(0), Some(600), Some(600), Some(600)],
        "the rest keeps its backoff"
    );
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!((s.received, circuit_of(&s).1), (0, "hold"));
    assert_eq!(s.circuit.as_ref().unwrap().operator, Override::Open);
    // Forced closed: bounced copies are redriven and the circuit stays closed.
    set_override(&store, DLQ, &settings, Override::Closed, clock())
        .await
        .unwrap();
    push_bounced(&sqs, 5, clock() - 10 * SEC);
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
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
async fn a_write_that_committed_but_lost_its_answer_is_applied_once() {
    // The SDK retried the conditional write (it fails its condition: the version moved, by
    // the write itself), or its retries ran out (a timeout after the commit).
    let lost_answers = [
        Ok(SaveOutcome::Conflict),
        Err(PortError::new(
            "PutItem",
            "TimeoutError",
            "injected: committed, answer lost",
            true,
        )),
    ];
    for lost in lost_answers {
        let (sqs, _cw, store, engine) = setup(CIRCUIT);
        push_fresh(&sqs, 4);
        store.lose_next_answer(lost.clone());
        let s = engine.run(&request(100)).await.unwrap();
        assert_eq!(s.redriven, 4, "{lost:?}");
        let stored = store.get(DLQ).unwrap();
        assert_eq!(stored.record.counts(), (4, 0), "{lost:?}: counted once");
        // And the next run's counts land on top, once.
        push_fresh(&sqs, 2);
        store.lose_next_answer(lost.clone());
        engine.run(&request(100)).await.unwrap();
        assert_eq!(store.get(DLQ).unwrap().record.counts(), (6, 0), "{lost:?}");
    }
}

#[tokio::test]
async fn a_circuit_record_that_cannot_be_read_keeps_the_circuit_open() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    push_fresh(&sqs, 4);
    for _ in 0..3 {
        store.fail_next(PortError::new(
            "GetItem",
            "AccessDeniedException",
            "injected",
            false,
        ));
    }
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!(s.redriven, 6);
    assert!(s.circuit.is_none());
}

#[tokio::test]
async fn a_dry_run_reports_the_circuit_but_writes_nothing() {
    let (sqs, _cw, store, engine) = setup(CIRCUIT);
    push_bounced(&sqs, 6, T0 - 30 * SEC);
    let s = engine.run(&common::dry_run(100)).await.unwrap();
    assert_eq!(circuit_of(&s).0, State::Open, "what would happen");
    assert!(store.get(DLQ).is_none(), "nothing durable");
    assert_eq!(sqs.depth_visible(DLQ), 6);
}

// DynamoDB on moto.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_the_record_is_written_only_on_the_version_read() {
    let ddb = moto().dynamodb().await;
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: create_circuit_table(&ddb).await,
    };
    let settings = CircuitSettings::default();
    let q = "https://sqs.us-east-1.amazonaws.com/000000000000/some-dlq";
    assert_eq!(store.load(q).await.unwrap(), None);
    let mut record = CircuitRecord::new(&settings, T0);
    assert_eq!(
        store
            .save(q, VersionedWrite::new(&record, None))
            .await
            .unwrap(),
        SaveOutcome::Saved { version: 1 }
    );
    // A second creator loses.
    assert_eq!(
        store
            .save(q, VersionedWrite::new(&record, None))
            .await
            .unwrap(),
        SaveOutcome::Conflict
    );
    record.record_redriven(&settings, T0, 5);
    assert_eq!(
        store
            .save(q, VersionedWrite::new(&record, Some(1)))
            .await
            .unwrap(),
        SaveOutcome::Saved { version: 2 }
    );
    // A writer that read version 1 loses.
    assert_eq!(
        store
            .save(q, VersionedWrite::new(&record, Some(1)))
            .await
            .unwrap(),
        SaveOutcome::Conflict
    );
    let stored = store.load(q).await.unwrap().unwrap();
    assert_eq!((stored.version, stored.record), (2, record));
    // The operator's override through the same path, readable in the item.
    let (r, t) = set_override(&store, q, &settings, Override::Open, T0 + 1000)
        .await
        .unwrap();
    assert_eq!((r.state, t.len()), (State::Open, 1));
    // Under the queue's ARN, whichever form named it.
    let key = store.key(q);
    assert_eq!(key, "arn:aws:sqs:us-east-1:000000000000:some-dlq");
    let item = ddb
        .get_item()
        .table_name(&store.table)
        .key("queue", aws_sdk_dynamodb::types::AttributeValue::S(key))
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

/// The DynamoDB store, whose first load meets the other taker's before either saves: both
/// read the same version and write on it, so only DynamoDB's condition can pick one.
struct LoadTogether {
    inner: DynamoDbCircuitStore,
    barrier: Arc<tokio::sync::Barrier>,
    waited: AtomicBool,
}

impl CircuitStore for LoadTogether {
    async fn load(&self, queue_url: &str) -> Result<Option<Stored>, PortError> {
        let stored = self.inner.load(queue_url).await;
        if !self.waited.swap(true, Ordering::SeqCst) {
            self.barrier.wait().await;
        }
        stored
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> Result<SaveOutcome, PortError> {
        self.inner.save(queue_url, write).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_of_two_executions_taking_a_free_lease_together_exactly_one_wins() {
    let ddb = moto().dynamodb().await;
    let inner = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: create_circuit_table(&ddb).await,
    };
    let settings = CircuitSettings::default();
    let q = "https://sqs.us-east-1.amazonaws.com/000000000000/leased-dlq";
    let ttl = 1920 * SEC;
    // No item yet (the first PutItem's attribute_not_exists), then an expired lease on an
    // existing item (the version condition).
    for (round, now) in [(1, T0), (2, T0 + ttl)] {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let taker = |holder: &'static str| {
            let store = LoadTogether {
                inner: inner.clone(),
                barrier: barrier.clone(),
                waited: AtomicBool::new(false),
            };
            let holder = format!("{holder}-{round}");
            async move {
                let got = acquire_lease(&store, q, &settings, &holder, now, ttl)
                    .await
                    .unwrap();
                (holder, got)
            }
        };
        let (a, b) = tokio::join!(taker("exec-a"), taker("exec-b"));
        let (winner, loser) = match (&a.1, &b.1) {
            (Ok(_), Err(_)) => (a, b),
            (Err(_), Ok(_)) => (b, a),
            _ => panic!("round {round}: exactly one may win: {a:?} {b:?}"),
        };
        assert_eq!(
            loser.1.as_ref().unwrap_err().holder,
            winner.0,
            "the loser names the winner"
        );
        let stored = inner.load(q).await.unwrap().unwrap();
        let lease = stored.record.lease.expect("the winner's lease");
        assert_eq!((lease.holder, lease.expires_at), (winner.0, now + ttl));
        assert_eq!(stored.version, round, "one write per round");
    }
}

/// `n` redriven copies back on the DLQ on moto (`b-0`, ... of chains `orig-0`, ...), at
/// `attempt`, redriven `ago_ms` before now.
async fn bounced_on_moto(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
    n: usize,
    attempt: u32,
    ago_ms: i64,
) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for i in 0..n {
        let meta = RedriveMeta {
            attempt,
            last_redriven_at: Some(rfc3339_from_millis(now - ago_ms)),
            ..RedriveMeta::fresh(&format!("orig-{i}"))
        };
        let attributes = [("x-redrive", attr_string(&meta.to_json()))];
        send_raw(sqs, dlq_url, &format!("b-{i}"), &attributes).await;
    }
}

type MotoEngine = Engine<SqsQueue, CloudWatch, CloudWatch, Option<DynamoDbCircuitStore>>;

/// The engine on moto's SQS and CloudWatch with the circuit (`CIRCUIT`) in `store`'s table.
async fn moto_engine(queues: &QueueSet, store: &DynamoDbCircuitStore) -> MotoEngine {
    let mut env: HashMap<String, String> = queues.redriver_env().into_iter().collect();
    env.insert("METRIC_NAMESPACE".into(), unique_name("ns"));
    env.insert("BACKOFF_BASE_SECONDS".into(), "0".into());
    // One pipeline, so that the first batch holds every bounced copy then on the DLQ.
    env.insert("MAX_CONCURRENT_BATCHES".into(), "1".into());
    for (k, v) in CIRCUIT {
        env.insert(k.to_string(), v.to_string());
    }
    env.insert("CIRCUIT_TABLE".into(), store.table.clone());
    let config = RedriverConfig::from_env(&Env(move |k: &str| env.get(k).cloned())).unwrap();
    let cloudwatch = CloudWatch {
        client: moto().cloudwatch().await,
    };
    Engine::new(
        SqsQueue {
            client: moto().sqs().await,
        },
        cloudwatch.clone(),
        cloudwatch,
        config,
    )
    .with_settings(Settings {
        retry_base: Duration::from_millis(10),
        ..Settings::default()
    })
    .with_circuit(Some(store.clone()))
}

/// Turns the answer of the next PutItem that succeeded into a 500: the write is committed, its
/// answer lost on the way back, and the SDK retries the same conditional write. (DynamoDB calls
/// of the client are made one at a time here.)
#[derive(Debug, Clone, Default)]
struct LoseNextPutItemAnswer {
    armed: Arc<AtomicBool>,
    put_in_flight: Arc<AtomicBool>,
}

impl Intercept for LoseNextPutItemAnswer {
    fn name(&self) -> &'static str {
        "LoseNextPutItemAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get("x-amz-target");
        self.put_in_flight.store(
            target.is_some_and(|t| t.ends_with(".PutItem")),
            Ordering::SeqCst,
        );
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.put_in_flight.load(Ordering::SeqCst)
            && context.response().status().is_success()
            && self.armed.swap(false, Ordering::SeqCst)
        {
            *context.response_mut().status_mut() = 500u16.try_into()?;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_committed_write_whose_answer_was_lost_counts_the_run_once() {
    // GIVEN a DynamoDB client that loses the answer of the next committed PutItem (the SDK
    // then retries the same conditional write, which fails its condition)
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let table = create_circuit_table(&ddb).await;
    let lose = LoseNextPutItemAnswer::default();
    let lossy = aws_sdk_dynamodb::Client::from_conf(
        ddb.config().to_builder().interceptor(lose.clone()).build(),
    );
    let store = DynamoDbCircuitStore {
        client: lossy,
        table,
    };
    let queues = QueueSet::create(&sqs, false, 3).await;
    for i in 0..4 {
        redrive_tests::send_raw(&sqs, &queues.dlq_url, &format!("fresh-{i}"), &[]).await;
    }
    let engine = moto_engine(&queues, &store).await;

    // WHEN a run redrives four and its record's write loses its answer
    lose.armed.store(true, Ordering::SeqCst);
    let s = engine.run(&request(100)).await.unwrap();

    // THEN the write happened (the answer was lost), and the run's copies count once
    assert!(!lose.armed.load(Ordering::SeqCst), "the answer was lost");
    assert_eq!(s.redriven, 4, "{s:?}");
    let stored = store.load(&queues.dlq_url).await.unwrap().unwrap();
    assert_eq!(stored.record.counts(), (4, 0), "{:?}", stored.record);
    // The operator's override through update() is applied once too.
    lose.armed.store(true, Ordering::SeqCst);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let settings = CircuitSettings::default();
    let (r, t) = set_override(&store, &queues.dlq_url, &settings, Override::Open, now)
        .await
        .unwrap();
    assert!(!lose.armed.load(Ordering::SeqCst), "the answer was lost");
    assert_eq!(
        (r.state, r.operator, t.len()),
        (State::Open, Override::Open, 1)
    );
    let stored = store.load(&queues.dlq_url).await.unwrap().unwrap();
    assert_eq!(
        stored.record.history.len(),
        1,
        "{:?}",
        stored.record.history
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_the_engine_opens_the_circuit_and_the_table_says_so() {
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: create_circuit_table(&ddb).await,
    };
    let engine = moto_engine(&queues, &store).await;
    bounced_on_moto(&sqs, &queues.dlq_url, 5, 2, 20 * SEC).await;
    let s = engine.run(&request(100)).await.unwrap();
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
    let s = engine.run(&request(100)).await.unwrap();
    assert_eq!((s.received, circuit_of(&s).1), (0, "hold"));
}

// The CLI on moto.

struct CliRun {
    code: i32,
    stdout: String,
    stderr: String,
}

impl CliRun {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// The `redrive` binary with moto's environment and nothing of the caller's AWS_*, re-driver
/// or circuit variables, plus `env`.
fn redrive(args: &[&str], env: &[(&str, &str)]) -> CliRun {
    let mut command = std::process::Command::new(redrive_tests::binary("redrive"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_")
            || k.starts_with("CIRCUIT_")
            || k.ends_with("_URL")
            || k.starts_with("MAX_")
            || k.starts_with("BACKOFF_")
            || k == "GUARD_ALARM_NAMES"
        {
            command.env_remove(k);
        }
    }
    command
        .args(args)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
    let mut full_env = moto().env();
    full_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    command.envs(redrive_tests::iam::cli_env(&full_env, args));
    let out = command.output().expect("running the redrive binary");
    CliRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn cli_circuit_without_a_table_names_the_setting() {
    let dlq = "https://sqs.us-east-1.amazonaws.com/000000000000/some-dlq";
    let run = redrive(&["circuit", "status", "--dlq", dlq], &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("CIRCUIT_TABLE"), "{}", run.stderr);
    assert!(run.stderr.contains("--circuit-table"), "{}", run.stderr);
    // A bad tunable is named too, before anything is touched.
    let run = redrive(
        &["drain", "--canary", "2", "--dlq", dlq],
        &[
            (
                "SOURCE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/000000000000/s",
            ),
            (
                "POISON_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/000000000000/p",
            ),
            ("CIRCUIT_THRESHOLD", "2"),
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("CIRCUIT_THRESHOLD"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_circuit_open_status_auto_show_the_state_and_its_history() {
    let ddb = moto().dynamodb().await;
    let table = create_circuit_table(&ddb).await;
    let dlq = format!(
        "https://sqs.us-east-1.amazonaws.com/000000000000/{}",
        unique_name("dlq")
    );
    let env = [("CIRCUIT_COOLDOWN_SECONDS", "1")];
    let base = |action: &'static str| {
        vec![
            "--json".to_string(),
            "circuit".to_string(),
            action.to_string(),
            "--dlq".to_string(),
            dlq.clone(),
            "--circuit-table".to_string(),
            table.clone(),
        ]
    };
    let call = |action: &'static str| {
        let args = base(action);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        redrive(&args, &env)
    };
    let status = tokio::task::block_in_place(|| call("status"));
    assert_eq!(status.code, 0, "{}", status.stderr);
    let j = status.json();
    assert_eq!(j["version"], serde_json::Value::Null, "no record yet");
    assert_eq!(j["record"]["state"], "closed");

    let open = tokio::task::block_in_place(|| call("open"));
    assert_eq!(open.code, 0, "{}", open.stderr);
    let j = open.json();
    assert_eq!(
        (j["record"]["state"].as_str(), j["version"].as_u64()),
        (Some("open"), Some(1))
    );
    assert_eq!(j["transitions"][0]["to"], "open");
    assert_eq!(j["nextRun"]["plan"], "hold", "held open whatever the time");

    let auto = tokio::task::block_in_place(|| call("auto"));
    assert_eq!(auto.json()["record"]["operator"], "auto");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let j = tokio::task::block_in_place(|| call("status")).json();
    assert_eq!(
        j["nextRun"]["plan"], "canary",
        "cool-down over: a canary first"
    );
    assert_eq!(j["record"]["history"].as_array().map(Vec::len), Some(1));

    // The text form shows the history.
    let text = tokio::task::block_in_place(|| {
        redrive(
            &[
                "circuit",
                "status",
                "--dlq",
                &dlq,
                "--circuit-table",
                &table,
            ],
            &env,
        )
    });
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("history"), "{}", text.stdout);
    assert!(text.stdout.contains("operator: open"), "{}", text.stdout);
}

/// Every item of the circuit table `table`: (key, version, state).
async fn circuit_items(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Vec<(String, u64, String)> {
    let out = ddb.scan().table_name(table).send().await.expect("Scan");
    let text = |i: &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>, k: &str| {
        i.get(k)
            .and_then(|v| v.as_s().or_else(|_| v.as_n()).ok())
            .cloned()
            .unwrap_or_default()
    };
    let mut items: Vec<_> = out
        .items()
        .iter()
        .map(|i| {
            (
                text(i, "queue"),
                text(i, "version").parse().unwrap_or(0),
                text(i, "state"),
            )
        })
        .collect();
    items.sort();
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_the_alarm_the_manual_drain_and_the_cli_share_one_record_however_they_name_the_dlq() {
    // GIVEN a DLQ holding three messages, one re-driver configured with its URL in AWS's host
    // form (the alarm's drain) and one with the URL moto answers (a manual drain)
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let table = create_circuit_table(&ddb).await;
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: table.clone(),
    };
    let aws_form = format!(
        "https://sqs.us-east-1.amazonaws.com/{}/{}",
        queues.account(),
        queues.dlq_name
    );
    assert_ne!(aws_form, queues.dlq_url, "two host forms of one queue");
    let by_alarm = moto_engine(
        &QueueSet {
            dlq_url: aws_form.clone(),
            ..queues.clone()
        },
        &store,
    )
    .await;
    let by_hand = moto_engine(&queues, &store).await;
    fill_dlq(&sqs, &queues.dlq_url, 3).await;
    let cli = |action: &str, dlq: &str| {
        let run = tokio::task::block_in_place(|| {
            redrive(
                &[
                    "--json",
                    "circuit",
                    action,
                    "--dlq",
                    dlq,
                    "--circuit-table",
                    &table,
                ],
                // The operator's policy for this stack's queues, whichever form names them.
                &[
                    ("DLQ_URL", queues.dlq_url.as_str()),
                    ("SOURCE_QUEUE_URL", queues.source_url.as_str()),
                    ("POISON_QUEUE_URL", queues.poison_url.as_str()),
                ],
            )
        });
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()
    };
    // The drains an alarm notification and a manual `{"maxMessages": 10}` ask for.
    let alarm = DrainRequest {
        trigger_alarm: Some("dlq-depth".to_string()),
        ..DrainRequest::configured(&by_alarm.config, None)
    };
    let manual = DrainRequest {
        max_messages: 10,
        ..DrainRequest::configured(&by_hand.config, None)
    };

    // WHEN the operator holds the circuit open by the queue's name
    cli("open", &queues.dlq_name);

    // THEN the alarm's drain and the manual drain both hold: nothing received
    let s = by_alarm.run(&alarm).await.expect("the alarm's drain");
    assert_eq!(
        (s.received, s.stopped_because),
        (0, StopReason::CircuitOpen),
        "{s:?}"
    );
    let s = by_hand.run(&manual).await.expect("the manual drain");
    assert_eq!(
        (s.received, s.stopped_because),
        (0, StopReason::CircuitOpen),
        "{s:?}"
    );
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 3, "all kept");

    // WHEN the operator forces it closed by the queue's ARN
    let j = cli("close", &queues.dlq_arn);
    assert_eq!(
        (j["record"]["state"].as_str(), j["version"].as_u64()),
        (Some("closed"), Some(2)),
        "the record the name opened: {j}"
    );

    // THEN the alarm's drain redrives, and its counts land in that same record
    let s = by_alarm.run(&alarm).await.expect("the alarm's drain");
    assert_eq!(s.redriven, 3, "{s:?}");
    let j = cli("status", &queues.dlq_url);
    assert_eq!(j["record"]["operator"], "closed", "{j}");
    assert_eq!(j["version"].as_u64(), Some(3), "{j}");
    assert_eq!(j["key"], queues.dlq_arn.as_str(), "{j}");
    assert_eq!(
        circuit_items(&ddb, &table).await,
        [(queues.dlq_arn.clone(), 3, "closed".to_string())],
        "one record, under the queue's ARN"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_record_kept_under_the_dlqs_url_is_found_and_moved_under_its_arn() {
    // GIVEN an open circuit recorded under the DLQ's URL (the key before), at version 4
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let table = create_circuit_table(&ddb).await;
    let settings = CircuitSettings::default();
    let mut record = CircuitRecord::new(&settings, 0);
    record.apply(
        &settings,
        &Event::Override {
            now: 0,
            mode: Override::Open,
        },
    );
    let json = serde_json::to_string(&record).unwrap();
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
    ddb.put_item()
        .table_name(&table)
        .item("queue", s(&queues.dlq_url))
        .item(
            "version",
            aws_sdk_dynamodb::types::AttributeValue::N("4".into()),
        )
        .item("state", s("open"))
        .item("operator", s("open"))
        .item("record", s(&json))
        .item("updatedAt", s("2026-01-01T00:00:00Z"))
        .send()
        .await
        .expect("PutItem");
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: table.clone(),
    };
    fill_dlq(&sqs, &queues.dlq_url, 2).await;

    // WHEN the upgraded re-driver drains
    let engine = moto_engine(&queues, &store).await;
    let s = engine.run(&request(100)).await.unwrap();

    // THEN the circuit is still open (nothing received), and the record is under the ARN,
    // its version kept; the CLI by name finds the same one
    assert_eq!((s.received, circuit_of(&s).1), (0, "hold"), "{s:?}");
    let stored = store.load(&queues.dlq_arn).await.unwrap().expect("moved");
    assert_eq!((stored.version, stored.record.state), (4, State::Open));
    let items = circuit_items(&ddb, &table).await;
    assert!(
        items.contains(&(queues.dlq_arn.clone(), 4, "open".to_string())),
        "{items:?}"
    );
    let (r, _) = set_override(&store, &queues.dlq_arn, &settings, Override::Closed, 1)
        .await
        .unwrap();
    assert_eq!(r.state, State::Closed);
    assert_eq!(
        store.load(&queues.dlq_url).await.unwrap().unwrap().version,
        5
    );
}

async fn fill_dlq(sqs: &aws_sdk_sqs::Client, dlq: &str, n: usize) {
    for i in 0..n {
        sqs.send_message()
            .queue_url(dlq)
            .message_body(format!("m-{i}"))
            .send()
            .await
            .unwrap();
    }
}

/// The downstream is down: copies that reach the source go back to the DLQ as they are.
async fn bounce_source_to_dlq(sqs: aws_sdk_sqs::Client, source: String, dlq: String) {
    loop {
        let got = sqs
            .receive_message()
            .queue_url(&source)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for m in got.messages.unwrap_or_default() {
            sqs.send_message()
                .queue_url(&dlq)
                .message_body(m.body.clone().unwrap_or_default())
                .set_message_attributes(m.message_attributes.clone())
                .send()
                .await
                .unwrap();
            sqs.delete_message()
                .queue_url(&source)
                .receipt_handle(m.receipt_handle.unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
    }
}

fn drain_args<'a>(q: &'a QueueSet, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--json"];
    args.extend(q.drain_args());
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drain_canary_stops_when_its_copies_come_back() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    fill_dlq(&sqs, &q.dlq_url, 5).await;
    let mover = tokio::spawn(bounce_source_to_dlq(
        sqs.clone(),
        q.source_url.clone(),
        q.dlq_url.clone(),
    ));
    let ns = unique_name("ns");
    let run = tokio::task::block_in_place(|| {
        redrive(
            &drain_args(&q, &["--canary", "2", "--canary-window", "20"]),
            &[("BACKOFF_BASE_SECONDS", "0"), ("METRIC_NAMESPACE", &ns)],
        )
    });
    mover.abort();
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let j = run.json();
    assert_eq!(j["redriven"], 2);
    assert_eq!(j["canary"]["failed"], true, "{j}");
    assert_eq!(j["canary"]["bounced"], 1 + 1, "{j}");
    assert!(
        j["canary"]["waitedSeconds"].as_u64().unwrap() < 20,
        "stopped at once"
    );
    // Nothing beyond the canary was sent: 3 untouched + 2 bounced on the DLQ.
    assert_eq!(queue_depth(&sqs, &q.dlq_url).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drain_canary_that_stays_away_drains_the_rest() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    fill_dlq(&sqs, &q.dlq_url, 5).await;
    let ns = unique_name("ns");
    let run = tokio::task::block_in_place(|| {
        redrive(
            &drain_args(&q, &["--canary", "2", "--canary-window", "2"]),
            &[("BACKOFF_BASE_SECONDS", "0"), ("METRIC_NAMESPACE", &ns)],
        )
    });
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let j = run.json();
    assert_eq!(j["canary"]["failed"], false, "{j}");
    assert_eq!(j["canary"]["bounced"], 0);
    assert_eq!(j["redriven"], 5, "the canary and then the rest");
    assert_eq!(queue_depth(&sqs, &q.dlq_url).await, 0);
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 5);
}

// The Lambda.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lambda_with_circuit_table_opens_its_circuit_on_bounced_copies() {
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let table = create_circuit_table(&ddb).await;
    bounced_on_moto(&sqs, &queues.dlq_url, 4, 1, 30 * SEC).await;
    let mut env = moto().env();
    env.extend(queues.redriver_env());
    env.push(("METRIC_NAMESPACE".into(), unique_name("ns")));
    env.push(("CIRCUIT_TABLE".into(), table.clone()));
    // One receive at a time: two pipelines can each take two of the four bounced copies, and a
    // batch of two is below the circuit's minimum of bounces, so the first would be redriven
    // before the second opens the circuit (under load, on moto). The four in one batch is what
    // this test proves.
    env.push(("MAX_CONCURRENT_BATCHES".into(), "1".into()));
    let watch = redrive_tests::LambdaWatch::start(&["redriver"], &env).await;
    let response = watch
        .invoke("redriver", &serde_json::json!({}))
        .await
        .expect("invoke");
    assert_eq!(response["redriven"], 0, "{response}");
    assert_eq!(response["stoppedBecause"], "circuit-open");
    assert_eq!(response["circuit"]["state"], "open");
    assert_eq!(response["circuit"]["bounced"], 4);
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 4);
    let store = DynamoDbCircuitStore { client: ddb, table };
    let stored = store.load(&queues.dlq_url).await.unwrap().expect("written");
    assert_eq!(stored.record.state, State::Open);
}
