//! The re-driver against a real SQS/CloudWatch emulator (moto): every behaviour of the
//! contract, with a conservation check (DLQ + source + poison before == after) in each test.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_cloudwatch::types::{StateValue, Statistic};
use aws_sdk_sqs::types::{
    Message, MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
};
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::{DrainRequest, Engine, Settings, StopReason, Summary};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::{ATTRIBUTE_NAME, IsolationReason, RedriveMeta};
use redrive_tests::{
    QueueSet, alarm_state, attr_binary, attr_custom, attr_number, attr_string,
    batch_sends_keep_trace_headers, drain_all, metric_points, moto, producer_trace_header,
    put_queue_alarm, queue_attributes, queue_depth, send_fifo, send_raw, send_traced,
    trace_header_of, unique_name,
};
use serde_json::json;

type MotoEngine = Engine<SqsQueue, CloudWatch, CloudWatch>;

struct Fixture {
    sqs: aws_sdk_sqs::Client,
    cw: aws_sdk_cloudwatch::Client,
    queues: QueueSet,
    namespace: String,
    before: u64,
}

impl Fixture {
    async fn new(fifo: bool) -> Self {
        let sqs = moto().sqs().await;
        let cw = moto().cloudwatch().await;
        let queues = QueueSet::create(&sqs, fifo, 3).await;
        Self {
            sqs,
            cw,
            queues,
            namespace: unique_name("ns"),
            before: 0,
        }
    }

    fn engine(&self, extra: &[(&str, &str)]) -> MotoEngine {
        let mut map: HashMap<String, String> = self.queues.redriver_env().into_iter().collect();
        map.insert("METRIC_NAMESPACE".into(), self.namespace.clone());
        // No delay unless a test asks for one, so that redriven copies can be read back.
        map.insert("BACKOFF_BASE_SECONDS".into(), "0".into());
        for (k, v) in extra {
            map.insert(k.to_string(), v.to_string());
        }
        let config = RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .expect("valid config");
        let sqs = SqsQueue {
            client: self.sqs.clone(),
        };
        let cw = CloudWatch {
            client: self.cw.clone(),
        };
        Engine::new(sqs, cw.clone(), cw, config)
            .with_settings(Settings {
                retry_base: Duration::from_millis(10),
                ..Settings::default()
            })
            .with_seed(11)
    }

    async fn total(&self) -> u64 {
        let q = &self.queues;
        queue_depth(&self.sqs, &q.dlq_url).await
            + queue_depth(&self.sqs, &q.source_url).await
            + queue_depth(&self.sqs, &q.poison_url).await
    }

    /// Records the number of messages before the run, for the conservation check.
    async fn seal(&mut self) {
        self.before = self.total().await;
    }

    async fn assert_conserved(&self) {
        assert_eq!(
            self.total().await,
            self.before,
            "messages in DLQ + source + poison changed: a loss or a phantom"
        );
    }

    /// The drain the DLQ's `alarm` asks of `engine` when it notifies that it is in ALARM
    /// (the configured drain, re-arming that alarm); its answer.
    async fn alarm_drains(&self, engine: &MotoEngine, alarm: &str) -> Summary {
        let request = DrainRequest {
            trigger_alarm: Some(alarm.to_string()),
            ..DrainRequest::configured(&engine.config, None)
        };
        engine.run(&request).await.expect("the drain answers")
    }

    /// A message on the DLQ whose chain `original` was redriven `attempt` times.
    async fn to_dlq_at_attempt(&self, body: &str, original: &str, attempt: u32) -> String {
        let meta = RedriveMeta {
            attempt,
            ..RedriveMeta::fresh(original)
        };
        self.to_dlq(body, &[(ATTRIBUTE_NAME, meta_attr(&meta))])
            .await
    }

    async fn to_dlq(&self, body: &str, attrs: &[(&str, MessageAttributeValue)]) -> String {
        send_raw(&self.sqs, &self.queues.dlq_url, body, attrs).await
    }

    /// `n` messages never redriven (`m0`, `m1`, ...), then one, `spent`, at `attempt`.
    async fn to_dlq_fresh_and_spent(&self, n: usize, attempt: u32) {
        for i in 0..n {
            self.to_dlq(&format!("m{i}"), &[]).await;
        }
        self.to_dlq_at_attempt("spent", "orig-spent", attempt).await;
    }
}

