//! Idempotency keys for the consumer: which value of a message identifies its side effect.

use std::collections::HashMap;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// Keys longer than this are rejected (DynamoDB allows 2048 bytes for a partition key).
pub const MAX_KEY_BYTES: usize = 1024;

/// Where the key comes from (`IDEMPOTENCY_KEY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `message`: `originalMessageId` from `x-redrive`, else the MessageId, bound to a digest
    /// of the body. Stable across redrives and replays (byte-identical copies).
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
///
/// - [`KeySource::Message`]: `<originalMessageId>:<digest>`, the digest being the first 16
///   bytes of the body's SHA-256 in hex. Redriven and replayed copies are byte-identical, so
///   they share the key; a producer that copies one message's `x-redrive` onto other payloads
///   does not make them duplicates of it.
/// - [`KeySource::Pointer`]: the value at the pointer. A string is keyed by its value; a
///   number by its exact text as written in the body, never through a float: so
///   `123456789012345678901234` and `123456789012345678901235` are two keys, and so are `1`,
///   `1.0` and `1e0` (spellings of one value are different keys: a producer that writes
///   one id two ways gets two keys). A number and a string of the same characters (`42`,
///   `"42"`) share a key.
pub fn derive(
    source: &KeySource,
    original_message_id: &str,
    body: &str,
) -> Result<IdempotencyKey, KeyError> {
    match source {
        KeySource::Message => {
            IdempotencyKey::try_from(format!("{original_message_id}:{}", body_digest(body)))
        }
        KeySource::Pointer(pointer) => IdempotencyKey::try_from(pointer_text(body, pointer)?),
    }
}

/// The digest that binds a `message` key to the body: 16 bytes of SHA-256, in hex.
pub fn body_digest(body: &str) -> String {
    sha256_hex(body.as_bytes(), 32)
}

/// The text of the scalar at `pointer` (RFC 6901) in `body`, read from the raw JSON so that a
/// number keeps the exact text it was written with.
fn pointer_text(body: &str, pointer: &str) -> Result<String, KeyError> {
    let not_json = || KeyError::BodyNotJson {
        pointer: pointer.to_string(),
    };
    let missing = || KeyError::Missing {
        pointer: pointer.to_string(),
    };
    // Parsing the whole body as one raw value checks that it is JSON, trailing text included.
    let mut current: &RawValue = serde_json::from_str(body).map_err(|_| not_json())?;
    if !pointer.is_empty() {
        for token in pointer.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            let raw = current.get();
            current = match raw.as_bytes().first() {
                Some(b'{') => {
                    let mut fields: HashMap<String, &RawValue> =
                        serde_json::from_str(raw).map_err(|_| not_json())?;
                    fields.remove(&token).ok_or_else(missing)?
                }
                Some(b'[') => {
                    let items: Vec<&RawValue> =
                        serde_json::from_str(raw).map_err(|_| not_json())?;
                    let index = array_index(&token).ok_or_else(missing)?;
                    items.get(index).copied().ok_or_else(missing)?
                }
                _ => return Err(missing()),
            };
        }
    }
    let raw = current.get();
    let not_scalar = |kind| KeyError::NotScalar {
        pointer: pointer.to_string(),
        kind,
    };
    match raw.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw).map_err(|_| not_json()),
        Some(b'-' | b'0'..=b'9') => Ok(raw.to_string()),
        Some(b'n') => Err(missing()),
        Some(b't' | b'f') => Err(not_scalar("a boolean")),
        Some(b'[') => Err(not_scalar("an array")),
        Some(b'{') => Err(not_scalar("an object")),
        _ => Err(not_json()),
    }
}

