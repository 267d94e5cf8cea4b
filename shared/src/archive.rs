//! The archive / export format: one SQS message per line of JSON (JSON Lines, UTF-8), written
//! by the archiver and by `redrive export`, read by `redrive import`.
//!
//! # A line
//! ```json
//! {"format":"redrive.archive/1","queue":"https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq",
//!  "archivedAt":"2026-11-21T10:00:00Z","messageId":"5fea7756-...",
//!  "attributes":{"x-redrive":{"dataType":"String","stringValue":"{\"v\":1,...}"},
//!                "blob":{"dataType":"Binary.gz","binaryValue":"AAEC/w=="}},
//!  "system":{"SentTimestamp":"1795255200000","ApproximateReceiveCount":"3",
//!            "MessageGroupId":"g1"},
//!  "bodySha256":"<64 hex>","body":"{\"orderId\":42}"}
//! ```
//! (one line in the file; wrapped here to be read).
//! - `format` is always `redrive.archive/1`; a reader refuses any other value.
//! - `body` is the body as a JSON string: SQS bodies are Unicode text, so this is lossless.
//!   `bodySha256` is the lowercase hex SHA-256 of the body's UTF-8 bytes; a reader refuses a line
//!   whose body does not match it (a truncated or edited line).
//! - `attributes` holds every message attribute with its `dataType` (`String`, `Number`,
//!   `Binary`, or a custom type such as `Number.int` or `Binary.gz`); `String` and `Number`
//!   types carry `stringValue`, `Binary` types carry `binaryValue` in standard base64 with
//!   padding. `x-redrive` is kept as the attribute it is.
//! - `system` holds the SQS system attributes present when the message was read, by their SQS
//!   names and as SQS reports them (strings): `SentTimestamp`, `ApproximateReceiveCount`,
//!   `ApproximateFirstReceiveTimestamp` (epoch milliseconds or counts, digits only),
//!   `MessageGroupId`, `MessageDeduplicationId`, `SequenceNumber`, and `AWSTraceHeader` (the
//!   X-Ray trace header of a traced producer, which `redrive import` sends on with the copy;
//!   a reader refuses a value that is no trace header, see [`crate::trace_header`]).
//!   `AWSTraceHeader` joined the format in a compatible way: it is written only for a message
//!   that has one, so the lines of untraced messages are exactly what readers before it read,
//!   and a line without it (every older archive) reads as before; a reader before it refuses
//!   a line that carries it (unknown field).
//! - `archivedAt` is the archive or export time, RFC 3339 UTC to the second.
//!
//! Unknown fields are refused: a line is exactly this version of the format or it is an error
//! naming the line number and the field.
//!
//! # S3 object keys
//! The archiver and `redrive export --to s3://bucket/prefix` write objects of the same format
//! under one key scheme ([`object_key`]):
//! ```text
//! <prefix>/<queue name>/<yyyy>/<mm>/<dd>/<hhmmss>Z-<first message id>-<n>.jsonl
//! ```
//! The date and time are the archive time (UTC), `<first message id>` the MessageId of the
//! object's first line and `<n>` the number of lines. Keys therefore list in time order within
//! a queue, and a run repeated after a crash (between the put and the deletes) writes a second
//! object next to the first, never over it. An empty prefix leaves the key starting at the
//! queue name. `redrive import --from s3://bucket/prefix` reads every `.jsonl` object under the
//! prefix in key order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::attributes::{AttributeValue, Attributes, MessageAttribute};
use base64::DecodeError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::timefmt::{millis_from_rfc3339, rfc3339_from_millis};
use crate::trace_header::{AWS_TRACE_HEADER, TraceHeader};

/// The format tag every line carries.
pub const FORMAT: &str = "redrive.archive/1";

/// One archived (or exported) message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedMessage {
    /// URL of the queue the message was read from.
    pub queue: String,
    /// Archive or export time, epoch milliseconds (written to the second).
    pub archived_at_ms: i64,
    pub message_id: String,
    pub body: String,
    pub attributes: Attributes,
    pub system: SystemAttributes,
}

/// The SQS system attributes an archive keeps, as SQS reports them (strings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct SystemAttributes {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approximate_receive_count: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approximate_first_receive_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_group_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_deduplication_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
    #[serde(rename = "AWSTraceHeader", skip_serializing_if = "Option::is_none")]
    pub aws_trace_header: Option<String>,
}

impl SystemAttributes {
    /// The SQS names this archive keeps.
    pub const NAMES: [&'static str; 7] = [
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "MessageGroupId",
        "MessageDeduplicationId",
        "SequenceNumber",
        AWS_TRACE_HEADER,
    ];

