//! The `x-redrive` message attribute: the whole redrive history of a message in one attribute
//! slot, as compact JSON. Reading is total: every input yields a usable [`RedriveMeta`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::attributes::{AttributeValue, Attributes, MessageAttribute};
use crate::timefmt::{millis_from_rfc3339, rfc3339_from_millis};

/// Name of the one attribute redrive state costs.
pub const ATTRIBUTE_NAME: &str = "x-redrive";
/// Attribute earlier tools wrote (a Number); read, then replaced by `x-redrive` on the next write.
pub const LEGACY_ATTEMPT_ATTRIBUTE: &str = "x-redrive-attempt";
/// The format version this crate writes.
pub const VERSION: u32 = 1;
/// `lastError.message` is cut to this many characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 256;
const MAX_ORIGINAL_ID_LEN: usize = 100;

/// `Display`, `Serialize` and `Deserialize` of a value written as its text: `as_str` out,
/// `from_text` in (total: an unknown text is kept, never an error).
macro_rules! as_text {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Ok(Self::from_text(&text))
            }
        }
    };
}

/// Why a message was parked in the poison queue.
///
/// A reason this crate does not know (written by a newer re-driver) is kept as its text in
/// [`IsolationReason::Other`] and written back unchanged: it is never a reason to restart a
/// message's history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IsolationReason {
    MaxAttempts,
    PermanentFailure,
    AttributeLimit,
    SizeLimit,
    Manual,
    /// SQS kept rejecting the copy as the sender's fault (not throttling, not a 5xx).
    SendRejected,
    /// A protected DLQ's message whose source queue cannot be known: no
    /// `DeadLetterQueueSourceArn` and no `source` in its `x-redrive` (sent to the DLQ by hand,
    /// by SNS, by Lambda), or a source that no longer names the DLQ in its RedrivePolicy.
    UnknownSource,
    /// A reason written by a newer writer, kept as text.
    Other(String),
}

impl IsolationReason {
    /// The reasons this crate writes.
    pub const ALL: [IsolationReason; 7] = [
        Self::MaxAttempts,
        Self::PermanentFailure,
        Self::AttributeLimit,
        Self::SizeLimit,
        Self::Manual,
        Self::SendRejected,
        Self::UnknownSource,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            Self::MaxAttempts => "max-attempts",
            Self::PermanentFailure => "permanent-failure",
            Self::AttributeLimit => "attribute-limit",
            Self::SizeLimit => "size-limit",
            Self::Manual => "manual",
            Self::SendRejected => "send-rejected",
            Self::UnknownSource => "unknown-source",
            Self::Other(text) => text,
        }
    }

    /// The reason named by `text`: a known one, else [`IsolationReason::Other`].
    pub fn from_text(text: &str) -> Self {
        Self::ALL
            .iter()
            .find(|r| r.as_str() == text)
            .cloned()
            .unwrap_or_else(|| Self::Other(text.to_string()))
    }
}

as_text!(IsolationReason);

/// `lastError.class`. A class this crate does not know is kept as text in
/// [`ErrorClass::Other`]; only `permanent` isolates a message at once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    Transient,
    Permanent,
    /// A class written by a newer writer, kept as text.
    Other(String),
}

impl ErrorClass {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Other(text) => text,
        }
    }

    pub fn from_text(text: &str) -> Self {
        match text {
            "transient" => Self::Transient,
            "permanent" => Self::Permanent,
            other => Self::Other(other.to_string()),
        }
    }
}

as_text!(ErrorClass);

/// The consumer's stamp when it gives up on a message. Fields a newer writer added are kept in
/// `extra` and written back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub class: ErrorClass,
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub at: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl LastError {
    /// Builds a stamp, cutting `message` to [`MAX_ERROR_MESSAGE_CHARS`] characters (never inside
    /// a multi-byte character).
    pub fn new(class: ErrorClass, code: impl Into<String>, message: &str, at: String) -> Self {
        let message: String = message.chars().take(MAX_ERROR_MESSAGE_CHARS).collect();
        Self {
            class,
            code: code.into(),
            message,
            at,
            extra: Map::new(),
        }
    }
}

