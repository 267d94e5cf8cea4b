//! The replay of parked messages, on the fake SQS.

use redrive_engine::ports::{Received, SendEntry};
use redrive_shared::config::QueueUrl;
use redrive_shared::decision::dedup_id;
use redrive_shared::limits::MAX_MESSAGE_BYTES;
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use redrive_shared::timefmt::rfc3339_from_millis;

use super::entry::DEDUP_KIND;
use super::report::Report;
use super::walk::{Destination, Plan, walk};
use super::*;
use redrive_engine::fake::FakeSqs;
use redrive_engine::ports::EntryFailure;
use redrive_shared::{Attributes, ErrorClass, LastError, MessageAttribute};

const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";
const SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";

fn parked_attributes() -> Attributes {
    let mut attrs = Attributes::new();
    attrs.insert("tenant".into(), MessageAttribute::string("acme"));
    RedriveMeta {
        attempt: 5,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        last_redriven_at: Some("2026-11-21T10:30:00Z".into()),
        isolated_at: Some("2026-11-21T11:00:00Z".into()),
        reason: Some(IsolationReason::PermanentFailure),
        last_error: Some(LastError::new(
            ErrorClass::Permanent,
            "HTTP_400",
            "bad",
            "2026-11-21T10:59:00Z".into(),
        )),
        ..RedriveMeta::fresh("orig-1")
    }
    .write_into(&mut attrs);
    attrs
}

fn received(attributes: Attributes) -> Received {
    crate::fixtures::received("poison-copy-1", "{\"order\":1}", attributes)
}

#[test]
fn the_copy_resets_the_attempt_and_clears_last_error_and_the_isolation() {
    let mut attributes = parked_attributes();
    let (mut parked, _) = RedriveMeta::read(&attributes, "x");
    parked.set_dlq("https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq");
    parked.write_into(&mut attributes);
    let m = received(attributes);
    let (entry, stamped) = replay_entry(&m, false, MAX_MESSAGE_BYTES, 1_795_300_000_000);
    assert!(stamped);
    assert_eq!(entry.message.body, m.body);
    assert_eq!(entry.message.attributes["tenant"], m.attributes["tenant"]);
    assert_eq!(
        (entry.message.group_id, entry.message.dedup_id),
        (None, None)
    );
    let (meta, _) = RedriveMeta::read(&entry.message.attributes, "new-id");
    assert_eq!(meta.attempt, 0);
    assert_eq!(meta.last_error, None);
    assert_eq!((&meta.reason, meta.isolated_at.as_deref()), (&None, None));
    assert_eq!(meta.dlq(), None, "the copy is not parked any more");
    assert_eq!(meta.original_message_id, "orig-1");
    assert_eq!(
        meta.first_redriven_at.as_deref(),
        Some("2026-11-21T10:00:00Z")
    );
    assert_eq!(
        meta.last_redriven_at.as_deref(),
        Some(rfc3339_from_millis(1_795_300_000_000).as_str())
    );
    assert!(
        !meta.is_permanent_failure(),
        "the re-driver will not isolate it again"
    );
}

#[test]
fn a_fifo_destination_gets_a_group_and_a_per_copy_dedup_id() {
    let mut m = received(parked_attributes());
    let (entry, _) = replay_entry(&m, true, MAX_MESSAGE_BYTES, 0);
    assert_eq!(entry.message.group_id.as_deref(), Some("orig-1"));
    assert_eq!(
        entry.message.dedup_id,
        Some(dedup_id("poison-copy-1", DEDUP_KIND))
    );
    m.group_id = Some("customer-7".into());
    assert_eq!(
        replay_entry(&m, true, MAX_MESSAGE_BYTES, 0)
            .0
            .message
            .group_id
            .as_deref(),
        Some("customer-7")
    );
}

#[test]
fn a_fifo_dlqs_message_parked_in_a_standard_queue_is_replayed_into_its_own_group() {
    let mut attributes = parked_attributes();
    let (mut meta, _) = RedriveMeta::read(&attributes, "x");
    meta.extra
        .insert("groupId".into(), serde_json::json!("customer-7"));
    meta.write_into(&mut attributes);
    let m = received(attributes);
    let (entry, stamped) = replay_entry(&m, true, MAX_MESSAGE_BYTES, 0);
    assert!(stamped);
    assert_eq!(entry.message.group_id.as_deref(), Some("customer-7"));
    // The copy is not parked any more: the group is its MessageGroupId, not in the stamp.
    let (copy, _) = RedriveMeta::read(&entry.message.attributes, "new-id");
    assert!(!copy.to_json().contains("groupId"), "{}", copy.to_json());
}

#[test]
fn a_message_with_no_room_for_the_stamp_is_sent_as_received() {
    let mut attrs = Attributes::new();
    for i in 0..10 {
        attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
    }
    let m = received(attrs.clone());
    let (entry, stamped) = replay_entry(&m, false, MAX_MESSAGE_BYTES, 0);
    assert!(!stamped);
    assert_eq!(entry.message.attributes, attrs);
    // Too large for the destination's own limit, with the stamp: sent as received too.
    let m = received(parked_attributes());
    let (entry, stamped) = replay_entry(&m, false, m.body.len() + 10, 0);
    assert!(!stamped);
    assert_eq!(entry.message.attributes, m.attributes);
}

