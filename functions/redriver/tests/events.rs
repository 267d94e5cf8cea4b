//! The events the re-driver is sent, against moto: an alarm that is not in ALARM, one for
//! another queue (plain, metric math, another account) and a manual event with a typo all
//! touch nothing: the DLQ's one message is not even received.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::{Engine, StopReason};
use redrive_redriver::handle;
use redrive_shared::config::{Env, RedriverConfig};
use redrive_tests::{QueueSet, moto, queue_attributes, queue_depth, send_raw, unique_name};
use serde_json::json;

/// Standard queues with one message on the DLQ, and the re-driver's engine for them.
struct Fixture {
    sqs: aws_sdk_sqs::Client,
    cw: aws_sdk_cloudwatch::Client,
    queues: QueueSet,
}

impl Fixture {
    async fn holding_one(body: &str) -> Self {
        let sqs = moto().sqs().await;
        let cw = moto().cloudwatch().await;
        let queues = QueueSet::create(&sqs, false, 3).await;
        send_raw(&sqs, &queues.dlq_url, body, &[]).await;
        Self { sqs, cw, queues }
    }

    fn engine(&self, extra: &[(&str, &str)]) -> Engine<SqsQueue, CloudWatch, CloudWatch> {
        let mut map: HashMap<String, String> = self.queues.redriver_env().into_iter().collect();
        map.insert("METRIC_NAMESPACE".into(), unique_name("ns"));
        for (k, v) in extra {
            map.insert(k.to_string(), v.to_string());
        }
        let config = RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .expect("valid config");
        Engine::over_sdk(self.sqs.clone(), self.cw.clone(), config)
    }

    /// The one message still visible on the DLQ, nothing on the source or the poison queue.
    async fn assert_not_even_received(&self) {
        let q = &self.queues;
        let visible = queue_attributes(&self.sqs, &q.dlq_url).await;
        assert_eq!(
            visible
                .get(&QueueAttributeName::ApproximateNumberOfMessages)
                .map(String::as_str),
            Some("1"),
            "not even received"
        );
        assert_eq!(
            queue_depth(&self.sqs, &q.source_url).await
                + queue_depth(&self.sqs, &q.poison_url).await,
            0
        );
    }
}

#[tokio::test]
async fn ok_state_and_other_queue_alarms_touch_nothing_and_typos_are_rejected() {
    let f = Fixture::holding_one("stay").await;
    let engine = f.engine(&[]);
    let dlq = f.queues.dlq_name.clone();
    let s = handle(&engine, &f.queues.alarm_notification("a", "OK", &dlq), None)
        .await
        .unwrap();
    assert_eq!((s.received, s.stopped_because), (0, StopReason::NotInAlarm));
    let s = handle(
        &engine,
        &f.queues
            .alarm_notification("a", "ALARM", "someone-elses-dlq"),
        None,
    )
    .await
    .unwrap();
    assert_eq!((s.received, s.stopped_because), (0, StopReason::OtherQueue));
    let err = handle(&engine, &json!({"maxMessage": 3}), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"maxMessage\""), "{err}");
    f.assert_not_even_received().await;
}

#[tokio::test]
async fn another_queues_metric_math_alarm_touches_nothing() {
    let f = Fixture::holding_one("stay").await;
    let engine = f.engine(&[]);
    for fixture in [
        "sns-metric-math-alarm.json",
        "sns-metric-math-alarm-api-casing.json",
        "sns-cloudwatch-alarm-other-account.json",
    ] {
        let mut event = redrive_tests::fixture(fixture);
        // Same DLQ name as ours where the fixture names orders-dlq: only account differs.
        let message = event["Records"][0]["Sns"]["Message"]
            .as_str()
            .unwrap()
            .replace("orders-dlq", &f.queues.dlq_name);
        event["Records"][0]["Sns"]["Message"] = json!(message);
        let s = handle(&engine, &event, None).await.unwrap();
        assert_eq!(
            (s.received, s.stopped_because),
            (0, StopReason::OtherQueue),
            "{fixture}"
        );
    }
    f.assert_not_even_received().await;
}
