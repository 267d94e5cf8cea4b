//! The processing step: the side effect the idempotency layer protects. Implement
//! [`Processor`] for a type of your own, or pass a closure; the shipped binary uses
//! [`crate::http::HttpProcessor`] (feature `http`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use redrive_shared::json::JsonError;

use crate::record::Record;

/// Error code of a body that does not parse as the processor's input type: a permanent
/// failure (replaying the same bytes cannot make them parse).
pub const BODY_NOT_PARSED: &str = "BODY_NOT_PARSED";

/// Why processing one message failed, and so what happens to it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// Worth another try later: the record is released, the message's visibility is set to
    /// `retry_after` (capped at 900 s) or else the retry backoff for its receive count, and it
    /// is reported in `batchItemFailures`.
    #[error("transient failure {code}: {message}")]
    #[non_exhaustive]
    Transient {
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Replaying cannot succeed: with `DLQ_URL` set, a copy stamped with `lastError` goes to
    /// the DLQ and the original is deleted; without it, the message is reported as failed.
    #[error("permanent failure {code}: {message}")]
    #[non_exhaustive]
    Permanent { code: String, message: String },
}

impl ProcessError {
    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Transient {
            code: code.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Permanent {
            code: code.into(),
            message: message.into(),
        }
    }

    /// A transient failure that asks to be retried after `after` (capped at 900 s).
    pub fn retry_after(
        code: impl Into<String>,
        message: impl Into<String>,
        after: Duration,
    ) -> Self {
        Self::Transient {
            code: code.into(),
            message: message.into(),
            retry_after: Some(after),
        }
    }

    pub fn code(&self) -> &str {
        match self {
            Self::Transient { code, .. } | Self::Permanent { code, .. } => code,
        }
    }

    /// The failure's text (stamped into `lastError`, at most 256 characters of it).
    pub fn message(&self) -> &str {
        match self {
            Self::Transient { message, .. } | Self::Permanent { message, .. } => message,
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent { .. })
    }

    /// The delay a transient failure asked for.
    pub fn retry_delay(&self) -> Option<Duration> {
        match self {
            Self::Transient { retry_after, .. } => *retry_after,
            Self::Permanent { .. } => None,
        }
    }
}

/// The message body as SQS delivered it, unparsed: the input of a processor that wants the
/// string (the body need not be JSON).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawBody(pub String);

impl RawBody {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::ops::Deref for RawBody {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// How a message body becomes a processor's input. Every `serde::de::DeserializeOwned` type is
/// read as JSON; [`RawBody`] is the string as it is. Implement it for a format of your own.
pub trait FromBody: Sized + Send {
    /// `Err` holds the reason, which must never quote the body (it is logged and stamped into
    /// the DLQ copy's `lastError`).
    fn from_body(body: &str) -> Result<Self, String>;
}

impl<T: DeserializeOwned + Send> FromBody for T {
    fn from_body(body: &str) -> Result<Self, String> {
        redrive_shared::json::from_str(body).map_err(|e| describe_json_error(&e))
    }
}

impl FromBody for RawBody {
    fn from_body(body: &str) -> Result<Self, String> {
        Ok(RawBody(body.to_string()))
    }
}

/// Why the body does not parse: the field path, serde's error category and the position
/// ([`JsonError`]), never what the body holds (serde_json's own message quotes the value it
/// met: a card number, an e-mail).
pub fn describe_json_error(e: &JsonError) -> String {
    format!("the body does not parse: {e}")
}

/// The side effect of one message, with the body parsed as `T` (any
/// `serde::de::DeserializeOwned` type, read as JSON, or [`RawBody`] for the string).
///
/// Called at most once per key at a time, and not again once it returned `Ok` for that key
/// (until the record expires after `IDEMPOTENCY_TTL_SECONDS`). A body that does not parse as
/// `T` is a permanent failure with code [`BODY_NOT_PARSED`]; the processor is not called.
///
/// A crash or timeout after the side effect but before the success is recorded can still
/// repeat it once the claim's `inProgressExpiration` passed: pass [`Record::key`] on to the
/// downstream (the shipped HTTP step sends it as `Idempotency-Key`) so that it can drop that
/// repeat too.
///
/// The [`Processor::Output`] is stored with the COMPLETED record (as JSON, up to
/// [`crate::MAX_STORED_RESULT_BYTES`]) and handed to [`Processor::duplicate`] when the same key
/// comes again; `()` stores nothing.
///
/// Implementations must not panic: a panic is caught and treated as a transient failure, but
/// a build with `panic = "abort"` would lose the whole batch.
///
/// Closures implement it: `|order: Order, record: Record| async move { ... }` returning
/// `Result<Output, ProcessError>`.
pub trait Processor<T = RawBody>: Sync {
    /// What a success returns; stored, and given back to duplicates.
    type Output: Serialize + DeserializeOwned + Send;