fn meta_of(m: &Message) -> RedriveMeta {
    let text = m
        .message_attributes()
        .and_then(|a| a.get(ATTRIBUTE_NAME))
        .and_then(|v| v.string_value())
        .unwrap_or_else(|| panic!("{:?} has no x-redrive", m.message_id()));
    RedriveMeta::parse(text).expect("x-redrive is valid")
}

fn manual(max: u32) -> DrainRequest {
    DrainRequest::new(max)
}

fn meta_attr(meta: &RedriveMeta) -> MessageAttributeValue {
    attr_string(&meta.to_json())
}

#[tokio::test]
async fn redrives_with_metadata_and_passes_every_attribute_and_body_byte_for_byte() {
    let mut f = Fixture::new(false).await;
    let utf8 = "zażółć gęślą jaźń — 注文 🚚";
    let binary: Vec<u8> = vec![0, 1, 2, 255, 254, 10, 13];
    let id1 = f
        .to_dlq(
            "not json at all {",
            &[
                ("bin", attr_binary(&binary)),
                ("count", attr_custom("Number.int", "0042")),
                ("tenant", attr_string("acme")),
            ],
        )
        .await;
    let id2 = f.to_dlq(utf8, &[("price", attr_number("12.50"))]).await;
    f.seal().await;

    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (2, 2, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.stopped_because, StopReason::QueueEmpty);
    assert_eq!(s.dlq_remaining, Some(0));
    f.assert_conserved().await;

    let out = drain_all(&f.sqs, &f.queues.source_url).await;
    assert_eq!(out.len(), 2);
    let first = out
        .iter()
        .find(|m| m.body() == Some("not json at all {"))
        .expect("first body intact");
    let attrs = first.message_attributes().unwrap();
    assert_eq!(
        attrs["bin"].binary_value().unwrap().as_ref(),
        binary.as_slice()
    );
    assert_eq!(attrs["bin"].data_type(), "Binary");
    assert_eq!(attrs["count"].data_type(), "Number.int");
    assert_eq!(attrs["count"].string_value(), Some("0042"));
    assert_eq!(attrs["tenant"].string_value(), Some("acme"));
    assert_eq!(attrs.len(), 4);
    let meta = meta_of(first);
    assert_eq!(
        (meta.attempt, meta.original_message_id.as_str()),
        (1, id1.as_str())
    );
    assert!(meta.first_redriven_at.is_some() && meta.first_redriven_at == meta.last_redriven_at);

    let second = out
        .iter()
        .find(|m| m.body() == Some(utf8))
        .expect("UTF-8 body intact");
    assert_eq!(
        second.message_attributes().unwrap()["price"].string_value(),
        Some("12.50")
    );
    assert_eq!(meta_of(second).original_message_id, id2);
}

#[tokio::test]
async fn redriven_and_isolated_copies_keep_the_producers_aws_trace_header() {
    // GIVEN two messages of traced producers on the DLQ: one to redrive, and a consumer's
    // stamped copy of a permanent failure to isolate
    let mut f = Fixture::new(false).await;
    let (redriven, isolated) = (producer_trace_header(), producer_trace_header());
    send_traced(&f.sqs, &f.queues.dlq_url, "order-1", &[], &redriven).await;
    let permanent = common::permanently_failed("orig-2");
    let attributes = [(ATTRIBUTE_NAME, meta_attr(&permanent))];
    send_traced(&f.sqs, &f.queues.dlq_url, "order-2", &attributes, &isolated).await;
    f.seal().await;

    // WHEN the re-driver drains
    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 1, 0), "{s:?}");
    f.assert_conserved().await;

    // THEN the copy on the source and the one on the poison queue carry their original's
    // header (SQS would otherwise give them the sender's own, or none)
    if !batch_sends_keep_trace_headers() {
        return;
    }
    let source = drain_all(&f.sqs, &f.queues.source_url).await;
    assert_eq!(trace_header_of(&source[0]), Some(redriven.as_str()));
    let poison = drain_all(&f.sqs, &f.queues.poison_url).await;
    assert_eq!(poison[0].body(), Some("order-2"));
    assert_eq!(trace_header_of(&poison[0]), Some(isolated.as_str()));
}