/// The decoded `x-redrive` value. A value of this type is always writable.
///
/// Only `v`, `attempt` and `originalMessageId` are structural: without them (or with them
/// ill-typed) the stamp is garbled. Any other field this crate does not know, or a known
/// optional field it cannot read (say `"firstRedrivenAt": 5` from a buggy writer), is kept
/// as written in `extra` and written back, so that a newer writer's stamp survives an older
/// re-driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveMeta {
    pub v: u32,
    pub attempt: u32,
    pub original_message_id: String,
    pub first_redriven_at: Option<String>,
    pub last_redriven_at: Option<String>,
    pub isolated_at: Option<String>,
    pub reason: Option<IsolationReason>,
    pub last_error: Option<LastError>,
    /// Fields kept as written: unknown ones, and known optional ones that could not be read.
    pub extra: Map<String, Value>,
}

const FIELD_V: &str = "v";
const FIELD_ATTEMPT: &str = "attempt";
const FIELD_ORIGINAL: &str = "originalMessageId";
const FIELD_FIRST: &str = "firstRedrivenAt";
const FIELD_LAST: &str = "lastRedrivenAt";
const FIELD_ISOLATED: &str = "isolatedAt";
const FIELD_REASON: &str = "reason";
const FIELD_LAST_ERROR: &str = "lastError";

/// The `x-redrive` field of a message waiting on the DLQ for a backoff longer than SQS's
/// `DelaySeconds` allows: the RFC 3339 time before which it must not go back to its source.
/// Its attempt is already counted; a drain that receives it earlier sends it back to the DLQ
/// with a delay again, one that receives it later redrives it at once.
pub const NOT_BEFORE_FIELD: &str = "notBefore";

/// The `x-redrive` field naming the ARN of the queue a protected DLQ's message came from,
/// written by every move of such a message: a copy that goes back to the DLQ (a wait, a
/// rejection) or to the poison queue carries no `DeadLetterQueueSourceArn`, and this is then
/// where its source is read.
pub const SOURCE_FIELD: &str = "source";

/// The `x-redrive` field naming the DLQ a parked message was received from (the queue URL the
/// re-driver drained), written on isolation: one poison queue serves every protected DLQ.
pub const DLQ_FIELD: &str = "dlq";

/// The `x-redrive` field of an `unknown-source` isolation holding the source the message
/// claimed (SQS's `DeadLetterQueueSourceArn`, else the `source` an earlier move recorded) that
/// could not be used. A clue for people, never a route: nothing sends a message there.
pub const CLAIMED_SOURCE_FIELD: &str = "claimedSource";

/// The `x-redrive` field holding a parked message's FIFO `MessageGroupId`, written on
/// isolation: a standard poison queue keeps no group, and `redrive replay` restores it when it
/// sends the message to a FIFO queue.
pub const GROUP_FIELD: &str = "groupId";