    fn process(
        &self,
        input: T,
        record: &Record,
    ) -> impl Future<Output = Result<Self::Output, ProcessError>> + Send;

    /// Called for a record whose key is already COMPLETED (a later delivery, a redriven copy,
    /// or a twin in the same batch), instead of [`Processor::process`]: `stored` is the output
    /// the first success returned, `None` when nothing was stored (`()`, an output over
    /// [`crate::MAX_STORED_RESULT_BYTES`], a record written without one, or one that no longer
    /// parses as `Output`). The record is a success either way. Default: nothing.
    fn duplicate(
        &self,
        stored: Option<Self::Output>,
        record: &Record,
    ) -> impl Future<Output = ()> + Send {
        let _ = (stored, record);
        async {}
    }

    /// The longest one call can take (the shipped HTTP step: its request timeout). The engine
    /// does not start a record when less than this plus [`crate::Settings::deadline_margin`]
    /// is left before the Lambda deadline. `None` (the default): only the margin is kept.
    fn time_limit(&self) -> Option<Duration> {
        None
    }
}

impl<F, T, O, Fut> Processor<T> for F
where
    F: Fn(T, Record) -> Fut + Sync,
    Fut: Future<Output = Result<O, ProcessError>> + Send,
    T: FromBody,
    O: Serialize + DeserializeOwned + Send,
{
    type Output = O;

    fn process(
        &self,
        input: T,
        record: &Record,
    ) -> impl Future<Output = Result<O, ProcessError>> + Send {
        self(input, record.clone())
    }
}

impl<T, P: Processor<T> + Send> Processor<T> for Arc<P> {
    type Output = P::Output;

    fn process(
        &self,
        input: T,
        record: &Record,
    ) -> impl Future<Output = Result<Self::Output, ProcessError>> + Send {
        (**self).process(input, record)
    }

    fn duplicate(
        &self,
        stored: Option<Self::Output>,
        record: &Record,
    ) -> impl Future<Output = ()> + Send {
        (**self).duplicate(stored, record)
    }

    fn time_limit(&self) -> Option<Duration> {
        (**self).time_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Order {
        order_id: String,
        amount_cents: u64,
        kind: Kind,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Card,
    }

    #[test]
    fn a_body_that_does_not_parse_is_described_without_its_content() {
        for (body, named) in [
            (
                r#"{"order_id":"o-1","amount_cents":"4111111111111111","kind":"card"}"#,
                "does not fit the type (wrong type, unknown value or missing field) at `amount_cents`",
            ),
            (
                r#"{"order_id":"o-1","amount_cents":1,"kind":"secret-kind"}"#,
                "does not fit the type (wrong type, unknown value or missing field) at `kind`",
            ),
            (
                r#"{"order_id":"o-1","kind":"card"}"#,
                "does not fit the type (wrong type, unknown value or missing field) at `.`",
            ),
            (
                "alice@example.com",
                "not valid JSON at `.` (line 1 column 1)",
            ),
            (r#"{"order_id":"o-1""#, "the JSON ends early"),
            (
                r#"[-4111111111111111]"#,
                "does not fit the type (wrong type, unknown value or missing field) at `[0]`",
            ),
        ] {
            let reason = Order::from_body(body).unwrap_err();
            assert!(reason.contains(named), "{reason:?} should name {named:?}");
            for secret in ["4111111111111111", "secret-kind", "alice", "o-1"] {
                assert!(!reason.contains(secret), "{secret} in {reason:?}");
            }
        }
    }

    #[test]
    fn a_raw_body_is_the_string_as_delivered() {
        let raw = RawBody::from_body("not json \u{1F4E6}").unwrap();
        assert_eq!(raw.as_str(), "not json \u{1F4E6}");
        // A String input is JSON, like every other serde type.
        assert_eq!(String::from_body("\"quoted\"").unwrap(), "quoted");
        assert!(String::from_body("not json").is_err());
    }
}
