//! Faults a real emulator cannot produce, on the in-memory port fake: partial batch failures,
//! throttling, a crash between send and delete, FIFO ordering under failure, deadlines, the
//! velocity cap. Every test checks conservation: nothing received is ever lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common;

use common::{DLQ, POISON, SRC, config, permanent_failure, queues, settings, setup};
use redrive_engine::fake::{FakeCloudWatch, FakeSqs, throttled};
use redrive_engine::ports::{EntryFailure, SendEntry};
use redrive_engine::{DrainError, DrainRequest, Engine, Settings, StopReason, now_ms};
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use redrive_shared::{Attributes, MessageAttribute, TraceHeader};
use serde_json::json;
use tokio::time::Instant;

const DLQ_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq.fifo";
const SRC_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo";
const POISON_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison.fifo";

fn request(max: u32) -> DrainRequest {
    DrainRequest::new(max)
}

fn fill(sqs: &FakeSqs, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| sqs.push(DLQ, &format!("body-{i}"), Attributes::new(), None))
        .collect()
}

fn total(sqs: &FakeSqs, queues: [&str; 3]) -> usize {
    queues.iter().map(|q| sqs.len(q)).sum()
}

fn original_ids(sqs: &FakeSqs, url: &str) -> Vec<String> {
    let mut ids: Vec<String> = sqs
        .messages(url)
        .iter()
        .map(|m| {
            RedriveMeta::read(&m.attributes, &m.message_id)
                .0
                .original_message_id
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn send_entries_that_fail_stay_on_the_dlq_and_only_the_others_are_deleted() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 10);
    sqs.fail_send_entries(|_, e| {
        (e.message.body == "body-3" || e.message.body == "body-7").then(|| EntryFailure {
            id: e.id.clone(),
            code: "InvalidParameterValue".into(),
            message: "injected".into(),
            sender_fault: true,
        })
    });
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (10, 8, 0, 2)
    );
    let left: Vec<String> = sqs.messages(DLQ).into_iter().map(|m| m.body).collect();
    assert_eq!(left, ["body-3", "body-7"]);
    assert_eq!(sqs.len(SRC), 8);
    assert_eq!(total(&sqs, [DLQ, SRC, POISON]), 10, "conservation");
    let published = cw.published.lock().unwrap().clone();
    assert_eq!(published.len(), 1, "one PutMetricData per invocation");
    assert_eq!(published[0].2.successful_redrives, 8);
    assert_eq!(published[0].2.redrive_failures, 2);
    assert_eq!(published[0].1, "orders-dlq");
}

#[tokio::test]
async fn a_whole_call_that_fails_is_the_sdks_to_retry_and_deletes_nothing() {
    // GIVEN a SendMessageBatch that fails as a whole once (the SDK's own attempts spent)
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 5);
    sqs.fail_next("SendMessageBatch", throttled("SendMessageBatch"));
    // WHEN a drain runs
    let s = engine.run(&request(5)).await.unwrap();
    // THEN the engine does not call again: every entry stays on the DLQ, counted failed
    assert_eq!((s.received, s.redriven, s.failed), (5, 0, 5), "{s:?}");
    assert_eq!(sqs.calls.send_batch.load(Ordering::SeqCst), 1);
    assert_eq!(sqs.calls.delete_batch.load(Ordering::SeqCst), 0);
    assert_eq!(sqs.len(DLQ), 5);
    assert_eq!(sqs.len(SRC), 0);
}

#[tokio::test]
async fn throttled_entries_inside_a_batch_are_retried() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 4);
    let failures = Arc::new(std::sync::Mutex::new(0));
    let f = failures.clone();
    sqs.fail_send_entries(move |_, e| {
        let mut n = f.lock().unwrap();
        (e.message.body == "body-1" && *n < 2).then(|| {
            *n += 1;
            EntryFailure {
                id: e.id.clone(),
                code: "ThrottlingException".into(),
                message: "slow down".into(),
                sender_fault: false,
            }
        })
    });
    let s = engine.run(&request(4)).await.unwrap();
    assert_eq!((s.redriven, s.failed), (4, 0), "{s:?}");
    assert_eq!(*failures.lock().unwrap(), 2);
    assert_eq!(sqs.len(SRC), 4);
}