    /// Picks the kept attributes out of SQS's (name, value) pairs; others are ignored, and so
    /// is an `AWSTraceHeader` that is no trace header (a reader would refuse the line).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut s = Self::default();
        for (name, value) in pairs {
            let slot = match name {
                AWS_TRACE_HEADER if TraceHeader::parse(value).is_err() => continue,
                AWS_TRACE_HEADER => &mut s.aws_trace_header,
                "SentTimestamp" => &mut s.sent_timestamp,
                "ApproximateReceiveCount" => &mut s.approximate_receive_count,
                "ApproximateFirstReceiveTimestamp" => &mut s.approximate_first_receive_timestamp,
                "MessageGroupId" => &mut s.message_group_id,
                "MessageDeduplicationId" => &mut s.message_deduplication_id,
                "SequenceNumber" => &mut s.sequence_number,
                _ => continue,
            };
            *slot = Some(value.to_string());
        }
        s
    }

    /// `SentTimestamp` as epoch milliseconds.
    pub fn sent_timestamp_ms(&self) -> Option<i64> {
        self.sent_timestamp.as_deref().and_then(|v| v.parse().ok())
    }

    /// `AWSTraceHeader` (a line that was read was checked: a value is a trace header).
    pub fn trace_header(&self) -> Option<TraceHeader> {
        self.aws_trace_header
            .as_deref()
            .and_then(|v| TraceHeader::parse(v).ok())
    }

    fn check(&self) -> Result<(), (String, String)> {
        for (name, value) in [
            ("SentTimestamp", &self.sent_timestamp),
            ("ApproximateReceiveCount", &self.approximate_receive_count),
            (
                "ApproximateFirstReceiveTimestamp",
                &self.approximate_first_receive_timestamp,
            ),
        ] {
            if let Some(v) = value
                && (v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err((format!("system.{name}"), format!("{v:?} is not a number")));
            }
        }
        for (name, value) in [
            ("MessageGroupId", &self.message_group_id),
            ("MessageDeduplicationId", &self.message_deduplication_id),
            ("SequenceNumber", &self.sequence_number),
        ] {
            if value.as_deref() == Some("") {
                return Err((format!("system.{name}"), "is empty".into()));
            }
        }
        if let Some(Err(e)) = self.aws_trace_header.as_deref().map(TraceHeader::parse) {
            return Err((format!("system.{AWS_TRACE_HEADER}"), e.to_string()));
        }
        Ok(())
    }
}

/// A line that is not this format: which line, which field, what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {field}: {problem}")]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// The field at fault (`attributes.blob.binaryValue`), or `line` for the line as a whole.
    pub field: String,
    pub problem: String,
}

/// The lowercase hex SHA-256 of a body's UTF-8 bytes, as `bodySha256` carries it.
pub fn body_sha256(body: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(body.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WireLine {
    format: String,
    queue: String,
    archived_at: String,
    message_id: String,
    #[serde(default)]
    attributes: BTreeMap<String, WireAttribute>,
    #[serde(default)]
    system: SystemAttributes,
    body_sha256: String,
    body: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WireAttribute {
    data_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    string_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_value: Option<String>,
}

/// One message as one line of the format, without the trailing newline. JSON escapes keep
/// the line free of raw newlines whatever the body holds.
pub fn to_line(message: &ArchivedMessage) -> String {
    let wire = WireLine {
        format: FORMAT.to_string(),
        queue: message.queue.clone(),
        archived_at: rfc3339_from_millis(message.archived_at_ms),
        message_id: message.message_id.clone(),
        attributes: message
            .attributes
            .iter()
            .map(|(name, a)| {
                let (string_value, binary_value) = match &a.value {
                    AttributeValue::String(s) => (Some(s.clone()), None),
                    AttributeValue::Binary(b) => (None, Some(base64_encode(b))),
                };
                (
                    name.clone(),
                    WireAttribute {
                        data_type: a.data_type.clone(),
                        string_value,
                        binary_value,
                    },
                )
            })
            .collect(),
        system: message.system.clone(),
        body_sha256: body_sha256(&message.body),
        body: message.body.clone(),
    };
    // Serialising plain strings and maps of strings cannot fail.
    serde_json::to_string(&wire).expect("an archive line serialises")
}

/// Reads line number `line` (1-based, for the error) of an archive.
pub fn parse_line(line: usize, text: &str) -> Result<ArchivedMessage, LineError> {
    let err = |field: &str, problem: String| LineError {
        line,
        field: field.to_string(),
        problem,
    };
    if text.trim().is_empty() {
        return Err(err("line", "empty line".into()));
    }
    // The tag first, so that another format is named as such rather than by its first
    // unexpected field.
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| err("line", format!("not a JSON object ({e})")))?;
    let Some(object) = value.as_object() else {
        return Err(err("line", "not a JSON object".into()));
    };
    match object.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(err(
                "format",
                format!("{other:?} is not {FORMAT:?} (this reader knows only {FORMAT})"),
            ));
        }
        None => return Err(err("format", format!("missing; expected {FORMAT:?}"))),
    }
    // The field's path, never serde's message: that quotes the value it met (a body).
    let wire: WireLine = crate::json::from_value(value).map_err(|e| {
        let field = if e.path == "." { "line" } else { &e.path };
        err(field, e.what().to_string())
    })?;
    if wire.queue.is_empty() {
        return Err(err("queue", "is empty".into()));
    }
    if wire.message_id.is_empty() {
        return Err(err("messageId", "is empty".into()));
    }
    let archived_at_ms = millis_from_rfc3339(&wire.archived_at).ok_or_else(|| {
        err(
            "archivedAt",
            format!(
                "{:?} is not an RFC 3339 UTC time such as 2026-11-21T10:00:00Z",
                wire.archived_at
            ),
        )
    })?;
    let digest = body_sha256(&wire.body);
    if !wire.body_sha256.eq_ignore_ascii_case(&digest) {
        return Err(err(
            "bodySha256",
            "does not match the body (the line was truncated or edited)".into(),
        ));
    }
    wire.system.check().map_err(|(field, p)| err(&field, p))?;
    let mut attributes = Attributes::new();
    for (name, a) in wire.attributes {
        let field = |leaf: &str| format!("attributes.{name}.{leaf}");
        if name.is_empty() {
            return Err(err("attributes", "an attribute has an empty name".into()));
        }
        let base = a.data_type.split('.').next().unwrap_or("");
        let value = match (base, a.string_value, a.binary_value) {
            ("String" | "Number", Some(s), None) => {
                if base == "Number" && !is_number(&s) {
                    return Err(err(&field("stringValue"), format!("{s:?} is not a Number")));
                }
                AttributeValue::String(s)
            }
            ("Binary", None, Some(b)) => AttributeValue::Binary(
                base64_decode(&b).map_err(|why| err(&field("binaryValue"), why))?,
            ),
            ("String" | "Number", _, _) => {
                return Err(err(
                    &field("stringValue"),
                    format!(
                        "a {} attribute needs stringValue and no binaryValue",
                        a.data_type
                    ),
                ));
            }
            ("Binary", _, _) => {
                return Err(err(
                    &field("binaryValue"),
                    format!(
                        "a {} attribute needs binaryValue (base64) and no stringValue",
                        a.data_type
                    ),
                ));
            }
            _ => {
                return Err(err(
                    &field("dataType"),
                    format!(
                        "{:?} is not String, Number or Binary (optionally with a .suffix)",
                        a.data_type
                    ),
                ));
            }
        };
        attributes.insert(
            name,
            MessageAttribute {
                data_type: a.data_type,
                value,
            },
        );
    }
    Ok(ArchivedMessage {
        queue: wire.queue,
        archived_at_ms,
        message_id: wire.message_id,
        body: wire.body,
        attributes,
        system: wire.system,
    })
}

