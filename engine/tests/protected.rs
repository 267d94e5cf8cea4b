//! A protected DLQ (one redrive did not create, with no configured source) on the port fake:
//! each message goes back to the queue SQS moved it from, a DLQ fed by several sources sends
//! each to its own, and a message whose source is not known is isolated `unknown-source`,
//! never guessed. Every test checks that nothing received is lost.

use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::{POISON, settings};
use redrive_engine::fake::{FakeCloudWatch, FakeSqs, clock};
use redrive_engine::ports::PortError;
use redrive_engine::{DrainRequest, Engine};
use redrive_shared::Attributes;
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::{IsolationReason, RedriveMeta};

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/shared-dlq";
const ORDERS: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
const BILLING: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/billing";
/// A queue that does not name the DLQ in a RedrivePolicy.
const STRANGER: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/stranger";
const DLQ_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/ledger-dlq.fifo";
const LEDGER_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/ledger.fifo";

type TestEngine = Engine<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>>;

fn protected(dlq: &str, pairs: &[(&str, &str)]) -> RedriverConfig {
    let mut map: std::collections::HashMap<String, String> = [
        ("DLQ_URLS", dlq),
        ("POISON_QUEUE_URL", POISON),
        ("BACKOFF_JITTER", "none"),
        ("BACKOFF_BASE_SECONDS", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    map.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut fleet = RedriverConfig::fleet_from_env(&Env(move |k: &str| map.get(k).cloned()))
        .expect("valid test config");
    assert_eq!(fleet.len(), 1);
    fleet.remove(0)
}

fn setup(dlq: &str, sources: &[&str], pairs: &[(&str, &str)]) -> (Arc<FakeSqs>, TestEngine) {
    let sqs = FakeSqs::new();
    for q in [dlq, POISON, STRANGER].iter().chain(sources) {
        sqs.create_queue(q);
    }
    for s in sources {
        sqs.set_redrive_policy(s, dlq, 3);
    }
    let cw = FakeCloudWatch::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw, protected(dlq, pairs))
        .with_settings(settings())
        .with_seed(11)
        .with_clock(clock::now);
    (sqs, engine)
}

/// A message on `dlq` as SQS leaves it after moving it from `source`.
fn moved(sqs: &FakeSqs, dlq: &str, source: &str, body: &str) -> String {
    sqs.push_moved(dlq, source, body, Attributes::new(), None)
}

fn bodies(sqs: &FakeSqs, url: &str) -> Vec<String> {
    let mut b: Vec<String> = sqs.messages(url).into_iter().map(|m| m.body).collect();
    b.sort();
    b
}

fn meta_of(sqs: &FakeSqs, url: &str, body: &str) -> RedriveMeta {
    let m = sqs
        .messages(url)
        .into_iter()
        .find(|m| m.body == body)
        .unwrap_or_else(|| panic!("{body} is not on {url}"));
    RedriveMeta::read(&m.attributes, &m.message_id).0
}

#[tokio::test]
async fn a_dlq_fed_by_two_sources_sends_each_message_back_to_its_own() {
    let (sqs, engine) = setup(DLQ, &[ORDERS, BILLING], &[]);
    for i in 0..6 {
        moved(&sqs, DLQ, ORDERS, &format!("order-{i}"));
        moved(&sqs, DLQ, BILLING, &format!("invoice-{i}"));
    }
    let s = engine.run(&DrainRequest::new(100)).await.unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (12, 12, 0, 0)
    );
    let orders: Vec<String> = (0..6).map(|i| format!("order-{i}")).collect();
    let invoices: Vec<String> = (0..6).map(|i| format!("invoice-{i}")).collect();
    assert_eq!(bodies(&sqs, ORDERS), orders);
    assert_eq!(bodies(&sqs, BILLING), invoices);
    assert!(sqs.is_empty(DLQ) && sqs.is_empty(POISON));
    let meta = meta_of(&sqs, BILLING, "invoice-0");
    assert_eq!(meta.attempt, 1);
    assert_eq!(
        meta.source(),
        Some("arn:aws:sqs:us-east-1:000000000000:billing"),
        "the copy records where it came from"
    );
}

#[tokio::test]
async fn the_source_comes_from_what_sqs_moved_through_a_real_redrive_policy() {
    let (sqs, engine) = setup(DLQ, &[ORDERS, BILLING], &[]);
    sqs.push(ORDERS, "order-a", Attributes::new(), None);
    sqs.push(BILLING, "invoice-a", Attributes::new(), None);
    // Three failed receives each, then the fourth receive moves them to the DLQ.
    for _ in 0..4 {
        for q in [ORDERS, BILLING] {
            sqs.receive_now(q, 10, 0).expect("receive");
            sqs.expire_visibility(q);
        }
    }
    assert_eq!(sqs.len(DLQ), 2, "SQS moved both");
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.redriven), (2, 2));
    assert_eq!(bodies(&sqs, ORDERS), ["order-a"]);
    assert_eq!(bodies(&sqs, BILLING), ["invoice-a"]);
}

