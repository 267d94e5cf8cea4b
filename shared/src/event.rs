//! Recognition of the events that invoke the re-driver: an SNS notification carrying a
//! CloudWatch alarm, a manual drain object, or an EventBridge scheduled event. Anything else is
//! an error that names what was wrong, and nothing is touched.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sns::SnsEvent;
use serde_json::{Map, Value};

/// Keys a manual invocation may carry.
pub const MANUAL_KEYS: [&str; 2] = ["maxMessages", "dryRun"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    Alarm(AlarmNotification),
    Manual(ManualDrain),
    Scheduled,
}

/// The parts of a CloudWatch alarm notification the re-driver acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmNotification {
    pub alarm_name: String,
    pub new_state: String,
    /// The `QueueName` dimension of the alarm's metric, when it has one (the first of
    /// `queue_names`).
    pub queue_name: Option<String>,
    /// Every `QueueName` dimension: under `Trigger.Dimensions` (a metric alarm) and under
    /// `Trigger.Metrics[].MetricStat.Metric.Dimensions` (a metric-math alarm).
    pub queue_names: Vec<String>,
    /// `AlarmArn` (`arn:aws:cloudwatch:REGION:ACCOUNT:alarm:NAME`), when present.
    pub alarm_arn: Option<String>,
}

/// Region and account of a queue URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`, the
/// legacy `https://REGION.queue.amazonaws.com/ACCOUNT/NAME`), as far as the URL tells them:
/// an emulator's `http://localhost:4566/ACCOUNT/NAME` has no region.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueLocation {
    pub region: Option<String>,
    pub account: Option<String>,
    pub name: String,
}

impl QueueLocation {
    pub fn from_url(url: &str) -> Self {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let rest = rest.split(['?', '#']).next().unwrap_or("");
        let mut parts = rest.split('/').filter(|p| !p.is_empty());
        let host = parts.next().unwrap_or("").to_ascii_lowercase();
        let path: Vec<&str> = parts.collect();
        let name = path.last().map_or(String::new(), |n| n.to_string());
        let account = (path.len() >= 2)
            .then(|| path[path.len() - 2])
            .filter(|a| a.len() == 12 && a.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_string);
        let labels: Vec<&str> = host.split(':').next().unwrap_or("").split('.').collect();
        let region = match labels.as_slice() {
            ["sqs", region, "amazonaws", ..] => Some(region.to_string()),
            [region, "queue", "amazonaws", ..] => Some(region.to_string()),
            _ => None,
        };
        Self {
            region,
            account,
            name,
        }
    }
}

/// `{"maxMessages": N, "dryRun": bool}`, both optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManualDrain {
    pub max_messages: Option<u32>,
    pub dry_run: Option<bool>,
}

/// Why an alarm-triggered invocation does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The alarm moved to OK or INSUFFICIENT_DATA.
    NotInAlarm,
    /// The alarm watches another queue.
    OtherQueue,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotInAlarm => "not-in-alarm",
            Self::OtherQueue => "other-queue",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error(
        "the event is not a JSON object (got {0}); expected an SNS alarm notification, a manual drain object {{\"maxMessages\":N,\"dryRun\":bool}} or an EventBridge scheduled event"
    )]
    NotAnObject(&'static str),
    #[error(
        "unknown key {key:?} in the manual drain event; allowed keys are maxMessages and dryRun"
    )]
    UnknownManualKey { key: String },
    #[error("manual drain: {key} must be {expected}, got {got}")]
    ManualValue {
        key: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("the Records event is not a single SNS notification: {0}")]
    NotSns(String),
    #[error("the SNS message is not a CloudWatch alarm notification: {0}")]
    NotAlarm(String),
    #[error(
        "the EventBridge event is not a scheduled event: detail-type {detail_type:?}, source {source_name:?}"
    )]
    NotScheduled {
        detail_type: String,
        source_name: String,
    },
}