#[tokio::test]
async fn nothing_is_deleted_from_poison_unless_its_copy_was_acknowledged() {
    // GIVEN two parked messages, and a source queue that refuses the copy of one of them
    let sqs = FakeSqs::new();
    sqs.create_queue(POISON);
    sqs.create_queue(SOURCE);
    sqs.push(POISON, "keep-me", parked_attributes(), None);
    sqs.push(POISON, "send-me", parked_attributes(), None);
    sqs.fail_send_entries(|_, e| (e.message.body == "keep-me").then(|| refuse(e)));

    // WHEN everything is replayed
    let report = replay_all(&sqs, POISON, SOURCE).await;

    // THEN the refused one is still parked (and visible again), the other moved
    assert_eq!(report.replayed.len(), 1);
    assert_eq!(report.failed.len(), 1);
    assert!(
        report.failed[0].1.starts_with("InternalError"),
        "{:?}",
        report.failed
    );
    let parked: Vec<String> = sqs.messages(POISON).into_iter().map(|m| m.body).collect();
    assert_eq!(parked, ["keep-me"]);
    assert_eq!(sqs.depth_visible(POISON), 1);
    let sent: Vec<String> = sqs.messages(SOURCE).into_iter().map(|m| m.body).collect();
    assert_eq!(sent, ["send-me"]);
}

const POISON_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison.fifo";
const SOURCE_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo";

async fn replay_all(sqs: &std::sync::Arc<FakeSqs>, from: &str, to: &str) -> Report {
    let args = ReplayArgs {
        from: Some(QueueRef::parse(from).unwrap()),
        to: Some(QueueRef::parse(to).unwrap()),
        selection: crate::select::Selection {
            id: vec![],
            all: true,
            filters: Default::default(),
            max: None,
            plan: None,
        },
        dry_run: false,
        allow_unstamped: false,
    };
    let plan = Plan {
        args: &args,
        from: QueueUrl::parse(from).unwrap(),
        to: Some(Destination {
            url: QueueUrl::parse(to).unwrap(),
            max_bytes: MAX_MESSAGE_BYTES,
        }),
        sources: None,
    };
    let mut filter = Filter::new(&args.selection, now_ms());
    let mut scan = Scanner::new(sqs, from);
    let mut report = Report::default();
    walk(sqs, &mut scan, &mut filter, &plan, &mut report)
        .await
        .unwrap();
    scan.release().await;
    report
}

fn refuse(e: &SendEntry) -> EntryFailure {
    EntryFailure {
        id: e.id.clone(),
        code: "InternalError".into(),
        message: "injected".into(),
        sender_fault: false,
    }
}

fn bodies(sqs: &FakeSqs, url: &str) -> Vec<String> {
    sqs.messages(url).into_iter().map(|m| m.body).collect()
}

#[tokio::test]
async fn replay_fifo_keeps_group_order() {
    // GIVEN a1 then a2 of group a parked on a FIFO queue, and a source queue that refuses
    // the first try of a1 (a partial batch failure, worth a retry)
    let sqs = FakeSqs::new();
    sqs.create_queue(POISON_FIFO);
    sqs.create_queue(SOURCE_FIFO);
    for body in ["a1", "a2"] {
        sqs.push(POISON_FIFO, body, parked_attributes(), Some("a"));
    }
    let tries = std::sync::atomic::AtomicUsize::new(0);
    sqs.fail_send_entries(move |_, e| {
        (e.message.body == "a1" && tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0)
            .then(|| refuse(e))
    });

    // WHEN both are replayed
    let report = replay_all(&sqs, POISON_FIFO, SOURCE_FIFO).await;

    // THEN a1 was retried before a2 was sent: the group's order is kept
    assert_eq!(report.replayed.len(), 2, "{report:?}");
    assert_eq!(bodies(&sqs, SOURCE_FIFO), ["a1", "a2"]);
    assert!(sqs.is_empty(POISON_FIFO));
}

#[tokio::test]
async fn replay_fifo_holds_a_group_behind_a_failed_message() {
    // GIVEN a1, a2 of group a and b1 of group b, and a source that keeps refusing a1
    let sqs = FakeSqs::new();
    sqs.create_queue(POISON_FIFO);
    sqs.create_queue(SOURCE_FIFO);
    sqs.push(POISON_FIFO, "a1", parked_attributes(), Some("a"));
    sqs.push(POISON_FIFO, "b1", parked_attributes(), Some("b"));
    sqs.push(POISON_FIFO, "a2", parked_attributes(), Some("a"));
    sqs.fail_send_entries(|_, e| (e.message.body == "a1").then(|| refuse(e)));

    // WHEN everything is replayed
    let report = replay_all(&sqs, POISON_FIFO, SOURCE_FIFO).await;

    // THEN a2 is not sent past a1: both stay parked and are reported; b1 went
    assert_eq!(bodies(&sqs, SOURCE_FIFO), ["b1"]);
    assert_eq!(bodies(&sqs, POISON_FIFO), ["a1", "a2"]);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.held.len(), 1, "{report:?}");
    assert!(report.shortfall());
}
