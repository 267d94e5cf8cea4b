//! The drain on the ordering fake when SQS delivers a message twice: no second copy, deletes
//! with the latest receipt handle, and a hold renewed before it lapses.

use std::sync::Arc;
use std::time::Duration;

use redrive_shared::Attributes;

use super::{DrainRequest, Engine, Settings};
use crate::fake::orders::{self, DLQ, POISON, SRC};
use crate::fake::{FakeCloudWatch, FakeSqs};
use crate::ports::PortError;

type FakeEngine = Engine<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>>;

fn engine(sqs: &Arc<FakeSqs>, pairs: &[(&str, &str)], settings: Settings) -> FakeEngine {
    let config = orders::config(pairs);
    for q in [DLQ, SRC, POISON] {
        sqs.create_queue(q);
    }
    let cw = FakeCloudWatch::new();
    Engine::new(sqs.clone(), cw.clone(), cw, config)
        .with_settings(settings)
        .with_seed(7)
}

fn fast() -> Settings {
    Settings {
        retry_base: Duration::from_millis(1),
        receive_wait_seconds: 0,
        ..Settings::default()
    }
}

fn fill(sqs: &FakeSqs, n: usize) {
    for i in 0..n {
        sqs.push(DLQ, &format!("body-{i}"), Attributes::new(), None);
    }
}

/// Nothing left on the DLQ, even once every hold lapsed.
fn dlq_empty(sqs: &FakeSqs) -> bool {
    sqs.expire_visibility(DLQ);
    sqs.is_empty(DLQ)
}

#[tokio::test(start_paused = true)]
async fn a_message_delivered_to_two_pipelines_is_copied_once_and_deleted_with_its_latest_handle() {
    // Two pipelines receive at once; the second receive returns the first one's messages
    // again, with new handles (the first handles go stale).
    let sqs = FakeSqs::with_latency(Duration::from_millis(5));
    let engine = engine(&sqs, &[("MAX_CONCURRENT_BATCHES", "2")], fast());
    fill(&sqs, 3);
    sqs.redeliver_in_flight(1);
    // A budget for both pipelines' receives.
    let s = engine.run(&DrainRequest::new(100)).await.unwrap();
    assert_eq!(sqs.len(SRC), 3, "one copy of each message");
    assert_eq!((s.received, s.redriven, s.failed), (3, 3, 0), "{s:?}");
    assert!(dlq_empty(&sqs), "deleted with the latest handles");
}