impl AlarmNotification {
    /// Whether this notification should start a drain of the queue named `dlq_name`: not when
    /// the alarm is not in ALARM, nor when its `QueueName` dimensions (if any) all name other
    /// queues. An alarm without a `QueueName` dimension was routed here on purpose.
    pub fn skip_for(&self, dlq_name: &str) -> Option<Skip> {
        if self.new_state != "ALARM" {
            return Some(Skip::NotInAlarm);
        }
        if !self.queue_names.is_empty() && !self.queue_names.iter().any(|q| q == dlq_name) {
            return Some(Skip::OtherQueue);
        }
        None
    }

    /// [`Self::skip_for`] the DLQ at `dlq_url`, and also skips an alarm whose `AlarmArn` names
    /// another region or account than the URL does (where the URL tells them).
    pub fn skip_for_dlq(&self, dlq_url: &str) -> Option<Skip> {
        let dlq = QueueLocation::from_url(dlq_url);
        if let Some(skip) = self.skip_for(&dlq.name) {
            return Some(skip);
        }
        let (region, account) = self.arn_region_account()?;
        let differs = |ours: &Option<String>, theirs: &str| {
            !theirs.is_empty() && ours.as_deref().is_some_and(|o| o != theirs)
        };
        (differs(&dlq.region, region) || differs(&dlq.account, account)).then_some(Skip::OtherQueue)
    }

    /// Region and account of `AlarmArn`.
    pub fn arn_region_account(&self) -> Option<(&str, &str)> {
        let arn = self.alarm_arn.as_deref()?;
        let mut parts = arn.splitn(6, ':');
        let (_arn, _partition, _service) = (parts.next()?, parts.next()?, parts.next()?);
        Some((parts.next()?, parts.next()?))
    }

    /// Parses the `Message` of an SNS notification sent by a CloudWatch alarm action.
    pub fn parse(message: &str) -> Result<Self, EventError> {
        let v: Value = serde_json::from_str(message)
            .map_err(|e| EventError::NotAlarm(format!("Message is not JSON ({e})")))?;
        let field = |name: &str| -> Result<String, EventError> {
            v.get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| EventError::NotAlarm(format!("no string {name}")))
        };
        let alarm_name = field("AlarmName")?;
        let new_state = field("NewStateValue")?;
        // Dimensions in notifications are lowercase `name`/`value`; accept the API's casing
        // too. A metric-math alarm carries them per metric of its expression.
        let trigger_dims = v.pointer("/Trigger/Dimensions").and_then(Value::as_array);
        let math_dims = v
            .pointer("/Trigger/Metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                m.pointer("/MetricStat/Metric/Dimensions")
                    .and_then(Value::as_array)
            });
        let mut queue_names: Vec<String> = Vec::new();
        for d in trigger_dims.into_iter().chain(math_dims).flatten() {
            let text = |lower: &str, upper: &str| {
                d.get(lower)
                    .or_else(|| d.get(upper))
                    .and_then(Value::as_str)
            };
            if let (Some("QueueName"), Some(value)) = (text("name", "Name"), text("value", "Value"))
                && !queue_names.iter().any(|q| q == value)
            {
                queue_names.push(value.to_string());
            }
        }
        let alarm_arn = v
            .get("AlarmArn")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Self {
            alarm_name,
            new_state,
            queue_name: queue_names.first().cloned(),
            queue_names,
            alarm_arn,
        })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Recognizes an invocation payload.
pub fn recognize(event: &Value) -> Result<Trigger, EventError> {
    let obj = event
        .as_object()
        .ok_or_else(|| EventError::NotAnObject(kind(event)))?;
    if let Some(records) = obj.get("Records") {
        return recognize_sns(event, records).map(Trigger::Alarm);
    }
    if obj.contains_key("detail-type")
        || obj.get("source").is_some_and(Value::is_string) && obj.contains_key("detail")
    {
        return recognize_scheduled(event, obj);
    }
    recognize_manual(obj).map(Trigger::Manual)
}

