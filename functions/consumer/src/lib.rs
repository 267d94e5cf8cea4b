//! The idempotent SQS consumer: the Rust counterpart of Powertools' idempotency and
//! partial-batch utilities, built for redrive.
//!
//! - Idempotency keyed on a value that survives a redrive (`originalMessageId` from the
//!   `x-redrive` attribute), on the body's digest, or on fields of the message (JSON pointers
//!   into the body, message attributes, several at once), recorded in DynamoDB under a hash of
//!   the key with one conditional write to claim and one write to complete: two writes and no
//!   read per message. An opt-in payload check turns a different payload under a completed key
//!   into a permanent failure of its own instead of a duplicate.
//! - A crashed or timed-out invocation's IN_PROGRESS claim expires at its Lambda deadline and
//!   is then reclaimed.
//! - Partial batch responses: each record is read and handled on its own; transient failures
//!   are retried after the shared backoff (ChangeMessageVisibility), permanent ones are
//!   fast-tracked to the DLQ with a `lastError` stamp so that the re-driver isolates them.
//!
//! Plug in your own side effect by implementing [`Processor`]; the shipped binary uses
//! [`HttpProcessor`]. See `README.md` for an example.

pub mod aws;
pub mod engine;
pub mod fake;
pub mod http;
pub mod message;
pub mod ports;
pub mod process;

pub use engine::{
    BatchItemFailure, BatchResponse, Consumer, EventError, FailedIds, Handled, Outcome, Settings,
    key_digest,
};
pub use http::HttpProcessor;
pub use message::Message;
pub use process::{ProcessError, Processor};
pub use redrive_shared::config::ConsumerConfig;
pub use redrive_shared::key::IdempotencyKey;

/// JSON logs, one line per event, level from `RUST_LOG` (default `info`). Never message bodies:
/// no code path logs one.
pub fn init_logging() {
    redrive_shared::logging::init_json_logging("info", false);
}