#[tokio::test]
async fn the_history_survives_a_second_redrive() {
    let mut f = Fixture::new(false).await;
    let id = f.to_dlq("order-1", &[]).await;
    f.seal().await;
    let engine = f.engine(&[]);
    engine.run(&manual(10)).await.unwrap();
    f.assert_conserved().await;
    // The consumer fails again: the copy lands in the DLQ (as SQS's move would put it there).
    let copy = drain_all(&f.sqs, &f.queues.source_url).await.remove(0);
    let first = meta_of(&copy);
    send_raw(
        &f.sqs,
        &f.queues.dlq_url,
        copy.body().unwrap(),
        &[(ATTRIBUTE_NAME, meta_attr(&first))],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    f.seal().await;
    engine.run(&manual(10)).await.unwrap();
    f.assert_conserved().await;
    let again = drain_all(&f.sqs, &f.queues.source_url).await.remove(0);
    let second = meta_of(&again);
    assert_eq!(second.attempt, 2);
    assert_eq!(second.original_message_id, id, "the chain id never changes");
    assert_eq!(second.first_redriven_at, first.first_redriven_at);
    assert_ne!(
        again.message_id(),
        Some(id.as_str()),
        "SQS gave the copy a new MessageId"
    );
}

fn as_refs(v: &[(String, MessageAttributeValue)]) -> Vec<(&str, MessageAttributeValue)> {
    v.iter().map(|(k, a)| (k.as_str(), a.clone())).collect()
}

#[tokio::test]
async fn nine_attributes_get_the_tenth_slot_and_ten_are_isolated_unchanged() {
    let mut f = Fixture::new(false).await;
    let nine: Vec<(String, MessageAttributeValue)> = (0..9)
        .map(|i| (format!("a{i}"), attr_string(&format!("v{i}"))))
        .collect();
    let ten: Vec<(String, MessageAttributeValue)> = (0..10)
        .map(|i| (format!("b{i}"), attr_string(&format!("w{i}"))))
        .collect();
    f.to_dlq("nine", &as_refs(&nine)).await;
    f.to_dlq("ten", &as_refs(&ten)).await;
    f.seal().await;

    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 1, 0), "{s:?}");
    f.assert_conserved().await;

    let redriven = drain_all(&f.sqs, &f.queues.source_url).await;
    let attrs = redriven[0].message_attributes().unwrap();
    assert_eq!(attrs.len(), 10, "nine plus x-redrive: within the SQS limit");
    assert_eq!(meta_of(&redriven[0]).attempt, 1);

    let parked = drain_all(&f.sqs, &f.queues.poison_url).await;
    assert_eq!(parked[0].body(), Some("ten"));
    let attrs = parked[0].message_attributes().unwrap();
    assert_eq!(
        attrs.len(),
        10,
        "parked exactly as received: no 11th attribute"
    );
    assert!(!attrs.contains_key(ATTRIBUTE_NAME));
    assert_eq!(attrs["b7"].string_value(), Some("w7"));
}

#[tokio::test]
async fn a_message_near_the_size_limit_is_isolated_when_the_stamp_would_not_fit() {
    let mut f = Fixture::new(false).await;
    for url in [
        &f.queues.dlq_url,
        &f.queues.source_url,
        &f.queues.poison_url,
    ] {
        f.sqs
            .set_queue_attributes()
            .queue_url(url)
            .attributes(QueueAttributeName::MaximumMessageSize, "1048576")
            .send()
            .await
            .expect("1 MiB queues");
    }
    // 1 MiB minus 50 bytes with its attribute: no room for x-redrive (~150 bytes).
    let big = "x".repeat(1_048_576 - 50 - ("k".len() + "String".len() + 1));
    f.to_dlq(&big, &[("k", attr_string("v"))]).await;
    // Room for the stamp: redriven.
    let fits = "y".repeat(1_048_576 - 1000);
    f.to_dlq(&fits, &[]).await;
    f.seal().await;

    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 1, 0), "{s:?}");
    f.assert_conserved().await;
    let parked = drain_all(&f.sqs, &f.queues.poison_url).await;
    assert_eq!(parked[0].body().map(str::len), Some(big.len()));
    let redriven = drain_all(&f.sqs, &f.queues.source_url).await;
    assert_eq!(redriven[0].body().map(str::len), Some(fits.len()));
}

