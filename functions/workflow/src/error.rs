//! The tasks' errors: each has the `errorType` the state machine's `Retry` and `Catch` match.

use redrive_engine::ports::PortError;

/// Why a task failed; `error_type` is the name `Retry` and `Catch` match in the ASL.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("invalid task input: {0}")]
    InvalidInput(String),
    #[error(
        "message {message_id} did not come back from the DLQ within {receives} receives; this attempt deleted nothing. Either an earlier attempt of this task already redrove it (its answer lost) or another reader holds it on the DLQ"
    )]
    MessageNotFound { message_id: String, receives: u32 },
    #[error("the DLQ cannot be read: {0}")]
    DlqUnreadable(#[source] PortError),
    #[error(transparent)]
    Port(#[from] PortError),
}

impl TaskError {
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidInput(_) => "InvalidInput",
            Self::MessageNotFound { .. } => "MessageNotFound",
            Self::DlqUnreadable(_) => "DlqUnreadable",
            Self::Port(e) if e.retryable => "Sqs.Retryable",
            Self::Port(_) => "Sqs.Failed",
        }
    }
}

pub(crate) fn invalid(e: impl std::fmt::Display) -> TaskError {
    TaskError::InvalidInput(e.to_string())
}
