//! `redrive`, the operator CLI: the replay workflow (inspect, fix, replay in batches, verify,
//! discard) on the same engine and ports as the Lambda. See the README, "Operator CLI".
//!
//! Every command that reads messages holds them (invisible) only while it runs and releases
//! them at once when it ends; a message is deleted only after its copy was acknowledged
//! (`replay`, `drain`) or when the operator said `--yes` (`discard`).

pub mod args;
pub mod circuit;
mod discard;
mod drain;
mod export;
pub mod filter;
mod generate;
pub mod history;
mod import;
mod inspect;
pub mod output;
mod peek;
mod progress;
mod replay;
pub mod scan;
mod select;
mod stats;
pub mod view;

use std::process::ExitCode;

use aws_config::{BehaviorVersion, Region, SdkConfig};

pub use args::Cli;
use args::Command;
use output::Style;
use redrive_engine::aws::{Clients, SqsQueue};
use redrive_engine::ports::PortError;
pub use replay::replay_entry;

/// Exit codes (also in `redrive --help`).
pub mod exit {
    pub const OK: u8 = 0;
    /// An AWS call failed; the command did not complete.
    pub const ERROR: u8 = 1;
    /// Usage or configuration error (clap uses 2 too), or `discard` without `--yes`.
    pub const USAGE: u8 = 2;
    /// Some messages failed, were not found, or the circuit was open.
    pub const INCOMPLETE: u8 = 3;
}

/// Why a command stopped early.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Invalid or missing configuration: nothing was touched.
    #[error("{0}")]
    Config(String),
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
}

impl Ctx {
    pub fn queue(&self) -> SqsQueue {
        self.clients.sqs.clone()
    }
}

/// Logs of the engine go to stderr as JSON lines, `warn` and above unless `RUST_LOG` says
/// otherwise: stdout is the command's output.
pub fn init_logging() {
    redrive_shared::logging::init_json_logging("warn", true);
}

/// The SDK configuration from the standard chain (`AWS_REGION`, `AWS_PROFILE`,
/// `AWS_ENDPOINT_URL`, shared config files, ...), with `--region` and `--profile` on top.
pub async fn sdk_config(
    region: Option<&str>,
    profile: Option<&str>,
) -> Result<SdkConfig, CliError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(profile) = profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_string()));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(CliError::Config(
            "no AWS region: pass --region, set AWS_REGION, or name one in the profile".into(),
        ));
    }
    Ok(sdk)
}

/// Runs one parsed command line; the exit code follows [`exit`].
pub async fn run(cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Completions(a) => {
            generate::print(&generate::completions(a.shell));
            return ExitCode::from(exit::OK);
        }
        Command::Man => {
            return match generate::man() {
                Ok(page) => {
                    generate::print(&page);
                    ExitCode::from(exit::OK)
                }
                Err(e) => {
                    eprintln!("error: writing the man page: {e}");
                    ExitCode::from(exit::ERROR)
                }
            };
        }
        _ => {}
    }
    let sdk = match sdk_config(cli.region.as_deref(), cli.profile.as_deref()).await {
        Ok(sdk) => sdk,
        Err(e) => return fail(&e),
    };
    let ctx = Ctx {
        clients: Clients::from_sdk(&sdk),
        sdk,
        json: cli.json,
        style: if cli.json {
            Style::plain()
        } else {
            Style::detect()
        },
    };
    let result = match cli.command {
        Command::Stats(a) => stats::run(&ctx, a).await,
        Command::Peek(a) => peek::run(&ctx, a).await,
        Command::Drain(a) => drain::run(&ctx, a).await,
        Command::Replay(a) => replay::run(&ctx, a).await,
        Command::Discard(a) => discard::run(&ctx, a).await,
        Command::Export(a) => export::run(&ctx, a).await,
        Command::Import(a) => import::run(&ctx, a).await,
        Command::Circuit(a) => circuit::run(&ctx, a).await,
        Command::History(a) => history::run(&ctx, a).await,
        Command::Completions(_) | Command::Man => Ok(Outcome::Done),
    };
    match result {
        Ok(Outcome::Done) => ExitCode::from(exit::OK),
        Ok(Outcome::Incomplete) => ExitCode::from(exit::INCOMPLETE),
        Ok(Outcome::Refused) => ExitCode::from(exit::USAGE),
        Ok(Outcome::Failed) => ExitCode::from(exit::ERROR),
        Err(e) => fail(&e),
    }
}

fn fail(e: &CliError) -> ExitCode {
    match e {
        CliError::Config(message) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::USAGE)
        }
        CliError::Aws(e) => {
            // The AWS CLI's wording, so that runbooks and searches match.
            eprintln!(
                "error: An error occurred ({}) when calling the {} operation: {}",
                e.code, e.operation, e.message
            );
            ExitCode::from(exit::ERROR)
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