impl Serialize for RedriveMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry(FIELD_V, &self.v)?;
        map.serialize_entry(FIELD_ATTEMPT, &self.attempt)?;
        map.serialize_entry(FIELD_ORIGINAL, &self.original_message_id)?;
        let mut written: Vec<&str> = vec![FIELD_V, FIELD_ATTEMPT, FIELD_ORIGINAL];
        for (name, value) in [
            (FIELD_FIRST, &self.first_redriven_at),
            (FIELD_LAST, &self.last_redriven_at),
            (FIELD_ISOLATED, &self.isolated_at),
        ] {
            if let Some(value) = value {
                map.serialize_entry(name, value)?;
                written.push(name);
            }
        }
        if let Some(reason) = &self.reason {
            map.serialize_entry(FIELD_REASON, reason)?;
            written.push(FIELD_REASON);
        }
        if let Some(last_error) = &self.last_error {
            map.serialize_entry(FIELD_LAST_ERROR, last_error)?;
            written.push(FIELD_LAST_ERROR);
        }
        for (name, value) in &self.extra {
            if !written.contains(&name.as_str()) {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RedriveMeta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

/// Where a [`RedriveMeta`] came from, so that callers can log what they repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaSource {
    /// No redrive metadata: a message never redriven.
    Absent,
    /// A valid `x-redrive` attribute.
    Current,
    /// Only the legacy `x-redrive-attempt` Number attribute.
    Legacy,
    /// An `x-redrive` (or legacy) attribute that could not be read; the text says why. The
    /// message is treated as never redriven, keyed on its current MessageId.
    Garbled(String),
}

impl RedriveMeta {
    /// Metadata of a message never redriven: attempt 0, keyed on its own MessageId.
    pub fn fresh(message_id: &str) -> Self {
        Self {
            v: VERSION,
            attempt: 0,
            original_message_id: message_id.to_string(),
            first_redriven_at: None,
            last_redriven_at: None,
            isolated_at: None,
            reason: None,
            last_error: None,
            extra: Map::new(),
        }
    }

    /// Reads a message's redrive metadata from its attributes. Total: absent metadata is
    /// attempt 0, a garbled value is attempt 0 keyed on `message_id` (with the reason in
    /// [`MetaSource::Garbled`]), a legacy `x-redrive-attempt` alone is read as that attempt.
    pub fn read(attributes: &Attributes, message_id: &str) -> (Self, MetaSource) {
        if let Some(attr) = attributes.get(ATTRIBUTE_NAME) {
            return match Self::parse_attribute(attr) {
                Ok(meta) => (meta, MetaSource::Current),
                Err(why) => (Self::fresh(message_id), MetaSource::Garbled(why)),
            };
        }
        if let Some(attr) = attributes.get(LEGACY_ATTEMPT_ATTRIBUTE) {
            let attempt = match (attr.base_type(), attr.as_str()) {
                ("Number", Some(v)) => parse_legacy_attempt(v),
                _ => None,
            };
            return match attempt {
                Some(attempt) => (
                    Self {
                        attempt,
                        ..Self::fresh(message_id)
                    },
                    MetaSource::Legacy,
                ),
                None => (
                    Self::fresh(message_id),
                    MetaSource::Garbled(format!(
                        "{LEGACY_ATTEMPT_ATTRIBUTE} is not a non-negative whole Number"
                    )),
                ),
            };
        }
        (Self::fresh(message_id), MetaSource::Absent)
    }

    fn parse_attribute(attr: &MessageAttribute) -> Result<Self, String> {
        if attr.data_type != "String" {
            return Err(format!(
                "{ATTRIBUTE_NAME} has DataType {:?}, not String",
                attr.data_type
            ));
        }
        let AttributeValue::String(text) = &attr.value else {
            return Err(format!("{ATTRIBUTE_NAME} carries a binary value"));
        };
        Self::parse(text)
    }

    /// Parses the JSON value of an `x-redrive` attribute, checking what the type promises.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("{ATTRIBUTE_NAME} is not valid JSON: {e}"))?;
        Self::from_value(value)
    }

    /// Reads a decoded `x-redrive` object. Structural fields (`v`, `attempt`,
    /// `originalMessageId`) must be there and well typed; everything else is read if it can
    /// be and otherwise kept as written in `extra`.
    fn from_value(value: Value) -> Result<Self, String> {
        let Value::Object(mut fields) = value else {
            return Err(format!("{ATTRIBUTE_NAME} is not a JSON object"));
        };
        let v = take_u32(&mut fields, FIELD_V)?;
        if v == 0 {
            return Err(format!("{ATTRIBUTE_NAME} has version 0"));
        }
        let attempt = take_u32(&mut fields, FIELD_ATTEMPT)?;
        let original_message_id = match fields.remove(FIELD_ORIGINAL) {
            Some(Value::String(id)) if valid_original_id(&id) => id,
            _ => {
                return Err(format!(
                    "{ATTRIBUTE_NAME} originalMessageId must be 1 to {MAX_ORIGINAL_ID_LEN} characters of letters, digits and -_.:"
                ));
            }
        };
        let text = |v: &Value| v.as_str().map(str::to_string);
        let first_redriven_at = read_field(&mut fields, FIELD_FIRST, text);
        let last_redriven_at = read_field(&mut fields, FIELD_LAST, text);
        let isolated_at = read_field(&mut fields, FIELD_ISOLATED, text);
        let reason = read_field(&mut fields, FIELD_REASON, |v| {
            v.as_str().map(IsolationReason::from_text)
        });
        let last_error = read_field(&mut fields, FIELD_LAST_ERROR, |v| {
            LastError::deserialize(v).ok()
        });
        Ok(Self {
            v,
            attempt,
            original_message_id,
            first_redriven_at,
            last_redriven_at,
            isolated_at,
            reason,
            last_error,
            extra: fields,
        })
    }

    /// The compact JSON value, always at the version this crate writes.
    pub fn to_json(&self) -> String {
        let mut out = self.clone();
        out.v = VERSION;
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_string(&out).unwrap_or_default()
    }

    /// The `x-redrive` attribute carrying this metadata.
    pub fn to_attribute(&self) -> MessageAttribute {
        MessageAttribute::string(self.to_json())
    }

    /// Drops the marks of an earlier isolation (`isolatedAt`, `reason`, also when kept
    /// unread in `extra`, and the DLQ and claimed source it recorded): a copy sent on to be
    /// processed again must not look parked.
    pub fn clear_isolation(&mut self) {
        self.isolated_at = None;
        self.reason = None;
        self.extra.remove(FIELD_ISOLATED);
        self.extra.remove(FIELD_REASON);
        self.extra.remove(DLQ_FIELD);
        self.extra.remove(CLAIMED_SOURCE_FIELD);
        self.extra.remove(GROUP_FIELD);
    }

    /// When a message waiting on the DLQ may go back to its source (epoch ms); `None` for a
    /// message not waiting, or whose `notBefore` is not an RFC 3339 time (then it is not held
    /// back: a garbled wait never strands a message).
    pub fn not_before_ms(&self) -> Option<i64> {
        millis_from_rfc3339(self.extra.get(NOT_BEFORE_FIELD)?.as_str()?)
    }

    /// Sets or clears [`NOT_BEFORE_FIELD`], rounded up to the whole second (never early).
    pub fn set_not_before(&mut self, epoch_ms: Option<i64>) {
        match epoch_ms {
            Some(at) => {
                let whole = at.div_euclid(1000) * 1000 + if at % 1000 == 0 { 0 } else { 1000 };
                self.extra.insert(
                    NOT_BEFORE_FIELD.to_string(),
                    Value::String(rfc3339_from_millis(whole)),
                );
            }
            None => {
                self.extra.remove(NOT_BEFORE_FIELD);
            }
        }
    }

    /// [`SOURCE_FIELD`]: the ARN of the message's source queue, when a move recorded it.
    pub fn source(&self) -> Option<&str> {
        self.extra.get(SOURCE_FIELD)?.as_str()
    }

    /// Records the ARN of the message's source queue ([`SOURCE_FIELD`]).
    pub fn set_source(&mut self, arn: &str) {
        self.extra
            .insert(SOURCE_FIELD.to_string(), Value::String(arn.to_string()));
    }

    /// [`DLQ_FIELD`]: the DLQ a parked message was received from, when its isolation
    /// recorded it.
    pub fn dlq(&self) -> Option<&str> {
        self.extra.get(DLQ_FIELD)?.as_str()
    }

    /// Records the DLQ the message was received from ([`DLQ_FIELD`]).
    pub fn set_dlq(&mut self, dlq: &str) {
        self.extra
            .insert(DLQ_FIELD.to_string(), Value::String(dlq.to_string()));
    }

    /// [`CLAIMED_SOURCE_FIELD`]: the source an `unknown-source` message claimed.
    pub fn claimed_source(&self) -> Option<&str> {
        self.extra.get(CLAIMED_SOURCE_FIELD)?.as_str()
    }

    /// Turns a claimed source into a clue: `claimed` (else a recorded `source`) goes to
    /// [`CLAIMED_SOURCE_FIELD`] and `source` is dropped, so that nothing routes by it.
    pub fn demote_source(&mut self, claimed: Option<&str>) {
        let recorded = self.extra.remove(SOURCE_FIELD);
        let claimed = claimed
            .filter(|c| !c.is_empty())
            .map(|c| Value::String(c.to_string()))
            .or(recorded.filter(|r| r.as_str().is_some_and(|r| !r.is_empty())));
        if let Some(claimed) = claimed {
            self.extra.insert(CLAIMED_SOURCE_FIELD.to_string(), claimed);
        }
    }

    /// [`GROUP_FIELD`]: the FIFO group of a parked message, when its isolation recorded it.
    pub fn group_id(&self) -> Option<&str> {
        self.extra
            .get(GROUP_FIELD)?
            .as_str()
            .filter(|g| !g.is_empty())
    }

    /// Records the message's FIFO group ([`GROUP_FIELD`]).
    pub fn set_group_id(&mut self, group: &str) {
        self.extra
            .insert(GROUP_FIELD.to_string(), Value::String(group.to_string()));
    }

    /// True when the consumer gave up on this message for good.
    pub fn is_permanent_failure(&self) -> bool {
        matches!(&self.last_error, Some(e) if e.class == ErrorClass::Permanent)
    }

    /// Writes this metadata into `attributes`, replacing a legacy `x-redrive-attempt`
    /// (so that the migration costs no extra slot); all other attributes are left untouched.
    pub fn write_into(&self, attributes: &mut Attributes) {
        attributes.remove(LEGACY_ATTEMPT_ATTRIBUTE);
        attributes.insert(ATTRIBUTE_NAME.to_string(), self.to_attribute());
    }
}