#[tokio::test]
async fn a_send_that_keeps_failing_deletes_nothing() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 3);
    for _ in 0..3 {
        sqs.fail_next("SendMessageBatch", throttled("SendMessageBatch"));
    }
    let s = engine.run(&request(3)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.failed), (3, 0, 3));
    assert_eq!(sqs.len(DLQ), 3, "all still on the DLQ");
    assert_eq!(sqs.len(SRC), 0);
}

#[tokio::test]
async fn delete_partial_failure_gives_a_duplicate_never_a_loss() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 10);
    sqs.fail_delete_entries(|m| m.body == "body-2" || m.body == "body-5");
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.failed), (10, 8, 2), "{s:?}");
    assert_eq!(sqs.len(SRC), 10, "every copy was sent");
    let left: Vec<String> = sqs.messages(DLQ).into_iter().map(|m| m.body).collect();
    assert_eq!(
        left,
        ["body-2", "body-5"],
        "originals whose delete failed remain: duplicates, not losses"
    );
}

#[tokio::test]
async fn a_crash_between_send_and_delete_leaves_a_duplicate_not_a_loss() {
    let (sqs, _cw, engine) = setup(&[]);
    let ids = fill(&sqs, 7);
    sqs.hang_deletes(true);
    let crashed = tokio::time::timeout(Duration::from_millis(300), engine.run(&request(7))).await;
    assert!(crashed.is_err(), "the drain was killed mid-flight");
    assert_eq!(sqs.len(SRC), 7, "sends were acknowledged");
    assert_eq!(sqs.len(DLQ), 7, "nothing was deleted");
    // After the visibility timeout the next run redrives them again: a duplicate per message,
    // with the same originalMessageId so the idempotent consumer absorbs it.
    sqs.hang_deletes(false);
    sqs.expire_visibility(DLQ);
    let s = engine.run(&request(7)).await.unwrap();
    assert_eq!(s.redriven, 7);
    assert!(sqs.is_empty(DLQ));
    let mut want = ids.clone();
    want.extend(ids);
    want.sort();
    assert_eq!(original_ids(&sqs, SRC), want);
}

#[tokio::test]
async fn fifo_keeps_group_order_when_a_send_fails() {
    let (sqs, _cw, engine) = setup(&[
        ("DLQ_URL", DLQ_FIFO),
        ("SOURCE_QUEUE_URL", SRC_FIFO),
        ("POISON_QUEUE_URL", POISON_FIFO),
    ]);
    for i in 0..4 {
        sqs.push(DLQ_FIFO, &format!("a{i}"), Attributes::new(), Some("A"));
        sqs.push(DLQ_FIFO, &format!("b{i}"), Attributes::new(), Some("B"));
    }
    // a1 fails: a2 and a3 must not overtake it; group B flows.
    sqs.fail_send_entries(|_, e| {
        (e.message.body == "a1").then(|| EntryFailure {
            id: e.id.clone(),
            code: "InternalError".into(),
            message: "x".into(),
            sender_fault: true,
        })
    });
    let s = engine.run(&request(8)).await.unwrap();
    let sent: Vec<(String, Option<String>)> = sqs
        .messages(SRC_FIFO)
        .into_iter()
        .map(|m| (m.body, m.group_id))
        .collect();
    let a: Vec<&str> = sent
        .iter()
        .filter(|(_, g)| g.as_deref() == Some("A"))
        .map(|(b, _)| b.as_str())
        .collect();
    let b: Vec<&str> = sent
        .iter()
        .filter(|(_, g)| g.as_deref() == Some("B"))
        .map(|(b, _)| b.as_str())
        .collect();
    assert_eq!(a, ["a0"], "nothing of group A after the failed a1");
    assert_eq!(b, ["b0", "b1", "b2", "b3"], "group B in order");
    assert!(
        sqs.messages(SRC_FIFO)
            .iter()
            .all(|m| m.delay_seconds.is_none()),
        "no per-message delay on FIFO"
    );
    let left: Vec<String> = sqs.messages(DLQ_FIFO).into_iter().map(|m| m.body).collect();
    assert_eq!(left, ["a1", "a2", "a3"]);
    assert_eq!(s.redriven, 5);
    assert_eq!(s.failed, s.received - 5);
    assert_eq!(total(&sqs, [DLQ_FIFO, SRC_FIFO, POISON_FIFO]), 8);
}

#[tokio::test]
async fn stops_at_the_limit_with_the_rest_left() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 35);
    let s = engine.run(&request(23)).await.unwrap();
    assert_eq!(s.received, 23);
    assert_eq!(s.redriven, 23);
    assert_eq!(s.stopped_because, StopReason::Limit);
    assert_eq!(s.dlq_remaining, Some(12));
    assert_eq!(sqs.len(SRC), 23);
}

