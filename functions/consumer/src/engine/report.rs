//! What an invocation answers: each record's outcome and report, the partial batch response,
//! and the errors that fail the invocation.

/// `{"batchItemFailures":[{"itemIdentifier":"<messageId>"}]}`: `aws_lambda_events`' type.
pub use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse as BatchResponse};

/// The reported MessageIds of a batch response, in record order.
pub trait FailedIds {
    fn failed_ids(&self) -> Vec<&str>;
}

impl FailedIds for BatchResponse {
    fn failed_ids(&self) -> Vec<&str> {
        self.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }
}

pub(super) fn item_failure(item_identifier: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = item_identifier;
    failure
}

/// What became of one record.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Processed now, and recorded COMPLETED.
    Processed,
    /// Already COMPLETED: success without a second side effect.
    Duplicate,
    /// Another invocation holds the key: reported failed, retried later.
    InProgress,
    /// Transient failure (of the processing step, or of the idempotency store): reported
    /// failed, visibility set to `visibility_seconds` when that call succeeded.
    Retry {
        code: String,
        visibility_seconds: Option<u32>,
    },
    /// Permanent failure: a copy (stamped with `lastError` when there was room) is on the
    /// DLQ and the original was deleted. Not reported: it is settled.
    DeadLettered { code: String, stamped: bool },
    /// Permanent failure without a DLQ, or whose DLQ copy was not acknowledged: reported failed.
    Failed { code: String },
    /// The payload check (`IDEMPOTENCY_PAYLOAD`): the key is COMPLETED for a different payload.
    /// Not processed (the side effect is not repeated) and never taken for a duplicate: a
    /// permanent failure with code [`PAYLOAD_MISMATCH`], dead-lettered with the `lastError`
    /// stamp (`dead_lettered`, `stamped` as in [`Outcome::DeadLettered`]) when `DLQ_URL` is set
    /// and SQS acknowledged the copy, else reported failed.
    PayloadMismatch { dead_lettered: bool, stamped: bool },
    /// FIFO: an earlier record of the same message group was reported failed, so this one was
    /// not processed (to keep the group's order) and is reported failed too.
    Skipped,
    /// The record could not be read: reported failed when it has a MessageId.
    Malformed,
    /// Not started: too little time was left before the invocation deadline to finish it.
    /// Reported failed untouched (nothing claimed, no SQS call): SQS delivers it again.
    Unstarted,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        self.names().0
    }

    /// The outcome's name in logs and reports, and the name of the metric that counts it
    /// ([`crate::metrics::OUTCOME_METRICS`]).
    pub(crate) fn names(&self) -> (&'static str, &'static str) {
        match self {
            Self::Processed => ("processed", "Processed"),
            Self::Duplicate => ("duplicate", "Duplicate"),
            Self::InProgress => ("in-progress", "InProgress"),
            Self::Retry { .. } => ("retry", "Retried"),
            Self::DeadLettered { .. } => ("dead-lettered", "DeadLettered"),
            Self::Failed { .. } => ("failed", "Failed"),
            Self::PayloadMismatch { .. } => ("payload-mismatch", "PayloadMismatch"),
            Self::Skipped => ("skipped", "Skipped"),
            Self::Malformed => ("malformed", "Malformed"),
            Self::Unstarted => ("unstarted", "Unstarted"),
        }
    }

    /// True when the record goes into `batchItemFailures` (SQS will deliver it again).
    pub fn is_reported(&self) -> bool {
        !matches!(
            self,
            Self::Processed
                | Self::Duplicate
                | Self::DeadLettered { .. }
                | Self::PayloadMismatch {
                    dead_lettered: true,
                    ..
                }
        )
    }

    pub(super) fn code(&self) -> Option<&str> {
        match self {
            Self::Retry { code, .. } | Self::DeadLettered { code, .. } | Self::Failed { code } => {
                Some(code)
            }
            Self::PayloadMismatch { .. } => Some(PAYLOAD_MISMATCH),
            _ => None,
        }
    }
}

