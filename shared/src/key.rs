//! Idempotency keys for the consumer: which value of a message identifies its side effect
//! (`IDEMPOTENCY_KEY`), the record id that stands for it in the table (a hash: no raw key is
//! stored), and the payload check (`IDEMPOTENCY_PAYLOAD`).
//!
//! ```text
//! IDEMPOTENCY_KEY     = "message" | "body" | fields
//! IDEMPOTENCY_PAYLOAD = "body" | fields                 (unset: no payload check)
//! fields              = field *( "," field )            at most 8, none named twice
//! field               = json-pointer | "attribute:" attribute-name
//! json-pointer        = "/" ...                         RFC 6901, without ","
//! attribute-name      = an SQS message attribute name   not x-redrive
//! ```
//! Spaces around a field are ignored (`/customerId, /orderId`).

use std::fmt;

use sha2::{Digest, Sha256};

use crate::attributes::{AttributeValue, Attributes};
use crate::meta::ATTRIBUTE_NAME as REDRIVE_ATTRIBUTE;

mod json;
mod payload;

pub use payload::{PayloadHash, PayloadSource};

/// Keys longer than this are rejected: a key is sent as a header value and kept in memory.
pub const MAX_KEY_BYTES: usize = 1024;
/// At most this many fields in a compound key or a payload check.
pub const MAX_FIELDS: usize = 8;

/// Where the key comes from (`IDEMPOTENCY_KEY`), parsed once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// `message`: `originalMessageId` from `x-redrive`, else the MessageId, bound to a digest
    /// of the body. Stable across redrives and replays (byte-identical copies); two sends of
    /// one body are two keys.
    Message,
    /// `body`: the SHA-256 of the whole body. Any two messages with byte-identical bodies share
    /// the key, whatever their MessageIds: content-based deduplication.
    Body,
    /// One field (a JSON pointer such as `/paymentId`, or `attribute:OrderId`), or several
    /// (`/customerId,/orderId`): a business key.
    Fields(Fields),
}

impl KeySource {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "message" => Ok(Self::Message),
            "body" => Ok(Self::Body),
            fields => Fields::parse(fields).map(Self::Fields).map_err(|problem| {
                format!(
                    "{problem}; IDEMPOTENCY_KEY is `message`, `body`, or fields separated by commas, each a JSON pointer into the body (`/paymentId`) or `attribute:<message attribute name>`"
                )
            }),
        }
    }

    /// One JSON pointer into the body, such as `/paymentId`.
    pub fn pointer(pointer: &str) -> Result<Self, String> {
        Self::parse(pointer)
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Message => f.write_str("message"),
            Self::Body => f.write_str("body"),
            Self::Fields(fields) => fields.fmt(f),
        }
    }
}

impl std::str::FromStr for KeySource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// A JSON pointer (RFC 6901) into the body.
    Pointer(String),
    /// A message attribute, by name (`attribute:OrderId`).
    Attribute(String),
}

impl Field {
    fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("attribute:") {
            check_attribute_name(name.trim())?;
            Ok(Self::Attribute(name.trim().to_string()))
        } else if text.starts_with('/') {
            json::check_pointer(text)?;
            Ok(Self::Pointer(text.to_string()))
        } else if text == "message" || text == "body" {
            Err(format!(
                "`{text}` stands alone; it cannot be one of several fields"
            ))
        } else {
            Err(format!(
                "{text:?} is neither a JSON pointer (`/orderId`) nor `attribute:<name>`"
            ))
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pointer(p) => f.write_str(p),
            Self::Attribute(name) => write!(f, "attribute:{name}"),
        }
    }
}

/// 1 to [`MAX_FIELDS`] distinct fields, in the order configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields(Vec<Field>);