#[tokio::test]
async fn attempts_at_max_permanent_failures_legacy_and_garbled_metadata() {
    let mut f = Fixture::new(false).await;
    f.to_dlq_at_attempt("at-max", "orig-max", 3).await;
    f.to_dlq_at_attempt("below-max", "orig-below", 2).await;
    let permanent = json!({"v":1,"attempt":0,"originalMessageId":"orig-perm",
        "lastError":{"class":"permanent","code":"HTTP_400","message":"bad order","at":"2026-11-21T10:00:00Z"}});
    f.to_dlq(
        "permanent",
        &[(ATTRIBUTE_NAME, attr_string(&permanent.to_string()))],
    )
    .await;
    f.to_dlq("legacy", &[("x-redrive-attempt", attr_number("3"))])
        .await;
    let garbled_id = f
        .to_dlq("garbled", &[(ATTRIBUTE_NAME, attr_string("{not json"))])
        .await;
    f.seal().await;

    let s = f
        .engine(&[("MAX_REDRIVE_ATTEMPTS", "3")])
        .run(&manual(10))
        .await
        .unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed),
        (5, 2, 3, 0),
        "{s:?}"
    );
    f.assert_conserved().await;

    let parked = drain_all(&f.sqs, &f.queues.poison_url).await;
    let reason =
        |body: &str| meta_of(parked.iter().find(|m| m.body() == Some(body)).unwrap()).reason;
    assert_eq!(reason("at-max"), Some(IsolationReason::MaxAttempts));
    assert_eq!(reason("permanent"), Some(IsolationReason::PermanentFailure));
    assert_eq!(
        reason("legacy"),
        Some(IsolationReason::MaxAttempts),
        "legacy attempt 3 read as 3"
    );
    let legacy = parked.iter().find(|m| m.body() == Some("legacy")).unwrap();
    assert!(
        !legacy
            .message_attributes()
            .unwrap()
            .contains_key("x-redrive-attempt"),
        "migrated in its slot"
    );
    let perm = meta_of(
        parked
            .iter()
            .find(|m| m.body() == Some("permanent"))
            .unwrap(),
    );
    assert!(perm.isolated_at.is_some());
    assert_eq!(perm.last_error.unwrap().code, "HTTP_400");

    let redriven = drain_all(&f.sqs, &f.queues.source_url).await;
    let meta = |body: &str| meta_of(redriven.iter().find(|m| m.body() == Some(body)).unwrap());
    assert_eq!(meta("below-max").attempt, 3);
    let garbled = meta("garbled");
    assert_eq!(
        (garbled.attempt, garbled.original_message_id),
        (1, garbled_id)
    );
}