/// Reads a whole archive; the first bad line is the error. A final newline is allowed, an
/// empty line elsewhere is not.
pub fn parse_jsonl(text: &str) -> Result<Vec<ArchivedMessage>, LineError> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split('\n')
        .enumerate()
        .map(|(i, l)| parse_line(i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .collect()
}

/// SQS's Number: decimal digits with an optional sign, point and exponent (no `inf`, `NaN`).
fn is_number(s: &str) -> bool {
    let t = s.trim();
    t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        && t.parse::<f64>().is_ok()
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Strict standard base64 with padding: anything [`base64_encode`] would not write is refused,
/// so one byte string has one spelling.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    STANDARD.decode(text).map_err(|e| match e {
        DecodeError::InvalidByte(at, b'=') => {
            format!("not base64: padding in the wrong place (position {at})")
        }
        DecodeError::InvalidByte(at, c) => {
            format!("not base64: character {:?} at position {at}", char::from(c))
        }
        DecodeError::InvalidLength(_) | DecodeError::InvalidPadding => format!(
            "not base64: {} characters, not a multiple of 4 with padding",
            text.len()
        ),
        DecodeError::InvalidLastSymbol(..) => {
            "not base64: non-zero bits after the last byte".into()
        }
    })
}

/// Where `s3://bucket/prefix` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Without leading or trailing `/`; may be empty.
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://bucket[/prefix]`; `None` when the text does not start with `s3://`.
    pub fn parse(text: &str) -> Option<Result<Self, String>> {
        let rest = text.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        Some(if valid_bucket {
            Ok(Self {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            })
        } else {
            Err(format!(
                "{text:?}: the bucket name must be 3 to 63 lowercase letters, digits, '-' or '.'"
            ))
        })
    }
}

/// The object key of `count` messages of `queue_name` archived at `archived_at_ms`, the first
/// being `first_message_id` (see the module documentation). Characters of the id outside
/// letters, digits, `-`, `_` and `.` become `_`.
pub fn object_key(
    prefix: &str,
    queue_name: &str,
    archived_at_ms: i64,
    first_message_id: &str,
    count: usize,
) -> String {
    // "YYYY-MM-DDTHH:MM:SSZ"
    let t = rfc3339_from_millis(archived_at_ms);
    let (date, time) = (&t[..10], &t[11..19]);
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let prefix = prefix.trim_matches('/');
    let lead = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    format!(
        "{lead}{}/{}/{}/{}/{}Z-{}-{count}.jsonl",
        safe(queue_name),
        &date[..4],
        &date[5..7],
        &date[8..10],
        time.replace(':', ""),
        safe(first_message_id),
    )
}

#[cfg(test)]
mod tests;