impl Fields {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut fields: Vec<Field> = Vec::new();
        for text in s.split(',') {
            let text = text.trim();
            if text.is_empty() {
                return Err(format!(
                    "{s:?} has an empty field (two commas, or one at an end)"
                ));
            }
            let field = Field::parse(text)?;
            if fields.contains(&field) {
                return Err(format!("{field} is named twice"));
            }
            fields.push(field);
        }
        if fields.len() > MAX_FIELDS {
            return Err(format!(
                "{} fields; at most {MAX_FIELDS} are allowed",
                fields.len()
            ));
        }
        Ok(Self(fields))
    }

    pub fn as_slice(&self) -> &[Field] {
        &self.0
    }

    fn has_pointer(&self) -> bool {
        self.0.iter().any(|f| matches!(f, Field::Pointer(_)))
    }
}

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            field.fmt(f)?;
        }
        Ok(())
    }
}

/// An SQS message attribute name (1-256 of `A-Z a-z 0-9 _ - .`, no `AWS.`/`Amazon.` prefix, no
/// `.` at either end or twice in a row), other than `x-redrive`, which changes on every redrive.
fn check_attribute_name(name: &str) -> Result<(), String> {
    let valid = (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.to_ascii_lowercase().starts_with("aws.")
        && !name.to_ascii_lowercase().starts_with("amazon.");
    if !valid {
        return Err(format!(
            "attribute:{name} does not name an SQS message attribute (1 to 256 of A-Z a-z 0-9 _ - ., not starting with AWS. or Amazon.)"
        ));
    }
    if name == REDRIVE_ATTRIBUTE {
        return Err(format!(
            "attribute:{name} changes on every redrive; `message` keys on the chain it names"
        ));
    }
    Ok(())
}

/// A non-empty key of at most [`MAX_KEY_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The record's `id` in the idempotency table: the lowercase hex SHA-256 of the key's UTF-8
    /// text, after `<namespace>#` when the consumer has a namespace (`IDEMPOTENCY_NAMESPACE`).
    /// The key itself (a business id, body content) is never stored.
    pub fn record_id(&self, namespace: Option<&str>) -> String {
        let hash = sha256_hex(self.0.as_bytes(), 64);
        match namespace {
            Some(ns) => format!("{ns}#{hash}"),
            None => hash,
        }
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// `IDEMPOTENCY_NAMESPACE` (or the function's name): 1 to 128 of `A-Z a-z 0-9 _ - . :`. No `#`,
/// so that a record id reads back unambiguously as `<namespace>#<hash>`.
pub fn parse_namespace(s: &str) -> Result<String, String> {
    let ok = (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        Ok(s.to_string())
    } else {
        Err("must be 1 to 128 of A-Z a-z 0-9 _ - . : (it prefixes every record id)".into())
    }
}

/// Why a message has no key (or no payload fingerprint): a permanent failure of that message,
/// since no retry can change its content. Field names are configuration; values never appear.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("the body is not JSON, so the idempotency key pointer {pointer} cannot be read")]
    BodyNotJson { pointer: String },
    #[error("the body has no value at the idempotency key pointer {pointer}")]
    Missing { pointer: String },
    #[error("the value at the idempotency key pointer {pointer} is {kind}, not a string or number")]
    NotScalar { pointer: String, kind: &'static str },
    #[error("the message has no attribute {name}, the idempotency key's attribute:{name}")]
    AttributeMissing { name: String },
    #[error(
        "the message attribute {name} is Binary; an idempotency key reads String and Number attributes"
    )]
    AttributeBinary { name: String },
    #[error("the idempotency key field {field} is empty")]
    EmptyField { field: String },
    #[error("the idempotency key is empty")]
    Empty,
    #[error("the idempotency key is {0} bytes; at most {MAX_KEY_BYTES} are allowed")]
    TooLong(usize),
    #[error("the body is not JSON, so the payload check's pointers ({fields}) cannot be read")]
    PayloadBodyNotJson { fields: String },
}