#[tokio::test]
async fn standard_redrives_are_delayed_by_the_backoff() {
    let mut f = Fixture::new(false).await;
    f.to_dlq_at_attempt("delayed", "orig-d", 1).await;
    f.seal().await;
    let engine = f.engine(&[("BACKOFF_BASE_SECONDS", "30"), ("BACKOFF_JITTER", "none")]);
    let s = engine.run(&manual(10)).await.unwrap();
    assert_eq!(s.redriven, 1);
    let attrs = queue_attributes(&f.sqs, &f.queues.source_url).await;
    assert_eq!(
        attrs
            .get(&QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .map(String::as_str),
        Some("1")
    );
    assert!(
        drain_all(&f.sqs, &f.queues.source_url).await.is_empty(),
        "not visible before its 60 s delay"
    );
    f.assert_conserved().await;
}

#[tokio::test]
async fn a_message_that_exceeded_max_receive_count_is_redriven_from_the_real_dlq_move() {
    let mut f = Fixture::new(false).await;
    let id = send_raw(
        &f.sqs,
        &f.queues.source_url,
        "fails thrice",
        &[("tenant", attr_string("acme"))],
    )
    .await;
    // Three failed receives (visibility 0), the fourth makes SQS move it to the DLQ.
    for _ in 0..4 {
        let _ = redrive_tests::receive_raw(&f.sqs, &f.queues.source_url, 0).await;
    }
    assert_eq!(queue_depth(&f.sqs, &f.queues.dlq_url).await, 1);
    f.seal().await;
    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!(s.redriven, 1);
    f.assert_conserved().await;
    let back = drain_all(&f.sqs, &f.queues.source_url).await;
    assert_eq!(meta_of(&back[0]).original_message_id, id);
    assert_eq!(
        back[0].message_attributes().unwrap()["tenant"].string_value(),
        Some("acme")
    );
}

#[tokio::test]
async fn fifo_two_groups_keep_their_order_and_get_derived_dedup_ids() {
    let mut f = Fixture::new(true).await;
    for i in 0..3 {
        send_fifo(
            &f.sqs,
            &f.queues.dlq_url,
            &format!("A{i}"),
            "group-a",
            &format!("a{i}"),
            &[],
        )
        .await;
        send_fifo(
            &f.sqs,
            &f.queues.dlq_url,
            &format!("B{i}"),
            "group-b",
            &format!("b{i}"),
            &[],
        )
        .await;
    }
    f.seal().await;
    let s = f.engine(&[]).run(&manual(10)).await.unwrap();
    assert_eq!((s.received, s.redriven, s.failed), (6, 6, 0), "{s:?}");
    f.assert_conserved().await;
    let mut out = Vec::new();
    // Drain in several receives so that FIFO group locking does not hide messages.
    for _ in 0..6 {
        out.extend(drain_all(&f.sqs, &f.queues.source_url).await);
        if out.len() == 6 {
            break;
        }
    }
    let group = |m: &Message| {
        m.attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            .cloned()
            .unwrap_or_default()
    };
    let a: Vec<&str> = out
        .iter()
        .filter(|m| group(m) == "group-a")
        .filter_map(|m| m.body())
        .collect();
    let b: Vec<&str> = out
        .iter()
        .filter(|m| group(m) == "group-b")
        .filter_map(|m| m.body())
        .collect();
    assert_eq!(a, ["A0", "A1", "A2"]);
    assert_eq!(b, ["B0", "B1", "B2"]);
    for m in &out {
        let dedup = m
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::MessageDeduplicationId))
            .cloned();
        assert_eq!(
            dedup,
            // A first redrive: the moved DLQ copy's MessageId is the chain's original id.
            Some(redrive_shared::decision::dedup_id(
                &meta_of(m).original_message_id,
                "r"
            ))
        );
    }
}

#[tokio::test]
async fn dry_run_reports_the_plan_and_changes_nothing() {
    let mut f = Fixture::new(false).await;
    f.to_dlq_fresh_and_spent(4, 9).await;
    f.seal().await;
    let s = f
        .engine(&[])
        .run(&DrainRequest {
            dry_run: true,
            ..manual(10)
        })
        .await
        .unwrap();
    assert_eq!(
        (s.received, s.redriven, s.isolated, s.failed, s.dry_run),
        (5, 4, 1, 0, true),
        "{s:?}"
    );
    f.assert_conserved().await;
    assert_eq!(
        queue_depth(&f.sqs, &f.queues.source_url).await
            + queue_depth(&f.sqs, &f.queues.poison_url).await,
        0
    );
    // Released at once: all five are visible again.
    let visible = queue_attributes(&f.sqs, &f.queues.dlq_url).await;
    assert_eq!(
        visible
            .get(&QueueAttributeName::ApproximateNumberOfMessages)
            .map(String::as_str),
        Some("5")
    );
}

#[tokio::test]
async fn a_guard_alarm_in_alarm_opens_the_circuit() {
    let mut f = Fixture::new(false).await;
    f.to_dlq("waiting", &[]).await;
    let guard = unique_name("guard");
    put_queue_alarm(&f.cw, &guard, "downstream", StateValue::Alarm).await;
    f.seal().await;
    let other = unique_name("healthy");
    put_queue_alarm(&f.cw, &other, "downstream", StateValue::Ok).await;
    let engine = f.engine(&[("GUARD_ALARM_NAMES", &format!("{other},{guard}"))]);
    let s = engine.run(&manual(10)).await.unwrap();
    assert_eq!(
        (s.received, s.stopped_because, s.dlq_remaining),
        (0, StopReason::CircuitOpen, Some(1))
    );
    f.assert_conserved().await;
    f.cw.set_alarm_state()
        .alarm_name(&guard)
        .state_value(StateValue::Ok)
        .state_reason("ok")
        .send()
        .await
        .unwrap();
    assert_eq!(
        engine.run(&manual(10)).await.unwrap().redriven,
        1,
        "the circuit closes with the guard"
    );
}