#[tokio::test]
async fn stops_before_the_deadline_and_finishes_in_flight_batches() {
    let sqs = FakeSqs::with_latency(Duration::from_millis(40));
    let cfg = config(&[("MAX_CONCURRENT_BATCHES", "2")]);
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    fill(&sqs, 400);
    let cw = FakeCloudWatch::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw.clone(), cfg).with_settings(Settings {
        deadline_margin: Duration::from_millis(200),
        post_drain_reserve: Duration::from_millis(20),
        ..settings()
    });
    let started = Instant::now();
    let deadline = started + Duration::from_millis(700);
    let s = engine
        .run(&DrainRequest {
            deadline: Some(deadline),
            ..request(1000)
        })
        .await
        .unwrap();
    assert_eq!(s.stopped_because, StopReason::Deadline);
    assert!(s.received > 0 && s.received < 400, "{s:?}");
    assert_eq!(s.failed, 0, "in-flight batches finished: {s:?}");
    assert_eq!(s.redriven, s.received);
    assert!(
        Instant::now() < deadline + Duration::from_millis(150),
        "returned near the deadline"
    );
    assert_eq!(sqs.len(SRC) + sqs.len(DLQ), 400);
}

#[tokio::test]
async fn velocity_cap_spreads_the_drain() {
    let (sqs, _cw, engine) = setup(&[
        ("MAX_MESSAGES_PER_SECOND", "40"),
        ("MAX_CONCURRENT_BATCHES", "4"),
    ]);
    fill(&sqs, 40);
    let started = Instant::now();
    let s = engine.run(&request(40)).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(s.redriven, 40);
    // 4 receives of 10 at 40/s: the 4th may start at 30 messages / 40 per s = 0.75 s.
    assert!(elapsed >= Duration::from_millis(740), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn without_a_cap_pipelines_overlap() {
    let sqs = FakeSqs::with_latency(Duration::from_millis(50));
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    fill(&sqs, 80);
    let cw = FakeCloudWatch::new();
    let engine = Engine::new(
        sqs.clone(),
        cw.clone(),
        cw.clone(),
        config(&[("MAX_CONCURRENT_BATCHES", "8")]),
    )
    .with_settings(settings());
    let started = Instant::now();
    let s = engine.run(&request(80)).await.unwrap();
    assert_eq!(s.redriven, 80);
    // Sequentially: 8 x (receive + send + delete) x 50 ms = 1.2 s, plus empty receives.
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        sqs.calls
            .send_batch
            .load(std::sync::atomic::Ordering::SeqCst),
        8
    );
    assert_eq!(
        sqs.calls
            .delete_batch
            .load(std::sync::atomic::Ordering::SeqCst),
        8
    );
}

#[tokio::test]
async fn dry_run_plans_and_releases_everything() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 12);
    let mut poisoned = Attributes::new();
    RedriveMeta {
        attempt: 5,
        ..RedriveMeta::fresh("orig-1")
    }
    .write_into(&mut poisoned);
    sqs.push(DLQ, "spent", poisoned, None);
    let before = sqs.messages(DLQ);
    let s = engine.run(&common::dry_run(100)).await.unwrap();
    assert!(s.dry_run);
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (13, 12, 1, 0)
    );
    assert_eq!(s.stopped_because, StopReason::QueueEmpty);
    assert_eq!(sqs.len(SRC) + sqs.len(POISON), 0, "nothing sent");
    let after = sqs.messages(DLQ);
    assert_eq!(after.len(), 13, "nothing deleted");
    for (a, b) in before.iter().zip(&after) {
        assert_eq!((&a.body, &a.attributes), (&b.body, &b.attributes));
    }
    assert_eq!(
        sqs.depth_visible(DLQ),
        13,
        "released: visible again at once"
    );
    assert_eq!(
        cw.published.lock().unwrap()[0].2.successful_redrives,
        0,
        "a plan is not a redrive"
    );
}

#[tokio::test]
async fn guard_alarm_in_alarm_opens_the_circuit() {
    let (sqs, cw, engine) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors,latency")]);
    fill(&sqs, 3);
    cw.set_state("downstream-errors", "OK");
    cw.set_state("latency", "ALARM");
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(s.received, 0);
    assert_eq!(
        sqs.calls.receive.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing received"
    );
    assert_eq!(s.dlq_remaining, Some(3));
    cw.set_state("latency", "OK");
    assert_eq!(engine.run(&request(10)).await.unwrap().redriven, 3);
}

