//! CloudWatch alarms on the emulator (moto, or LocalStack under REDRIVE_SQS_EMULATOR): a depth alarm on a queue, put in a given state, and its state; a datapoint put for a queue's metric, and the datapoints a queue's metric got.

use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{
    ComparisonOperator, Datapoint, Dimension, MetricDatum, StandardUnit, StateValue, Statistic,
};

/// The dimension the re-driver's and SQS's queue metrics carry: `QueueName`.
fn queue_dimension(queue_name: &str) -> Dimension {
    Dimension::builder()
        .name("QueueName")
        .value(queue_name)
        .build()
}

/// Creates (or replaces) the metric alarm `name` on the visible depth of queue `queue` (period
/// 60 s, as the stack's DLQ alarm) and sets it to `state`.
pub async fn put_queue_alarm(cw: &Client, name: &str, queue: &str, state: StateValue) {
    cw.put_metric_alarm()
        .alarm_name(name)
        .namespace("AWS/SQS")
        .metric_name("ApproximateNumberOfMessagesVisible")
        .dimensions(queue_dimension(queue))
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

/// Puts one datapoint of metric `name` in `namespace` for queue `queue_name` (dimension
/// `QueueName`), as the re-driver (or SQS itself, in `AWS/SQS`) publishes it.
pub async fn put_queue_metric(
    cw: &Client,
    namespace: &str,
    name: &str,
    queue_name: &str,
    (unit, value): (StandardUnit, f64),
) {
    cw.put_metric_data()
        .namespace(namespace)
        .metric_data(
            MetricDatum::builder()
                .metric_name(name)
                .dimensions(queue_dimension(queue_name))
                .unit(unit)
                .value(value)
                .build(),
        )
        .send()
        .await
        .expect("PutMetricData");
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

/// The datapoints of metric `name` in `namespace` for queue `queue_name` (dimension
/// `QueueName`), from ten minutes ago to ten minutes ahead by the minute, with `statistics`.
pub async fn metric_points(
    cw: &Client,
    namespace: &str,
    name: &str,
    queue_name: &str,
    statistics: &[Statistic],
) -> Vec<Datapoint> {
    let now = SystemTime::now();
    let out = cw
        .get_metric_statistics()
        .namespace(namespace)
        .metric_name(name)
        .dimensions(queue_dimension(queue_name))
        .start_time(DateTime::from(now - Duration::from_secs(600)))
        .end_time(DateTime::from(now + Duration::from_secs(600)))
        .period(60)
        .set_statistics(Some(statistics.to_vec()))
        .send()
        .await
        .expect("GetMetricStatistics");
    out.datapoints().to_vec()
}
