//! Idempotency keys for the consumer: which value of a message identifies its side effect.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Keys longer than this are rejected (DynamoDB allows 2048 bytes for a partition key).
pub const MAX_KEY_BYTES: usize = 1024;

/// Where the key comes from (`IDEMPOTENCY_KEY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `message`: `originalMessageId` from `x-redrive`, else the MessageId. Stable across redrives.
    Message,
    /// A JSON pointer into the body, such as `/paymentId`.
    Pointer(String),
}

impl KeySource {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() || s == "message" {
            Ok(Self::Message)
        } else if s.starts_with('/') {
            Ok(Self::Pointer(s.to_string()))
        } else {
            Err("must be `message` or a JSON pointer into the body such as `/paymentId`".into())
        }
    }
}

/// A non-empty key of at most [`MAX_KEY_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        if s.is_empty() {
            Err(KeyError::Empty)
        } else if s.len() > MAX_KEY_BYTES {
            Err(KeyError::TooLong(s.len()))
        } else {
            Ok(Self(s))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the body is not JSON, so the idempotency key pointer {pointer} cannot be read")]
    BodyNotJson { pointer: String },
    #[error("the body has no value at the idempotency key pointer {pointer}")]
    Missing { pointer: String },
    #[error("the value at the idempotency key pointer {pointer} is {kind}, not a string or number")]
    NotScalar { pointer: String, kind: &'static str },
    #[error("the idempotency key is empty")]
    Empty,
    #[error("the idempotency key is {0} bytes; at most {MAX_KEY_BYTES} are allowed")]
    TooLong(usize),
}

impl KeyError {
    /// Short code for logs and the `lastError` stamp.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BodyNotJson { .. } => "KEY_BODY_NOT_JSON",
            Self::Missing { .. } => "KEY_MISSING",
            Self::NotScalar { .. } => "KEY_NOT_SCALAR",
            Self::Empty => "KEY_EMPTY",
            Self::TooLong(_) => "KEY_TOO_LONG",
        }
    }
}

/// Derives the key of one message. `original_message_id` is the chain id from `x-redrive`
/// (already defaulted to the MessageId by [`crate::meta::RedriveMeta::read`]).
pub fn derive(
    source: &KeySource,
    original_message_id: &str,
    body: &str,
) -> Result<IdempotencyKey, KeyError> {
    match source {
        KeySource::Message => IdempotencyKey::try_from(original_message_id.to_string()),
        KeySource::Pointer(pointer) => {
            let doc: Value = serde_json::from_str(body).map_err(|_| KeyError::BodyNotJson {
                pointer: pointer.clone(),
            })?;
            let value = doc.pointer(pointer).ok_or_else(|| KeyError::Missing {
                pointer: pointer.clone(),
            })?;
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Null => {
                    return Err(KeyError::Missing {
                        pointer: pointer.clone(),
                    });
                }
                Value::Bool(_) => {
                    return Err(KeyError::NotScalar {
                        pointer: pointer.clone(),
                        kind: "a boolean",
                    });
                }
                Value::Array(_) => {
                    return Err(KeyError::NotScalar {
                        pointer: pointer.clone(),
                        kind: "an array",
                    });
                }
                Value::Object(_) => {
                    return Err(KeyError::NotScalar {
                        pointer: pointer.clone(),
                        kind: "an object",
                    });
                }
            };
            IdempotencyKey::try_from(text)
        }
    }
}

/// The first `hex_chars` hex digits (at most 64) of the SHA-256 of `bytes`, lowercase.
pub fn sha256_hex(bytes: &[u8], hex_chars: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out.truncate(hex_chars.min(64));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn message_key_is_the_original_id() {
        assert_eq!(
            derive(&KeySource::Message, "orig-1", "not json")
                .unwrap()
                .as_str(),
            "orig-1"
        );
    }

    #[test]
    fn pointer_keys() {
        let p = KeySource::parse("/payment/id").unwrap();
        assert_eq!(
            derive(&p, "x", r#"{"payment":{"id":"p-9"}}"#)
                .unwrap()
                .as_str(),
            "p-9"
        );
        assert_eq!(
            derive(&p, "x", r#"{"payment":{"id":42}}"#)
                .unwrap()
                .as_str(),
            "42"
        );
        assert_eq!(
            derive(&p, "x", "{oops").unwrap_err(),
            KeyError::BodyNotJson {
                pointer: "/payment/id".into()
            }
        );
        assert_eq!(
            derive(&p, "x", r#"{"payment":{}}"#).unwrap_err(),
            KeyError::Missing {
                pointer: "/payment/id".into()
            }
        );
        assert_eq!(
            derive(&p, "x", r#"{"payment":{"id":null}}"#)
                .unwrap_err()
                .code(),
            "KEY_MISSING"
        );
        assert_eq!(
            derive(&p, "x", r#"{"payment":{"id":{}}}"#)
                .unwrap_err()
                .code(),
            "KEY_NOT_SCALAR"
        );
        assert_eq!(
            derive(&p, "x", r#"{"payment":{"id":""}}"#).unwrap_err(),
            KeyError::Empty
        );
        let long = format!(
            r#"{{"payment":{{"id":"{}"}}}}"#,
            "k".repeat(MAX_KEY_BYTES + 1)
        );
        assert_eq!(
            derive(&p, "x", &long).unwrap_err(),
            KeyError::TooLong(MAX_KEY_BYTES + 1)
        );
    }

    #[test]
    fn key_source_parsing() {
        assert_eq!(KeySource::parse("message"), Ok(KeySource::Message));
        assert_eq!(KeySource::parse(""), Ok(KeySource::Message));
        assert_eq!(
            KeySource::parse("/id"),
            Ok(KeySource::Pointer("/id".into()))
        );
        assert!(KeySource::parse("paymentId").is_err());
    }

    proptest! {
        #[test]
        fn derive_never_panics(body in "\\PC{0,80}", pointer in "/[a-z/~0-9]{0,10}") {
            let _ = derive(&KeySource::Pointer(pointer), "id", &body);
        }
    }
}