#[tokio::test]
async fn unreadable_guard_alarms_fail_closed() {
    let (sqs, cw, engine) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors")]);
    fill(&sqs, 2);
    *cw.fail_alarms.lock().unwrap() = true;
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(sqs.len(DLQ), 2);
}

#[tokio::test]
async fn metrics_failure_never_fails_the_drain() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 4);
    *cw.fail_metrics.lock().unwrap() = true;
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(s.redriven, 4);
    assert_eq!(sqs.len(SRC), 4);
}

#[tokio::test]
async fn rearms_the_triggering_alarm_after_every_drain_whatever_the_backlog() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 15);
    let alarm = || DrainRequest {
        trigger_alarm: Some("orders-dlq-depth".into()),
        ..request(10)
    };
    cw.set_state("orders-dlq-depth", "ALARM");
    let s = engine.run(&alarm()).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::Limit);
    assert_eq!(
        cw.set_ok_calls.lock().unwrap().as_slice(),
        ["orders-dlq-depth"]
    );
    // The rest drains to empty; the alarm is in ALARM again (inflow): re-armed all the same,
    // or it would never notify again.
    cw.set_state("orders-dlq-depth", "ALARM");
    let s = engine.run(&alarm()).await.unwrap();
    assert_eq!((s.redriven, s.dlq_remaining), (5, Some(0)));
    assert_eq!(s.stopped_because, StopReason::QueueEmpty);
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 2);
    // An alarm that already left ALARM is left alone.
    let s = engine.run(&alarm()).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::QueueEmpty);
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 2);
    // A drain that names no trigger alarm never re-arms; dry runs never re-arm; REARM_ALARM=false never re-arms.
    cw.set_state("orders-dlq-depth", "ALARM");
    fill(&sqs, 15);
    engine.run(&request(10)).await.unwrap();
    engine
        .run(&DrainRequest {
            dry_run: true,
            ..alarm()
        })
        .await
        .unwrap();
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 2);
    let (sqs2, cw2, engine2) = setup(&[("REARM_ALARM", "false")]);
    fill(&sqs2, 15);
    cw2.set_state("orders-dlq-depth", "ALARM");
    engine2.run(&alarm()).await.unwrap();
    assert!(cw2.set_ok_calls.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_open_circuit_rearms_at_most_once_per_alarm_period() {
    let (sqs, cw, engine) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors")]);
    fill(&sqs, 3);
    cw.set_state("downstream-errors", "ALARM");
    cw.periods
        .lock()
        .unwrap()
        .insert("orders-dlq-depth".into(), 300);
    let alarm = DrainRequest {
        trigger_alarm: Some("orders-dlq-depth".into()),
        ..request(10)
    };
    cw.set_state("orders-dlq-depth", "ALARM");
    let s = engine.run(&alarm).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 1);
    // The next evaluation a minute later fires again: the guard is still open, no re-arm.
    tokio::time::advance(Duration::from_secs(60)).await;
    cw.set_state("orders-dlq-depth", "ALARM");
    assert_eq!(
        engine.run(&alarm).await.unwrap().stopped_because,
        StopReason::CircuitOpen
    );
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 1, "no flapping");
    // One period (300 s) after the re-arm: again.
    tokio::time::advance(Duration::from_secs(241)).await;
    engine.run(&alarm).await.unwrap();
    assert_eq!(cw.set_ok_calls.lock().unwrap().len(), 2);
    assert_eq!(sqs.len(DLQ), 3);
}

#[tokio::test]
async fn poison_pills_are_isolated_with_their_reasons() {
    let (sqs, _cw, engine) = setup(&[("MAX_REDRIVE_ATTEMPTS", "2")]);
    let mut spent = Attributes::new();
    RedriveMeta {
        attempt: 2,
        ..RedriveMeta::fresh("orig-spent")
    }
    .write_into(&mut spent);
    sqs.push(DLQ, "spent", spent, None);
    let permanent = permanent_failure();
    sqs.push(DLQ, "permanent", permanent, None);
    let mut full = Attributes::new();
    for i in 0..10 {
        full.insert(format!("a{i}"), MessageAttribute::string("v"));
    }
    sqs.push(DLQ, "full", full.clone(), None);
    sqs.push(DLQ, "fresh", Attributes::new(), None);

    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 3, 0));
    let poison = sqs.messages(POISON);
    let reason_of = |body: &str| {
        let m = poison.iter().find(|m| m.body == body).unwrap();
        RedriveMeta::read(&m.attributes, &m.message_id).0.reason
    };
    assert_eq!(reason_of("spent"), Some(IsolationReason::MaxAttempts));
    assert_eq!(
        reason_of("permanent"),
        Some(IsolationReason::PermanentFailure)
    );
    let unstamped = poison.iter().find(|m| m.body == "full").unwrap();
    assert_eq!(unstamped.attributes, full, "parked exactly as received");
    assert_eq!(sqs.messages(SRC)[0].body, "fresh");
}

