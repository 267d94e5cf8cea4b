//! CloudWatch's evaluation of the DLQ alarm, the safety-net schedule, and the re-driver's
//! invocations they make.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_sdk_cloudwatch::types::StateValue;
use redrive_tests::{REGION, fixture, queue_counts};
use serde_json::{Value, json};

use crate::{ALARM_PERIOD, Demo, SCHEDULE, rfc3339_now};

/// CloudWatch's evaluation of the trigger alarm (the DLQ's ApproximateNumberOfMessagesVisible
/// greater than 0): a transition to ALARM sets the alarm's real state and notifies the trigger
/// topic, whose subscriber is the re-driver. A notification happens only on a state change,
/// which is why the re-driver re-arms the alarm (sets it to OK) after every alarm-triggered
/// drain: inflow during or after the drain then fires it again.
pub async fn alarm_evaluator(demo: Arc<Demo>) {
    while !demo.stopped() {
        tokio::time::sleep(ALARM_PERIOD).await;
        let visible = match visible_depth(&demo.sqs, &demo.stack.dlq_url).await {
            Some(v) => v,
            None => continue,
        };
        let state = alarm_state(&demo).await;
        *demo.alarm.lock().unwrap() = if state == StateValue::Alarm {
            "ALARM"
        } else {
            "OK"
        };
        let alarm = &demo.stack.trigger_alarm;
        if visible > 0 && state != StateValue::Alarm {
            let reason = format!(
                "Threshold Crossed: 1 out of the last 1 datapoints [{visible}.0] was greater than the threshold (0.0)."
            );
            if set_alarm(&demo, StateValue::Alarm, &reason).await {
                *demo.alarm.lock().unwrap() = "ALARM";
                demo.counters
                    .alarm_notifications
                    .fetch_add(1, Ordering::SeqCst);
                demo.console.event(&format!(
                    "alarm {alarm}: {} -> ALARM ({visible} visible in the DLQ); SNS notifies the re-driver",
                    state.as_str()
                ));
                let event =
                    alarm_notification(&demo, state.as_str(), visible, &demo.stack.dlq_name);
                run_redriver(&demo, "alarm", &event).await;
            }
        } else if visible == 0 && state == StateValue::Alarm {
            let reason = "Threshold Crossed: 1 out of the last 1 datapoints [0.0] was not greater than the threshold (0.0).";
            if set_alarm(&demo, StateValue::Ok, reason).await {
                *demo.alarm.lock().unwrap() = "OK";
                demo.console
                    .event(&format!("alarm {alarm}: ALARM -> OK (the DLQ is empty)"));
            }
        }
    }
}

/// The safety net (wiring.yaml's schedule): a drain with the configured defaults, whatever the
/// alarm's state.
pub async fn schedule(demo: Arc<Demo>) {
    let mut next = tokio::time::Instant::now() + SCHEDULE;
    while !demo.stopped() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if tokio::time::Instant::now() < next {
            continue;
        }
        next += SCHEDULE;
        let visible = visible_depth(&demo.sqs, &demo.stack.dlq_url)
            .await
            .unwrap_or(0);
        if visible == 0 {
            continue;
        }
        demo.counters.scheduled_runs.fetch_add(1, Ordering::SeqCst);
        let mut event = fixture("eventbridge-scheduled.json");
        event["time"] = json!(rfc3339_now());
        let silent = if alarm_state(&demo).await == StateValue::Alarm {
            "; the alarm, still in ALARM, sends no new notification"
        } else {
            ""
        };
        demo.console.event(&format!(
            "schedule: the safety-net rule invokes the re-driver ({visible} visible in the DLQ{silent})"
        ));
        run_redriver(&demo, "schedule", &event).await;
    }
}

