//! A source added after the deploy: SQS routes its failures to a protected DLQ at once, but the
//! re-driver's role may not send to it until the next deploy. Under IAM enforcement (moto
//! refuses what the role's policy, rendered from `infra/templates/`, does not allow), its
//! messages stay on the DLQ untouched and the metric that pages says so; the other sources are
//! drained as ever. Nothing is lost.

use std::collections::HashMap;
use std::time::Duration;

use crate::common;
use aws_sdk_cloudwatch::types::Statistic;
use aws_sdk_sqs::types::QueueAttributeName;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::ports::PortError;
use redrive_engine::{DrainRequest, Engine, Settings};
use redrive_shared::Attributes;
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::meta::RedriveMeta;
use redrive_tests::{
    QueueSet, attr_string, drain_all, metric_points, moto, queue_depth, send_raw, unique_name,
};

/// A message on the DLQ whose recorded source is `source_arn` (as on a copy redrive moved).
async fn from_source(sqs: &aws_sdk_sqs::Client, dlq: &str, source_arn: &str, body: &str) {
    let mut meta = RedriveMeta::fresh(&format!("orig-{body}"));
    meta.set_source(source_arn);
    send_raw(
        sqs,
        dlq,
        body,
        &[("x-redrive", attr_string(&meta.to_json()))],
    )
    .await;
}