#[tokio::test]
async fn the_init_warm_up_reads_the_destinations_limits_only_and_moves_nothing() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 3);
    sqs.set_max_message_size(SRC, 2048);
    let limits = engine.warm_up().await.expect("the destinations answer");
    assert_eq!(limits.source_max_bytes, 2048);
    // two calls at once, the source's and the poison queue's; no depth read, no message moved
    assert_eq!(sqs.calls.max_size.load(Ordering::SeqCst), 2);
    assert_eq!(sqs.calls.depth.load(Ordering::SeqCst), 0);
    assert_eq!(sqs.calls.drain_calls(), 0);
    assert_eq!(sqs.len(DLQ), 3);
}

#[tokio::test]
async fn a_failed_warm_up_is_reported_to_init_and_the_first_drain_reads_the_limits_again() {
    let (sqs, _cw, engine) = setup(&[]);
    fill(&sqs, 3);
    sqs.fail_next("GetQueueAttributes", throttled("GetQueueAttributes"));
    assert!(engine.warm_up().await.is_err());
    assert_eq!(sqs.len(DLQ), 3);
    let before = sqs.calls.max_size.load(Ordering::SeqCst);
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(s.redriven, 3, "{s:?}");
    assert_eq!(sqs.calls.max_size.load(Ordering::SeqCst), before + 2);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_send_does_not_push_the_invocation_past_its_deadline() {
    let (sqs, cw, engine) = setup(&[]);
    let engine = engine.with_settings(Settings {
        retry_base: Duration::from_millis(100),
        ..Settings::default()
    });
    fill(&sqs, 5);
    cw.set_state("orders-dlq-depth", "ALARM");
    // The connection stalls for an hour: far past the deadline and the 60 s visibility.
    sqs.stall("SendMessageBatch", Duration::from_secs(3600));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let s = engine
        .run(&DrainRequest {
            deadline: Some(deadline),
            trigger_alarm: Some("orders-dlq-depth".into()),
            ..request(100)
        })
        .await
        .unwrap();
    assert!(
        Instant::now() <= deadline,
        "returned {:?} after the deadline",
        Instant::now() - deadline
    );
    assert!(
        Instant::now() - started < Duration::from_secs(60),
        "done before the messages' visibility timeout ran out: {:?}",
        Instant::now() - started
    );
    assert_eq!((s.received, s.redriven, s.failed), (5, 0, 5), "{s:?}");
    assert_eq!(sqs.len(DLQ), 5, "nothing deleted that was not acknowledged");
    assert_eq!(total(&sqs, [DLQ, SRC, POISON]), 5, "conservation");
    assert_eq!(
        cw.published.lock().unwrap().len(),
        1,
        "metrics still published"
    );
    assert_eq!(
        cw.set_ok_calls.lock().unwrap().len(),
        1,
        "and the alarm re-armed"
    );
}

#[tokio::test(start_paused = true)]
async fn calls_after_the_drain_are_bounded_by_the_deadline_too() {
    let (sqs, cw, engine) = setup(&[]);
    fill(&sqs, 3);
    sqs.stall("GetQueueAttributes", Duration::from_secs(3600));
    let deadline = Instant::now() + Duration::from_secs(120);
    let s = engine
        .run(&DrainRequest {
            deadline: Some(deadline),
            ..request(100)
        })
        .await
        .unwrap();
    assert!(Instant::now() <= deadline);
    assert_eq!((s.redriven, s.dlq_remaining), (3, None));
    assert_eq!(cw.published.lock().unwrap().len(), 1);
}

fn access_denied() -> redrive_engine::ports::PortError {
    redrive_engine::ports::PortError::new(
        "ReceiveMessage",
        "AccessDenied",
        "not authorized to perform sqs:receivemessage",
        false,
    )
}

/// Arms an AccessDenied on the DLQ's next receive once the first batch was received.
struct DeniedAfterFirstBatch(Arc<FakeSqs>, std::sync::atomic::AtomicBool);

impl redrive_engine::tap::Tap for DeniedAfterFirstBatch {
    fn received(&self, queue_url: &str, count: usize) {
        if queue_url == DLQ && count > 0 && !self.1.swap(true, Ordering::SeqCst) {
            self.0.fail_next("ReceiveMessage", access_denied());
        }
    }
}

#[tokio::test]
async fn a_dlq_that_becomes_unreadable_mid_drain_fails_the_run_with_what_it_moved_reported_and_metered()
 {
    let cfg = config(&[("MAX_CONCURRENT_BATCHES", "1")]);
    let sqs = queues(&cfg);
    let cw = FakeCloudWatch::new();
    let tapped = redrive_engine::tap::Tapped {
        inner: sqs.clone(),
        tap: DeniedAfterFirstBatch(sqs.clone(), Default::default()),
    };
    let engine = Engine::new(tapped, cw.clone(), cw.clone(), cfg)
        .with_settings(settings())
        .with_seed(7);
    fill(&sqs, 15);
    let err = engine.run(&request(100)).await.unwrap_err();
    let DrainError::DlqUnreadable { reason, summary } = &err;
    assert_eq!(reason.code, "AccessDenied", "{reason}");
    assert_eq!(
        (summary.received, summary.redriven),
        (10, 10),
        "{summary:?}"
    );
    assert_eq!(summary.stopped_because, StopReason::Other);
    assert_eq!(
        summary.dlq_remaining,
        Some(5),
        "the run's end still asks the depth"
    );
    assert_eq!((sqs.len(SRC), sqs.len(DLQ)), (10, 5), "nothing lost");
    let published = cw.published.lock().unwrap().clone();
    assert_eq!(published.len(), 1, "one PutMetricData");
    assert_eq!(published[0].2.successful_redrives, 10);
    assert_eq!(published[0].2.dlq_receive_failures, 1);
}

#[tokio::test]
async fn a_guard_alarm_that_does_not_exist_opens_the_circuit() {
    let (sqs, cw, engine) = setup(&[("GUARD_ALARM_NAMES", "downstream-errors,downstream-erors")]);
    fill(&sqs, 2);
    cw.set_state("downstream-errors", "OK");
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!(s.stopped_because, StopReason::CircuitOpen);
    assert_eq!(sqs.len(DLQ), 2);
    assert_eq!(
        sqs.calls.receive.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    // INSUFFICIENT_DATA is not ALARM.
    cw.set_state("downstream-erors", "INSUFFICIENT_DATA");
    assert_eq!(engine.run(&request(10)).await.unwrap().redriven, 2);
}

fn reason_in(sqs: &FakeSqs, url: &str, body: &str) -> Option<IsolationReason> {
    let m = sqs
        .messages(url)
        .into_iter()
        .find(|m| m.body == body)
        .unwrap_or_else(|| panic!("{body} not on {url}"));
    RedriveMeta::read(&m.attributes, &m.message_id).0.reason
}

#[tokio::test]
async fn the_source_queues_own_size_limit_is_read_at_init_and_isolates_size_limit() {
    let (sqs, _cw, engine) = setup(&[]);
    sqs.set_max_message_size(SRC, 1024);
    let body = "x".repeat(1000);
    sqs.push(DLQ, &body, Attributes::new(), None);
    sqs.push(DLQ, "small", Attributes::new(), None);
    engine.warm_up().await.expect("warm-up");
    assert_eq!(
        sqs.calls.max_size.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "source and poison read once at init"
    );
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 1, 0), "{s:?}");
    assert_eq!(
        reason_in(&sqs, POISON, &body),
        Some(IsolationReason::SizeLimit)
    );
    assert_eq!(sqs.messages(SRC)[0].body, "small");
    engine.run(&request(10)).await.unwrap();
    assert_eq!(
        sqs.calls.max_size.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "not read again"
    );
}