pub async fn run_redriver(demo: &Demo, trigger: &str, event: &Value) {
    let _one_at_a_time = demo.redriver_calls.lock().await;
    match demo.watch.invoke("redriver", event).await {
        Ok(summary) => {
            let stopped = summary["stoppedBecause"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            let mut line = format!(
                "re-driver ({trigger}): received {}, redriven {}, isolated {}, failed {}; stopped: {stopped}; {} left in the DLQ",
                summary["received"],
                summary["redriven"],
                summary["isolated"],
                summary["failed"],
                summary["dlqRemaining"]
            );
            // The evaluator set the alarm to ALARM before this invocation and waits for it:
            // an OK now is the re-driver's re-arm.
            if trigger == "alarm" && alarm_state(demo).await == StateValue::Ok {
                demo.counters.rearms.fetch_add(1, Ordering::SeqCst);
                *demo.alarm.lock().unwrap() = "OK";
                line.push_str("; it re-armed the alarm (OK) so that it fires again");
            }
            demo.console.event(&line);
            demo.redriver_runs
                .lock()
                .unwrap()
                .push((trigger.to_string(), summary));
        }
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console
                .event(&format!("re-driver ({trigger}) failed: {e}"));
        }
    }
}

pub async fn alarm_state(demo: &Demo) -> StateValue {
    demo.cloudwatch
        .describe_alarms()
        .alarm_names(&demo.stack.trigger_alarm)
        .send()
        .await
        .ok()
        .and_then(|out| out.metric_alarms?.into_iter().next()?.state_value)
        .unwrap_or(StateValue::InsufficientData)
}

pub async fn set_alarm(demo: &Demo, state: StateValue, reason: &str) -> bool {
    match demo
        .cloudwatch
        .set_alarm_state()
        .alarm_name(&demo.stack.trigger_alarm)
        .state_value(state)
        .state_reason(reason)
        .send()
        .await
    {
        Ok(_) => true,
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console.event(&format!("SetAlarmState failed: {e:?}"));
            false
        }
    }
}

/// The SNS event that delivers a CloudWatch alarm notification to a Lambda (the shape of
/// tests/fixtures/sns-cloudwatch-alarm.json), for this demo's alarm, topic and queue.
pub fn alarm_notification(demo: &Demo, old_state: &str, visible: u64, queue_name: &str) -> Value {
    let alarm = &demo.stack.trigger_alarm;
    let topic = &demo.stack.trigger_topic;
    let now = rfc3339_now();
    let mut event = fixture("sns-cloudwatch-alarm.json");
    let record = &mut event["Records"][0];
    let mut message: Value =
        serde_json::from_str(record["Sns"]["Message"].as_str().unwrap_or("{}"))
            .expect("the fixture's Message is JSON");
    message["AlarmName"] = json!(alarm);
    message["AlarmDescription"] = json!("redrive trigger: the DLQ holds messages.");
    message["AWSAccountId"] = json!(demo.stack.account);
    message["AlarmArn"] = json!(format!(
        "arn:aws:cloudwatch:{REGION}:{}:alarm:{alarm}",
        demo.stack.account
    ));
    message["NewStateValue"] = json!("ALARM");
    message["OldStateValue"] = json!(old_state);
    message["NewStateReason"] = json!(format!(
        "Threshold Crossed: 1 out of the last 1 datapoints [{visible}.0] was greater than the threshold (0.0)."
    ));
    message["StateChangeTime"] = json!(now);
    message["AlarmActions"] = json!([topic]);
    message["Trigger"]["Dimensions"] = json!([{"value": queue_name, "name": "QueueName"}]);
    let subscription = uuid::Uuid::new_v4();
    record["EventSubscriptionArn"] = json!(format!("{topic}:{subscription}"));
    record["Sns"]["TopicArn"] = json!(topic);
    record["Sns"]["MessageId"] = json!(uuid::Uuid::new_v4().to_string());
    record["Sns"]["Subject"] = json!(format!("ALARM: \"{alarm}\" in US East (N. Virginia)"));
    record["Sns"]["Message"] = json!(message.to_string());
    record["Sns"]["Timestamp"] = json!(now);
    event
}

/// The visible messages of a queue; `None` when they could not be read.
pub async fn visible_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<u64> {
    Some(queue_counts(sqs, url).await?.0)
}