/// Takes a field out of `fields` if `read` can read it; otherwise it stays there (kept as
/// written, in `extra`).
fn read_field<T>(
    fields: &mut Map<String, Value>,
    name: &str,
    read: impl FnOnce(&Value) -> Option<T>,
) -> Option<T> {
    let value = read(fields.get(name)?)?;
    fields.remove(name);
    Some(value)
}

fn take_u32(fields: &mut Map<String, Value>, name: &str) -> Result<u32, String> {
    fields
        .remove(name)
        .and_then(|v| v.as_u64())
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "{ATTRIBUTE_NAME} {name} must be a whole number from 0 to {}",
                u32::MAX
            )
        })
}

fn parse_legacy_attempt(v: &str) -> Option<u32> {
    let v = v.trim();
    if let Ok(n) = v.parse::<u32>() {
        return Some(n);
    }
    // SQS Numbers may be written with a fraction: accept "3.0" but not "3.5".
    let f: f64 = v.parse().ok()?;
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= f64::from(u32::MAX)).then_some(f as u32)
}

/// SQS MessageIds are UUIDs; accept the characters that are safe in a FIFO deduplication id.
fn valid_original_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ORIGINAL_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "5fea7756-0ea4-451a-a703-a558b933e274";

    fn attrs_with(name: &str, attr: MessageAttribute) -> Attributes {
        let mut a = Attributes::new();
        a.insert(name.to_string(), attr);
        a
    }

    #[test]
    fn absent_is_attempt_zero_keyed_on_message_id() {
        let (meta, src) = RedriveMeta::read(&Attributes::new(), "m-1");
        assert_eq!(src, MetaSource::Absent);
        assert_eq!(meta.attempt, 0);
        assert_eq!(meta.original_message_id, "m-1");
    }

    #[test]
    fn reads_the_contract_example() {
        let text = format!(
            r#"{{"v":1,"attempt":2,"originalMessageId":"{ID}","firstRedrivenAt":"2026-11-21T10:00:00Z","lastRedrivenAt":"2026-11-21T10:04:00Z"}}"#
        );
        let (meta, src) = RedriveMeta::read(
            &attrs_with(ATTRIBUTE_NAME, MessageAttribute::string(&text)),
            "new-id",
        );
        assert_eq!(src, MetaSource::Current);
        assert_eq!(meta.attempt, 2);
        assert_eq!(meta.original_message_id, ID);
        assert_eq!(
            meta.first_redriven_at.as_deref(),
            Some("2026-11-21T10:00:00Z")
        );
        assert_eq!(
            meta.last_redriven_at.as_deref(),
            Some("2026-11-21T10:04:00Z")
        );
        // Written back compactly, with the same keys in the same order.
        assert_eq!(meta.to_json(), text);
    }

    #[test]
    fn garbled_values_read_as_attempt_zero_with_current_id() {
        let cases = [
            MessageAttribute::string("not json"),
            MessageAttribute::string(r#"{"v":1,"attempt":-1,"originalMessageId":"a"}"#),
            MessageAttribute::string(r#"{"v":1,"attempt":3}"#),
            MessageAttribute::string(r#"{"v":1,"attempt":3,"originalMessageId":""}"#),
            MessageAttribute::string(r#"{"v":1,"attempt":3,"originalMessageId":"has space"}"#),
            MessageAttribute::string(r#"{"v":0,"attempt":3,"originalMessageId":"a"}"#),
            MessageAttribute::string(r#"[1,2]"#),
            MessageAttribute::string(r#"{"v":1,"attempt":"3","originalMessageId":"a"}"#),
            MessageAttribute::string(r#"{"v":1,"attempt":3,"originalMessageId":7}"#),
            MessageAttribute::string(r#"{"attempt":3,"originalMessageId":"a"}"#),
            MessageAttribute::number("3"),
            MessageAttribute::binary(b"{}".to_vec()),
        ];
        for attr in cases {
            let (meta, src) = RedriveMeta::read(&attrs_with(ATTRIBUTE_NAME, attr.clone()), "cur");
            assert!(
                matches!(src, MetaSource::Garbled(_)),
                "{attr:?} read as {src:?}"
            );
            assert_eq!(meta, RedriveMeta::fresh("cur"), "{attr:?}");
        }
    }

    #[test]
    fn legacy_attempt_is_read_when_no_current_attribute() {
        for (value, want) in [
            ("3", Some(3)),
            ("0", Some(0)),
            ("4.0", Some(4)),
            ("2.5", None),
            ("-1", None),
            ("x", None),
        ] {
            let attrs = attrs_with(LEGACY_ATTEMPT_ATTRIBUTE, MessageAttribute::number(value));
            let (meta, src) = RedriveMeta::read(&attrs, "cur");
            match want {
                Some(n) => {
                    assert_eq!(src, MetaSource::Legacy, "{value}");
                    assert_eq!(meta.attempt, n);
                    assert_eq!(meta.original_message_id, "cur");
                }
                None => assert!(matches!(src, MetaSource::Garbled(_)), "{value}"),
            }
        }
        // A legacy attribute typed String is not trusted.
        let attrs = attrs_with(LEGACY_ATTEMPT_ATTRIBUTE, MessageAttribute::string("3"));
        assert!(matches!(
            RedriveMeta::read(&attrs, "cur").1,
            MetaSource::Garbled(_)
        ));
    }

    #[test]
    fn current_attribute_wins_over_legacy() {
        let mut attrs = attrs_with(LEGACY_ATTEMPT_ATTRIBUTE, MessageAttribute::number("9"));
        let meta = RedriveMeta {
            attempt: 1,
            ..RedriveMeta::fresh(ID)
        };
        meta.write_into(&mut attrs);
        assert!(
            !attrs.contains_key(LEGACY_ATTEMPT_ATTRIBUTE),
            "the legacy slot is reused"
        );
        let (read, src) = RedriveMeta::read(&attrs, "other");
        assert_eq!((read.attempt, src), (1, MetaSource::Current));
    }

    #[test]
    fn isolation_and_last_error_round_trip() {
        let meta = RedriveMeta {
            isolated_at: Some("2026-11-21T11:00:00Z".into()),
            reason: Some(IsolationReason::PermanentFailure),
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "HTTP_400",
                "bad order",
                "2026-11-21T10:59:00Z".into(),
            )),
            ..RedriveMeta {
                attempt: 3,
                ..RedriveMeta::fresh(ID)
            }
        };
        let json = meta.to_json();
        assert!(json.contains(r#""reason":"permanent-failure""#), "{json}");
        assert!(
            json.contains(r#""lastError":{"class":"permanent","code":"HTTP_400""#),
            "{json}"
        );
        assert_eq!(RedriveMeta::parse(&json).unwrap(), meta);
        assert!(meta.is_permanent_failure());
    }

    #[test]
    fn every_reason_has_its_contract_name() {
        let names: Vec<String> = IsolationReason::ALL
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"max-attempts\"",
                "\"permanent-failure\"",
                "\"attribute-limit\"",
                "\"size-limit\"",
                "\"manual\"",
                "\"send-rejected\"",
                "\"unknown-source\""
            ]
        );
        for r in IsolationReason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
    }

    #[test]
    fn last_error_message_is_cut_to_256_characters_on_a_char_boundary() {
        let long = "é".repeat(300);
        let e = LastError::new(ErrorClass::Transient, "X", &long, "t".into());
        assert_eq!(e.message.chars().count(), 256);
    }

    #[test]
    fn unknown_fields_from_a_newer_writer_are_tolerated() {
        let m = RedriveMeta::parse(r#"{"v":2,"attempt":1,"originalMessageId":"a","future":true}"#)
            .unwrap();
        assert_eq!(m.attempt, 1);
        assert!(m.to_json().starts_with(r#"{"v":1,"#));
    }

    fn read_text(text: &str) -> (RedriveMeta, MetaSource) {
        RedriveMeta::read(
            &attrs_with(ATTRIBUTE_NAME, MessageAttribute::string(text)),
            "current-id",
        )
    }

    #[test]
    fn unknown_reason_keeps_the_history_and_is_written_back() {
        let text = format!(
            r#"{{"v":1,"attempt":3,"originalMessageId":"{ID}","isolatedAt":"2026-11-21T11:00:00Z","reason":"quarantined-by-v2"}}"#
        );
        let (meta, src) = read_text(&text);
        assert_eq!(src, MetaSource::Current, "an unknown reason is not garbage");
        assert_eq!((meta.attempt, meta.original_message_id.as_str()), (3, ID));
        assert_eq!(
            meta.reason.as_ref().map(|r| r.to_string()).as_deref(),
            Some("quarantined-by-v2")
        );
        assert_eq!(meta.to_json(), text, "written back unchanged");
    }

    #[test]
    fn unknown_error_class_and_fields_are_kept_as_text() {
        let text = format!(
            r#"{{"v":1,"attempt":2,"originalMessageId":"{ID}","lastError":{{"class":"throttled-v2","code":"X","message":"m","at":"t","retryAfter":5}},"future":{{"a":[1,2.50]}}}}"#
        );
        let (meta, src) = read_text(&text);
        assert_eq!(src, MetaSource::Current);
        assert_eq!((meta.attempt, meta.original_message_id.as_str()), (2, ID));
        assert!(!meta.is_permanent_failure(), "only `permanent` isolates");
        assert_eq!(
            meta.last_error
                .as_ref()
                .map(|e| e.class.to_string())
                .as_deref(),
            Some("throttled-v2")
        );
        // Unknown fields, inside lastError and beside it, survive a write by this version.
        let written = meta.to_json();
        assert!(written.contains(r#""retryAfter":5"#), "{written}");
        assert!(written.contains(r#""future":{"a":[1,2.5]}"#), "{written}");
        assert_eq!(RedriveMeta::parse(&written).unwrap(), meta);
    }

    #[test]
    fn an_unreadable_optional_field_does_not_restart_the_history() {
        let text = format!(
            r#"{{"v":1,"attempt":4,"originalMessageId":"{ID}","firstRedrivenAt":5,"reason":["x"],"lastError":"oops"}}"#
        );
        let (meta, src) = read_text(&text);
        assert_eq!(src, MetaSource::Current);
        assert_eq!((meta.attempt, meta.original_message_id.as_str()), (4, ID));
        assert_eq!(meta.first_redriven_at, None);
        assert_eq!(meta.reason, None);
        // Kept as written (unknown and unreadable fields are written after the known ones).
        let as_value = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        assert_eq!(as_value(&meta.to_json()), as_value(&text));
        // A value this version writes replaces the unreadable one, never duplicates the key.
        let mut again = meta.clone();
        again.first_redriven_at = Some("2026-11-21T10:00:00Z".into());
        let json = again.to_json();
        assert_eq!(json.matches("firstRedrivenAt").count(), 1, "{json}");
        assert!(json.contains(r#""firstRedrivenAt":"2026-11-21T10:00:00Z""#));
    }

    fn arb_meta() -> impl Strategy<Value = RedriveMeta> {
        let id = "[A-Za-z0-9_.:-]{1,100}";
        let ts = proptest::option::of("[0-9T:Z-]{0,25}");
        let reason = proptest::option::of(proptest::sample::select(IsolationReason::ALL.to_vec()));
        let err = proptest::option::of(
            (any::<bool>(), "\\PC{0,20}", "\\PC{0,300}", "\\PC{0,30}").prop_map(
                |(perm, code, msg, at)| {
                    LastError::new(
                        if perm {
                            ErrorClass::Permanent
                        } else {
                            ErrorClass::Transient
                        },
                        code,
                        &msg,
                        at,
                    )
                },
            ),
        );
        (any::<u32>(), id, ts.clone(), ts.clone(), ts, reason, err).prop_map(
            |(attempt, id, first, last, iso, reason, last_error)| RedriveMeta {
                v: VERSION,
                attempt,
                original_message_id: id,
                first_redriven_at: first,
                last_redriven_at: last,
                isolated_at: iso,
                reason,
                last_error,
                extra: Map::new(),
            },
        )
    }

    proptest! {
        #[test]
        fn metadata_round_trips_through_the_attribute(meta in arb_meta()) {
            let mut attrs = Attributes::new();
            meta.write_into(&mut attrs);
            let (read, src) = RedriveMeta::read(&attrs, "ignored");
            prop_assert_eq!(src, MetaSource::Current);
            prop_assert_eq!(read, meta);
        }

        #[test]
        fn reading_any_string_never_panics(text in "\\PC{0,200}", id in "\\PC{0,10}") {
            let (meta, _) = RedriveMeta::read(&attrs_with(ATTRIBUTE_NAME, MessageAttribute::string(text)), &id);
            let _ = meta.to_json();
        }

        #[test]
        fn reading_any_legacy_value_never_panics(text in "\\PC{0,40}") {
            let _ = RedriveMeta::read(&attrs_with(LEGACY_ATTEMPT_ATTRIBUTE, MessageAttribute::number(text)), "id");
        }
    }
}
