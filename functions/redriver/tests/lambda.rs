//! The built `redriver` binary as a Lambda: under `cargo lambda watch`, invoked with a real
//! CloudWatch-alarm SNS notification, draining a DLQ on moto.

use aws_sdk_cloudwatch::types::StateValue;
use redrive_shared::meta::{ATTRIBUTE_NAME, RedriveMeta};
use redrive_tests::fixture::assert_never_received;
use redrive_tests::{
    LambdaWatch, QueueSet, alarm_state, drain_all, fixture, moto, put_queue_alarm, queue_depth,
    send_raw, unique_name,
};
use serde_json::json;

/// The re-driver under `cargo lambda watch` for `queues`: no backoff, its own metric namespace,
/// no re-arming of a trigger alarm, and `extra` on top (an empty value removes a setting).
async fn redriver(queues: &QueueSet, extra: &[(&str, &str)]) -> LambdaWatch {
    let mut env = moto().env();
    env.extend(queues.redriver_env());
    env.push(("BACKOFF_BASE_SECONDS".into(), "0".into()));
    env.push(("METRIC_NAMESPACE".into(), unique_name("ns")));
    env.push(("REARM_ALARM".into(), "false".into()));
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        if !v.is_empty() {
            env.push((k.to_string(), v.to_string()));
        }
    }
    LambdaWatch::start(&["redriver"], &env).await
}

#[tokio::test]
async fn the_lambda_drains_a_dlq_when_its_alarm_fires() {
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(send_raw(&sqs, &queues.dlq_url, &format!("order-{i}"), &[]).await);
    }
    let watch = redriver(&queues, &[]).await;

    // An alarm on another queue is ignored and touches nothing.
    let other = watch
        .invoke("redriver", &fixture("sns-cloudwatch-alarm.json"))
        .await
        .expect("invoke");
    assert_eq!(other["stoppedBecause"], "other-queue");
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 5);

    let response = watch
        .invoke(
            "redriver",
            &queues.alarm_notification("orders-dlq-depth", "ALARM", &queues.dlq_name),
        )
        .await
        .expect("invoke");
    assert_eq!(
        response,
        json!({"received":5,"redriven":5,"isolated":0,"failed":0,"dryRun":false,"stoppedBecause":"queue-empty","dlqRemaining":0})
    );
    let conserved = queue_depth(&sqs, &queues.dlq_url).await
        + queue_depth(&sqs, &queues.source_url).await
        + queue_depth(&sqs, &queues.poison_url).await;
    assert_eq!(conserved, 5, "DLQ + source + poison hold every message");
    let mut back: Vec<String> = drain_all(&sqs, &queues.source_url)
        .await
        .iter()
        .map(|m| {
            let text = m.message_attributes().unwrap()[ATTRIBUTE_NAME]
                .string_value()
                .unwrap();
            RedriveMeta::parse(text).unwrap().original_message_id
        })
        .collect();
    back.sort();
    ids.sort();
    assert_eq!(back, ids);

    // A typo'd manual drain is an error naming the key.
    let err = watch
        .invoke("redriver", &json!({"maxMesages": 1}))
        .await
        .unwrap_err();
    assert!(err.contains("maxMesages"), "{err}");
    assert_eq!(error_type(&err), "InvalidEvent", "{err}");

    // Logs are JSON lines with the action and ids, never the bodies.
    let log = watch.log();
    assert!(
        log.contains("\"action\":\"redriven\""),
        "per-message action lines"
    );
    assert!(log.contains(&ids[0]));
    assert!(
        !log.contains("order-3"),
        "a message body leaked into the logs"
    );
}

#[tokio::test]
async fn a_config_error_fails_init_naming_the_variable_and_touches_no_queue() {
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    send_raw(&sqs, &queues.dlq_url, "stays", &[]).await;
    let watch = redriver(&queues, &[("MAX_REDRIVE_ATTEMPTS", "lots")]).await;
    let err = watch.invoke("redriver", &json!({})).await.unwrap_err();
    assert!(
        err.contains("MAX_REDRIVE_ATTEMPTS") && err.contains("lots"),
        "{err}"
    );
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 1);
    // AND the failed init never received it
    assert_never_received(&sqs, &queues.dlq_url).await;
}

#[tokio::test]
async fn a_dlq_that_cannot_be_read_fails_the_lambda_invocation() {
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let watch = redriver(&queues, &[]).await;
    sqs.delete_queue()
        .queue_url(&queues.dlq_url)
        .send()
        .await
        .expect("DeleteQueue");
    // The invocation fails (so the Lambda Errors alarm sees it), naming the cause.
    let err = watch.invoke("redriver", &json!({})).await.unwrap_err();
    assert!(err.contains("DLQ cannot be read"), "{err}");
    assert_eq!(error_type(&err), "DlqUnreadable", "{err}");
    let log = watch.log();
    assert!(
        log.contains("\"action\":\"dlq-unreadable\""),
        "an ERROR line says so"
    );
}