#[tokio::test(start_paused = true)]
async fn a_message_received_again_after_its_copy_was_acknowledged_is_deleted_not_copied() {
    let sqs = FakeSqs::new();
    let engine = engine(&sqs, &[("MAX_CONCURRENT_BATCHES", "1")], fast());
    fill(&sqs, 3);
    // The first delete fails: the originals stay in flight, and come back on the next receive.
    sqs.fail_next(
        "DeleteMessageBatch",
        PortError::new("DeleteMessageBatch", "AccessDenied", "injected", false),
    );
    sqs.redeliver_in_flight(1);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!(sqs.len(SRC), 3, "no second copy: {s:?}");
    assert!(
        dlq_empty(&sqs),
        "the originals deleted with their new handles"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hold_shorter_than_the_batch_s_work_is_renewed_before_it_lapses() {
    let sqs = FakeSqs::new();
    let engine = engine(
        &sqs,
        &[("MAX_CONCURRENT_BATCHES", "1")],
        Settings {
            visibility_seconds: 2,
            ..fast()
        },
    );
    fill(&sqs, 2);
    // Each send takes 4 s: twice the visibility timeout.
    sqs.stall("SendMessageBatch", Duration::from_secs(4));
    let other = async {
        // Another receiver (another drain) 3 s in, once the first hold would have lapsed.
        tokio::time::sleep(Duration::from_secs(3)).await;
        sqs.receive_now(DLQ, 10, 30).unwrap()
    };
    let request = DrainRequest::new(10);
    let (s, seen) = tokio::join!(engine.run(&request), other);
    let s = s.unwrap();
    assert!(seen.is_empty(), "the hold lapsed: {seen:?}");
    assert_eq!(sqs.len(SRC), 2, "{s:?}");
    assert_eq!((s.received, s.redriven), (2, 2));
    assert!(dlq_empty(&sqs));
}

/// The most sends within any one second.
fn most_in_a_second(mut at: Vec<tokio::time::Instant>) -> usize {
    at.sort();
    (0..at.len())
        .map(|i| {
            at[i..]
                .iter()
                .take_while(|t| **t < at[i] + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn the_velocity_cap_paces_the_sends_in_every_second() {
    // A rate of 1: one message a second, never a burst, whatever the pipelines receive.
    let sqs = FakeSqs::new();
    let paced = engine(
        &sqs,
        &[
            ("MAX_MESSAGES_PER_SECOND", "1"),
            ("MAX_CONCURRENT_BATCHES", "4"),
        ],
        fast(),
    );
    fill(&sqs, 6);
    let s = paced.run(&DrainRequest::new(100)).await.unwrap();
    assert_eq!(s.redriven, 6, "{s:?}");
    assert_eq!(most_in_a_second(sqs.sent_at(SRC)), 1);

    // A rate of 4: batches of 4, at most 4 + 3 (one batch's rounding) in any second.
    let sqs = FakeSqs::new();
    let paced = engine(
        &sqs,
        &[
            ("MAX_MESSAGES_PER_SECOND", "4"),
            ("MAX_CONCURRENT_BATCHES", "4"),
        ],
        fast(),
    );
    fill(&sqs, 20);
    let started = tokio::time::Instant::now();
    let s = paced.run(&DrainRequest::new(100)).await.unwrap();
    assert_eq!(s.redriven, 20, "{s:?}");
    assert!(most_in_a_second(sqs.sent_at(SRC)) <= 4 + 3);
    assert!(
        started.elapsed() >= Duration::from_millis(4750),
        "{:?}",
        started.elapsed()
    );
}

/// `n` messages on the DLQ waiting 12 h (their wait begun by an earlier run).
fn fill_waiting(sqs: &FakeSqs, n: usize) {
    for i in 0..n {
        let mut meta = redrive_shared::meta::RedriveMeta {
            attempt: 1,
            ..redrive_shared::meta::RedriveMeta::fresh(&format!("orig-waiting-{i}"))
        };
        meta.set_not_before(Some(crate::now_ms() + 12 * 3_600_000));
        let mut attributes = Attributes::new();
        meta.write_into(&mut attributes);
        sqs.push(DLQ, &format!("waiting-{i}"), attributes, None);
    }
}

#[tokio::test(start_paused = true)]
async fn hops_counted_apart_take_nothing_of_the_budget_and_have_no_record() {
    let sqs = FakeSqs::new();
    let engine = engine(&sqs, &[], fast());
    fill_waiting(&sqs, 200);
    fill(&sqs, 5);
    let request = DrainRequest::new(5).with_records().with_max_hops(1_000);
    let s = engine.run(&request).await.unwrap();
    assert_eq!((s.received, s.redriven, s.waiting), (5, 5, 0), "{s:?}");
    assert!(
        s.hops > 0,
        "the waiting ones met on the way were sent on: {s:?}"
    );
    assert_eq!(s.records.len(), 5, "a record per redrive, none per hop");
    assert!(s.records.iter().all(|r| r.outcome == "redriven"));
    assert_eq!(
        (sqs.len(SRC), sqs.len(DLQ)),
        (5, 200),
        "none lost, none twice"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_does_not_count_hops_apart_spends_its_budget_on_them_as_before() {
    // The Lambda's drain and `redrive drain`: a hop is a message of the budget.
    let sqs = FakeSqs::new();
    let engine = engine(&sqs, &[], fast());
    fill_waiting(&sqs, 200);
    fill(&sqs, 5);
    let s = engine
        .run(&DrainRequest::new(5).with_records())
        .await
        .unwrap();
    assert_eq!(s.received, 5, "{s:?}");
    assert_eq!(s.redriven + s.waiting, 5, "{s:?}");
    assert_eq!(s.hops, 0);
    assert_eq!(s.records.len(), 5, "each hop recorded");
}

#[tokio::test(start_paused = true)]
async fn a_drain_stops_at_its_limit_once_its_hops_are_spent() {
    let sqs = FakeSqs::new();
    let drainer = engine(&sqs, &[("MAX_CONCURRENT_BATCHES", "1")], fast());
    fill_waiting(&sqs, 50);
    let s = drainer
        .run(&DrainRequest::new(40).with_max_hops(20))
        .await
        .unwrap();
    assert!(
        (20..=29).contains(&s.hops),
        "the budget, then the batch in hand: {s:?}"
    );
    assert_eq!(s.stopped_because, super::StopReason::Limit);
    assert_eq!(s.received, 0);
    assert_eq!(sqs.len(DLQ), 50, "each hop on the DLQ once");
    // A dry run holds what it receives: its hops take the budget and are planned as ever.
    let sqs = FakeSqs::new();
    let drainer = engine(&sqs, &[("MAX_CONCURRENT_BATCHES", "1")], fast());
    fill_waiting(&sqs, 50);
    let dry = DrainRequest {
        dry_run: true,
        ..DrainRequest::new(10).with_max_hops(20)
    };
    let s = drainer.run(&dry).await.unwrap();
    assert_eq!((s.received, s.waiting, s.hops), (10, 10, 0), "{s:?}");
}
