//! One re-driver for several protected DLQs, on the port fake: an alarm drains the DLQ it
//! names, a schedule drains every DLQ in a fair order with a bounded share each, each DLQ's
//! tags override the install's settings, and a bad tag leaves that DLQ alone and the others
//! working.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use redrive_engine::fake::orders::POISON;
use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::{Engine, Settings};
use redrive_redriver::Fleet;
use redrive_shared::Attributes;
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use serde_json::{Value, json};

const ACCOUNT: &str = "000000000000";
const ORDERS_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
const ORDERS: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
const RETURNS: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/returns";
const LEDGER_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/ledger-dlq.fifo";
const LEDGER: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/ledger.fifo";
const MAIL_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/mail-dlq";
const MAIL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/mail";

/// Retries after a millisecond, receives without a long poll.
fn settings() -> Settings {
    Settings {
        retry_base: Duration::from_millis(1),
        receive_wait_seconds: 0,
        ..Settings::default()
    }
}

type TestFleet = Fleet<
    Arc<FakeSqs>,
    Arc<FakeCloudWatch>,
    Arc<FakeCloudWatch>,
    redrive_engine::circuit::NoCircuit,
>;

fn env_map(extra: &[(&str, &str)]) -> HashMap<String, String> {
    let list = format!("{ORDERS_DLQ},{LEDGER_DLQ},{MAIL_DLQ}");
    let mut map: HashMap<String, String> = [
        ("POISON_QUEUE_URL", POISON),
        ("BACKOFF_JITTER", "none"),
        ("BACKOFF_BASE_SECONDS", "1"),
        ("MAX_REDRIVE_ATTEMPTS", "5"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    map.insert("DLQ_URLS".into(), list);
    map.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    map
}

/// The user's queues: orders-dlq fed by orders and returns, a FIFO ledger, mail.
fn accounts_queues() -> Arc<FakeSqs> {
    let sqs = FakeSqs::new();
    for q in [
        ORDERS_DLQ, ORDERS, RETURNS, LEDGER_DLQ, LEDGER, MAIL_DLQ, MAIL, POISON,
    ] {
        sqs.create_queue(q);
    }
    sqs.set_redrive_policy(ORDERS, ORDERS_DLQ, 3);
    sqs.set_redrive_policy(RETURNS, ORDERS_DLQ, 3);
    sqs.set_redrive_policy(LEDGER, LEDGER_DLQ, 3);
    sqs.set_redrive_policy(MAIL, MAIL_DLQ, 3);
    sqs
}

async fn fleet(sqs: &Arc<FakeSqs>, extra: &[(&str, &str)]) -> TestFleet {
    fleet_and_metrics(sqs, extra).await.0
}

/// The fleet as the re-driver makes it, a DLQ left alone said in `DlqLeftAlone` through the
/// CloudWatch fake returned beside it.
async fn fleet_and_metrics(
    sqs: &Arc<FakeSqs>,
    extra: &[(&str, &str)],
) -> (TestFleet, Arc<FakeCloudWatch>) {
    let map = env_map(extra);
    let lookup = move |k: &str| map.get(k).cloned();
    let configs = RedriverConfig::fleet_from_env(&Env(&lookup)).expect("valid");
    let cw = FakeCloudWatch::new();
    let queue = sqs.clone();
    let engines_cw = cw.clone();
    let fleet = Fleet::new(configs, lookup, sqs.clone(), move |config| {
        Engine::new(
            queue.clone(),
            engines_cw.clone(),
            engines_cw.clone(),
            config,
        )
        .with_settings(settings())
        .with_seed(3)
    })
    .await
    .with_left_alone_metrics(cw.clone(), "RedriveTest".to_string());
    (fleet, cw)
}

/// How many times `DlqLeftAlone` said `queue` was left alone.
fn left_alone(cw: &FakeCloudWatch, queue: &str) -> usize {
    cw.put
        .lock()
        .unwrap()
        .iter()
        .filter(|(ns, q, values)| {
            ns == "RedriveTest"
                && q == queue
                && values
                    .iter()
                    .any(|v| v.name == "DlqLeftAlone" && v.value == 1)
        })
        .count()
}

/// The fleet's summary of its answer to `queue`'s alarm.
async fn answer_alarm(fleet: &TestFleet, queue: &str) -> Value {
    fleet.handle(&alarm_for(queue), None).await.unwrap()
}

fn alarm_for(queue: &str) -> Value {
    let mut event = redrive_tests::fixture("sns-cloudwatch-alarm.json");
    let record = &mut event["Records"][0]["Sns"];
    let mut message: Value = serde_json::from_str(record["Message"].as_str().unwrap()).unwrap();
    message["Trigger"]["Dimensions"] = json!([{"name": "QueueName", "value": queue}]);
    message["AlarmArn"] = json!(format!(
        "arn:aws:cloudwatch:us-east-1:{ACCOUNT}:alarm:{queue}-age"
    ));
    message["AWSAccountId"] = json!(ACCOUNT);
    record["Message"] = json!(message.to_string());
    event
}

fn scheduled() -> Value {
    redrive_tests::fixture("eventbridge-scheduled.json")
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

fn at_attempt(attempt: u32) -> Attributes {
    let mut a = Attributes::new();
    RedriveMeta {
        attempt,
        ..RedriveMeta::fresh(&format!("orig-{attempt}"))
    }
    .write_into(&mut a);
    a
}

/// Entry `entry-0` of group `acct`, moved from the FIFO ledger queue to its DLQ before any
/// redrive.
fn ledger_entry(sqs: &FakeSqs) {
    sqs.push_moved(
        LEDGER_DLQ,
        LEDGER,
        "entry-0",
        Attributes::new(),
        Some("acct"),
    );
}

#[tokio::test]
async fn three_protected_dlqs_incidents_on_two_at_once_each_message_home_settings_by_tag() {
    let sqs = accounts_queues();
    // mail-dlq's owners allow one attempt only.
    sqs.tag_queue(MAIL_DLQ, "redrive:max-attempts", "1");
    sqs.tag_queue(MAIL_DLQ, "team", "mail");
    let fleet = fleet(&sqs, &[]).await;
    assert_eq!(
        fleet.queues(),
        ["orders-dlq", "ledger-dlq.fifo", "mail-dlq"]
    );
    for i in 0..3 {
        moved(&sqs, ORDERS_DLQ, ORDERS, &format!("order-{i}"));
        moved(&sqs, ORDERS_DLQ, RETURNS, &format!("return-{i}"));
        sqs.push_moved(MAIL_DLQ, MAIL, &format!("mail-{i}"), at_attempt(1), None);
    }
    ledger_entry(&sqs);
    // Two alarms at once: orders-dlq and mail-dlq.
    let (orders_alarm, mail_alarm) = (alarm_for("orders-dlq"), alarm_for("mail-dlq"));
    let (a, b) = tokio::join!(
        fleet.handle(&orders_alarm, None),
        fleet.handle(&mail_alarm, None)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        (a["received"].as_u64(), a["redriven"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(
        (b["received"].as_u64(), b["isolated"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(bodies(&sqs, ORDERS), ["order-0", "order-1", "order-2"]);
    assert_eq!(bodies(&sqs, RETURNS), ["return-0", "return-1", "return-2"]);
    // The tag's one attempt: the mail messages are parked, not redriven a second time.
    assert!(sqs.is_empty(MAIL));
    assert_eq!(bodies(&sqs, POISON), ["mail-0", "mail-1", "mail-2"]);
    let parked = &sqs.messages(POISON)[0];
    let meta = RedriveMeta::read(&parked.attributes, &parked.message_id).0;
    assert_eq!(meta.reason, Some(IsolationReason::MaxAttempts));
    assert_eq!(
        meta.source(),
        Some("arn:aws:sqs:us-east-1:000000000000:mail")
    );
    // The ledger's alarm did not fire: its DLQ was not touched.
    assert_eq!(bodies(&sqs, LEDGER_DLQ), ["entry-0"]);
    let s = answer_alarm(&fleet, "ledger-dlq.fifo").await;
    assert_eq!(s["redriven"].as_u64(), Some(1));
    assert_eq!(bodies(&sqs, LEDGER), ["entry-0"]);
    // Lost: none.
    let everywhere: usize = [
        ORDERS_DLQ, ORDERS, RETURNS, LEDGER_DLQ, LEDGER, MAIL_DLQ, MAIL, POISON,
    ]
    .iter()
    .map(|q| sqs.len(q))
    .sum();
    assert_eq!(everywhere, 10);
}

#[tokio::test]
async fn a_bad_tag_leaves_its_dlq_alone_and_the_other_two_working_until_it_is_fixed() {
    let sqs = accounts_queues();
    sqs.tag_queue(LEDGER_DLQ, "redrive:max-attempts", "lots");
    let (fleet, cw) = fleet_and_metrics(&sqs, &[]).await;
    moved(&sqs, ORDERS_DLQ, ORDERS, "order-0");
    ledger_entry(&sqs);
    moved(&sqs, MAIL_DLQ, MAIL, "mail-0");
    let s = fleet.handle(&scheduled(), None).await.unwrap();
    assert_eq!(s["redriven"].as_u64(), Some(2));
    let ledger = s["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "ledger-dlq.fifo")
        .unwrap()
        .clone();
    assert_eq!(ledger["stoppedBecause"], "bad-settings");
    let error = ledger["error"].as_str().unwrap();
    assert!(
        error.contains("ledger-dlq.fifo")
            && error.contains("redrive:max-attempts")
            && error.contains("\"lots\""),
        "{error}"
    );
    assert_eq!(
        bodies(&sqs, LEDGER_DLQ),
        ["entry-0"],
        "left alone, not lost"
    );
    assert_eq!(bodies(&sqs, ORDERS), ["order-0"]);
    assert_eq!(bodies(&sqs, MAIL), ["mail-0"]);
    // Its alarm is answered without touching it.
    let s = answer_alarm(&fleet, "ledger-dlq.fifo").await;
    assert_eq!(s["stoppedBecause"], "bad-settings");
    // Each invocation that leaves it alone says so, for it alone: the fleet's alarm pages.
    assert_eq!(left_alone(&cw, "ledger-dlq.fifo"), 2);
    assert_eq!(
        left_alone(&cw, "orders-dlq") + left_alone(&cw, "mail-dlq"),
        0
    );
    // Fixed on the queue: the next invocation serves it.
    sqs.tag_queue(LEDGER_DLQ, "redrive:max-attempts", "4");
    let s = answer_alarm(&fleet, "ledger-dlq.fifo").await;
    assert_eq!(s["redriven"].as_u64(), Some(1));
    assert_eq!(bodies(&sqs, LEDGER), ["entry-0"]);
    assert_eq!(
        left_alone(&cw, "ledger-dlq.fifo"),
        2,
        "served: no longer said"
    );
}

#[tokio::test]
async fn a_schedule_drains_every_dlq_bounded_each_and_starts_one_further_each_time() {
    let sqs = accounts_queues();
    let fleet = fleet(&sqs, &[("MAX_MESSAGES_PER_INVOCATION", "4")]).await;
    // A big backlog on orders-dlq must not starve mail-dlq.
    for i in 0..40 {
        moved(&sqs, ORDERS_DLQ, ORDERS, &format!("order-{i}"));
    }
    for i in 0..2 {
        moved(&sqs, MAIL_DLQ, MAIL, &format!("mail-{i}"));
    }
    let first = fleet.handle(&scheduled(), None).await.unwrap();
    let order = |s: &Value| -> Vec<String> {
        s["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["queue"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(order(&first), ["orders-dlq", "ledger-dlq.fifo", "mail-dlq"]);
    assert_eq!(
        first["queues"][0]["redriven"].as_u64(),
        Some(4),
        "bounded per DLQ"
    );
    assert_eq!(bodies(&sqs, MAIL), ["mail-0", "mail-1"], "not starved");
    let second = fleet.handle(&scheduled(), None).await.unwrap();
    assert_eq!(
        order(&second),
        ["ledger-dlq.fifo", "mail-dlq", "orders-dlq"]
    );
    assert_eq!(sqs.len(ORDERS), 8);
    assert_eq!(sqs.len(ORDERS_DLQ), 32);
}

#[tokio::test]
async fn an_alarm_for_a_queue_outside_the_fleet_touches_nothing() {
    let sqs = accounts_queues();
    let fleet = fleet(&sqs, &[]).await;
    moved(&sqs, ORDERS_DLQ, ORDERS, "order-0");
    let s = answer_alarm(&fleet, "payments-dlq").await;
    assert_eq!(s["stoppedBecause"], "other-queue");
    assert_eq!(s["received"].as_u64(), Some(0));
    assert_eq!(bodies(&sqs, ORDERS_DLQ), ["order-0"]);
}
