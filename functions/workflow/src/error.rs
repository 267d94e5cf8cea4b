//! The tasks' errors: each has the `errorType` the state machine's `Retry` and `Catch` match.

use redrive_engine::ports::PortError;

/// Why a task failed; `error_type` is the name `Retry` and `Catch` match in the ASL.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("invalid task input: {0}")]
    InvalidInput(String),
    #[error("the DLQ cannot be read: {0}")]
    DlqUnreadable(#[source] PortError),
    #[error(transparent)]
    Port(#[from] PortError),
}

impl TaskError {
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidInput(_) => "InvalidInput",
            Self::DlqUnreadable(_) => "DlqUnreadable",
            Self::Port(e) if e.retryable => "Sqs.Retryable",
            Self::Port(_) => "Sqs.Failed",
        }
    }
}

pub(crate) fn invalid(e: impl std::fmt::Display) -> TaskError {
    TaskError::InvalidInput(e.to_string())
}
