use super::*;
use crate::ports::HandleEntry;

const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/q";
const FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/q.fifo";

fn handle(id: &str, receipt_handle: &str) -> HandleEntry {
    HandleEntry {
        id: id.to_string(),
        receipt_handle: receipt_handle.to_string(),
    }
}

fn filled(sqs: &FakeSqs, url: &str, n: usize) -> Vec<String> {
    sqs.create_queue(url);
    (0..n)
        .map(|i| sqs.push(url, &format!("m{i}"), Attributes::new(), None))
        .collect()
}

fn drain_order(seed: u64) -> Vec<String> {
    let sqs = FakeSqs::seeded(seed);
    filled(&sqs, Q, 30);
    let mut order = Vec::new();
    loop {
        let got = sqs.receive_now(Q, 10, 300).unwrap();
        if got.is_empty() {
            return order;
        }
        order.extend(got.into_iter().map(|m| m.message_id));
    }
}

#[tokio::test]
async fn a_standard_receive_samples_the_visible_messages_in_no_set_order() {
    // GIVEN 30 messages sent in order
    let sent = filled(&FakeSqs::new(), Q, 30);

    // WHEN they are received until none is visible
    let order = drain_order(7);

    // THEN each comes once, not in the order sent, and the same seed repeats the order
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, sent);
    assert_ne!(order, sent, "best-effort order, not insertion order");
    assert_eq!(order, drain_order(7));
    assert_ne!(order, drain_order(8));
}

#[tokio::test]
async fn a_fifo_receive_returns_unlocked_groups_in_their_order() {
    // GIVEN two groups of three messages, interleaved
    let sqs = FakeSqs::new();
    sqs.create_queue(FIFO);
    let mut ids: HashMap<&str, Vec<String>> = HashMap::new();
    for i in 0..6 {
        let g = if i % 2 == 0 { "a" } else { "b" };
        let id = sqs.push(FIFO, &format!("m{i}"), Attributes::new(), Some(g));
        ids.entry(g).or_default().push(id);
    }

    // WHEN one message is received
    let first = sqs.receive_now(FIFO, 1, 300).unwrap();
    assert_eq!(first.len(), 1);
    let g = first[0].group_id.clone().unwrap();
    let other = if g == "a" { "b" } else { "a" };

    // THEN it is the head of its group, and that group is locked while it is in flight:
    // the next receive returns the other group, whole and in order
    assert_eq!(first[0].message_id, ids[g.as_str()][0]);
    let next = sqs.receive_now(FIFO, 10, 300).unwrap();
    let got: Vec<String> = next.into_iter().map(|m| m.message_id).collect();
    assert_eq!(got, ids[other]);
    assert!(sqs.receive_now(FIFO, 10, 300).unwrap().is_empty());

    // AND once the head is deleted, the rest of its group comes in order
    sqs.delete_now(FIFO, &[handle("0", &first[0].receipt_handle)])
        .unwrap();
    let rest: Vec<String> = sqs
        .receive_now(FIFO, 10, 300)
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(rest, ids[g.as_str()][1..]);
}

#[tokio::test(start_paused = true)]
async fn a_delete_with_a_stale_handle_succeeds_and_deletes_nothing() {
    // GIVEN a message received twice (its visibility ran out in between)
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 1);
    let old = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(2)).await;
    let new = sqs.receive_now(Q, 1, 30).unwrap().remove(0);

    // WHEN it is deleted with the first handle
    let outcome = sqs
        .delete_now(Q, &[handle("0", &old.receipt_handle)])
        .unwrap();

    // THEN SQS answers success, and the message is still there
    assert_eq!(outcome.succeeded, vec!["0".to_string()]);
    assert_eq!(sqs.len(Q), 1);

    // AND the latest handle deletes it
    sqs.delete_now(Q, &[handle("0", &new.receipt_handle)])
        .unwrap();
    assert_eq!(sqs.len(Q), 0);
}