fn sorted_bodies(messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
    let mut b: Vec<String> = messages
        .iter()
        .filter_map(|m| m.body().map(str::to_string))
        .collect();
    b.sort();
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_a_source_the_role_does_not_grant_keeps_its_messages_on_the_dlq_and_pages() {
    // GIVEN a protected DLQ fed by source A (granted to the re-driver's role at deploy) and by
    // source B (added later: its redrive policy names the DLQ, the role does not name it), and
    // three messages of each on the DLQ
    let admin = moto().sqs().await;
    let queues = QueueSet::create(&admin, false, 3).await;
    let b_name = format!("{}-later", queues.source_name);
    let b_url = admin
        .create_queue()
        .queue_name(&b_name)
        .attributes(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({"deadLetterTargetArn": queues.dlq_arn, "maxReceiveCount": "3"})
                .to_string(),
        )
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("a URL");
    let b_arn = queues.source_arn.replace(&queues.source_name, &b_name);
    for i in 0..3 {
        from_source(
            &admin,
            &queues.dlq_url,
            &queues.source_arn,
            &format!("a-{i}"),
        )
        .await;
        from_source(&admin, &queues.dlq_url, &b_arn, &format!("b-{i}")).await;
    }
    let namespace = unique_name("ns");
    let env: HashMap<String, String> = [
        ("DLQ_URLS", queues.dlq_url.as_str()),
        ("POISON_QUEUE_URL", queues.poison_url.as_str()),
        ("METRIC_NAMESPACE", namespace.as_str()),
        ("BACKOFF_BASE_SECONDS", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = RedriverConfig::fleet_from_env(&Env(move |k: &str| env.get(k).cloned()))
        .expect("valid config")
        .remove(0);
    // The re-driver's role as the managed stack renders it: this DLQ, source A, the poison queue.
    let resources: redrive_tests::iam::Resources = [
        ("DeadLetterQueue", queues.dlq_name.as_str()),
        ("SourceQueue", queues.source_name.as_str()),
        ("PoisonQueue", queues.poison_name.as_str()),
        ("MetricNamespace", namespace.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let role = redrive_tests::iam::role_of_binary("redriver").expect("a role");
    let sdk = moto().sdk_config_as(role, &resources).await;
    let refused = aws_sdk_sqs::Client::new(&sdk)
        .send_message()
        .queue_url(&b_url)
        .message_body("probe")
        .send()
        .await;
    assert!(refused.is_err(), "the role must not grant source B");
    let cloudwatch = CloudWatch {
        client: aws_sdk_cloudwatch::Client::new(&sdk),
    };
    let engine = Engine::new(
        SqsQueue {
            client: aws_sdk_sqs::Client::new(&sdk),
        },
        cloudwatch.clone(),
        cloudwatch,
        config,
    )
    .with_settings(Settings {
        retry_base: Duration::from_millis(10),
        receive_wait_seconds: 0,
        ..Settings::default()
    });

    // WHEN the re-driver drains the DLQ
    let s = engine.run(&DrainRequest::new(100)).await.unwrap();

    // THEN A's messages are redriven, B's stay on the DLQ (none isolated, none failed), each
    // tried once, and the drain says so
    let answer = serde_json::to_value(&s).expect("the summary as JSON");
    assert_eq!(
        (
            s.redriven,
            s.isolated,
            s.failed,
            answer["ungranted"].as_u64()
        ),
        (3, 0, 0, Some(3)),
        "{answer}"
    );
    assert_eq!(s.received, 3, "B's messages are left, not received: {s:?}");
    let on_source = drain_all(&admin, &queues.source_url).await;
    assert_eq!(sorted_bodies(&on_source), ["a-0", "a-1", "a-2"]);
    assert_eq!(queue_depth(&admin, &b_url).await, 0, "nothing reached B");
    assert_eq!(
        queue_depth(&admin, &queues.poison_url).await,
        0,
        "never isolated"
    );
    // Released at the end of the drain: visible again at once, each with its own x-redrive.
    let left = drain_all(&admin, &queues.dlq_url).await;
    assert_eq!(sorted_bodies(&left), ["b-0", "b-1", "b-2"], "lost 0");
    for m in &left {
        let text = m
            .message_attributes()
            .and_then(|a| a.get("x-redrive"))
            .and_then(|v| v.string_value())
            .expect("x-redrive kept");
        let meta = RedriveMeta::parse(text).expect("valid");
        assert_eq!((meta.attempt, meta.source()), (0, Some(b_arn.as_str())));
    }
    // DlqLeftAlone = 1 for this DLQ, in the fleet's namespace and dimension: the attach
    // stack's dlq-left-alone alarm pages on it.
    let cw = moto().cloudwatch().await;
    let points = metric_points(
        &cw,
        &namespace,
        "DlqLeftAlone",
        &queues.dlq_name,
        &[Statistic::Sum],
    )
    .await;
    let sum: f64 = points.iter().filter_map(|d| d.sum()).sum();
    assert_eq!(sum, 1.0, "{points:?}");
}

#[tokio::test]
async fn a_configured_source_that_refuses_is_a_send_failure_that_pages_as_ever() {
    // GIVEN a DLQ with its configured source (SOURCE_QUEUE_URL, granted by its own stack),
    // which refuses the next send with AccessDenied
    let config = common::config(&[]);
    let sqs: std::sync::Arc<FakeSqs> = common::queues(&config);
    let cw = FakeCloudWatch::new();
    sqs.push(common::DLQ, "order-1", Attributes::new(), None);
    sqs.fail_next(
        "SendMessageBatch",
        PortError::new("SendMessageBatch", "AccessDenied", "not authorized", false),
    );
    let engine =
        Engine::new(sqs.clone(), cw.clone(), cw.clone(), config).with_settings(common::settings());

    // WHEN it drains
    let s = engine.run(&DrainRequest::new(10)).await.unwrap();

    // THEN the message failed and stays on the DLQ, and RedriveFailures says so (no
    // DlqLeftAlone: the managed stack's redrive-failures alarm pages)
    assert_eq!((s.failed, s.ungranted, s.redriven), (1, 0, 0), "{s:?}");
    assert_eq!(sqs.len(common::DLQ), 1, "lost 0");
    let published = cw.published.lock().unwrap();
    let run = &published.last().expect("the run's metrics").2;
    assert_eq!(
        (run.redrive_failures, run.dlq_left_alone),
        (1, 0),
        "{run:?}"
    );
}
