//! CloudWatch alarms on the emulator (moto, or LocalStack under REDRIVE_SQS_EMULATOR): a depth alarm on a queue, put in a given state, and its state.

use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, StateValue, Statistic};

/// Creates (or replaces) the metric alarm `name` on the visible depth of queue `queue` (period
/// 60 s, as the stack's DLQ alarm) and sets it to `state`.
pub async fn put_queue_alarm(cw: &Client, name: &str, queue: &str, state: StateValue) {
    cw.put_metric_alarm()
        .alarm_name(name)
        .namespace("AWS/SQS")
        .metric_name("ApproximateNumberOfMessagesVisible")
        .dimensions(Dimension::builder().name("QueueName").value(queue).build())
        .statistic(Statistic::Maximum)
        .period(60)
        .evaluation_periods(1)
        .threshold(0.0)
        .comparison_operator(ComparisonOperator::GreaterThanThreshold)
        // An emulator that evaluates alarms (LocalStack, as CloudWatch does, at once on
        // PutMetricAlarm and then every period) would turn the state set below into
        // INSUFFICIENT_DATA for want of datapoints; `ignore` keeps it, on AWS too.
        .treat_missing_data("ignore")
        .send()
        .await
        .expect("PutMetricAlarm");
    cw.set_alarm_state()
        .alarm_name(name)
        .state_value(state)
        .state_reason("test")
        .send()
        .await
        .expect("SetAlarmState");
}

/// The state of metric alarm `name`.
pub async fn alarm_state(cw: &Client, name: &str) -> StateValue {
    let out = cw
        .describe_alarms()
        .alarm_names(name)
        .send()
        .await
        .expect("DescribeAlarms");
    out.metric_alarms()
        .first()
        .and_then(|a| a.state_value())
        .cloned()
        .unwrap_or_else(|| panic!("alarm {name} exists and has a state"))
}