fn reject_body(
    body: &'static str,
    queue: &'static str,
) -> impl Fn(&str, &SendEntry) -> Option<EntryFailure> {
    move |url, e| {
        (url == queue && e.message.body == body).then(|| EntryFailure {
            id: e.id.clone(),
            code: "InvalidParameterValue".into(),
            message: "rejected".into(),
            sender_fault: true,
        })
    }
}

#[tokio::test]
async fn a_copy_the_source_keeps_rejecting_is_isolated_send_rejected() {
    let (sqs, cw, engine) = setup(&[]);
    sqs.push(DLQ, "rejected", Attributes::new(), None);
    sqs.push(DLQ, "fine", Attributes::new(), None);
    sqs.fail_send_entries(reject_body("rejected", SRC));
    // Receives 1 and 2: left on the DLQ, counted failed.
    for _ in 0..2 {
        let s = engine.run(&request(10)).await.unwrap();
        assert_eq!(s.failed, 1, "{s:?}");
        assert_eq!(sqs.len(DLQ), 1);
        sqs.expire_visibility(DLQ);
    }
    // Receive 3: isolated with its own reason instead of looping until retention.
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!((s.isolated, s.failed), (1, 0), "{s:?}");
    assert!(sqs.is_empty(DLQ));
    assert_eq!(
        reason_in(&sqs, POISON, "rejected"),
        Some(IsolationReason::SendRejected)
    );
    assert_eq!(total(&sqs, [DLQ, SRC, POISON]), 2, "conservation");
    let published = cw.published.lock().unwrap().clone();
    assert_eq!(published[2].2.poison_pills_isolated, 1);
    assert_eq!(published[2].2.unplaceable_messages, 0);
}

