//! The processing step: the side effect the idempotency layer protects. Implement
//! [`Processor`] to plug in your own; the shipped binary uses [`crate::http::HttpProcessor`].

use std::future::Future;
use std::time::Duration;

use redrive_shared::key::IdempotencyKey;

use crate::message::Message;

/// Why processing one message failed, and so what happens to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// Worth another try later: the record is released, the message's visibility is set to
    /// `retry_after` (capped at 900 s) or else the retry backoff for its receive count, and it
    /// is reported in `batchItemFailures`.
    #[error("transient failure {code}: {message}")]
    Transient {
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Replaying cannot succeed: with `DLQ_URL` set, a copy stamped with `lastError` goes to
    /// the DLQ and the original is deleted; without it, the message is reported as failed.
    #[error("permanent failure {code}: {message}")]
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

    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent { .. })
    }
}

/// The side effect of one message. Called at most once per key at a time, and not again once
/// it returned `Ok` for that key (until the record expires after `IDEMPOTENCY_TTL_SECONDS`).
///
/// A crash or timeout after the side effect but before the success is recorded can still
/// repeat it once the claim's `inProgressExpiration` passed: pass `key` on to the downstream
/// (the shipped HTTP step sends it as `Idempotency-Key`) so that it can drop that repeat too.
///
/// Implementations must not panic: a panic is caught and treated as a transient failure, but
/// a build with `panic = "abort"` would lose the whole batch.
pub trait Processor: Sync {
    fn process(
        &self,
        message: &Message,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(), ProcessError>> + Send;

    /// The longest one call can take (the shipped HTTP step: its request timeout). The engine
    /// does not start a record when less than this plus [`crate::Settings::deadline_margin`]
    /// is left before the Lambda deadline. `None` (the default): only the margin is kept.
    fn time_limit(&self) -> Option<Duration> {
        None
    }
}

impl<T: Processor> Processor for &T {
    fn process(
        &self,
        message: &Message,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<(), ProcessError>> + Send {
        (**self).process(message, key)
    }

    fn time_limit(&self) -> Option<Duration> {
        (**self).time_limit()
    }
}