async fn metric_sum(f: &Fixture, name: &str) -> f64 {
    let points = metric_points(
        &f.cw,
        &f.namespace,
        name,
        &f.queues.dlq_name,
        &[Statistic::Sum, Statistic::SampleCount],
    )
    .await;
    assert!(!points.is_empty(), "{name} was published (zeros included)");
    points.iter().filter_map(|p| p.sum()).sum()
}

#[tokio::test]
async fn an_alarm_drain_publishes_metrics_and_rearms_when_a_backlog_remains() {
    let mut f = Fixture::new(false).await;
    f.to_dlq_fresh_and_spent(12, 5).await;
    let alarm = unique_name("dlq-depth");
    put_queue_alarm(&f.cw, &alarm, &f.queues.dlq_name, StateValue::Alarm).await;
    f.seal().await;

    let engine = f.engine(&[("MAX_MESSAGES_PER_INVOCATION", "10")]);
    let s = f.alarm_drains(&engine, &alarm).await;
    assert_eq!(s.received, 10);
    assert_eq!(s.stopped_because, StopReason::Limit);
    assert_eq!(s.dlq_remaining, Some(3));
    assert_eq!(
        alarm_state(&f.cw, &alarm).await,
        StateValue::Ok,
        "re-armed so that it fires again"
    );
    f.assert_conserved().await;

    // The rest: the queue empties; the alarm, in ALARM again, is re-armed all the same.
    put_queue_alarm(&f.cw, &alarm, &f.queues.dlq_name, StateValue::Alarm).await;
    let s2 = f.alarm_drains(&engine, &alarm).await;
    assert_eq!(s2.stopped_because, StopReason::QueueEmpty);
    assert_eq!(alarm_state(&f.cw, &alarm).await, StateValue::Ok);
    f.assert_conserved().await;

    assert_eq!(
        metric_sum(&f, "SuccessfulRedrives").await,
        (s.redriven + s2.redriven) as f64
    );
    assert_eq!(metric_sum(&f, "PoisonPillsIsolated").await, 1.0);
    assert_eq!(metric_sum(&f, "RedriveFailures").await, 0.0);
}

#[tokio::test]
async fn the_trigger_never_stalls_drain_to_empty_then_inflow_with_the_alarm_in_alarm() {
    let mut f = Fixture::new(false).await;
    for i in 0..4 {
        f.to_dlq(&format!("first-{i}"), &[]).await;
    }
    let alarm = unique_name("dlq-depth");
    put_queue_alarm(&f.cw, &alarm, &f.queues.dlq_name, StateValue::Alarm).await;
    f.seal().await;
    let engine = f.engine(&[]);
    // The alarm fires; the drain empties the DLQ.
    let s = f.alarm_drains(&engine, &alarm).await;
    assert_eq!(
        (s.redriven, s.stopped_because, s.dlq_remaining),
        (4, StopReason::QueueEmpty, Some(0))
    );
    f.assert_conserved().await;
    // Steady inflow: messages arrive right after the drain, and the alarm's next datapoint
    // keeps it in ALARM (no state change, no notification) unless the re-driver re-armed it.
    for i in 0..3 {
        f.to_dlq(&format!("later-{i}"), &[]).await;
    }
    assert_eq!(
        alarm_state(&f.cw, &alarm).await,
        StateValue::Ok,
        "left in OK, so that the next evaluation over the new messages notifies again"
    );
    // That next notification drains the newcomers and re-arms again (a drain that made
    // progress is never rate-limited).
    put_queue_alarm(&f.cw, &alarm, &f.queues.dlq_name, StateValue::Alarm).await;
    f.seal().await;
    let s = f.alarm_drains(&engine, &alarm).await;
    assert_eq!(s.redriven, 3);
    assert_eq!(alarm_state(&f.cw, &alarm).await, StateValue::Ok);
    f.assert_conserved().await;
    // A dry run never re-arms.
    put_queue_alarm(&f.cw, &alarm, &f.queues.dlq_name, StateValue::Alarm).await;
    engine
        .run(&DrainRequest {
            dry_run: true,
            trigger_alarm: Some(alarm.clone()),
            ..manual(10)
        })
        .await
        .unwrap();
    assert_eq!(alarm_state(&f.cw, &alarm).await, StateValue::Alarm);
}