#[tokio::test(start_paused = true)]
async fn the_latest_handle_deletes_after_the_visibility_ran_out() {
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 1);
    let m = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(2)).await;
    sqs.delete_now(Q, &[handle("0", &m.receipt_handle)])
        .unwrap();
    assert_eq!(sqs.len(Q), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fifo_queue_refuses_a_stale_handle() {
    let sqs = FakeSqs::new();
    sqs.create_queue(FIFO);
    sqs.push(FIFO, "b", Attributes::new(), Some("g"));
    let old = sqs.receive_now(FIFO, 1, 1).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(2)).await;
    sqs.receive_now(FIFO, 1, 30).unwrap();
    let outcome = sqs
        .delete_now(FIFO, &[handle("0", &old.receipt_handle)])
        .unwrap();
    assert!(
        outcome.failed[0].message.contains("expired"),
        "{:?}",
        outcome.failed
    );
    assert_eq!(sqs.len(FIFO), 1);
}

#[tokio::test(start_paused = true)]
async fn change_visibility_past_twelve_hours_from_the_receive_is_refused() {
    // GIVEN a message received an hour ago
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 1);
    let m = sqs.receive_now(Q, 1, 7200).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(3600)).await;
    let entry = [handle("0", &m.receipt_handle)];

    // WHEN its visibility is set to end 12 hours and 1 second after the receive
    let refused = sqs.change_visibility_now(Q, &entry, 11 * 3600 + 1).unwrap();

    // THEN SQS refuses it as the caller's fault, and 11 hours (exactly 12) is accepted
    let f = &refused.failed[0];
    assert_eq!(f.code, "InvalidParameterValue");
    assert!(
        f.message.contains("Total VisibilityTimeout"),
        "{}",
        f.message
    );
    assert!(f.sender_fault);
    let ok = sqs.change_visibility_now(Q, &entry, 11 * 3600).unwrap();
    assert_eq!(ok.succeeded, vec!["0".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn change_visibility_needs_the_latest_handle_of_a_message_in_flight() {
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 1);
    let old = sqs.receive_now(Q, 1, 1).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(2)).await;
    // Its visibility ran out: not in flight.
    let out = sqs
        .change_visibility_now(Q, &[handle("0", &old.receipt_handle)], 60)
        .unwrap();
    assert_eq!(out.failed[0].code, "MessageNotInflight");
    // Received again: the old handle is stale.
    sqs.receive_now(Q, 1, 60).unwrap();
    let out = sqs
        .change_visibility_now(Q, &[handle("0", &old.receipt_handle)], 60)
        .unwrap();
    assert_eq!(out.failed[0].code, "ReceiptHandleIsInvalid");
}

#[tokio::test(start_paused = true)]
async fn retention_deletes_messages_in_flight_or_not() {
    // GIVEN a queue keeping messages 60 seconds, one message in flight and one visible
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 2);
    sqs.set_retention(Q, Duration::from_secs(60));
    let m = sqs.receive_now(Q, 1, 300).unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(30)).await;
    let young = sqs.push(Q, "young", Attributes::new(), None);

    // WHEN 60 seconds passed since the first two were sent
    tokio::time::advance(Duration::from_secs(30)).await;

    // THEN both are gone, the one in flight too; the younger one stays
    let left: Vec<String> = sqs.messages(Q).into_iter().map(|m| m.message_id).collect();
    assert_eq!(left, vec![young]);
    assert_eq!(sqs.depth_now(Q).unwrap().total(), 1);
    let out = sqs
        .change_visibility_now(Q, &[handle("0", &m.receipt_handle)], 60)
        .unwrap();
    assert_eq!(out.failed.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn retention_counts_from_the_send_on_the_default_four_days() {
    let sqs = FakeSqs::new();
    filled(&sqs, Q, 1);
    tokio::time::advance(DEFAULT_RETENTION - Duration::from_secs(1)).await;
    assert_eq!(sqs.len(Q), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(sqs.len(Q), 0);
}