#[tokio::test]
async fn a_message_with_no_known_source_is_isolated_never_guessed() {
    // One source only: the tempting guess.
    let (sqs, engine) = setup(DLQ, &[ORDERS], &[]);
    let prior = RedriveMeta {
        attempt: 2,
        ..RedriveMeta::fresh("orig-by-hand")
    };
    let mut attributes = Attributes::new();
    prior.write_into(&mut attributes);
    sqs.push(DLQ, "sent-by-hand", attributes, None);
    moved(&sqs, DLQ, STRANGER, "from-a-stranger");
    moved(&sqs, DLQ, ORDERS, "order-1");
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.isolated, s.failed), (3, 1, 2, 0));
    assert_eq!(bodies(&sqs, ORDERS), ["order-1"]);
    assert!(
        sqs.is_empty(STRANGER),
        "never sent where it was not asked for"
    );
    assert_eq!(bodies(&sqs, POISON), ["from-a-stranger", "sent-by-hand"]);
    let by_hand = meta_of(&sqs, POISON, "sent-by-hand");
    assert_eq!(by_hand.reason, Some(IsolationReason::UnknownSource));
    assert_eq!(by_hand.attempt, 2, "its history is kept");
    assert_eq!(by_hand.original_message_id, "orig-by-hand");
    let stranger = meta_of(&sqs, POISON, "from-a-stranger");
    assert_eq!(stranger.reason, Some(IsolationReason::UnknownSource));
    // Each parked message says which DLQ it came from; the source SQS stamped on the stranger's
    // is kept as claimed, never as the source a replay would trust.
    assert_eq!(stranger.dlq(), Some(DLQ));
    assert_eq!(by_hand.dlq(), Some(DLQ));
    assert_eq!(
        stranger.claimed_source(),
        Some("arn:aws:sqs:us-east-1:000000000000:stranger")
    );
    assert_eq!(stranger.source(), None);
}

#[tokio::test]
async fn a_parked_message_keeps_its_source_for_a_replay() {
    let (sqs, engine) = setup(DLQ, &[BILLING], &[("MAX_REDRIVE_ATTEMPTS", "1")]);
    let spent = RedriveMeta {
        attempt: 1,
        ..RedriveMeta::fresh("orig-spent")
    };
    let mut attributes = Attributes::new();
    spent.write_into(&mut attributes);
    sqs.push_moved(DLQ, BILLING, "invoice-spent", attributes, None);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!(s.isolated, 1);
    let parked = meta_of(&sqs, POISON, "invoice-spent");
    assert_eq!(parked.reason, Some(IsolationReason::MaxAttempts));
    assert_eq!(
        parked.source(),
        Some("arn:aws:sqs:us-east-1:000000000000:billing")
    );
    assert_eq!(parked.dlq(), Some(DLQ), "the DLQ it was parked from");
}

#[tokio::test(start_paused = true)]
async fn a_long_wait_hops_on_the_dlq_and_still_goes_back_to_its_own_source() {
    // A 100 s backoff with copies delayed 10 s at most: the message waits on the DLQ, where
    // its hop carries no DeadLetterQueueSourceArn.
    let (sqs, engine) = setup(DLQ, &[ORDERS, BILLING], &[("BACKOFF_BASE_SECONDS", "100")]);
    let engine = engine.with_max_delay(10);
    moved(&sqs, DLQ, BILLING, "invoice-late");
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.waiting), (1, 1));
    let hop = sqs.messages(DLQ);
    assert_eq!(hop.len(), 1);
    assert_eq!(hop[0].dead_letter_source_arn, None, "a copy redrive sent");
    let meta = meta_of(&sqs, DLQ, "invoice-late");
    assert_eq!(
        meta.source(),
        Some("arn:aws:sqs:us-east-1:000000000000:billing")
    );
    // Received again before its time: another hop, the source kept.
    tokio::time::advance(Duration::from_secs(11)).await;
    clock::advance(11_000);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.waiting, s.isolated), (1, 1, 0));
    // Due: back to billing, not isolated unknown-source.
    tokio::time::advance(Duration::from_secs(100)).await;
    clock::advance(100_000);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.isolated), (1, 1, 0));
    assert_eq!(bodies(&sqs, BILLING), ["invoice-late"]);
    assert!(sqs.is_empty(ORDERS) && sqs.is_empty(POISON) && sqs.is_empty(DLQ));
}