#[tokio::test]
async fn scheduled_and_manual_drains_rearm_the_configured_trigger_alarm() {
    let sqs = moto().sqs().await;
    let cw = moto().cloudwatch().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    for i in 0..3 {
        send_raw(&sqs, &queues.dlq_url, &format!("order-{i}"), &[]).await;
    }
    // GIVEN the DLQ's trigger alarm stuck in ALARM (its notification came and went)
    let alarm = unique_name("dlq-not-empty");
    put_queue_alarm(&cw, &alarm, &queues.dlq_name, StateValue::Alarm).await;
    let watch = redriver(
        &queues,
        &[("REARM_ALARM", ""), ("TRIGGER_ALARM_NAME", &alarm)],
    )
    .await;

    // WHEN the safety-net schedule drains
    let response = watch
        .invoke("redriver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("invoke");

    // THEN the DLQ is drained and the alarm is OK, so that the next inflow notifies again
    assert_eq!(
        (&response["redriven"], &response["stoppedBecause"]),
        (&json!(3), &json!("queue-empty")),
        "{response}"
    );
    assert_eq!(alarm_state(&cw, &alarm).await, StateValue::Ok);

    // A manual drain re-arms it too; a dry run never does.
    put_queue_alarm(&cw, &alarm, &queues.dlq_name, StateValue::Alarm).await;
    watch
        .invoke("redriver", &json!({"dryRun": true}))
        .await
        .expect("invoke");
    assert_eq!(alarm_state(&cw, &alarm).await, StateValue::Alarm);
    watch.invoke("redriver", &json!({})).await.expect("invoke");
    assert_eq!(alarm_state(&cw, &alarm).await, StateValue::Ok);
}

#[tokio::test]
async fn every_log_line_of_an_invocation_carries_its_request_and_trace_ids() {
    // GIVEN the re-driver under cargo lambda watch
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let watch = redriver(&queues, &[]).await;

    // WHEN it drains twice, each time a DLQ with messages on it
    let mut seen = Vec::new();
    for round in 0..2 {
        for i in 0..3 {
            send_raw(&sqs, &queues.dlq_url, &format!("order-{round}-{i}"), &[]).await;
        }
        let (response, lines) = watch.invoke_logged("redriver", &json!({})).await;
        assert_eq!(response.unwrap()["redriven"], json!(3));

        // THEN every line it logged during the drain (one per message and more) carries the
        // invocation's requestId and xrayTraceId
        let ids = redrive_tests::invocation_ids(&lines).unwrap_or_else(|e| panic!("{e}"));
        let actions = lines
            .iter()
            .filter(|l| l["fields"]["action"] == "redriven")
            .count();
        assert_eq!(actions, 3, "{lines:?}");
        seen.push(ids);
    }
    // AND each invocation has its own
    assert_ne!(seen[0].0, seen[1].0);
    assert_ne!(seen[0].1, seen[1].1);
}

#[tokio::test]
async fn the_lambdas_copy_keeps_the_producers_aws_trace_header_not_its_own() {
    if !redrive_tests::batch_sends_keep_trace_headers() {
        return;
    }
    // GIVEN a traced producer's message on the DLQ, and the re-driver under cargo lambda
    // watch, whose own SDK calls carry the invocation's trace header (X-Amzn-Trace-Id)
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let header = redrive_tests::producer_trace_header();
    redrive_tests::send_traced(&sqs, &queues.dlq_url, "traced", &[], &header).await;
    let watch = redriver(&queues, &[]).await;

    // WHEN it drains
    let (response, lines) = watch.invoke_logged("redriver", &json!({})).await;
    assert_eq!(response.unwrap()["redriven"], json!(1));

    // THEN the copy on the source carries the producer's header, not the invocation's
    let (_, invocation_trace) = redrive_tests::invocation_ids(&lines).unwrap();
    let copies = drain_all(&sqs, &queues.source_url).await;
    let carried = redrive_tests::trace_header_of(&copies[0]);
    assert_eq!(carried, Some(header.as_str()));
    assert_ne!(carried, Some(invocation_trace.as_str()));
}

/// The `errorType` of a failed invocation's error document.
fn error_type(err: &str) -> String {
    serde_json::from_str::<serde_json::Value>(err)
        .ok()
        .and_then(|d| d.get("errorType")?.as_str().map(str::to_string))
        .unwrap_or_default()
}