#[tokio::test]
async fn every_copy_keeps_the_producers_aws_trace_header_whichever_way_it_goes() {
    // GIVEN messages of traced producers on the DLQ: one to redrive, one permanent failure to
    // isolate, one the source keeps rejecting; and one untraced message
    let (sqs, _cw, engine) = setup(&[]);
    let header = |n: u32| {
        TraceHeader::parse(&format!(
            "Root=1-5759e988-bd862e3fe1be46a99427279{n};Parent=53995c3f42cd8ad8;Sampled=1"
        ))
        .unwrap()
    };
    sqs.push_traced(DLQ, "redrive", Attributes::new(), header(1));
    let permanent = permanent_failure();
    sqs.push_traced(DLQ, "permanent", permanent, header(2));
    sqs.push_traced(DLQ, "rejected", Attributes::new(), header(3));
    sqs.push(DLQ, "untraced", Attributes::new(), None);
    sqs.fail_send_entries(reject_body("rejected", SRC));
    let trace_of = |url: &str, body: &str| {
        sqs.messages(url)
            .into_iter()
            .find(|m| m.body == body)
            .unwrap_or_else(|| panic!("{body} is not on {url}"))
            .trace_header
    };

    // WHEN the re-driver drains: the rejected copy goes back to the DLQ with its count
    engine.run(&request(10)).await.unwrap();

    // THEN each copy carries its own original's header, and the untraced one none
    assert_eq!(trace_of(SRC, "redrive"), Some(header(1)));
    assert_eq!(trace_of(POISON, "permanent"), Some(header(2)));
    assert_eq!(trace_of(DLQ, "rejected"), Some(header(3)));
    assert_eq!(trace_of(SRC, "untraced"), None);

    // AND WHEN the source rejects it until it is isolated `send-rejected`
    for _ in 0..2 {
        sqs.expire_visibility(DLQ);
        engine.run(&request(10)).await.unwrap();
    }

    // THEN its copy on the poison queue still carries it
    assert_eq!(
        reason_in(&sqs, POISON, "rejected"),
        Some(IsolationReason::SendRejected)
    );
    assert_eq!(trace_of(POISON, "rejected"), Some(header(3)));
}

#[tokio::test]
async fn a_rejected_copy_is_isolated_at_its_third_rejection_whatever_its_receive_count() {
    // GIVEN a message that sweeps and searches received three times before the re-driver
    // saw it, and a source queue that rejects its copy as the sender's fault
    let (sqs, _cw, engine) = setup(&[]);
    let id = sqs.push(DLQ, "rejected", Attributes::new(), None);
    for _ in 0..3 {
        sqs.receive_now(DLQ, 10, 0).unwrap();
    }
    assert_eq!(sqs.messages(DLQ)[0].receive_count, 3);
    sqs.fail_send_entries(reject_body("rejected", SRC));

    // WHEN the source rejects it twice
    for rejections in 1..=2u64 {
        let s = engine.run(&request(10)).await.unwrap();

        // THEN it stays on the DLQ, counted failed, and its copy there carries the count of
        // the re-driver's own rejected sends, its history kept
        assert_eq!((s.isolated, s.failed), (0, 1), "{s:?}");
        assert!(sqs.is_empty(POISON));
        let left = sqs.messages(DLQ);
        assert_eq!(left.len(), 1);
        let (meta, _) = RedriveMeta::read(&left[0].attributes, &left[0].message_id);
        assert_eq!(meta.extra["sendRejections"], json!(rejections));
        assert_eq!(meta.original_message_id, id);
        assert_eq!(meta.attempt, 0);
        sqs.expire_visibility(DLQ);
    }

    // AND the third rejection isolates it `send-rejected`
    let s = engine.run(&request(10)).await.unwrap();
    assert_eq!((s.isolated, s.failed), (1, 0), "{s:?}");
    assert_eq!(
        reason_in(&sqs, POISON, "rejected"),
        Some(IsolationReason::SendRejected)
    );
    assert_eq!(original_ids(&sqs, POISON), vec![id]);
    assert_eq!(total(&sqs, [DLQ, SRC, POISON]), 1, "conservation");
}

