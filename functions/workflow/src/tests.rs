//! Unit tests of the tasks over the engine's fakes.

use std::collections::HashMap;
use std::sync::Arc;

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::StopReason;
use redrive_shared::circuit::{CircuitRecord, CircuitSettings};
use redrive_shared::config::{ConfigError, Env};
use serde_json::{Value, json};

use crate::tally::drain_plan;
use crate::workflow::{now_ms, to_value};
use crate::*;
use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::ports::{EntryFailure, SendEntry};
use redrive_shared::Attributes;
use redrive_shared::meta::RedriveMeta;
use std::time::Duration;

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";
const SRC_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo";

type TestWorkflow = Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>>;

/// The configuration read from exactly these variables.
fn config_of(vars: &[(&str, &str)]) -> Result<WorkflowConfig, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    WorkflowConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
}

/// The configuration of the DLQ, its source and its poison queue, with `pairs` on top.
fn config(pairs: &[(&str, &str)]) -> Result<WorkflowConfig, ConfigError> {
    let mut vars = vec![
        ("DLQ_URL", DLQ),
        ("SOURCE_QUEUE_URL", SRC),
        ("POISON_QUEUE_URL", POISON),
    ];
    vars.extend_from_slice(pairs);
    config_of(&vars)
}

fn setup(pairs: &[(&str, &str)]) -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestWorkflow) {
    setup_on(FakeSqs::new(), pairs)
}

fn setup_on(
    sqs: Arc<FakeSqs>,
    pairs: &[(&str, &str)],
) -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestWorkflow) {
    let cfg = config(pairs).expect("valid test config");
    for q in [
        cfg.redriver.dlq_url.as_str(),
        cfg.redriver
            .source_queue_url
            .as_ref()
            .expect("a source")
            .as_str(),
        cfg.redriver.poison_queue_url.as_str(),
    ] {
        sqs.create_queue(q);
    }
    workflow_on(sqs, cfg)
}

/// A workflow of `cfg` on `sqs` that retries at once and does not long-poll, its jitter seeded.
fn workflow_on(
    sqs: Arc<FakeSqs>,
    cfg: WorkflowConfig,
) -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestWorkflow) {
    let cw = FakeCloudWatch::new();
    let wf = Workflow::new(sqs.clone(), cw.clone(), cw.clone(), cfg)
        .with_settings(redrive_engine::engine::Settings {
            retry_base: Duration::from_millis(1),
            receive_wait_seconds: 0,
            ..redrive_engine::engine::Settings::default()
        })
        .with_seed(7);
    (sqs, cw, wf)
}

/// A run of up to `max_messages` in `mode`: one drain, a standard queue, no trigger alarm.
fn run_of(mode: Mode, max_messages: u32) -> Run {
    Run {
        max_messages,
        dry_run: false,
        mode,
        drains: 1,
        fifo: false,
        trigger_alarm: None,
    }
}

/// The totals `run` starts from: its whole budget remaining.
fn start_totals(run: &Run) -> Totals {
    Totals {
        remaining: run.max_messages,
        ..Totals::default()
    }
}

type FakeWorkflow<C> = Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, C>;

/// The `start` task of the execution `arn` with the operator's `input`, through the handler.
async fn start_task<C: CircuitStore + Clone + Send>(
    wf: &FakeWorkflow<C>,
    arn: &str,
    input: Value,
) -> Value {
    wf.handle(
        json!({"action": "start", "input": input, "executionArn": arn, "stateMachineArn": "sm"}),
        None,
    )
    .await
    .unwrap()
}

/// The `summary` task of `run` with `totals`, through the handler.
async fn summary_task<C: CircuitStore + Clone + Send>(
    wf: &FakeWorkflow<C>,
    run: &Run,
    totals: &Totals,
) -> Value {
    wf.handle(
        json!({"action": "summary", "run": run, "totals": totals}),
        None,
    )
    .await
    .unwrap()
}

/// The `checkCircuit` task, through the handler.
async fn check_circuit<C: CircuitStore + Clone + Send>(wf: &FakeWorkflow<C>) -> Value {
    wf.handle(json!({"action": "checkCircuit"}), None)
        .await
        .unwrap()
}

/// A workflow with the long backoff, and on its DLQ a message that will wait and a poison one.
fn setup_waiting_and_poison() -> (Arc<FakeSqs>, TestWorkflow) {
    let (sqs, _, wf) = setup(LONG);
    sqs.push(DLQ, "later", Attributes::new(), None);
    sqs.push(DLQ, "poison", permanent(), None);
    (sqs, wf)
}

/// A fixed 2,000 s backoff: 900 s of DelaySeconds and 1,100 s held on the DLQ.
const LONG: &[(&str, &str)] = &[
    ("BACKOFF_BASE_SECONDS", "2000"),
    ("BACKOFF_MAX_SECONDS", "43200"),
    ("BACKOFF_JITTER", "none"),
];

fn permanent() -> Attributes {
    let mut a = Attributes::new();
    redrive_tests::permanently_failed("m-perm").write_into(&mut a);
    a
}

fn attempt_of(a: &Attributes, id: &str) -> u32 {
    RedriveMeta::read(a, id).0.attempt
}

#[test]
fn backoff_cap_is_twelve_hours_here_and_900_s_for_drains() {
    let c = config(LONG).unwrap();
    assert_eq!(c.wait_backoff.max(), 43_200);
    assert_eq!(
        c.redriver.backoff.max(),
        900,
        "scale-out drains keep SQS's limit"
    );
    let e = config(&[("BACKOFF_MAX_SECONDS", "43201")]).unwrap_err();
    assert_eq!(e.variable, "BACKOFF_MAX_SECONDS");
    assert!(e.to_string().contains("43200"), "{e}");
    // A hop of 0 s would hand a waiting message straight back.
    let e = config(&[("WORKFLOW_MAX_DELAY_SECONDS", "0")]).unwrap_err();
    assert_eq!(e.variable, "WORKFLOW_MAX_DELAY_SECONDS");
    let e = config(&[("WORKFLOW_BATCH_SIZE", "41")]).unwrap_err();
    assert_eq!(e.variable, "WORKFLOW_BATCH_SIZE");
    // The settings of the hold-and-search design fail init rather than be silently ignored.
    for gone in ["WORKFLOW_SEARCH_RECEIVES", "WORKFLOW_HOLD_SLACK_SECONDS"] {
        let e = config(&[(gone, "10")]).unwrap_err();
        assert_eq!(e.variable, gone);
        assert!(e.to_string().contains("no longer"), "{e}");
    }
    let e = config(&[("DLQ_URL", "nope")]).unwrap_err();
    assert_eq!(
        e.variable, "DLQ_URL",
        "the re-driver's own rules still apply"
    );
}

/// The `x-redrive` of a message on a queue.
fn meta_of(m: &redrive_engine::fake::FakeMessage) -> RedriveMeta {
    RedriveMeta::read(&m.attributes, &m.message_id).0
}

/// `n` messages on the DLQ whose next attempt is `attempt`.
fn push_at_attempt(sqs: &FakeSqs, n: usize, attempt: u32, label: &str) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut a = Attributes::new();
            if attempt > 1 {
                RedriveMeta {
                    attempt: attempt - 1,
                    ..RedriveMeta::fresh(&format!("{label}-{i}"))
                }
                .write_into(&mut a);
            }
            sqs.push(DLQ, &format!("{label} {i}"), a, None)
        })
        .collect()
}

#[tokio::test]
async fn a_round_sends_a_long_wait_back_to_the_dlq_and_records_each_message_without_its_body() {
    let (sqs, _, wf) = setup(LONG);
    let body = "x".repeat(200_000);
    let id = sqs.push(DLQ, &body, Attributes::new(), None);
    let poison_id = sqs.push(DLQ, "poison", permanent(), None);
    let round = wf.redrive_batch(10, false, None).await.unwrap();
    assert_eq!(
        (round.received, round.waiting, round.isolated, round.failed),
        (2, 1, 1, 0)
    );
    let json = serde_json::to_string(&round).unwrap();
    assert!(!json.contains("xxxxxxxx"), "bodies never enter the state");
    assert!(json.len() < 4_000, "small state: {} bytes", json.len());
    let r = round.records.iter().find(|r| r.message_id == id).unwrap();
    assert_eq!(r.outcome, "waiting");
    assert_eq!(r.attempt, 1);
    assert_eq!(r.destination, "orders-dlq");
    assert_eq!(r.delay_seconds, Some(900));
    let not_before = r.not_before.as_deref().expect("notBefore in the record");
    let p = round
        .records
        .iter()
        .find(|r| r.message_id == poison_id)
        .unwrap();
    assert_eq!(p.outcome, "isolated:permanent-failure");
    assert_eq!(p.destination, "orders-poison");
    // The waiting message is a new message on the DLQ, acknowledged before the original went:
    // its attempt decided, its wait in x-redrive, delayed by one hop.
    let waiting = sqs.messages(DLQ);
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].body, body);
    assert_eq!(waiting[0].delay_seconds, Some(900));
    let meta = meta_of(&waiting[0]);
    assert_eq!(
        (meta.attempt, meta.original_message_id.as_str()),
        (1, id.as_str())
    );
    assert_eq!(
        meta.extra["notBefore"], not_before,
        "the same time in the record and the message"
    );
    assert!(sqs.is_empty(SRC));
    assert_eq!(sqs.messages(POISON)[0].body, "poison");
}