impl KeyError {
    /// Short code for logs and the `lastError` stamp.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BodyNotJson { .. } => "KEY_BODY_NOT_JSON",
            Self::Missing { .. } => "KEY_MISSING",
            Self::NotScalar { .. } => "KEY_NOT_SCALAR",
            Self::AttributeMissing { .. } => "KEY_ATTRIBUTE_MISSING",
            Self::AttributeBinary { .. } => "KEY_ATTRIBUTE_BINARY",
            Self::EmptyField { .. } | Self::Empty => "KEY_EMPTY",
            Self::TooLong(_) => "KEY_TOO_LONG",
            Self::PayloadBodyNotJson { .. } => "PAYLOAD_BODY_NOT_JSON",
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
/// - [`KeySource::Body`]: the body's SHA-256 in hex (64 digits): byte-identical bodies share
///   the key whatever their MessageIds.
/// - [`KeySource::Fields`], one field: its value. A string is keyed by its value; a number by
///   its exact text as written in the body, never through a float: so
///   `123456789012345678901234` and `123456789012345678901235` are two keys, and so are `1`,
///   `1.0` and `1e0` (spellings of one value are different keys: a producer that writes one
///   id two ways gets two keys). A number and a string of the same characters (`42`, `"42"`)
///   share a key. An attribute is keyed by its String or Number value.
/// - Several fields: the JSON array of their values as strings, `["c-1","o-9"]`, so that
///   `("a,b","c")` and `("a","b,c")` are two keys. Every field must be there and non-empty:
///   a missing one fails the key (it never falls back to the others, which would merge
///   distinct events).
pub fn derive(
    source: &KeySource,
    original_message_id: &str,
    body: &str,
    attributes: &Attributes,
) -> Result<IdempotencyKey, KeyError> {
    match source {
        KeySource::Message => {
            IdempotencyKey::try_from(format!("{original_message_id}:{}", body_digest(body)))
        }
        KeySource::Body => IdempotencyKey::try_from(sha256_hex(body.as_bytes(), 64)),
        KeySource::Fields(fields) => {
            let root = if fields.has_pointer() {
                Some(json::parse(body).map_err(|_| KeyError::BodyNotJson {
                    pointer: first_pointer(fields),
                })?)
            } else {
                None
            };
            let mut values = Vec::with_capacity(fields.0.len());
            for field in &fields.0 {
                let value = match field {
                    Field::Pointer(pointer) => {
                        // Present whenever a field is a pointer.
                        let root = root.ok_or_else(|| KeyError::BodyNotJson {
                            pointer: pointer.clone(),
                        })?;
                        pointer_text(root, pointer)?
                    }
                    Field::Attribute(name) => attribute_text(attributes, name)?,
                };
                if value.is_empty() {
                    return Err(KeyError::EmptyField {
                        field: field.to_string(),
                    });
                }
                values.push(value);
            }
            let text = match values.as_slice() {
                [one] => one.clone(),
                several => serde_json::to_string(several).map_err(|_| KeyError::Empty)?,
            };
            IdempotencyKey::try_from(text)
        }
    }
}

fn first_pointer(fields: &Fields) -> String {
    fields
        .0
        .iter()
        .find_map(|f| match f {
            Field::Pointer(p) => Some(p.clone()),
            Field::Attribute(_) => None,
        })
        .unwrap_or_default()
}

/// The digest that binds a `message` key to the body: 16 bytes of SHA-256, in hex.
pub fn body_digest(body: &str) -> String {
    sha256_hex(body.as_bytes(), 32)
}

/// The text of the scalar at `pointer`, read from the raw JSON so that a number keeps the
/// exact text it was written with.
fn pointer_text(root: &serde_json::value::RawValue, pointer: &str) -> Result<String, KeyError> {
    let not_json = || KeyError::BodyNotJson {
        pointer: pointer.to_string(),
    };
    let missing = || KeyError::Missing {
        pointer: pointer.to_string(),
    };
    let raw = json::lookup(root, pointer)
        .map_err(|_| not_json())?
        .ok_or_else(missing)?
        .get();
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

/// The String or Number value of a message attribute.
fn attribute_text(attributes: &Attributes, name: &str) -> Result<String, KeyError> {
    match attributes.get(name).map(|a| &a.value) {
        Some(AttributeValue::String(s)) => Ok(s.clone()),
        Some(AttributeValue::Binary(_)) => Err(KeyError::AttributeBinary { name: name.into() }),
        None => Err(KeyError::AttributeMissing { name: name.into() }),
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
mod tests;
