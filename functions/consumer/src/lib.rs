//! The idempotent SQS consumer for AWS Lambda: the Rust counterpart of Powertools'
//! idempotency and partial-batch utilities.
//!
//! A whole Lambda, with your processing of a typed body (this is `examples/charge_orders.rs`,
//! which the tests run under `cargo lambda watch`):
//!
#![doc = concat!("```no_run\n", include_str!("../examples/charge_orders.rs"), "```")]
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
//! - The cause of every failed attempt (class, code, normalised text, first and last time,
//!   attempts) recorded in the same table under the message's idempotency key ([`cause`]), so
//!   that `redrive triage --causes-table` can name why a message that SQS moved to the DLQ after
//!   `maxReceiveCount` failed; [`aws::record_cause`] writes it for a consumer of your own.
//! - The processor's output is stored with the COMPLETED record and handed back to duplicates
//!   ([`Processor::duplicate`]).
//! - Payloads that reach the queue through SNS or EventBridge unwrapped by typed envelopes, as
//!   Powertools' parser envelopes do: a processor of [`SnsSqsEnvelope<T>`] gets the
//!   notification's `Message` parsed as `T`, one of [`EventBridgeEnvelope<T>`] the event's
//!   `detail`, each with the envelope's metadata; a body of another shape is a permanent
//!   failure naming what was wrong (see [`envelope`], and there which idempotency key to pick).
//! - Your own AWS configuration or clients instead of the loaded defaults
//!   ([`Runner::sdk_config`], [`Runner::clients`]; `aws_config` and the SDK crates are
//!   re-exported at the versions this crate links).
//!
//! Features: `runtime` (default: [`run`] and [`Runner`], with `dynamodb`), `dynamodb` (the
//! built-in [`aws::DynamoDbStore`] and [`aws::SqsOps`]), `http` (the shipped
//! [`HttpProcessor`], reqwest), `fake` (in-memory fakes of the ports for your tests).
//! See `README.md` for the configuration, the table and every outcome.

#[cfg(feature = "dynamodb")]
pub mod aws;
pub mod cache;
pub mod cause;
pub mod engine;
pub mod envelope;
#[cfg(feature = "fake")]
pub mod fake;
#[cfg(feature = "http")]
pub mod http;
pub mod message;
pub mod metrics;
pub mod ports;
pub mod process;
pub mod record;
#[cfg(feature = "runtime")]
pub mod runtime;

pub use cause::FailureCause;
pub use engine::{
    BatchItemFailure, BatchResponse, Consumer, EventError, EveryRecordFailed, FailedIds, Handled,
    MAX_STORED_RESULT_BYTES, Outcome, RecordReport, Settings, key_digest,
};
pub use envelope::{EventBridgeEnvelope, SnsMessageAttribute, SnsSqsEnvelope};
#[cfg(feature = "http")]
pub use http::HttpProcessor;
#[cfg(feature = "runtime")]
pub use lambda_runtime::Error;
pub use message::Message;
pub use process::{BODY_NOT_PARSED, FromBody, ProcessError, Processor, RawBody};
pub use record::Record;
// The shared crate's types this crate's public signatures use, so that a user names them from
// here and needs no second dependency.
pub use redrive_shared::backoff::{Backoff, Jitter, JitterRng};
pub use redrive_shared::config::{
    ConfigError, ConsumerConfig, DownstreamConfig, Env, FifoOnFailure, QueueUrl,
};
pub use redrive_shared::key::{IdempotencyKey, KeySource, PayloadSource};
pub use redrive_shared::limits::Outgoing;
pub use redrive_shared::{AttributeValue, Attributes, MessageAttribute, TraceHeader};
#[cfg(feature = "runtime")]
pub use runtime::{Runner, deadline_ms, run};
// The SDK crates of the signatures that take your own configuration or clients
// (`Runner::sdk_config`, `Runner::clients`, `aws::DynamoDbStore::new`), at the versions this
// crate links: build them from here and no version can mismatch.
#[cfg(feature = "runtime")]
pub use aws_config::{self, SdkConfig};
#[cfg(feature = "dynamodb")]
pub use {aws_sdk_dynamodb, aws_sdk_sqs};

/// Logs, one line per event, as Lambda's advanced logging controls choose them:
/// `AWS_LAMBDA_LOG_LEVEL` before `RUST_LOG` (default `info`), `AWS_LAMBDA_LOG_FORMAT` `JSON`
/// (the default) or `Text`, the invocation's request and trace ids on every line. Never message
/// bodies: no code path logs one. An invalid value of either Lambda variable is logged and
/// returned, naming it. [`run`] calls it.
#[cfg(feature = "runtime")]
pub fn init_logging() -> Result<(), ConfigError> {
    redrive_shared::logging::init_lambda_logging("info").map(|_| ())
}