#[tokio::test]
async fn a_deleted_dlq_fails_the_run_and_publishes_dlq_receive_failures() {
    let f = Fixture::new(false).await;
    let engine = f.engine(&[]);
    f.sqs
        .delete_queue()
        .queue_url(&f.queues.dlq_url)
        .send()
        .await
        .expect("DeleteQueue");
    let err = engine.run(&manual(10)).await.unwrap_err();
    let redrive_engine::DrainError::DlqUnreadable { reason, summary } = &err;
    assert_eq!(reason.operation, "ReceiveMessage", "{reason}");
    assert_eq!((summary.received, summary.dlq_remaining), (0, None));
    assert_eq!(metric_sum(&f, "DlqReceiveFailures").await, 1.0);
    assert_eq!(metric_sum(&f, "RedriveFailures").await, 0.0);
}

#[tokio::test]
async fn a_guard_alarm_that_does_not_exist_opens_the_circuit() {
    let mut f = Fixture::new(false).await;
    f.to_dlq("waiting", &[]).await;
    let healthy = unique_name("healthy");
    put_queue_alarm(&f.cw, &healthy, "downstream", StateValue::Ok).await;
    f.seal().await;
    let misspelt = format!("{healthy}-typo");
    let engine = f.engine(&[("GUARD_ALARM_NAMES", &format!("{healthy},{misspelt}"))]);
    let s = engine.run(&manual(10)).await.unwrap();
    assert_eq!(
        (s.received, s.stopped_because, s.dlq_remaining),
        (0, StopReason::CircuitOpen, Some(1))
    );
    f.assert_conserved().await;
    // INSUFFICIENT_DATA is not ALARM: a guard without data yet does not hold the drain.
    put_queue_alarm(&f.cw, &misspelt, "downstream", StateValue::InsufficientData).await;
    assert_eq!(engine.run(&manual(10)).await.unwrap().redriven, 1);
}

#[tokio::test]
async fn describe_alarms_asks_for_composite_and_metric_alarms() {
    // Moto answers composite alarms whatever `AlarmTypes` says; AWS answers metric alarms
    // only when it is absent. So the request itself is checked, on a loopback server.
    let server = redrive_tests::Downstream::start().await;
    let conf = aws_sdk_cloudwatch::config::Builder::from(&moto().sdk_config().await)
        .endpoint_url(server.url())
        .build();
    let cw = CloudWatch {
        client: aws_sdk_cloudwatch::Client::from_conf(conf),
    };
    use redrive_engine::ports::Alarms;
    let _ = cw.describe(&["guard".to_string()]).await;
    let requests = server.requests();
    let body = requests
        .first()
        .expect("DescribeAlarms was sent")
        .body_text();
    assert!(body.contains("Action=DescribeAlarms"), "{body}");
    assert!(
        body.contains("AlarmTypes.member.1=MetricAlarm")
            && body.contains("AlarmTypes.member.2=CompositeAlarm"),
        "{body}"
    );
}

#[tokio::test]
async fn a_source_queue_smaller_than_the_stamped_copy_isolates_size_limit() {
    let mut f = Fixture::new(false).await;
    f.sqs
        .set_queue_attributes()
        .queue_url(&f.queues.source_url)
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .expect("a 1 KiB source queue");
    // Fits the source as it is; the x-redrive stamp pushes it over. Moto checks the body only,
    // so only the re-driver's own accounting against the limit it read can catch this.
    let body = "z".repeat(1000);
    let id = f.to_dlq(&body, &[]).await;
    f.to_dlq("small", &[]).await;
    f.seal().await;
    let engine = f.engine(&[]);
    engine.warm_up().await.expect("warm-up");
    let s = engine.run(&manual(10)).await.unwrap();
    assert_eq!((s.redriven, s.isolated, s.failed), (1, 1, 0), "{s:?}");
    f.assert_conserved().await;
    let parked = drain_all(&f.sqs, &f.queues.poison_url).await;
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].body(), Some(body.as_str()));
    let meta = meta_of(&parked[0]);
    assert_eq!(meta.reason, Some(IsolationReason::SizeLimit));
    assert_eq!(meta.original_message_id, id);
}