#[tokio::test]
async fn a_source_that_rejects_a_copy_gets_it_back_when_it_accepts_it() {
    use redrive_engine::ports::EntryFailure;
    let (sqs, engine) = setup(DLQ, &[ORDERS, BILLING], &[]);
    moved(&sqs, DLQ, ORDERS, "order-rejected");
    let rejections = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = rejections.clone();
    sqs.fail_send_entries(move |url, e| {
        (url == ORDERS && count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0).then(|| {
            EntryFailure {
                id: e.id.clone(),
                code: "InvalidParameterValue".into(),
                message: "injected".into(),
                sender_fault: true,
            }
        })
    });
    let s = engine.run(&DrainRequest::new(1)).await.unwrap();
    assert_eq!(s.failed, 1, "rejected once: back on the DLQ with the count");
    let requeued = sqs.messages(DLQ);
    assert_eq!(requeued.len(), 1);
    assert_eq!(requeued[0].dead_letter_source_arn, None);
    sqs.expire_visibility(DLQ);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!(
        (s.redriven, s.isolated),
        (1, 0),
        "its recorded source still serves"
    );
    assert_eq!(bodies(&sqs, ORDERS), ["order-rejected"]);
}

#[tokio::test]
async fn a_fifo_dlq_sends_each_group_back_to_its_fifo_source_in_order() {
    let (sqs, engine) = setup(DLQ_FIFO, &[LEDGER_FIFO], &[]);
    for i in 0..4 {
        sqs.push_moved(
            DLQ_FIFO,
            LEDGER_FIFO,
            &format!("entry-{i}"),
            Attributes::new(),
            Some("account-7"),
        );
    }
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.failed), (4, 4, 0));
    let moved = sqs.messages(LEDGER_FIFO);
    let order: Vec<&str> = moved.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(order, ["entry-0", "entry-1", "entry-2", "entry-3"]);
    assert!(
        moved
            .iter()
            .all(|m| m.group_id.as_deref() == Some("account-7"))
    );
    assert!(moved.iter().all(|m| m.delay_seconds.is_none()));
}

#[tokio::test]
async fn a_dlq_whose_sources_cannot_be_listed_receives_nothing() {
    let (sqs, engine) = setup(DLQ, &[ORDERS], &[]);
    moved(&sqs, DLQ, ORDERS, "order-1");
    sqs.fail_next(
        "ListDeadLetterSourceQueues",
        PortError::new(
            "ListDeadLetterSourceQueues",
            "AccessDenied",
            "not authorized",
            false,
        ),
    );
    let err = engine.run(&DrainRequest::new(10)).await.unwrap_err();
    let redrive_engine::DrainError::DlqUnreadable { reason, summary } = &err;
    assert_eq!(
        (reason.operation, reason.code.as_str()),
        ("ListDeadLetterSourceQueues", "AccessDenied"),
        "the run fails, saying why"
    );
    assert_eq!((summary.received, summary.isolated), (0, 0));
    assert_eq!(
        bodies(&sqs, DLQ),
        ["order-1"],
        "not isolated for want of a list"
    );
    // The next drain lists them and redrives.
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!(s.redriven, 1);
    assert_eq!(bodies(&sqs, ORDERS), ["order-1"]);
}

#[tokio::test(start_paused = true)]
async fn a_message_that_arrives_waiting_hops_within_the_dlqs_retention() {
    // A DLQ that keeps messages 60 s, and a message whose notBefore (set by another front end,
    // the workflow's long backoffs) is 400 s away: this engine's own backoff never waits on the
    // DLQ, yet the hop must end before the DLQ's retention could expire the copy.
    let (sqs, engine) = setup(DLQ, &[ORDERS], &[]);
    sqs.set_retention(DLQ, Duration::from_secs(60));
    let mut waiting = RedriveMeta {
        attempt: 1,
        ..RedriveMeta::fresh("orig-waiting")
    };
    waiting.set_not_before(Some(clock::now() + 400_000));
    let mut attributes = Attributes::new();
    waiting.write_into(&mut attributes);
    sqs.push_moved(DLQ, ORDERS, "order-waiting", attributes, None);
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();
    assert_eq!((s.received, s.waiting), (1, 1));
    let hop = sqs.messages(DLQ);
    assert_eq!(hop.len(), 1);
    let delay = hop[0].delay_seconds.unwrap_or(0);
    assert!(
        (1..=30).contains(&delay),
        "a hop of {delay} s on a DLQ that keeps messages 60 s"
    );
}