/// One record's fate, for logs, tests and callers that want more than the response.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    pub message_id: Option<String>,
    pub key: Option<String>,
    pub outcome: Outcome,
    /// The processor's output as JSON text: the one it just returned (`processed`), or the
    /// one stored with the COMPLETED record (`duplicate`, twins included). `None` when there
    /// is none (`()`, too large to store, or another outcome).
    pub result: Option<String>,
}

impl RecordReport {
    pub(super) fn new(message_id: Option<String>, key: Option<String>, outcome: Outcome) -> Self {
        Self {
            message_id,
            key,
            outcome,
            result: None,
        }
    }
}

/// The result of one invocation.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    pub response: BatchResponse,
    /// In record order.
    pub records: Vec<RecordReport>,
    /// The source queue's name, from the records' `eventSourceARN`.
    pub(super) queue_name: Option<String>,
    /// `FAIL_WHEN_ALL_FAILED` is on and every record of the (non-empty) batch failed.
    pub(super) fail_invocation: bool,
}

impl Handled {
    pub fn outcome_of(&self, message_id: &str) -> Option<&Outcome> {
        self.report_of(message_id).map(|r| &r.outcome)
    }

    pub fn report_of(&self, message_id: &str) -> Option<&RecordReport> {
        self.records
            .iter()
            .find(|r| r.message_id.as_deref() == Some(message_id))
    }

    /// The source queue's name (the metrics' `QueueName`), when a record named it.
    pub fn queue_name(&self) -> Option<&str> {
        self.queue_name.as_deref()
    }

    /// True when the batch is not empty and every record of it failed (is reported, or
    /// could not be reported for want of a MessageId).
    pub fn every_record_failed(&self) -> bool {
        !self.records.is_empty() && self.records.iter().all(|r| r.outcome.is_reported())
    }

    /// What the Lambda returns: the partial batch response, or, with `FAIL_WHEN_ALL_FAILED`
    /// and every record failed, an error, so that the invocation counts in Lambda's `Errors`
    /// metric. SQS then delivers the whole batch again, which is what reporting every record
    /// does too: the visibility each record was given and the released claims stay as they are.
    pub fn into_response(self) -> Result<BatchResponse, EveryRecordFailed> {
        if !self.fail_invocation {
            return Ok(self.response);
        }
        let mut outcomes: Vec<(&'static str, usize)> = Vec::new();
        for r in &self.records {
            match outcomes.iter_mut().find(|(o, _)| *o == r.outcome.as_str()) {
                Some((_, n)) => *n += 1,
                None => outcomes.push((r.outcome.as_str(), 1)),
            }
        }
        Err(EveryRecordFailed {
            records: self.records.len(),
            outcomes: outcomes
                .iter()
                .map(|(o, n)| format!("{o}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Every record of the batch failed and `FAIL_WHEN_ALL_FAILED` is on: the invocation fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "every record of the batch failed ({records} of {records}; {outcomes}): the invocation fails (FAIL_WHEN_ALL_FAILED) and SQS delivers the batch again"
)]
pub struct EveryRecordFailed {
    pub records: usize,
    /// Records per outcome, e.g. `retry: 9, in-progress: 1`.
    pub outcomes: String,
}

/// The event was not an SQS event at all: the invocation fails (nothing was touched).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an SQS event: {0}")]
pub struct EventError(pub &'static str);

/// Error code when the idempotency store could not be reached for a claim.
pub const STORE_UNAVAILABLE: &str = "IDEMPOTENCY_STORE_UNAVAILABLE";
/// Error code when the processing step panicked.
pub const PROCESSOR_PANIC: &str = "PROCESSOR_PANIC";
/// Error code when another invocation holds the key.
pub const IN_PROGRESS: &str = "IN_PROGRESS";
/// Error code of [`Outcome::PayloadMismatch`].
pub const PAYLOAD_MISMATCH: &str = "IDEMPOTENCY_PAYLOAD_MISMATCH";
