//! The payload check (`IDEMPOTENCY_PAYLOAD`): a fingerprint of what a message asks for, stored
//! with its key, so that a later message with the same key but a different payload is an error
//! instead of a silent duplicate.

use std::fmt;

use super::{Field, Fields, KeyError, json, sha256_hex};
use crate::attributes::{AttributeValue, Attributes};

/// What the payload check compares, parsed once at init. Off when `IDEMPOTENCY_PAYLOAD` is unset.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadSource {
    /// `body`: the whole body, byte for byte.
    Body,
    /// Fields of the message (`/amount,/currency`, `attribute:Version`), the same grammar as a
    /// compound key. A pointer may name any JSON value, an object or array too.
    Fields(Fields),
}

impl PayloadSource {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "body" => Ok(Self::Body),
            fields => Fields::parse(fields).map(Self::Fields).map_err(|problem| {
                format!(
                    "{problem}; IDEMPOTENCY_PAYLOAD is `body`, or fields separated by commas, each a JSON pointer into the body (`/amount`) or `attribute:<message attribute name>`"
                )
            }),
        }
    }

    /// The fingerprint of one message's payload.
    ///
    /// - `body`: the SHA-256 of the body's bytes.
    /// - Fields: the SHA-256 of the JSON array of the fields' values, each a pointer's value
    ///   in canonical JSON (no whitespace, members sorted by name, numbers by their exact
    ///   text), an attribute's String or Number value as a JSON string, a Binary one as
    ///   `{"binary":"<hex>"}`, and `null` for an absent field (absence is part of the
    ///   payload). A body that is not JSON cannot be read by pointers: an error.
    ///
    /// Both are prefixed with 8 hex digits of the definition's own SHA-256, so that a record
    /// written under another `IDEMPOTENCY_PAYLOAD` is recognised as not comparable.
    pub fn hash(&self, body: &str, attributes: &Attributes) -> Result<PayloadHash, KeyError> {
        let digest = match self {
            Self::Body => sha256_hex(body.as_bytes(), 64),
            Self::Fields(fields) => {
                let root = if fields.has_pointer() {
                    Some(json::parse(body).map_err(|_| KeyError::PayloadBodyNotJson {
                        fields: fields.to_string(),
                    })?)
                } else {
                    None
                };
                let not_json = || KeyError::PayloadBodyNotJson {
                    fields: fields.to_string(),
                };
                let mut text = String::from("[");
                for (i, field) in fields.as_slice().iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    match field {
                        Field::Pointer(pointer) => {
                            let root = root.ok_or_else(not_json)?;
                            match json::lookup(root, pointer).map_err(|_| not_json())? {
                                Some(value) => {
                                    text.push_str(&json::canonical(value).map_err(|_| not_json())?)
                                }
                                None => text.push_str("null"),
                            }
                        }
                        Field::Attribute(name) => match attributes.get(name).map(|a| &a.value) {
                            Some(AttributeValue::String(s)) => {
                                text.push_str(&serde_json::to_string(s).map_err(|_| not_json())?)
                            }
                            Some(AttributeValue::Binary(bytes)) => {
                                text.push_str(&format!("{{\"binary\":\"{}\"}}", hex(bytes)))
                            }
                            None => text.push_str("null"),
                        },
                    }
                }
                text.push(']');
                sha256_hex(text.as_bytes(), 64)
            }
        };
        Ok(PayloadHash(format!(
            "{}:{digest}",
            self.definition_digest()
        )))
    }

    /// 8 hex digits of the SHA-256 of the definition's canonical text (`body`, or the fields as
    /// [`fmt::Display`] writes them).
    fn definition_digest(&self) -> String {
        sha256_hex(self.to_string().as_bytes(), 8)
    }
}

impl fmt::Display for PayloadSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Body => f.write_str("body"),
            Self::Fields(fields) => fields.fmt(f),
        }
    }
}

impl std::str::FromStr for PayloadSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A payload fingerprint as stored in a record's `payloadHash`:
/// `<8 hex digits of the definition's SHA-256>:<64 hex digits of the payload's SHA-256>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayloadHash(String);