#[tokio::test]
async fn a_waiting_message_hops_until_it_is_due_then_goes_to_its_source_as_the_same_attempt() {
    // A 3 s backoff against a 1 s delay cap: three hops, then the redrive.
    let (sqs, _, wf) = setup(&[
        ("BACKOFF_BASE_SECONDS", "3"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
    ]);
    let id = sqs.push(DLQ, "order o-101", Attributes::new(), None);
    let began = std::time::Instant::now();
    let mut hops = 0;
    while sqs.is_empty(SRC) {
        assert!(began.elapsed() < Duration::from_secs(10), "never redriven");
        let round = wf.redrive_batch(10, false, None).await.unwrap();
        // Its first hop begins the wait (recorded); the later ones are counted apart.
        hops += round.waiting + round.hops;
        assert_eq!(round.failed, 0);
        assert_eq!(
            sqs.len(DLQ) + sqs.len(SRC),
            1,
            "always exactly one copy, in a queue"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "not before its wait"
    );
    assert!(hops >= 3, "{hops} hops");
    let copy = &sqs.messages(SRC)[0];
    let meta = meta_of(copy);
    assert_eq!(meta.attempt, 1, "hops are not attempts");
    assert_eq!(meta.original_message_id, id);
    assert!(!meta.extra.contains_key("notBefore"));
    assert_eq!(copy.delay_seconds, Some(0), "its wait is over");
    assert!(sqs.is_empty(DLQ));
}

#[tokio::test]
async fn a_long_wait_blocks_nothing_a_message_arriving_later_is_redriven_first() {
    let (sqs, _, wf) = setup(&[
        ("BACKOFF_BASE_SECONDS", "1"),
        ("BACKOFF_MULTIPLIER", "20"),
        ("BACKOFF_MAX_SECONDS", "43200"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
    ]);
    // Its next attempt is 2: a 20 s wait.
    push_at_attempt(&sqs, 1, 2, "slow");
    let round = wf.redrive_batch(10, false, None).await.unwrap();
    assert_eq!(round.waiting, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A new message, first attempt: 1 s.
    let fresh = sqs.push(DLQ, "new", Attributes::new(), None);
    let round = wf.redrive_batch(10, false, None).await.unwrap();
    assert_eq!(round.redriven, 1, "{round:?}");
    let on_source = sqs.messages(SRC);
    assert_eq!(on_source.len(), 1);
    assert_eq!(meta_of(&on_source[0]).original_message_id, fresh);
    assert_eq!(sqs.len(DLQ), 1, "the long wait goes on, on the DLQ");
}

#[tokio::test]
async fn a_message_whose_retention_ends_during_its_wait_is_in_a_queue_throughout() {
    // The DLQ keeps messages 3 s; the wait is 7 s, against a copy's delay of 5 s. Each hop is
    // a new message, and no hop is longer than the retention allows (half of 3 s, 1 s).
    let (sqs, _, wf) = setup(&[
        ("BACKOFF_BASE_SECONDS", "7"),
        ("BACKOFF_MAX_SECONDS", "43200"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "5"),
    ]);
    sqs.set_retention(DLQ, Duration::from_secs(3));
    sqs.push(DLQ, "order o-202", Attributes::new(), None);
    let began = std::time::Instant::now();
    while sqs.is_empty(SRC) {
        assert!(began.elapsed() < Duration::from_secs(15), "never redriven");
        let round = wf.redrive_batch(10, false, None).await.unwrap();
        if let Some(r) = round.records.iter().find(|r| r.outcome == "waiting") {
            assert!(r.delay_seconds.unwrap() <= 1, "{r:?}");
        }
        assert_eq!(sqs.len(DLQ) + sqs.len(SRC), 1, "expired or duplicated");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(began.elapsed() >= Duration::from_secs(7));
    assert_eq!(sqs.messages(SRC)[0].body, "order o-202");
}

#[tokio::test]
async fn two_thousand_visible_forty_long_waits_random_order_none_lost_none_twice() {
    // SQS's best-effort order: every receive is a random sample of the visible messages.
    let sqs = FakeSqs::seeded(20_261_127);
    let cfg = config(&[
        ("BACKOFF_BASE_SECONDS", "1"),
        ("BACKOFF_MULTIPLIER", "2"),
        ("BACKOFF_MAX_SECONDS", "43200"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
    ])
    .unwrap();
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    let cw = FakeCloudWatch::new();
    let settings = redrive_engine::engine::Settings {
        retry_base: Duration::from_millis(1),
        receive_wait_seconds: 0,
        ..redrive_engine::engine::Settings::default()
    };
    // Two executions at once on the one DLQ.
    let executions: Vec<TestWorkflow> = (0..2)
        .map(|seed| {
            Workflow::new(sqs.clone(), cw.clone(), cw.clone(), cfg.clone())
                .with_settings(settings.clone())
                .with_seed(seed)
        })
        .collect();
    // 40 whose next attempt is 4 (an 8 s wait, eight hops), 1,960 at their first (1 s).
    let mut expected: std::collections::HashSet<String> =
        push_at_attempt(&sqs, 40, 4, "long").into_iter().collect();
    expected.extend((0..40).map(|i| format!("long-{i}")));
    let long_ids: Vec<String> = (0..40).map(|i| format!("long-{i}")).collect();
    let mut fresh = push_at_attempt(&sqs, 1960, 1, "fresh");
    let mut all: Vec<String> = long_ids.clone();
    all.append(&mut fresh);
    let began = std::time::Instant::now();
    let (mut waiting, mut failed) = (0u64, 0u64);
    while sqs.len(SRC) < 2000 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "stuck at {}",
            sqs.len(SRC)
        );
        let rounds = futures_util::future::join_all(
            executions
                .iter()
                .map(|wf| wf.redrive_batch(40, false, None)),
        )
        .await;
        for r in rounds {
            let r = r.unwrap();
            waiting += r.waiting + r.hops;
            failed += r.failed;
        }
        if sqs.depth_visible(DLQ) == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut seen = std::collections::HashMap::new();
    for m in sqs.messages(SRC) {
        *seen.entry(meta_of(&m).original_message_id).or_insert(0u32) += 1;
    }
    let duplicated = seen.values().filter(|n| **n > 1).count();
    let lost = all.iter().filter(|id| !seen.contains_key(*id)).count();
    assert_eq!((lost, duplicated, failed), (0, 0, 0));
    assert!(sqs.is_empty(DLQ) && sqs.is_empty(POISON));
    assert!(waiting >= 40 * 8, "each long wait hopped: {waiting}");
    for m in sqs.messages(SRC) {
        let meta = meta_of(&m);
        let want = if meta.original_message_id.starts_with("long") {
            4
        } else {
            1
        };
        assert_eq!(meta.attempt, want, "{}", meta.original_message_id);
    }
    let _ = expected;
}

#[tokio::test]
async fn a_copy_not_acknowledged_leaves_the_message_on_the_dlq() {
    let (sqs, _, wf) = setup(&[]);
    sqs.push(DLQ, "order", Attributes::new(), None);
    sqs.fail_send_entries(|_, e: &SendEntry| {
        Some(EntryFailure {
            id: e.id.clone(),
            code: "InternalError".into(),
            message: "injected".into(),
            sender_fault: false,
        })
    });
    let round = wf.redrive_batch(10, false, None).await.unwrap();
    assert_eq!(round.failed, 1);
    assert_eq!(round.records[0].outcome, "send-failed:left-on-dlq");
    assert_eq!(
        sqs.len(DLQ),
        1,
        "not deleted: the copy was never acknowledged"
    );
    assert!(sqs.is_empty(SRC));
}

#[tokio::test]
async fn the_executions_answer_counts_the_messages_left_waiting() {
    // GIVEN a round that sent one message back to wait and isolated another
    let (_, wf) = setup_waiting_and_poison();
    let round = wf.redrive_batch(10, false, None).await.unwrap();
    let run = run_of(Mode::Messages, 10);
    let totals = tally(&run, start_totals(&run), Some(&to_value(&round)), &[]);
    assert_eq!(totals.waiting, 1);
    // WHEN the execution ends
    let answer = summary_task(&wf, &run, &totals).await;
    // THEN its answer accounts for every message received: the waiting one too
    let count = |k: &str| answer[k].as_u64().unwrap_or(0);
    assert_eq!(
        (
            count("received"),
            count("redriven"),
            count("isolated"),
            count("failed"),
            count("waiting")
        ),
        (2, 0, 1, 0, 1),
        "{answer}"
    );
}

#[tokio::test]
async fn dry_run_plans_and_releases() {
    let (sqs, wf) = setup_waiting_and_poison();
    let round = wf.redrive_batch(10, true, None).await.unwrap();
    assert_eq!((round.received, round.waiting, round.isolated), (2, 1, 1));
    let mut outcomes: Vec<&str> = round.records.iter().map(|r| r.outcome.as_str()).collect();
    outcomes.sort();
    assert_eq!(outcomes, ["plan:isolate:permanent-failure", "plan:wait"]);
    assert_eq!(sqs.depth_visible(DLQ), 2, "released at once");
    assert!(sqs.is_empty(SRC) && sqs.is_empty(POISON));
    let run = Run {
        dry_run: true,
        ..run_of(Mode::Messages, 10)
    };
    let t = tally(&run, start_totals(&run), Some(&to_value(&round)), &[]);
    assert_eq!((t.received, t.waiting, t.isolated), (2, 1, 1));
    assert!(!t.more, "a dry run plans one round");
}

#[test]
fn a_round_of_waits_only_is_progress_and_counts_apart() {
    let run = run_of(Mode::Messages, 100);
    let round = json!({"received": 40, "redriven": 0, "isolated": 0, "failed": 0, "waiting": 40, "stoppedBecause": "limit"});
    let t = tally(&run, start_totals(&run), Some(&round), &[]);
    assert_eq!((t.received, t.waiting, t.failed), (40, 40, 0));
    assert!(
        t.more,
        "the waits left the DLQ's visible set: the next round takes others"
    );
    assert_eq!(t.remaining, 60);
}

#[tokio::test]
async fn start_rejects_unknown_keys_and_plans_the_drains() {
    let (_, _, wf) = setup(&[]);
    let err = wf
        .handle(
            json!({"action": "start", "input": {"maxMesages": 5}, "executionArn": "e2", "stateMachineArn": "sm"}),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), "InvalidInput");
    assert!(err.to_string().contains("maxMesages"), "{err}");
    let started = start_task(
        &wf,
        "e1",
        json!({"maxMessages": 5, "mode": "scaleOut", "drains": 2}),
    )
    .await;
    assert_eq!(started["proceed"], true);
    assert_eq!(started["run"]["drains"], 2);
    assert_eq!(
        started["totals"]["drainPlan"],
        json!([
            {"index":0,"drains":2,"maxMessages":3,"dryRun":false,"circuit":null},
            {"index":1,"drains":2,"maxMessages":2,"dryRun":false,"circuit":null}
        ])
    );
}

/// One execution per DLQ: the lease in the circuit record (`lease.rs`).
mod lease {

    use super::*;
    use redrive_engine::circuit::MemoryCircuitStore;

    use redrive_engine::fake::clock::{START as T0, advance, now as clock};

    const TTL_MS: i64 = LEASE_TTL_SECONDS * 1000;

    type LeaseWorkflow =
        Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, Arc<MemoryCircuitStore>>;

    fn with_store() -> (Arc<FakeCloudWatch>, Arc<MemoryCircuitStore>, LeaseWorkflow) {
        let (_, cw, mut wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
        wf.clock = clock;
        let store = MemoryCircuitStore::new();
        (cw, store.clone(), wf.with_circuit(store))
    }

    async fn check(wf: &LeaseWorkflow, arn: &str) -> Value {
        wf.handle(json!({"action": "checkCircuit", "executionArn": arn}), None)
            .await
            .unwrap()
    }

    async fn summary(wf: &LeaseWorkflow, arn: &str, started: &Value) -> Value {
        wf.handle(
            json!({"action": "summary", "run": started["run"], "totals": started["totals"], "executionArn": arn}),
            None,
        )
        .await
        .unwrap()
    }

    fn holder(store: &MemoryCircuitStore) -> Option<(String, i64)> {
        store
            .get(DLQ)
            .and_then(|s| s.record.lease)
            .map(|l| (l.holder, l.expires_at))
    }

    fn assert_already_running(out: &Value, by: &str) {
        assert_eq!(out["proceed"], false, "{out}");
        assert_eq!(out["blockedBy"], by, "{out}");
        assert_eq!(out["totals"]["stoppedBecause"], "already-running", "{out}");
        assert_eq!(out["totals"]["more"], false, "{out}");
        assert_eq!(out["totals"]["drainPlan"], json!([]), "{out}");
    }

    #[tokio::test]
    async fn the_first_of_two_starts_holds_the_dlq_and_the_second_is_already_running() {
        let (_, store, wf) = with_store();
        let first = start_task(&wf, "e1", json!({})).await;
        assert_eq!(first["proceed"], true, "{first}");
        assert_eq!(first["blockedBy"], Value::Null, "{first}");
        assert_eq!(holder(&store), Some(("e1".into(), T0 + TTL_MS)));

        advance(1000);
        let second = start_task(&wf, "e2", json!({})).await;
        assert_already_running(&second, "e1");
        assert_eq!(
            holder(&store),
            Some(("e1".into(), T0 + TTL_MS)),
            "the holder's lease is untouched"
        );

        // A retried start of the holder (its answer lost) proceeds again, and renews.
        advance(1000);
        let retried = start_task(&wf, "e1", json!({})).await;
        assert_eq!(retried["proceed"], true, "{retried}");
        assert_eq!(holder(&store), Some(("e1".into(), T0 + 2000 + TTL_MS)));
    }

    #[tokio::test]
    async fn the_lease_outlives_the_longest_round_the_function_timeout_allows() {
        let (_, store, wf) = with_store();
        // A task function with a 900 s timeout: each invocation is given 900 s.
        let given = |s: u64| Some(tokio::time::Instant::now() + Duration::from_secs(s));
        // After the renewal: the rest of that invocation, then redriveBatch and tally, each
        // tried 5 times by the state machine (2, 4, 8 and 16 s apart), each attempt up to 900 s.
        let longest_round_ms = (900 + 2 * (5 * 900 + 30)) * 1000;
        let out = wf
            .handle(
                json!({"action": "start", "input": {}, "executionArn": "e1", "stateMachineArn": "sm"}),
                given(900),
            )
            .await
            .unwrap();
        assert_eq!(out["proceed"], true, "{out}");
        let (_, expires) = holder(&store).unwrap();
        assert!(
            expires - T0 >= longest_round_ms,
            "a lease of {} s is lost mid-round",
            (expires - T0) / 1000
        );
        // checkCircuit renews it by the same rule.
        advance(1000);
        wf.handle(
            json!({"action": "checkCircuit", "executionArn": "e1"}),
            given(900),
        )
        .await
        .unwrap();
        let (_, renewed) = holder(&store).unwrap();
        assert!(renewed - (T0 + 1000) >= longest_round_ms);
        // A short timeout never gets less than the floor.
        assert_eq!(lease_ttl_seconds(30), LEASE_TTL_SECONDS);
        assert_eq!(lease_ttl_seconds(900), 11 * 900 + 120);
        // A short timeout never gets less than the floor.
    }

    #[tokio::test]
    async fn an_expired_lease_goes_to_the_next_execution() {
        let (_, store, wf) = with_store();
        assert_eq!(start_task(&wf, "e1", json!({})).await["proceed"], true);
        // e1 stopped without its summary: its lease lives for the TTL, then anyone takes it.
        advance(TTL_MS - 1);
        assert_already_running(&start_task(&wf, "e2", json!({})).await, "e1");
        advance(1);
        let e3 = start_task(&wf, "e3", json!({})).await;
        assert_eq!(e3["proceed"], true, "{e3}");
        assert_eq!(holder(&store), Some(("e3".into(), T0 + 2 * TTL_MS)));
    }

    #[tokio::test]
    async fn the_summary_releases_the_lease_so_the_next_start_proceeds_at_once() {
        let (cw, store, wf) = with_store();
        let first = start_task(&wf, "e1", json!({"triggerAlarm": "orders-dlq-depth"})).await;
        // The blocked execution's summary re-arms the alarm and leaves the holder's lease.
        let blocked = start_task(&wf, "e2", json!({"triggerAlarm": "orders-dlq-depth"})).await;
        assert_already_running(&blocked, "e1");
        cw.set_state("orders-dlq-depth", "ALARM");
        let s = summary(&wf, "e2", &blocked).await;
        assert_eq!(s["stoppedBecause"], "already-running", "{s}");
        assert_eq!(s["received"], 0, "{s}");
        assert_eq!(
            cw.set_ok_calls.lock().unwrap().as_slice(),
            ["orders-dlq-depth"]
        );
        assert_eq!(holder(&store).map(|h| h.0), Some("e1".into()));

        summary(&wf, "e1", &first).await;
        assert_eq!(holder(&store), None);
        let next = start_task(&wf, "e3", json!({})).await;
        assert_eq!(next["proceed"], true, "{next}");
    }

    #[tokio::test]
    async fn check_circuit_renews_the_lease_and_a_lost_lease_stops_the_round() {
        let (_, store, wf) = with_store();
        start_task(&wf, "e1", json!({})).await;
        advance(600_000);
        let ok = check(&wf, "e1").await;
        assert_eq!(
            (ok["open"].clone(), ok["leaseLost"].clone()),
            (json!(false), json!(false)),
            "{ok}"
        );
        assert_eq!(
            holder(&store),
            Some(("e1".into(), T0 + 600_000 + TTL_MS)),
            "renewed"
        );

        // e1 stalls past its lease; e2 takes over.
        advance(TTL_MS);
        assert_eq!(start_task(&wf, "e2", json!({})).await["proceed"], true);
        let lost = check(&wf, "e1").await;
        assert_eq!(lost["open"], true, "{lost}");
        assert_eq!(lost["leaseLost"], true, "{lost}");
        assert_eq!(lost["blockedBy"], "e2", "{lost}");
        assert_eq!(
            holder(&store).map(|h| h.0),
            Some("e2".into()),
            "not taken back"
        );
        // e1's summary does not release e2's lease.
        let totals = Totals {
            stopped_because: StopReason::AlreadyRunning,
            ..Totals::default()
        };
        let run = json!({"maxMessages": 1, "dryRun": false, "mode": "messages", "drains": 1, "fifo": false});
        summary(&wf, "e1", &json!({"run": run, "totals": totals})).await;
        assert_eq!(holder(&store).map(|h| h.0), Some("e2".into()));
        assert_eq!(check(&wf, "e2").await["open"], false);
    }

    #[tokio::test]
    async fn without_a_circuit_table_there_is_no_lease_and_executions_run_side_by_side() {
        let (_, _, wf) = setup(&[]);
        assert_eq!(start_task(&wf, "e1", json!({})).await["proceed"], true);
        assert_eq!(start_task(&wf, "e2", json!({})).await["proceed"], true);
        let out = wf
            .handle(
                json!({"action": "checkCircuit", "executionArn": "e1"}),
                None,
            )
            .await
            .unwrap();
        assert_eq!(out["open"], false, "{out}");
    }
}

#[tokio::test]
async fn a_scheduled_or_manual_execution_re_arms_the_configured_trigger_alarm() {
    let (_, _, wf) = setup(&[("TRIGGER_ALARM_NAME", "orders-dlq-not-empty")]);
    // The schedule's input is {}; an operator's may name nothing either.
    let scheduled = start_task(&wf, "e", json!({})).await;
    assert_eq!(scheduled["run"]["triggerAlarm"], "orders-dlq-not-empty");
    // The alarm rule names the alarm that fired.
    let alarmed = start_task(&wf, "e", json!({"triggerAlarm": "other-alarm"})).await;
    assert_eq!(alarmed["run"]["triggerAlarm"], "other-alarm");
}

#[tokio::test]
async fn an_execution_ends_after_its_rounds_with_limit_and_the_next_trigger_continues() {
    let (_, _, wf) = setup(&[]);
    // No cap on maxMessages itself: the rounds bound the execution.
    let started = start_task(&wf, "e", json!({"maxMessages": 5000})).await;
    assert_eq!(started["proceed"], true);
    let run: Run = serde_json::from_value(started["run"].clone()).unwrap();
    let mut totals: Totals = serde_json::from_value(started["totals"].clone()).unwrap();
    let batch =
        json!({"received": MAX_PARALLEL, "redriven": MAX_PARALLEL, "stoppedBecause": "limit"});
    for round in 1..=MAX_ROUNDS_PER_EXECUTION {
        totals = tally(&run, totals, Some(&batch), &[]);
        assert_eq!(totals.rounds, round);
        assert_eq!(
            totals.more,
            round < MAX_ROUNDS_PER_EXECUTION,
            "round {round}"
        );
    }
    assert_eq!(totals.stopped_because, StopReason::Limit);
    assert_eq!(
        totals.received,
        u64::from(MAX_ROUNDS_PER_EXECUTION * MAX_PARALLEL)
    );
    assert!(totals.remaining > 0);

    // Scale-out rounds count the same way.
    let run = Run {
        mode: Mode::ScaleOut,
        drains: 2,
        ..run
    };
    let totals = Totals {
        remaining: 1_000_000,
        rounds: MAX_ROUNDS_PER_EXECUTION - 1,
        ..Totals::default()
    };
    let drained = json!({"received": 100, "redriven": 100, "stoppedBecause": "limit"});
    let t = tally(&run, totals, None, &[drained.clone(), drained]);
    assert!(!t.more);
    assert!(t.drain_plan.is_empty());
    assert_eq!(t.stopped_because, StopReason::Limit);
}

#[tokio::test]
async fn fifo_runs_as_one_drain_and_refuses_the_per_message_path() {
    let (_, _, wf) = setup(&[("SOURCE_QUEUE_URL", SRC_FIFO)]);
    let out = start_task(&wf, "e", json!({"mode": "messages", "drains": 4})).await;
    assert_eq!(out["run"]["mode"], "scaleOut");
    assert_eq!(out["run"]["drains"], 1);
    assert!(wf.redrive_batch(10, false, None).await.is_err());
}

#[tokio::test]
async fn scale_out_drains_share_the_budget_and_the_velocity_cap() {
    let (sqs, cw, wf) = setup(&[("MAX_MESSAGES_PER_SECOND", "100")]);
    for i in 0..30 {
        sqs.push(DLQ, &format!("m{i}"), Attributes::new(), None);
    }
    let run = Run {
        drains: 3,
        ..run_of(Mode::ScaleOut, 30)
    };
    assert_eq!(
        wf.drainer(3).config.max_messages_per_second,
        100.0 / 3.0,
        "each drain takes 1/K of the cap"
    );
    let plan = drain_plan(&run, 30);
    let results = futures_util::future::join_all(plan.iter().map(|d| wf.drain(d, None))).await;
    let results: Vec<Value> = results.into_iter().map(Result::unwrap).collect();
    let totals = tally(&run, start_totals(&run), None, &results);
    assert_eq!((totals.received, totals.redriven), (30, 30));
    assert_eq!(totals.remaining, 0);
    assert!(!totals.more);
    assert_eq!(sqs.len(SRC), 30);
    assert!(sqs.is_empty(DLQ));
    // The execution's summary publishes one PutMetricData with the totals.
    let s = wf.summary(&run, &totals, None).await;
    assert_eq!(s.redriven, 30);
    assert_eq!(s.dlq_remaining, Some(0));
    let published = cw.published.lock().unwrap();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].2.successful_redrives, 30);
}

#[tokio::test]
async fn the_circuit_check_reads_the_guard_alarms() {
    let (_, cw, wf) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors")]);
    cw.set_state("downstream-errors", "OK");
    let out = check_circuit(&wf).await;
    assert_eq!(out["open"], false);
    cw.set_state("downstream-errors", "ALARM");
    let out = check_circuit(&wf).await;
    assert_eq!(out["open"], true);
    assert_eq!(out["guards"], json!(["downstream-errors"]));
}

#[tokio::test]
async fn the_operator_flag_opens_the_circuit() {
    use redrive_engine::circuit::MemoryCircuitStore;
    use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Override};
    let (_, _, wf) = setup(&[("CIRCUIT_TABLE", "redrive-circuit")]);
    let store = MemoryCircuitStore::new();
    let mut record = CircuitRecord::new(&CircuitSettings::default(), 0);
    record.operator = Override::Open;
    store.put(DLQ, record.clone());
    let wf = wf.with_circuit(store);
    let out = check_circuit(&wf).await;
    assert_eq!(out["open"], true);
    assert_eq!(out["operator"], "open");
    assert_eq!(out["guards"], json!([]));
    record.operator = Override::Auto;
    wf.engine.circuit.put(DLQ, record);
    let out = check_circuit(&wf).await;
    assert_eq!(out["open"], false);
    assert_eq!(out["operator"], "auto");
}

mod adaptive_circuit {
    use super::*;
    use redrive_engine::circuit::MemoryCircuitStore;
    use redrive_shared::circuit::{Override, State};

    type CircuitWorkflow =
        Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, Arc<MemoryCircuitStore>>;

    /// A workflow of `pairs` on `sqs` with a circuit table, its records in memory.
    fn with_store_on(
        sqs: Arc<FakeSqs>,
        pairs: &[(&str, &str)],
    ) -> (
        Arc<FakeSqs>,
        Arc<FakeCloudWatch>,
        Arc<MemoryCircuitStore>,
        CircuitWorkflow,
    ) {
        let mut pairs = pairs.to_vec();
        pairs.push(("CIRCUIT_TABLE", "redrive-circuit"));
        let (sqs, cw, wf) = setup_on(sqs, &pairs);
        let store = MemoryCircuitStore::new();
        (sqs, cw, store.clone(), wf.with_circuit(store))
    }

    fn with_store() -> (Arc<FakeSqs>, Arc<MemoryCircuitStore>, CircuitWorkflow) {
        let (sqs, _, store, wf) = with_store_on(FakeSqs::new(), &[]);
        (sqs, store, wf)
    }

    /// [`with_store`] over an SQS whose every call takes a little while, so that drains run
    /// side by side interleave as Lambdas do (each reads the record before any writes it).
    fn concurrent(
        pairs: &[(&str, &str)],
    ) -> (Arc<FakeSqs>, Arc<MemoryCircuitStore>, CircuitWorkflow) {
        let sqs = FakeSqs::with_latency(Duration::from_millis(2));
        let (sqs, _, store, wf) = with_store_on(sqs, pairs);
        (sqs, store, wf)
    }

    /// A redriven copy back on the DLQ just now (attempt 1, `lastRedrivenAt` now).
    fn bounced(sqs: &FakeSqs, original: &str) -> String {
        let mut a = Attributes::new();
        RedriveMeta {
            attempt: 1,
            first_redriven_at: Some(redrive_shared::timefmt::rfc3339_from_millis(now_ms())),
            last_redriven_at: Some(redrive_shared::timefmt::rfc3339_from_millis(now_ms())),
            ..RedriveMeta::fresh(original)
        }
        .write_into(&mut a);
        sqs.push(DLQ, &format!("copy of {original}"), a, None)
    }

    /// `n` redriven copies back on the DLQ just now, of the chains `orig-0`, `orig-1`, ...
    fn bounced_on_dlq(sqs: &FakeSqs, n: usize) {
        for i in 0..n {
            bounced(sqs, &format!("orig-{i}"));
        }
    }

    /// `n` messages on the DLQ that were never redriven.
    fn fresh_on_dlq(sqs: &FakeSqs, n: usize) {
        for i in 0..n {
            sqs.push(DLQ, &format!("fresh {i}"), Attributes::new(), None);
        }
    }

    /// The first drain of a scale-out execution of `max_messages`, with its share of the
    /// circuit's plan.
    async fn scale_out_drain(wf: &CircuitWorkflow, max_messages: u32) -> (Totals, Value) {
        let mut plan = drain_plan(&run(Mode::ScaleOut), max_messages);
        wf.admit(&mut plan).await;
        let out = wf.drain(&plan[0], None).await.unwrap();
        let totals = Totals {
            drain_plan: plan,
            ..totals()
        };
        (totals, out)
    }

    /// The next batch of up to `max` is held by the circuit: nothing is decided, and the DLQ
    /// shows `visible` messages again at once.
    async fn next_batch_only_watches(
        wf: &CircuitWorkflow,
        sqs: &FakeSqs,
        max: u32,
        visible: usize,
    ) {
        let next = wf.redrive_batch(max, false, None).await.unwrap();
        assert_eq!(next.stopped_because, StopReason::CircuitOpen, "{next:?}");
        assert!(next.records.is_empty() && next.redriven == 0, "{next:?}");
        assert_eq!(sqs.depth_visible(DLQ), visible);
    }

    fn run(mode: Mode) -> Run {
        run_of(mode, 100)
    }

    fn totals() -> Totals {
        start_totals(&run(Mode::Messages))
    }

    fn state(store: &MemoryCircuitStore) -> State {
        store.get(DLQ).expect("a circuit record").record.state
    }

    #[tokio::test]
    async fn bounced_copies_seen_by_a_round_open_it_and_the_batch_goes_back_untouched() {
        let (sqs, store, wf) = with_store();
        bounced_on_dlq(&sqs, 3);
        sqs.push(DLQ, "fresh a", Attributes::new(), None);
        sqs.push(DLQ, "fresh b", Attributes::new(), None);

        let batch = wf.redrive_batch(10, false, None).await.unwrap();

        assert_eq!(batch.stopped_because, StopReason::CircuitOpen, "{batch:?}");
        assert!(batch.records.is_empty() && batch.redriven == 0, "{batch:?}");
        assert_eq!(state(&store), State::Open, "the record opened by itself");
        assert_eq!(
            store.get(DLQ).unwrap().record.counts().1,
            0,
            "cleared on open"
        );
        // Untouched: all five visible again on the DLQ at once, nothing sent, no attempt spent.
        assert_eq!((sqs.len(DLQ), sqs.depth_visible(DLQ)), (5, 5));
        assert!(sqs.is_empty(SRC) && sqs.is_empty(POISON));
        for m in sqs.messages(DLQ) {
            let want = u32::from(m.body.starts_with("copy"));
            assert_eq!(attempt_of(&m.attributes, &m.message_id), want);
        }
        // The round ends the execution, stopped by the circuit.
        let t = tally(&run(Mode::Messages), totals(), Some(&to_value(&batch)), &[]);
        assert!(!t.more);
        assert_eq!(t.stopped_because, StopReason::CircuitOpen);
        assert_eq!(t.redriven, 0);
        // The next batch is held by the open record (nothing received is decided).
        next_batch_only_watches(&wf, &sqs, 10, 5).await;
    }

    #[tokio::test]
    async fn a_scale_out_drain_with_bounced_copies_opens_it_and_stops() {
        let (sqs, store, wf) = with_store();
        bounced_on_dlq(&sqs, 3);
        fresh_on_dlq(&sqs, 4);
        let (round, out) = scale_out_drain(&wf, 7).await;

        assert_eq!(out["stoppedBecause"], "circuit-open", "{out}");
        assert_eq!(out["redriven"], 0, "{out}");
        assert_eq!(out["circuit"]["state"], "open", "{out}");
        assert!(store.get(DLQ).is_none(), "the drain writes nothing");
        assert_eq!((sqs.len(DLQ), sqs.depth_visible(DLQ)), (7, 7));
        assert!(sqs.is_empty(SRC));
        let t = wf
            .tally_round(&run(Mode::ScaleOut), round, None, &[out])
            .await;
        assert!(!t.more && t.drain_plan.is_empty());
        assert_eq!(t.stopped_because, StopReason::CircuitOpen);
        assert_eq!(state(&store), State::Open, "the round's tally landed it");
    }

    #[tokio::test]
    async fn half_open_sends_only_the_canary_at_once_even_a_long_wait() {
        use redrive_shared::circuit::{CircuitRecord, CircuitSettings};
        let (sqs, _, store, wf) = with_store_on(FakeSqs::new(), LONG);
        let mut record = CircuitRecord::new(&CircuitSettings::default(), now_ms());
        record.state = State::HalfOpen;
        store.put(DLQ, record);
        fresh_on_dlq(&sqs, 15);
        let batch = wf.redrive_batch(40, false, None).await.unwrap();
        assert_eq!(
            (batch.redriven, batch.waiting),
            (10, 0),
            "CIRCUIT_CANARY_SIZE messages, no more, none left to wait: {batch:?}"
        );
        let copies = sqs.messages(SRC);
        assert_eq!(copies.len(), 10);
        assert!(copies.iter().all(|m| m.delay_seconds == Some(0)));
        assert_eq!(sqs.depth_visible(DLQ), 5, "the rest went back at once");
        let canary = store
            .get(DLQ)
            .unwrap()
            .record
            .canary
            .expect("the canary is out");
        assert_eq!(canary.sent, 10);
        // With the canary out, the next batch only watches: released, the execution stops.
        next_batch_only_watches(&wf, &sqs, 40, 5).await;
    }

    #[tokio::test]
    async fn redriven_copies_reach_the_record_in_both_modes() {
        // Scale-out: the round's tally lands what its drains redrove.
        let (sqs, store, wf) = with_store();
        fresh_on_dlq(&sqs, 4);
        let (round, out) = scale_out_drain(&wf, 4).await;
        assert_eq!(out["redriven"], 4, "{out}");
        assert!(store.get(DLQ).is_none(), "the drain writes nothing");
        wf.tally_round(&run(Mode::ScaleOut), round, None, &[out])
            .await;
        assert_eq!(store.get(DLQ).unwrap().record.counts(), (4, 0));

        // Messages: the round counts what it redrove.
        let (sqs, store, wf) = with_store();
        sqs.push(DLQ, "a", Attributes::new(), None);
        sqs.push(DLQ, "b", Attributes::new(), None);
        sqs.push(DLQ, "p", permanent(), None);
        let batch = wf.redrive_batch(10, false, None).await.unwrap();
        assert_eq!((batch.received, batch.redriven, batch.isolated), (3, 2, 1));
        let record = store.get(DLQ).expect("the round wrote the record").record;
        assert_eq!(record.counts(), (2, 0), "isolated copies are not redriven");
        assert_eq!(record.state, State::Closed);
        // A dry run writes nothing.
        let (sqs, store, wf) = with_store();
        sqs.push(DLQ, "a", Attributes::new(), None);
        wf.redrive_batch(10, true, None).await.unwrap();
        assert!(store.get(DLQ).is_none());
    }

    /// `start` through the handler: the execution's run and totals (with its start time).
    async fn started<C: CircuitStore + Clone + Send>(
        wf: &Workflow<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>, C>,
        input: Value,
    ) -> (Run, Totals) {
        let out = start_task(wf, "exec-1", input).await;
        assert_eq!(out["proceed"], true, "{out}");
        (
            serde_json::from_value(out["run"].clone()).unwrap(),
            serde_json::from_value(out["totals"].clone()).unwrap(),
        )
    }

    /// What one PutMetricData publishes of a run that opened the circuit and saw `bounced`
    /// copies: CircuitOpen=1, CircuitTransitions=1, BouncedCopies.
    fn opened_once(bounced: u64) -> Vec<Option<redrive_engine::ports::CircuitMetrics>> {
        vec![Some(redrive_engine::ports::CircuitMetrics {
            open: true,
            transitions: 1,
            bounced,
        })]
    }

    fn published_circuit(
        cw: &FakeCloudWatch,
    ) -> Vec<Option<redrive_engine::ports::CircuitMetrics>> {
        let published = cw.published.lock().unwrap();
        published.iter().map(|(_, _, m)| m.circuit).collect()
    }

    #[tokio::test]
    async fn the_summary_of_an_execution_that_opened_the_circuit_reports_and_publishes_it() {
        let (sqs, cw, store, wf) = with_store_on(FakeSqs::new(), &[]);
        // An earlier transition, before this execution started: not this execution's.
        let mut record = CircuitRecord::new(&CircuitSettings::default(), 0);
        record.set_override(1_000, Override::Open);
        record.set_override(2_000, Override::Closed);
        record.set_override(3_000, Override::Auto);
        let before = record.history.len();
        assert!(before > 0, "{record:?}");
        store.put(DLQ, record);
        bounced_on_dlq(&sqs, 3);
        sqs.push(DLQ, "fresh a", Attributes::new(), None);
        sqs.push(DLQ, "fresh b", Attributes::new(), None);

        let (run, totals) = started(&wf, json!({"maxMessages": 10})).await;
        assert!(totals.started_at > 0);
        let batch = wf.redrive_batch(10, false, None).await.unwrap();
        assert_eq!(batch.stopped_because, StopReason::CircuitOpen, "{batch:?}");
        assert_eq!(batch.circuit.as_ref().map(|c| c.bounced), Some(3));
        let totals = tally(&run, totals, Some(&to_value(&batch)), &[]);
        assert_eq!(totals.bounced, 3);
        assert_eq!(state(&store), State::Open);

        let out = summary_task(&wf, &run, &totals).await;
        assert_eq!(out["stoppedBecause"], "circuit-open", "{out}");
        let c = &out["circuit"];
        assert_eq!(c["state"], "open", "{out}");
        assert_eq!(c["operator"], "auto", "{out}");
        assert_eq!(c["plan"], "hold", "{out}");
        assert_eq!(c["budget"], 0, "{out}");
        assert_eq!(c["bounced"], 3, "{out}");
        assert_eq!(
            c["transitions"], 1,
            "only the open this execution made: {out}"
        );
        assert_eq!(
            published_circuit(&cw),
            opened_once(3),
            "CircuitOpen=1, CircuitTransitions=1, BouncedCopies=3 in the one PutMetricData"
        );
    }

    #[tokio::test]
    async fn the_summary_of_a_scale_out_execution_counts_the_drains_bounced_copies() {
        let (sqs, cw, _, wf) = with_store_on(FakeSqs::new(), &[]);
        bounced_on_dlq(&sqs, 3);
        fresh_on_dlq(&sqs, 4);
        let (run, totals) = started(
            &wf,
            json!({"maxMessages": 7, "mode": "scaleOut", "drains": 1}),
        )
        .await;
        let out = wf.drain(&totals.drain_plan[0], None).await.unwrap();
        assert_eq!(out["circuit"]["bounced"], 3, "{out}");
        let totals = wf.tally_round(&run, totals, None, &[out]).await;
        assert_eq!(totals.bounced, 3);

        let s = wf.summary(&run, &totals, None).await;
        let c = s.circuit.expect("the circuit in the response");
        assert_eq!(
            (c.state, c.plan, c.bounced, c.transitions),
            (State::Open, "hold", 3, 1)
        );
        assert_eq!(published_circuit(&cw), opened_once(3));
    }

    #[tokio::test]
    async fn an_unreadable_record_gives_no_circuit_in_the_summary() {
        let (_, cw, store, wf) = with_store_on(FakeSqs::new(), &[]);
        let (run, totals) = started(&wf, json!({})).await;
        store.fail_next(redrive_engine::fake::throttled("GetItem"));
        let s = wf.summary(&run, &totals, None).await;
        assert_eq!(s.circuit, None);
        assert_eq!(published_circuit(&cw), vec![None]);
        // Readable again (no record yet): closed, nothing seen, nothing changed.
        let s = wf.summary(&run, &totals, None).await;
        let c = s.circuit.expect("the circuit in the response");
        assert_eq!(
            (
                c.state,
                c.operator,
                c.plan,
                c.budget,
                c.bounced,
                c.transitions
            ),
            (State::Closed, Override::Auto, "drain", None, 0, 0)
        );
    }

    #[tokio::test]
    async fn with_the_circuit_off_the_summary_has_no_circuit_and_publishes_none() {
        // No CIRCUIT_TABLE; then CIRCUIT_TABLE set but no store given: off both times.
        for pairs in [&[][..], &[("CIRCUIT_TABLE", "redrive-circuit")][..]] {
            let (sqs, cw, wf) = setup(pairs);
            bounced(&sqs, "orig-0");
            let (run, totals) = started(&wf, json!({"maxMessages": 5})).await;
            let batch = wf.redrive_batch(5, false, None).await.unwrap();
            assert!(batch.circuit.is_none(), "{batch:?}");
            let totals = tally(&run, totals, Some(&to_value(&batch)), &[]);
            let out = summary_task(&wf, &run, &totals).await;
            assert!(out.get("circuit").is_none(), "{out}");
            assert_eq!(published_circuit(&cw), vec![None]);
        }
    }
    /// One scale-out round of `drains` drains over `max_messages`, as the state machine runs
    /// it: `start` plans it, the K `drain` tasks run at once, then the round's `tally`.
    async fn scale_out_round(wf: &CircuitWorkflow, max_messages: u32, drains: u32) -> Totals {
        let (run, totals) = started(
            wf,
            json!({"maxMessages": max_messages, "mode": "scaleOut", "drains": drains}),
        )
        .await;
        assert_eq!(totals.drain_plan.len(), drains as usize);
        // Through the handler, as each Map item is given to the task.
        let results = futures_util::future::join_all(totals.drain_plan.iter().map(|d| {
            let mut task = serde_json::to_value(d).unwrap();
            task["action"] = json!("drain");
            wf.handle(task, None)
        }))
        .await;
        let results: Vec<Value> = results.into_iter().map(Result::unwrap).collect();
        let tally = json!({"action": "tally", "run": run, "totals": totals, "results": results});
        serde_json::from_value(wf.handle(tally, None).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn the_drains_of_a_half_open_round_send_one_canary_between_them() {
        let (sqs, store, wf) = concurrent(&[]);
        // Opened long ago: its cool-down is over, so the round's plan is the canary.
        let settings = CircuitSettings::default();
        let mut record = CircuitRecord::new(&settings, 0);
        record.state = State::Open;
        store.put(DLQ, record);
        fresh_on_dlq(&sqs, 40);
        let saves = store.saves();

        let totals = scale_out_round(&wf, 40, 4).await;

        let canary = settings.canary_size as usize;
        assert_eq!(
            sqs.len(SRC),
            canary,
            "the canary in all across the 4 drains, not 4 canaries"
        );
        assert_eq!(sqs.len(DLQ), 40 - canary);
        assert_eq!(totals.redriven, canary as u64);
        let stored = store.get(DLQ).unwrap();
        assert_eq!(
            store.saves() - saves,
            2,
            "the start's lease, then one write for the round"
        );
        let out = stored.record.canary.expect("the canary is out");
        assert_eq!(out.sent as usize, canary, "one canary of all its copies");
        assert_eq!(stored.record.state, State::HalfOpen);
        assert_eq!(
            stored.record.history.len(),
            1,
            "one transition (open to half-open): {:?}",
            stored.record.history
        );
    }

    #[tokio::test]
    async fn a_small_canary_goes_to_some_drains_and_the_others_receive_nothing() {
        let (sqs, store, wf) = concurrent(&[("CIRCUIT_CANARY_SIZE", "2")]);
        let mut record = CircuitRecord::new(&CircuitSettings::default(), now_ms());
        record.state = State::HalfOpen;
        store.put(DLQ, record);
        fresh_on_dlq(&sqs, 40);

        let totals = scale_out_round(&wf, 40, 4).await;

        assert_eq!(sqs.len(SRC), 2, "a canary of 2 is 2 messages in all");
        assert_eq!(
            totals.received, 2,
            "the drains with no share received nothing"
        );
        assert_eq!(sqs.depth_visible(DLQ), 38, "nothing else held");
        let canary = store.get(DLQ).unwrap().record.canary.expect("out");
        assert_eq!(canary.sent, 2);
    }

    #[tokio::test]
    async fn the_drains_of_a_ramping_round_redrive_the_budget_between_them() {
        let (sqs, store, wf) = concurrent(&[]);
        let mut record = CircuitRecord::new(&CircuitSettings::default(), now_ms());
        record.ramp = Some(6);
        store.put(DLQ, record);
        fresh_on_dlq(&sqs, 40);
        let saves = store.saves();

        let totals = scale_out_round(&wf, 40, 4).await;

        assert_eq!(sqs.len(SRC), 6, "the budget in all across the 4 drains");
        assert_eq!(totals.redriven, 6);
        let stored = store.get(DLQ).unwrap();
        assert_eq!(
            store.saves() - saves,
            2,
            "the start's lease, then one write for the round"
        );
        assert_eq!(
            stored.record.counts(),
            (6, 0),
            "the round's redriven copies, counted once"
        );
        assert_eq!(stored.record.ramp, Some(12), "one step of the ramp");
        assert!(stored.record.history.is_empty());
        // The next round's drains share the doubled budget.
        let next: u32 = totals
            .drain_plan
            .iter()
            .map(|d| match d.circuit {
                Some(redrive_engine::engine::Admission::Drain { budget: Some(b) }) => b,
                other => panic!("{other:?}"),
            })
            .sum();
        assert_eq!(next, 12);
    }

    #[tokio::test]
    async fn bounced_copies_seen_by_several_drains_open_the_circuit_once() {
        let (sqs, store, wf) = concurrent(&[]);
        bounced_on_dlq(&sqs, 4);
        fresh_on_dlq(&sqs, 4);
        let saves = store.saves();

        let totals = scale_out_round(&wf, 8, 2).await;

        assert_eq!(totals.bounced, 4);
        let stored = store.get(DLQ).unwrap();
        assert_eq!(
            store.saves() - saves,
            2,
            "the start's lease, then one write for the round"
        );
        assert_eq!(stored.record.state, State::Open, "judged on all 4 at once");
        assert_eq!(
            stored.record.history.len(),
            1,
            "{:?}",
            stored.record.history
        );
        // The next round's check stops the execution.
        let check = wf
            .handle(json!({"action": "checkCircuit"}), None)
            .await
            .unwrap();
        assert_eq!(check["open"], true);
    }

    #[tokio::test]
    async fn totals_from_before_the_start_time_parse_and_claim_no_transitions() {
        let (sqs, _, wf) = with_store();
        bounced_on_dlq(&sqs, 3);
        let batch = wf.redrive_batch(10, false, None).await.unwrap();
        assert_eq!(batch.stopped_because, StopReason::CircuitOpen);
        let old: Totals = serde_json::from_value(json!({
            "received": 0, "redriven": 0, "isolated": 0, "failed": 0, "leftOnDlq": 0,
            "remaining": 10, "queueEmpty": false, "more": false,
            "stoppedBecause": "circuit-open", "drainPlan": []
        }))
        .unwrap();
        assert_eq!((old.started_at, old.bounced), (0, 0));
        let s = wf.summary(&run(Mode::Messages), &old, None).await;
        let c = s.circuit.expect("the circuit in the response");
        assert_eq!((c.state, c.transitions), (State::Open, 0));
    }
}

/// A message on the DLQ whose wait (set by an earlier round) ends `in_ms` from now.
fn push_waiting(sqs: &FakeSqs, body: &str, in_ms: i64) {
    let mut waiting = RedriveMeta {
        attempt: 1,
        ..RedriveMeta::fresh(&format!("orig-{body}"))
    };
    waiting.set_not_before(Some(now_ms() + in_ms));
    let mut attributes = Attributes::new();
    waiting.write_into(&mut attributes);
    sqs.push(DLQ, body, attributes, None);
}

/// The one message on the DLQ: a hop, its delay within what a DLQ of `retention` seconds
/// allows (its retention less 300 s; half of it below 600 s), never past its expiry.
fn assert_one_hop_within(sqs: &FakeSqs, retention: u32) {
    let cap = if retention > 600 {
        retention - 300
    } else {
        retention / 2
    };
    let hop = sqs.messages(DLQ);
    assert_eq!(hop.len(), 1, "one message, on the DLQ: {hop:?}");
    let delay = hop[0].delay_seconds.unwrap_or(0);
    assert!(
        (1..=cap).contains(&delay),
        "a hop of {delay} s on a DLQ that keeps messages {retention} s"
    );
}

#[tokio::test]
async fn a_message_that_arrives_waiting_hops_within_the_dlqs_retention_in_a_round() {
    // A warm task whose first round saw a DLQ of 14 days; the DLQ now keeps messages 600 s,
    // and a message arrives whose notBefore is 701 s away. Its hop is at most 300 s (half the
    // retention as it is now), not the 701 s left of its wait, which would outlive the copy.
    for (what, pairs) in [("long backoff", LONG), ("default backoff", &[][..])] {
        let (sqs, _, wf) = setup(pairs);
        sqs.set_retention(DLQ, Duration::from_secs(1_209_600));
        wf.redrive_batch(10, false, None).await.unwrap();
        sqs.set_retention(DLQ, Duration::from_secs(600));
        push_waiting(&sqs, "order-waiting", 701_000);
        let round = wf.redrive_batch(10, false, None).await.unwrap();
        // A later hop of its wait: counted apart, no record.
        assert_eq!(
            (round.received, round.waiting, round.hops),
            (0, 0, 1),
            "{what}: {round:?}"
        );
        assert!(round.records.is_empty(), "{what}: {round:?}");
        assert_one_hop_within(&sqs, 600);
    }
}

#[tokio::test]
async fn a_message_that_arrives_waiting_hops_within_the_dlqs_retention_in_a_drain() {
    // The same on a scale-out drain (its own backoff, 900 s at most, never waits on the DLQ):
    // the drainer of an earlier round read the DLQ's retention then.
    let (sqs, _, wf) = setup(&[]);
    sqs.set_retention(DLQ, Duration::from_secs(1_209_600));
    let item = DrainItem {
        index: 0,
        drains: 1,
        max_messages: 10,
        dry_run: false,
        circuit: None,
    };
    wf.drain(&item, None).await.unwrap();
    sqs.set_retention(DLQ, Duration::from_secs(600));
    push_waiting(&sqs, "order-waiting", 701_000);
    let out = wf.drain(&item, None).await.unwrap();
    assert_eq!(
        (out["received"].as_u64(), out["waiting"].as_u64()),
        (Some(1), Some(1)),
        "{out}"
    );
    assert_one_hop_within(&sqs, 600);
}

/// A workflow on a protected DLQ (no `SOURCE_QUEUE_URL`) fed by one source, whose sends the
/// fake refuses with AccessDenied once: a source added after the deploy, not yet granted.
fn setup_ungranted() -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestWorkflow) {
    let cfg = config_of(&[("DLQ_URL", DLQ), ("POISON_QUEUE_URL", POISON)])
        .expect("a protected DLQ's config");
    let sqs = FakeSqs::new();
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    sqs.set_redrive_policy(SRC, DLQ, 3);
    for i in 0..2 {
        sqs.push_moved(DLQ, SRC, &format!("m{i}"), Attributes::new(), None);
    }
    sqs.fail_next(
        "SendMessageBatch",
        redrive_engine::ports::PortError::new(
            "SendMessageBatch",
            "AccessDenied",
            "not authorized",
            false,
        ),
    );
    workflow_on(sqs, cfg)
}

/// Tallies `rounds` answers and ends the execution with `summary`: its answer.
async fn tally_and_summarize(
    wf: &TestWorkflow,
    run: &Run,
    batch: Option<&Value>,
    results: &[Value],
) -> Value {
    let totals = tally(run, start_totals(run), batch, results);
    assert_eq!(
        totals.ungranted, 2,
        "the round's ungranted lands in the totals"
    );
    wf.handle(
        json!({"action": "summary", "run": run, "totals": to_value(&totals)}),
        None,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_executions_answer_reports_messages_left_for_an_ungranted_source() {
    for mode in [Mode::Messages, Mode::ScaleOut] {
        // GIVEN a protected DLQ whose source refuses the re-driver's sends (not granted yet)
        let (sqs, cw, wf) = setup_ungranted();
        let run = run_of(mode, 10);
        // WHEN a round runs and the execution ends
        let answer = match mode {
            Mode::Messages => {
                let round = to_value(wf.redrive_batch(10, false, None).await.unwrap());
                tally_and_summarize(&wf, &run, Some(&round), &[]).await
            }
            Mode::ScaleOut => {
                let d = json!({"action": "drain", "index": 0, "drains": 1, "maxMessages": 10, "dryRun": false, "circuit": null});
                let result = wf.handle(d, None).await.unwrap();
                tally_and_summarize(&wf, &run, None, &[result]).await
            }
        };
        // THEN its answer says how many were left on the DLQ for that source, as the
        // Lambda's does, and DlqLeftAlone is published once; nothing is lost
        assert_eq!(answer["ungranted"], 2, "{mode:?}: {answer}");
        assert_eq!(
            (answer["received"].as_u64(), answer["failed"].as_u64()),
            (Some(0), Some(0)),
            "{mode:?}: left alone, neither received nor failed: {answer}"
        );
        assert_eq!(sqs.len(DLQ), 2, "{mode:?}: lost 0");
        assert!(sqs.is_empty(POISON), "{mode:?}: never isolated");
        let published = cw.published.lock().unwrap();
        assert_eq!(published.len(), 1, "{mode:?}");
        assert_eq!(published[0].2.dlq_left_alone, 1, "{mode:?}");
    }
}

/// Triage's holds in the workflow: both of its drains (a Messages round and a scale-out drain
/// task) read the DLQ's book and leave a held group's messages on the DLQ while the rest drains.
mod triage_hold {
    use super::*;
    use redrive_engine::engine::TriageBooks;
    use redrive_engine::triage_store::{self, MemoryTriageStore};

    use redrive_tests::{transiently_failed, triage_group};

    /// Three 503s (their group held by an operator, until a far time) and two 429s on the DLQ.
    async fn held_503s() -> (Arc<FakeSqs>, TestWorkflow) {
        let (sqs, _, wf) = setup(&[]);
        let mut held = String::new();
        for (n, code) in redrive_tests::FAILED_ORDERS {
            let meta = transiently_failed(n, code);
            if code == "HTTP_503" {
                held = triage_group(&meta);
            }
            let mut attributes = Attributes::new();
            meta.write_into(&mut attributes);
            sqs.push(DLQ, "{}", attributes, None);
        }
        let books = Arc::new(MemoryTriageStore::default());
        triage_store::update(books.as_ref(), DLQ, |b| {
            b.observe(&held, "HTTP_503", None, 3, None, 0);
            b.hold(&held, "ops", Some(i64::MAX / 2), None, 0)
        })
        .await
        .unwrap();
        (sqs, wf.with_triage(Some(TriageBooks::Memory(books))))
    }

    #[tokio::test]
    async fn a_messages_round_leaves_a_held_group_on_the_dlq_and_drains_the_rest() {
        let (sqs, wf) = held_503s().await;
        let round = wf.redrive_batch(10, false, None).await.unwrap();
        assert_eq!((round.redriven, round.on_hold), (2, 3), "{round:?}");
        assert_eq!((sqs.len(SRC), sqs.len(DLQ)), (2, 3), "lost 0");
        assert!(sqs.is_empty(POISON));
        assert!(
            sqs.messages(DLQ)
                .iter()
                .all(|m| attempt_of(&m.attributes, "m") == 1),
            "the held messages are untouched"
        );
    }

    #[tokio::test]
    async fn a_scale_out_drain_task_leaves_a_held_group_on_the_dlq_and_drains_the_rest() {
        let (sqs, wf) = held_503s().await;
        let d = json!({"action": "drain", "index": 0, "drains": 1, "maxMessages": 10, "dryRun": false, "circuit": null});
        let result = wf.handle(d, None).await.unwrap();
        assert_eq!(
            (result["redriven"].as_u64(), result["onHold"].as_u64()),
            (Some(2), Some(3)),
            "{result}"
        );
        assert_eq!((sqs.len(SRC), sqs.len(DLQ)), (2, 3), "lost 0");
        assert!(sqs.is_empty(POISON));
    }
}

/// Long waits at scale: the hops of a large backlog of waiting messages do not hold back the
/// new ones.
mod hops {
    use super::*;
    use tokio::time::Instant;

    /// The Lambda timeout of the workflow's tasks, seconds: a round's deadline.
    const TASK_TIMEOUT_SECONDS: u64 = 300;

    /// A round as the state machine runs it: `RedriveBatch` of the execution's remaining
    /// budget, under the task's deadline, then `Tally`.
    async fn round(wf: &TestWorkflow, run: &Run, totals: Totals) -> (Summary, Totals) {
        let deadline = Instant::now() + Duration::from_secs(TASK_TIMEOUT_SECONDS);
        let summary = wf
            .redrive_batch(totals.remaining, false, Some(deadline))
            .await
            .unwrap();
        let value = serde_json::to_value(&summary).unwrap();
        let totals = crate::tally(run, totals, Some(&value), &[]);
        (summary, totals)
    }

    use redrive_engine::engine::Summary;

    #[test]
    fn the_hop_budget_defaults_to_two_thousand_and_is_checked_at_init() {
        assert_eq!(config(&[]).unwrap().hops_per_round, 2_000);
        assert_eq!(
            config(&[("WORKFLOW_HOPS_PER_ROUND", "50")])
                .unwrap()
                .hops_per_round,
            50
        );
        for bad in ["0", "100001", "many"] {
            let e = config(&[("WORKFLOW_HOPS_PER_ROUND", bad)]).unwrap_err();
            assert_eq!(e.variable, "WORKFLOW_HOPS_PER_ROUND", "{bad}");
        }
    }

    #[tokio::test]
    async fn a_round_at_its_hop_budget_stops_at_its_limit_and_its_answer_stays_small() {
        // 3,000 waiting and 40 new: finding all 40 would take nearly every waiting message's
        // hop; the round sends on its 2,000 and stops there, the rest for the next round.
        let (sqs, _, wf) = setup(&[]);
        for i in 0..3_000 {
            push_waiting(&sqs, &format!("waiting-{i}"), 12 * 3_600_000);
        }
        push_at_attempt(&sqs, 40, 1, "new");
        let round = wf.redrive_batch(40, false, None).await.unwrap();
        assert!(
            (2_000..2_010).contains(&round.hops),
            "the budget, and at most the rest of the batch in hand: {}",
            round.hops
        );
        assert_eq!(round.stopped_because, StopReason::Limit);
        assert_eq!(round.received, round.redriven, "hops are not received");
        assert_eq!(
            round.records.len() as u64,
            round.redriven,
            "no record per hop"
        );
        let answer = serde_json::to_string(&round).unwrap();
        // 40 records at most, ~200 bytes each: far below Step Functions' 256 KB.
        assert!(answer.len() < 16 * 1024, "{} bytes", answer.len());
        // Nothing lost, nothing twice: every message in a queue once.
        assert_eq!(sqs.len(DLQ) + sqs.len(SRC), 3_040);
        // The next round goes on: its tally counts the hops as progress.
        let run = run_of(Mode::Messages, 320);
        let totals = crate::tally(
            &run,
            start_totals(&run),
            Some(&serde_json::to_value(&round).unwrap()),
            &[],
        );
        assert!(totals.more, "{totals:?}");
        assert_eq!(totals.hops, round.hops);
        assert_eq!(totals.remaining, 320 - round.redriven as u32);
    }

    #[tokio::test]
    async fn a_round_of_hops_only_is_progress_and_takes_nothing_of_the_budget() {
        let (sqs, _, wf) = setup(&[("WORKFLOW_HOPS_PER_ROUND", "25")]);
        for i in 0..30 {
            push_waiting(&sqs, &format!("waiting-{i}"), 12 * 3_600_000);
        }
        let round = wf.redrive_batch(40, false, None).await.unwrap();
        assert!((25..=34).contains(&round.hops), "{round:?}");
        assert_eq!((round.received, round.waiting), (0, 0), "{round:?}");
        assert!(round.records.is_empty());
        assert_eq!(
            sqs.len(DLQ),
            30,
            "each hop a message on the DLQ, none twice"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ten_thousand_waiting_do_not_hold_back_a_thousand_new_every_round_redrives_its_batch() {
        // Each SQS call takes 5 ms (virtual): a round's time is what its calls cost.
        let sqs = FakeSqs::with_latency(Duration::from_millis(5));
        let (sqs, _, wf) = setup_on(sqs, &[]);
        // 10,000 waiting 12 h (set by earlier rounds), and 1,000 new, in SQS's random order.
        for i in 0..10_000 {
            push_waiting(&sqs, &format!("waiting-{i}"), 12 * 3_600_000);
        }
        let fresh: std::collections::HashSet<String> =
            push_at_attempt(&sqs, 1_000, 1, "new").into_iter().collect();
        let run = run_of(Mode::Messages, 320);
        let batch = 40;
        let (mut rounds, mut slowest) = (0u32, Duration::ZERO);
        let (mut hops, mut most_hops) = (0u64, 0u64);
        let began = Instant::now();
        // 25 rounds of 40 redrive 1,000 messages: as many as with no backlog at all.
        'executions: while rounds < 1_000 / batch {
            let mut totals = start_totals(&run);
            loop {
                let at = Instant::now();
                let (summary, next) = round(&wf, &run, totals).await;
                slowest = slowest.max(at.elapsed());
                rounds += 1;
                let counts = (
                    summary.received,
                    summary.redriven,
                    summary.waiting,
                    summary.hops,
                );
                assert_eq!(
                    summary.redriven,
                    u64::from(batch),
                    "round {rounds}: (received, redriven, waiting, hops) {counts:?}"
                );
                assert_eq!(
                    summary.records.len(),
                    batch as usize,
                    "a record per redrive only"
                );
                hops += summary.hops;
                most_hops = most_hops.max(summary.hops);
                totals = next;
                if rounds == 1_000 / batch {
                    break 'executions;
                }
                if !totals.more {
                    break;
                }
            }
        }
        let elapsed = began.elapsed();
        // Every new message on its source once; every waiting one still on the DLQ once.
        let mut on_source = std::collections::HashMap::new();
        for m in sqs.messages(SRC) {
            *on_source
                .entry(meta_of(&m).original_message_id)
                .or_insert(0u32) += 1;
        }
        let redriven: std::collections::HashSet<String> = on_source.keys().cloned().collect();
        let duplicated = on_source.values().filter(|n| **n > 1).count();
        let lost = fresh.difference(&redriven).count();
        assert_eq!((lost, duplicated, redriven.len()), (0, 0, 1_000));
        let mut on_dlq = std::collections::HashMap::new();
        for m in sqs.messages(DLQ) {
            *on_dlq
                .entry(meta_of(&m).original_message_id)
                .or_insert(0u32) += 1;
        }
        assert_eq!(on_dlq.len(), 10_000, "no waiting message lost");
        assert!(on_dlq.values().all(|n| *n == 1), "no waiting message twice");
        assert!(on_dlq.keys().all(|k| k.starts_with("orig-waiting")));
        assert!(most_hops <= u64::from(crate::config::DEFAULT_HOPS_PER_ROUND) + 10);
        // A round's time: its calls, at most a small share of the task's timeout.
        assert!(
            slowest < Duration::from_secs(60),
            "slowest round {slowest:?}"
        );
        eprintln!(
            "1,000 new behind 10,000 waiting: {rounds} rounds of {batch}, {hops} hops (at most {most_hops} a round), slowest round {slowest:?}, all {elapsed:?} (virtual, 5 ms per SQS call)"
        );
    }
}
