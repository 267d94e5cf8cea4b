//! Pure logic shared by the redrive Lambdas: no I/O, no global randomness, and no clock but
//! [`clock::now_ms`], which the logic modules never read (they take the time as an argument).
//!
//! - [`archive`]: the archive / export line format (JSON Lines) and its S3 key scheme.
//! - [`attributes`]: the SQS message-attribute model and size accounting.
//! - [`meta`]: the `x-redrive` attribute (parse, don't validate; reading is total).
//! - [`backoff`]: exponential backoff with jitter, random source injectable (`rand`'s SmallRng).
//! - [`clock`]: the wall clock in epoch milliseconds, for the Lambdas, the CLI and the harnesses.
//! - [`circuit`]: the adaptive circuit (bounce-back rate, canary, cool-down), pure.
//! - [`limits`]: SQS's documented limits, enforced here because emulators do not, and batching.
//! - [`decision`]: redrive or isolate one received message.
//! - [`emf`]: CloudWatch's Embedded Metric Format, metrics as log lines (no API call).
//! - [`event`]: what invoked the re-driver.
//! - [`config`]: typed configuration of both Lambdas, read once at init.
//! - [`key`]: idempotency keys for the consumer.
//! - [`timefmt`]: RFC 3339 timestamps of epoch milliseconds (`aws_smithy_types::DateTime`).
//! - [`triage`]: a DLQ grouped by cause (normaliser, group ids, actions, rules).
//! - [`sync`]: a mutex lock that takes over a lock a panicking holder poisoned.
//! - [`trace_header`]: SQS's `AWSTraceHeader` system attribute, carried onto every copy.
//! - `sdk` (feature `aws`): conversions to and from `aws-sdk-sqs` types.
//! - `logging` (feature `logging`): the JSON log setup of the Lambdas and the CLI.

pub mod archive;
pub mod attributes;
pub mod backoff;
pub mod circuit;
pub mod clock;
pub mod config;
pub mod decision;
pub mod emf;
pub mod event;
pub mod json;
pub mod key;
pub mod limits;
#[cfg(feature = "logging")]
pub mod logging;
pub mod meta;
#[cfg(feature = "aws")]
pub mod sdk;
pub mod source;
pub mod sync;
pub mod text;
pub mod timefmt;
pub mod trace_header;
pub mod triage;

pub use attributes::{AttributeValue, Attributes, MessageAttribute};
pub use backoff::{Backoff, Jitter, JitterRng, RandomSource};
pub use decision::{Decision, IsolationPlan, Policy, ReceivedMessage, RedrivePlan};
pub use meta::{ErrorClass, IsolationReason, LastError, MetaSource, RedriveMeta};
pub use trace_header::TraceHeader;
