//! The `x-redrive` message attribute: the whole redrive history of a message in one attribute
//! slot, as compact JSON. Reading is total: every input yields a usable [`RedriveMeta`].

use serde::{Deserialize, Serialize};

use crate::attributes::{AttributeValue, Attributes, MessageAttribute};

/// Name of the one attribute redrive state costs.
pub const ATTRIBUTE_NAME: &str = "x-redrive";
/// Attribute earlier tools wrote (a Number); read, then replaced by `x-redrive` on the next write.
pub const LEGACY_ATTEMPT_ATTRIBUTE: &str = "x-redrive-attempt";
/// The format version this crate writes.
pub const VERSION: u32 = 1;
/// `lastError.message` is cut to this many characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 256;
const MAX_ORIGINAL_ID_LEN: usize = 100;

/// Why a message was parked in the poison queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationReason {
    MaxAttempts,
    PermanentFailure,
    AttributeLimit,
    SizeLimit,
    Manual,
}

impl IsolationReason {
    pub const ALL: [IsolationReason; 5] = [
        Self::MaxAttempts,
        Self::PermanentFailure,
        Self::AttributeLimit,
        Self::SizeLimit,
        Self::Manual,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxAttempts => "max-attempts",
            Self::PermanentFailure => "permanent-failure",
            Self::AttributeLimit => "attribute-limit",
            Self::SizeLimit => "size-limit",
            Self::Manual => "manual",
        }
    }
}

impl std::fmt::Display for IsolationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorClass {
    Transient,
    Permanent,
}

/// The consumer's stamp when it gives up on a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastError {
    pub class: ErrorClass,
    pub code: String,
    pub message: String,
    pub at: String,
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
        }
    }
}

/// The decoded `x-redrive` value. A value of this type is always writable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedriveMeta {
    pub v: u32,
    pub attempt: u32,
    pub original_message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_redriven_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_redriven_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<IsolationReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
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
        let meta: RedriveMeta = serde_json::from_str(text)
            .map_err(|e| format!("{ATTRIBUTE_NAME} is not valid: {e}"))?;
        if meta.v == 0 {
            return Err(format!("{ATTRIBUTE_NAME} has version 0"));
        }
        if !valid_original_id(&meta.original_message_id) {
            return Err(format!(
                "{ATTRIBUTE_NAME} originalMessageId must be 1 to {MAX_ORIGINAL_ID_LEN} characters of letters, digits and -_.:"
            ));
        }
        Ok(meta)
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
            MessageAttribute::string(
                r#"{"v":1,"attempt":3,"originalMessageId":"a","reason":"bogus"}"#,
            ),
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
                "\"manual\""
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