impl PayloadHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `stored` (a COMPLETED record's `payloadHash`) fingerprints a different
    /// payload under the same definition. A record without one (written before the check was
    /// on, or by a consumer without it) or written under another definition cannot be
    /// compared, and is no contradiction: the message is a duplicate as before.
    pub fn contradicts(&self, stored: Option<&str>) -> bool {
        let Some(stored) = stored else {
            return false;
        };
        let definition = |h: &str| h.split_once(':').map(|(d, _)| d.to_string());
        match (definition(&self.0), definition(stored)) {
            (Some(ours), Some(theirs)) if ours == theirs => self.0 != stored,
            _ => false,
        }
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MessageAttribute;
    use proptest::prelude::*;

    fn hash_of(source: &str, body: &str) -> PayloadHash {
        PayloadSource::parse(source)
            .unwrap()
            .hash(body, &Attributes::new())
            .unwrap()
    }

    #[test]
    fn payload_definitions_parse_or_fail_naming_the_problem() {
        assert_eq!(PayloadSource::parse("body"), Ok(PayloadSource::Body));
        let p = PayloadSource::parse(" /amount , attribute:Version ").unwrap();
        assert_eq!(p.to_string(), "/amount,attribute:Version");
        for (bad, says) in [
            ("message", "stands alone"),
            ("amount", "neither a JSON pointer"),
            ("/a,/a", "named twice"),
            ("/a,", "empty field"),
            ("/a~2", "~0"),
            ("attribute:", "does not name"),
        ] {
            let err = PayloadSource::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains("IDEMPOTENCY_PAYLOAD"), "{bad}: {err}");
        }
    }

    #[test]
    fn body_fingerprints_bytes_and_fields_fingerprint_canonical_values() {
        // GIVEN payload definitions
        // THEN the body fingerprint sees every byte, the fields' only the fields' values
        assert_ne!(
            hash_of("body", r#"{"a":1}"#),
            hash_of("body", r#"{"a": 1}"#)
        );
        assert_eq!(
            hash_of("/order", r#"{"order":{"x":1,"y":[1,2]},"at":"10:00"}"#),
            hash_of("/order", r#"{"at":"10:05","order":{ "y":[1, 2], "x":1 }}"#)
        );
        assert_ne!(
            hash_of("/amount", r#"{"amount":5}"#),
            hash_of("/amount", r#"{"amount":7}"#)
        );
        assert_ne!(
            hash_of("/amount", r#"{"amount":5}"#),
            hash_of("/amount", r#"{}"#),
            "absence is part of the payload"
        );
        assert_ne!(
            hash_of("/a,/b", r#"{"a":"x,y","b":"z"}"#),
            hash_of("/a,/b", r#"{"a":"x","b":"y,z"}"#)
        );
        // AND a body that is not JSON cannot be read by pointers
        let err = PayloadSource::parse("/amount")
            .unwrap()
            .hash("not json", &Attributes::new())
            .unwrap_err();
        assert_eq!(err.code(), "PAYLOAD_BODY_NOT_JSON");
        assert!(hash_of("body", "not json").as_str().len() == 8 + 1 + 64);
    }

    #[test]
    fn attribute_fields_fingerprint_strings_binaries_and_absence_apart() {
        let source = PayloadSource::parse("attribute:Version").unwrap();
        let with = |a: Option<MessageAttribute>| {
            let mut attributes = Attributes::new();
            if let Some(a) = a {
                attributes.insert("Version".into(), a);
            }
            source.hash("not json either", &attributes).unwrap()
        };
        let string = with(Some(MessageAttribute::string("7")));
        assert_eq!(string, with(Some(MessageAttribute::number("7"))));
        assert_ne!(string, with(Some(MessageAttribute::string("8"))));
        assert_ne!(string, with(Some(MessageAttribute::binary(vec![b'7']))));
        assert_ne!(string, with(None));
    }

    #[test]
    fn only_a_different_payload_under_the_same_definition_contradicts() {
        let amount_5 = hash_of("/amount", r#"{"amount":5}"#);
        let amount_7 = hash_of("/amount", r#"{"amount":7}"#);
        assert!(amount_7.contradicts(Some(amount_5.as_str())));
        assert!(!amount_5.contradicts(Some(amount_5.as_str())));
        assert!(
            !amount_7.contradicts(None),
            "a record from before the check"
        );
        let other_definition = hash_of("/amount,/currency", r#"{"amount":5}"#);
        assert!(
            !amount_7.contradicts(Some(other_definition.as_str())),
            "a record written under another IDEMPOTENCY_PAYLOAD is not comparable"
        );
        assert!(!amount_7.contradicts(Some("garbled")));
    }

    proptest! {
        /// The fingerprint of a field is the value's, not its spelling: re-serialised with
        /// another layout, the same document fingerprints the same.
        #[test]
        fn layout_never_changes_the_fingerprint(
            a in "[a-z0-9 ,]{0,12}",
            n in any::<i64>(),
            flag in any::<bool>(),
        ) {
            let value = serde_json::json!({"s": a, "n": n, "f": flag, "l": [n, a]});
            let compact = serde_json::json!({"payload": value, "noise": 1}).to_string();
            let pretty = serde_json::to_string_pretty(&serde_json::json!({"noise": 2, "payload": value})).unwrap();
            prop_assert_eq!(hash_of("/payload", &compact), hash_of("/payload", &pretty));
        }

        #[test]
        fn hashing_never_panics(body in "\\PC{0,80}", pointer in "/[a-z/~0-9]{0,10}") {
            if let Ok(source) = PayloadSource::parse(&pointer) {
                let _ = source.hash(&body, &Attributes::new());
            }
        }
    }
}