#[tokio::test]
async fn a_message_the_poison_queue_rejects_too_stays_on_the_dlq_with_a_metric() {
    let (sqs, cw, engine) = setup(&[]);
    sqs.push(DLQ, "nowhere", Attributes::new(), None);
    let src = reject_body("nowhere", SRC);
    let poison = reject_body("nowhere", POISON);
    sqs.fail_send_entries(move |url, e| src(url, e).or_else(|| poison(url, e)));
    for _ in 0..3 {
        engine.run(&request(10)).await.unwrap();
        sqs.expire_visibility(DLQ);
    }
    assert_eq!(sqs.len(DLQ), 1, "never deleted: it stays for a human");
    assert_eq!(sqs.len(SRC) + sqs.len(POISON), 0);
    let published = cw.published.lock().unwrap().clone();
    assert_eq!(published[2].2.unplaceable_messages, 1, "{published:?}");
    assert_eq!(published[2].2.redrive_failures, 1);
    assert_eq!(
        published[1].2.unplaceable_messages, 0,
        "not before its receive count"
    );
}

/// A message waiting on the DLQ (`notBefore` ahead) as the Step Functions orchestrator leaves
/// it, with its attempt already decided.
fn waiting_on_dlq(sqs: &FakeSqs, original: &str, attempt: u32, not_before_ms: i64) -> String {
    let mut meta = RedriveMeta {
        attempt,
        ..RedriveMeta::fresh(original)
    };
    meta.set_not_before(Some(not_before_ms));
    let mut a = Attributes::new();
    meta.write_into(&mut a);
    sqs.push(DLQ, &format!("waiting {original}"), a, None)
}

#[tokio::test]
async fn the_lambdas_drain_honours_a_wait_it_did_not_decide_and_redrives_it_when_due() {
    // GIVEN the re-driver Lambda's engine (backoffs within 900 s) and two messages the
    // orchestrator left waiting: one due in an hour, one due already
    let (sqs, _, engine) = setup(&[]);
    waiting_on_dlq(&sqs, "o-later", 2, now_ms() + 3_600_000);
    waiting_on_dlq(&sqs, "o-due", 3, now_ms() - 1_000);

    // WHEN it drains
    let s = engine.drain(&request(10)).await.unwrap();

    // THEN the one not yet due goes back to the DLQ for one more hop, its history unchanged,
    // and the due one goes to its source at once as the attempt decided
    assert_eq!((s.received, s.redriven, s.waiting, s.failed), (2, 1, 1, 0));
    let back = sqs.messages(DLQ);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].delay_seconds, Some(900));
    let meta = RedriveMeta::read(&back[0].attributes, &back[0].message_id).0;
    assert_eq!(
        (meta.original_message_id.as_str(), meta.attempt),
        ("o-later", 2)
    );
    assert!(meta.not_before_ms().is_some());
    let sent = sqs.messages(SRC);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].delay_seconds, Some(0));
    let meta = RedriveMeta::read(&sent[0].attributes, &sent[0].message_id).0;
    assert_eq!(
        (meta.original_message_id.as_str(), meta.attempt),
        ("o-due", 3)
    );
    assert_eq!(meta.not_before_ms(), None);
    assert!(sqs.is_empty(POISON));
    // AND its response says so (`waiting` appears only when not 0)
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["waiting"], json!(1));
    let quiet = engine.drain(&request(10)).await.unwrap();
    assert!(
        serde_json::to_value(&quiet)
            .unwrap()
            .get("waiting")
            .is_none()
    );
}