/// The checks that name what is wrong come first; then the envelope is read as the ecosystem's
/// `SnsEvent`, which also rejects a record that lacks a field SNS always sends.
fn recognize_sns(event: &Value, records: &Value) -> Result<AlarmNotification, EventError> {
    let records = records
        .as_array()
        .ok_or_else(|| EventError::NotSns("Records is not an array".into()))?;
    let [record] = records.as_slice() else {
        return Err(EventError::NotSns(format!(
            "{} records, expected exactly 1",
            records.len()
        )));
    };
    // SNS records say `EventSource`; SQS and others say `eventSource`.
    let source = record
        .get("EventSource")
        .or_else(|| record.get("eventSource"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if source != "aws:sns" {
        return Err(EventError::NotSns(format!(
            "EventSource is {source:?}, not \"aws:sns\""
        )));
    }
    if record
        .pointer("/Sns/Message")
        .and_then(Value::as_str)
        .is_none()
    {
        return Err(EventError::NotSns("no Sns.Message string".into()));
    }
    let sns: SnsEvent = serde_json::from_value(event.clone())
        .map_err(|e| EventError::NotSns(format!("not an SNS notification record: {e}")))?;
    let message = sns
        .records
        .first()
        .map(|r| r.sns.message.as_str())
        .ok_or_else(|| EventError::NotSns("0 records, expected exactly 1".into()))?;
    AlarmNotification::parse(message)
}

fn recognize_scheduled(event: &Value, obj: &Map<String, Value>) -> Result<Trigger, EventError> {
    let detail_type = obj
        .get("detail-type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let source_name = obj
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let typed = serde_json::from_value::<EventBridgeEvent>(event.clone()).ok();
    if let Some(e) = typed
        && e.detail_type == "Scheduled Event"
        && e.source == "aws.events"
    {
        Ok(Trigger::Scheduled)
    } else {
        Err(EventError::NotScheduled {
            detail_type,
            source_name,
        })
    }
}

fn recognize_manual(obj: &Map<String, Value>) -> Result<ManualDrain, EventError> {
    if let Some(key) = obj.keys().find(|k| !MANUAL_KEYS.contains(&k.as_str())) {
        return Err(EventError::UnknownManualKey { key: key.clone() });
    }
    let max_messages = match obj.get("maxMessages") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n >= 1 && *n <= u64::from(u32::MAX))
                .map(|n| n as u32)
                .ok_or_else(|| EventError::ManualValue {
                    key: "maxMessages",
                    expected: "a whole number >= 1",
                    got: v.to_string(),
                })?,
        ),
    };
    let dry_run = match obj.get("dryRun") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            return Err(EventError::ManualValue {
                key: "dryRun",
                expected: "true or false",
                got: v.to_string(),
            });
        }
    };
    Ok(ManualDrain {
        max_messages,
        dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const ALARM_FIXTURE: &str = include_str!("../../tests/fixtures/sns-cloudwatch-alarm.json");
    const SCHEDULE_FIXTURE: &str = include_str!("../../tests/fixtures/eventbridge-scheduled.json");
    const SQS_FIXTURE: &str = include_str!("../../tests/fixtures/sqs-batch.json");
    const METRIC_MATH_FIXTURE: &str =
        include_str!("../../tests/fixtures/sns-metric-math-alarm.json");
    const METRIC_MATH_API_CASING_FIXTURE: &str =
        include_str!("../../tests/fixtures/sns-metric-math-alarm-api-casing.json");
    const OTHER_REGION_FIXTURE: &str =
        include_str!("../../tests/fixtures/sns-cloudwatch-alarm-other-region.json");
    const OTHER_ACCOUNT_FIXTURE: &str =
        include_str!("../../tests/fixtures/sns-cloudwatch-alarm-other-account.json");
    const ORDERS_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";

    fn alarm_of(fixture: &str) -> AlarmNotification {
        let v: Value = serde_json::from_str(fixture).unwrap();
        match recognize(&v).unwrap() {
            Trigger::Alarm(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn metric_math_alarm_of_another_queue_is_ignored() {
        for fixture in [METRIC_MATH_FIXTURE, METRIC_MATH_API_CASING_FIXTURE] {
            let a = alarm_of(fixture);
            assert_eq!(a.queue_names, ["payments-dlq"]);
            assert_eq!(a.skip_for_dlq(ORDERS_DLQ), Some(Skip::OtherQueue));
            assert_eq!(
                a.skip_for_dlq("https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq"),
                None
            );
        }
    }

    #[test]
    fn alarms_from_another_region_or_account_are_ignored() {
        let region = alarm_of(OTHER_REGION_FIXTURE);
        assert_eq!(region.queue_names, ["orders-dlq"]);
        assert_eq!(region.skip_for_dlq(ORDERS_DLQ), Some(Skip::OtherQueue));
        assert_eq!(
            region.skip_for_dlq("https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq"),
            None
        );
        let account = alarm_of(OTHER_ACCOUNT_FIXTURE);
        assert_eq!(account.skip_for_dlq(ORDERS_DLQ), Some(Skip::OtherQueue));
        // The legacy URL form carries region and account too.
        assert_eq!(
            account.skip_for_dlq("https://us-east-1.queue.amazonaws.com/123456789012/orders-dlq"),
            Some(Skip::OtherQueue)
        );
        // An emulator URL has no region: only the account is compared.
        assert_eq!(
            region.skip_for_dlq("http://localhost:5000/123456789012/orders-dlq"),
            None
        );
        assert_eq!(
            account.skip_for_dlq("http://localhost:5000/123456789012/orders-dlq"),
            Some(Skip::OtherQueue)
        );
        // The real fixture: same region and account, same queue.
        assert_eq!(alarm_of(ALARM_FIXTURE).skip_for_dlq(ORDERS_DLQ), None);
    }

    #[test]
    fn queue_locations_from_urls() {
        let l = QueueLocation::from_url(ORDERS_DLQ);
        assert_eq!(
            (l.region.as_deref(), l.account.as_deref(), l.name.as_str()),
            (Some("us-east-1"), Some("123456789012"), "orders-dlq")
        );
        let cn =
            QueueLocation::from_url("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q.fifo");
        assert_eq!(cn.region.as_deref(), Some("cn-north-1"));
        assert_eq!(cn.name, "q.fifo");
        let local = QueueLocation::from_url("http://127.0.0.1:4566/000000000000/q");
        assert_eq!(
            (local.region, local.account.as_deref()),
            (None, Some("000000000000"))
        );
    }

    fn alarm_event(state: &str, queue: Option<&str>) -> Value {
        let dims = match queue {
            Some(q) => json!([{"value": q, "name": "QueueName"}]),
            None => json!([]),
        };
        let message = json!({"AlarmName": "dlq-depth", "NewStateValue": state, "Trigger": {"Dimensions": dims}});
        let mut event: Value = serde_json::from_str(ALARM_FIXTURE).unwrap();
        event["Records"][0]["Sns"]["Message"] = json!(message.to_string());
        event
    }

    #[test]
    fn an_sns_record_missing_what_sns_always_sends_is_rejected() {
        let mut event = alarm_event("ALARM", Some("q"));
        event["Records"][0]["Sns"]
            .as_object_mut()
            .unwrap()
            .remove("TopicArn");
        let err = recognize(&event).unwrap_err();
        assert!(
            matches!(&err, EventError::NotSns(m) if m.contains("TopicArn")),
            "{err}"
        );
    }

    #[test]
    fn recognizes_the_real_alarm_fixture() {
        let v: Value = serde_json::from_str(ALARM_FIXTURE).unwrap();
        let Trigger::Alarm(a) = recognize(&v).unwrap() else {
            panic!()
        };
        assert_eq!(a.alarm_name, "orders-dlq-depth");
        assert_eq!(a.new_state, "ALARM");
        assert_eq!(a.queue_name.as_deref(), Some("orders-dlq"));
        assert_eq!(a.skip_for("orders-dlq"), None);
        assert_eq!(a.skip_for("payments-dlq"), Some(Skip::OtherQueue));
    }

    #[test]
    fn ok_and_insufficient_data_do_not_act() {
        for state in ["OK", "INSUFFICIENT_DATA"] {
            let Trigger::Alarm(a) = recognize(&alarm_event(state, Some("q"))).unwrap() else {
                panic!()
            };
            assert_eq!(a.skip_for("q"), Some(Skip::NotInAlarm));
        }
        // An alarm without a QueueName dimension (e.g. metric math) was routed here on purpose.
        let Trigger::Alarm(a) = recognize(&alarm_event("ALARM", None)).unwrap() else {
            panic!()
        };
        assert_eq!(a.skip_for("q"), None);
    }

    #[test]
    fn recognizes_the_scheduled_fixture() {
        let v: Value = serde_json::from_str(SCHEDULE_FIXTURE).unwrap();
        assert_eq!(recognize(&v).unwrap(), Trigger::Scheduled);
        let other = json!({"detail-type": "Object Created", "source": "aws.s3", "detail": {}});
        assert!(matches!(
            recognize(&other),
            Err(EventError::NotScheduled { .. })
        ));
    }

    #[test]
    fn manual_drains() {
        assert_eq!(
            recognize(&json!({})).unwrap(),
            Trigger::Manual(ManualDrain::default())
        );
        assert_eq!(
            recognize(&json!({"maxMessages": 25, "dryRun": true})).unwrap(),
            Trigger::Manual(ManualDrain {
                max_messages: Some(25),
                dry_run: Some(true)
            })
        );
        let err = recognize(&json!({"maxMesages": 25})).unwrap_err();
        assert_eq!(
            err,
            EventError::UnknownManualKey {
                key: "maxMesages".into()
            }
        );
        assert!(err.to_string().contains("maxMesages") && err.to_string().contains("allowed keys"));
        for bad in [
            json!({"maxMessages": 0}),
            json!({"maxMessages": -3}),
            json!({"maxMessages": "10"}),
            json!({"maxMessages": 2.5}),
        ] {
            assert!(
                matches!(
                    recognize(&bad),
                    Err(EventError::ManualValue {
                        key: "maxMessages",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            recognize(&json!({"dryRun": "yes"})),
            Err(EventError::ManualValue { key: "dryRun", .. })
        ));
    }

    #[test]
    fn other_events_are_rejected_with_a_reason() {
        let sqs: Value = serde_json::from_str(SQS_FIXTURE).unwrap();
        assert!(matches!(recognize(&sqs), Err(EventError::NotSns(m)) if m.contains("aws:sqs")));
        assert!(matches!(
            recognize(&json!([1])),
            Err(EventError::NotAnObject("an array"))
        ));
        assert!(matches!(
            recognize(&json!("drain")),
            Err(EventError::NotAnObject("a string"))
        ));
        let mut not_alarm = alarm_event("ALARM", None);
        not_alarm["Records"][0]["Sns"]["Message"] = json!("hello");
        assert!(matches!(
            recognize(&not_alarm),
            Err(EventError::NotAlarm(_))
        ));
        let two = json!({"Records": [alarm_event("ALARM", None)["Records"][0], alarm_event("ALARM", None)["Records"][0]]});
        assert!(matches!(recognize(&two), Err(EventError::NotSns(m)) if m.contains("2 records")));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "\\PC{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("Records".to_string()),
                        Just("maxMessages".to_string()),
                        Just("detail-type".to_string()),
                        Just("Sns".to_string()),
                        Just("Message".to_string()),
                        "[a-zA-Z]{1,8}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn recognizer_never_panics(v in arb_json()) {
            let _ = recognize(&v);
        }

        #[test]
        fn alarm_parser_never_panics(s in "\\PC{0,200}") {
            let _ = AlarmNotification::parse(&s);
        }
    }
}
