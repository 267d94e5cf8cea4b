//! What every command shares: its context ([`Ctx`]), why it stopped early ([`CliError`]), how
//! it went ([`Outcome`]) and the exit code that says so ([`exit`]).

use aws_config::SdkConfig;
use redrive_engine::aws::{Clients, SqsQueue};
use redrive_engine::ports::PortError;
use redrive_shared::config::QueueUrl;

use crate::output::Style;
use crate::queues::{QueueRef, Resolver};
use crate::stack;

/// Exit codes (also in `redrive --help`).
pub mod exit {
    pub const OK: u8 = 0;
    /// An AWS call failed; the command did not complete.
    pub const ERROR: u8 = 1;
    /// Usage or configuration error (clap uses 2 too), or `discard` without `--yes`.
    pub const USAGE: u8 = 2;
    /// Some messages failed, were not found, or the circuit was open.
    pub const INCOMPLETE: u8 = 3;
    /// Interrupted (Ctrl-C, SIGTERM): what the command held was made visible again.
    pub const INTERRUPTED: u8 = 130;
}

/// Why a command stopped early.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Invalid or missing configuration: nothing was touched.
    #[error("{0}")]
    Config(String),
    /// A queue named by its name or ARN that SQS does not know.
    #[error("queue '{queue}' does not exist ({code})")]
    NoSuchQueue { queue: String, code: String },
    #[error(transparent)]
    Aws(#[from] PortError),
}

/// How a command that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Some of the work was not done (failed, not found, circuit open).
    Incomplete,
    /// Refused (e.g. `discard` without `--yes`): nothing was changed.
    Refused,
    /// An AWS call failed part-way; the report says what was done.
    Failed,
}

/// What every command gets: the SDK configuration, the engine's clients built from it once
/// (whole calls are retried by the SDK, as its retry configuration says), output mode, colours.
pub struct Ctx {
    pub sdk: SdkConfig,
    pub clients: Clients,
    pub json: bool,
    pub style: Style,
    /// Queue names and ARNs to URLs, once per run.
    pub queues: Resolver,
    /// What `--stack` sets that no flag holds (the re-driver's variables of `drain`).
    pub stack_env: stack::StackEnv,
}

/// The value of a flag a command needs, which `--stack` may have given.
pub fn required<'a, T>(value: &'a Option<T>, flag: &str) -> Result<&'a T, CliError> {
    value.as_ref().ok_or_else(|| {
        CliError::Config(format!(
            "the following required argument was not provided: {flag} (or --stack NAME)"
        ))
    })
}

impl Ctx {
    pub fn queue(&self) -> SqsQueue {
        self.clients.sqs.clone()
    }

    /// The URL of a queue given by name, ARN or URL.
    pub async fn resolve(&self, queue: &QueueRef) -> Result<QueueUrl, CliError> {
        self.queues.resolve(queue).await
    }

    pub fn region(&self) -> &str {
        self.sdk.region().map_or("", |r| r.as_ref())
    }
}