/// An RFC 6901 array index: `0` or digits without a leading zero (`-`, past the end, is
/// never there).
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
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
    fn message_key_is_the_original_id_bound_to_the_body_digest() {
        let key = derive(&KeySource::Message, "orig-1", "not json").unwrap();
        assert_eq!(key.as_str(), format!("orig-1:{}", body_digest("not json")));
        assert_eq!(body_digest("not json").len(), 32);
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

    fn key_at(pointer: &str, body: &str) -> Result<String, KeyError> {
        derive(&KeySource::Pointer(pointer.into()), "x", body).map(|k| k.as_str().to_string())
    }

    #[test]
    fn numeric_pointer_keys_keep_exact_text() {
        let a = key_at("/id", r#"{"id":123456789012345678901234}"#).unwrap();
        let b = key_at("/id", r#"{"id":123456789012345678901235}"#).unwrap();
        assert_eq!(a, "123456789012345678901234");
        assert_eq!(b, "123456789012345678901235");
        assert_ne!(a, b, "two payments must not share a key");
        // Beyond u64 and beyond f64's 53-bit mantissa.
        assert_eq!(
            key_at("/id", r#"{"id": 18446744073709551617 }"#).unwrap(),
            "18446744073709551617"
        );
        assert_eq!(
            key_at("/id", r#"{"id":9007199254740993}"#).unwrap(),
            "9007199254740993"
        );
    }

    #[test]
    fn numbers_are_keyed_as_written_not_by_value() {
        // Documented: the key is the number's text, so different spellings are different keys.
        for (body, want) in [
            (r#"{"id":1}"#, "1"),
            (r#"{"id":1.0}"#, "1.0"),
            (r#"{"id":1e3}"#, "1e3"),
            (r#"{"id":-0}"#, "-0"),
            (
                r#"{"id":0.1000000000000000055511151231257827}"#,
                "0.1000000000000000055511151231257827",
            ),
        ] {
            assert_eq!(key_at("/id", body).unwrap(), want, "{body}");
        }
        assert_ne!(
            key_at("/id", r#"{"id":1}"#).unwrap(),
            key_at("/id", r#"{"id":1.0}"#).unwrap()
        );
    }

    #[test]
    fn pointer_walks_objects_arrays_and_escapes() {
        let body = r#"{"a/b":{"m~n":[10, {"id" : 7.50}]}, "dup":1, "dup":2, "s":"\u00e9\"x"}"#;
        assert_eq!(key_at("/a~1b/m~0n/1/id", body).unwrap(), "7.50");
        assert_eq!(key_at("/a~1b/m~0n/0", body).unwrap(), "10");
        assert_eq!(
            key_at("/dup", body).unwrap(),
            "2",
            "the last duplicate wins, as in serde_json"
        );
        assert_eq!(
            key_at("/s", body).unwrap(),
            "é\"x",
            "strings are keyed by their value"
        );
        for missing in [
            "/a~1b/m~0n/2",
            "/a~1b/m~0n/01",
            "/a~1b/m~0n/-",
            "/nope",
            "/s/0",
        ] {
            assert_eq!(
                key_at(missing, body).unwrap_err().code(),
                "KEY_MISSING",
                "{missing}"
            );
        }
        assert_eq!(key_at("/a~1b", body).unwrap_err().code(), "KEY_NOT_SCALAR");
        assert_eq!(
            key_at("/id", r#"{"id":1} trailing"#).unwrap_err().code(),
            "KEY_BODY_NOT_JSON"
        );
        assert_eq!(
            key_at("/id", r#"{"id":01}"#).unwrap_err().code(),
            "KEY_BODY_NOT_JSON"
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

    /// The key the consumer derives for a message with these attributes and body.
    fn message_key(attributes: &crate::Attributes, message_id: &str, body: &str) -> String {
        let (meta, _) = crate::RedriveMeta::read(attributes, message_id);
        derive(&KeySource::Message, &meta.original_message_id, body)
            .unwrap()
            .as_str()
            .to_string()
    }

    fn stamped(meta: &crate::RedriveMeta) -> crate::Attributes {
        let mut a = crate::Attributes::new();
        meta.write_into(&mut a);
        a
    }

    fn arb_stamp(original: String) -> impl Strategy<Value = crate::RedriveMeta> {
        (
            any::<u32>(),
            proptest::option::of("[0-9T:Z-]{0,20}"),
            proptest::option::of("[0-9T:Z-]{0,20}"),
            proptest::option::of(proptest::sample::select(
                crate::IsolationReason::ALL.to_vec(),
            )),
        )
            .prop_map(move |(attempt, first, last, reason)| crate::RedriveMeta {
                attempt,
                first_redriven_at: first,
                last_redriven_at: last,
                reason,
                ..crate::RedriveMeta::fresh(&original)
            })
    }

    proptest! {
        /// Item 4, one direction: byte-identical copies of a chain (any attempt, any stamp
        /// fields, any current MessageId) share the key.
        #[test]
        fn redriven_copies_share_the_key(
            (a, b) in "[A-Za-z0-9-]{1,40}".prop_flat_map(|id| (arb_stamp(id.clone()), arb_stamp(id))),
            body in "\\PC{0,200}",
            first_id in "[a-z0-9-]{1,36}",
            second_id in "[a-z0-9-]{1,36}",
        ) {
            prop_assert_eq!(
                message_key(&stamped(&a), &first_id, &body),
                message_key(&stamped(&b), &second_id, &body)
            );
        }

        /// Item 4, the other direction: one stamp copied onto different payloads (a producer
        /// that copies every attribute of what it received) gives different keys.
        #[test]
        fn a_copied_stamp_on_other_payloads_gives_other_keys(
            stamp in "[A-Za-z0-9-]{1,40}".prop_flat_map(arb_stamp),
            body_a in "\\PC{0,200}",
            body_b in "\\PC{0,200}",
        ) {
            prop_assume!(body_a != body_b);
            let attributes = stamped(&stamp);
            prop_assert_ne!(
                message_key(&attributes, "m-a", &body_a),
                message_key(&attributes, "m-b", &body_b)
            );
        }

        #[test]
        fn derive_never_panics(body in "\\PC{0,80}", pointer in "/[a-z/~0-9]{0,10}") {
            let _ = derive(&KeySource::Pointer(pointer), "id", &body);
        }
    }
}
