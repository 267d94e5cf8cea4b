//! Recognition of the events that invoke the re-driver: an SNS notification carrying a
//! CloudWatch alarm, a manual drain object, or an EventBridge scheduled event. Anything else is
//! an error that names what was wrong, and nothing is touched.

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
    /// The `QueueName` dimension of the alarm's metric, when it has one.
    pub queue_name: Option<String>,
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
    /// Whether this notification should start a drain of the queue named `dlq_name`.
    pub fn skip_for(&self, dlq_name: &str) -> Option<Skip> {
        if self.new_state != "ALARM" {
            return Some(Skip::NotInAlarm);
        }
        match &self.queue_name {
            Some(q) if q != dlq_name => Some(Skip::OtherQueue),
            _ => None,
        }
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
        // Dimensions of a metric alarm are lowercase `name`/`value`; accept the API's casing too.
        let queue_name = v
            .pointer("/Trigger/Dimensions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|d| {
                let name = d.get("name").or_else(|| d.get("Name"))?.as_str()?;
                let value = d.get("value").or_else(|| d.get("Value"))?.as_str()?;
                (name == "QueueName").then(|| value.to_string())
            });
        Ok(Self {
            alarm_name,
            new_state,
            queue_name,
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
        return recognize_sns(records).map(Trigger::Alarm);
    }
    if obj.contains_key("detail-type")
        || obj.get("source").is_some_and(Value::is_string) && obj.contains_key("detail")
    {
        return recognize_scheduled(obj);
    }
    recognize_manual(obj).map(Trigger::Manual)
}

fn recognize_sns(records: &Value) -> Result<AlarmNotification, EventError> {
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
    let message = record
        .pointer("/Sns/Message")
        .and_then(Value::as_str)
        .ok_or_else(|| EventError::NotSns("no Sns.Message string".into()))?;
    AlarmNotification::parse(message)
}

fn recognize_scheduled(obj: &Map<String, Value>) -> Result<Trigger, EventError> {
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
    if detail_type == "Scheduled Event" && source_name == "aws.events" {
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

    fn alarm_event(state: &str, queue: Option<&str>) -> Value {
        let dims = match queue {
            Some(q) => json!([{"value": q, "name": "QueueName"}]),
            None => json!([]),
        };
        let message = json!({"AlarmName": "dlq-depth", "NewStateValue": state, "Trigger": {"Dimensions": dims}});
        json!({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": message.to_string()}}]})
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
        let not_alarm =
            json!({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": "hello"}}]});
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
