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
pub mod errors;
mod export;
pub mod filter;
#[cfg(test)]
mod fixtures;
mod generate;
pub mod history;
mod import;
mod inspect;
pub mod output;
mod peek;
mod progress;
pub mod queues;
mod replay;
pub mod scan;
mod select;
pub mod stack;
mod stats;
mod status;
pub mod triage;
pub mod triage_act;
pub mod view;

use std::process::ExitCode;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use queues::{QueueRef, Resolver};
use redrive_shared::config::QueueUrl;

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

/// Logs of the engine go to stderr as JSON lines, `warn` and above unless `RUST_LOG` says
/// otherwise: stdout is the command's output. The SDK's own warnings (a credentials provider
/// that failed, a retried call) are left out by default: the command's one error line says
/// what went wrong.
pub fn init_logging() {
    redrive_shared::logging::init_json_logging(
        "warn,aws_config=error,aws_smithy_runtime=error",
        true,
    );
}

/// The profile in use: `--profile`, else `AWS_PROFILE`, else none named (`default`).
fn named_profile(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_string)
        .or_else(|| std::env::var("AWS_PROFILE").ok())
        .filter(|p| !p.is_empty())
}

/// A profile named by `--profile` or `AWS_PROFILE` must exist in the shared config or
/// credentials file: the SDK would otherwise go on without it and fail later, less clearly.
async fn check_profile(name: &str) -> Result<(), CliError> {
    use aws_runtime::env_config::file::EnvConfigFiles;
    use aws_types::os_shim_internal::{Env, Fs};
    let files = EnvConfigFiles::default();
    let set = aws_config::profile::load(
        &Fs::real(),
        &Env::real(),
        &files,
        Some(name.to_string().into()),
    )
    .await
    .map_err(|e| CliError::Config(format!("reading the AWS config files: {e}")))?;
    if set.get_profile(name).is_none() {
        return Err(CliError::Config(format!(
            "the config profile ({name}) could not be found"
        )));
    }
    Ok(())
}

/// The SDK configuration from the standard chain (`AWS_REGION`, `AWS_PROFILE`,
/// `AWS_ENDPOINT_URL`, shared config files, SSO and `credential_process` profiles, ...), with
/// `--region` and `--profile` on top.
pub async fn sdk_config(
    region: Option<&str>,
    profile: Option<&str>,
    endpoint_url: Option<&str>,
) -> Result<SdkConfig, CliError> {
    if let Some(name) = named_profile(profile) {
        check_profile(&name).await?;
    }
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(profile) = profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_string()));
    }
    if let Some(url) = endpoint_url {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(CliError::Config(format!(
                "--endpoint-url {url}: not an http(s) URL"
            )));
        }
        loader = loader.endpoint_url(url);
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(CliError::Config(
            "no AWS region: pass --region, set AWS_REGION, or name one in the profile".into(),
        ));
    }
    Ok(sdk)
}

/// Parses the command line (exiting with code 2 on a usage error, 0 for `--help`), keeping
/// which arguments it gave.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.given = stack::given_on_command_line(&matches);
    cli
}

/// Runs one parsed command line; the exit code follows [`exit`].
pub async fn run(mut cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Completions(a) => {
            generate::print(&generate::completions(a.shell));
            return ExitCode::from(exit::OK);
        }
        Command::Man(generate::ManArgs { dir: Some(dir) }) => {
            return match generate::man_pages(dir) {
                Ok(pages) => {
                    for page in pages {
                        println!("{}", page.display());
                    }
                    ExitCode::from(exit::OK)
                }
                Err(e) => {
                    eprintln!("error: writing the man pages to {}: {e}", dir.display());
                    ExitCode::from(exit::ERROR)
                }
            };
        }
        Command::Man(_) => {
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
    let format = match output::Format::choose(cli.output, cli.json) {
        Ok(format) => format,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    output::set_format(format);
    let mut setting = errors::Setting {
        profile: named_profile(cli.profile.as_deref()).unwrap_or_else(|| "default".into()),
        ..errors::Setting::default()
    };
    let sdk = match sdk_config(
        cli.region.as_deref(),
        cli.profile.as_deref(),
        cli.endpoint_url.as_deref(),
    )
    .await
    {
        Ok(sdk) => sdk,
        Err(e) => return fail(&e, &setting),
    };
    setting.region = sdk.region().map(|r| r.to_string());
    setting.endpoint = sdk.endpoint_url().map(str::to_string);
    errors::remember(&setting);
    // The stack's outputs are read before any queue is touched.
    let stack_env = match &cli.stack {
        Some(name) => match stack::apply(&sdk, name, &mut cli.command, &cli.given).await {
            Ok(env) => env,
            Err(e) => return fail(&e, &setting),
        },
        None => stack::StackEnv::default(),
    };
    let clients = Clients::from_sdk(&sdk);
    let ctx = Ctx {
        queues: Resolver::new(
            clients.sqs.client.clone(),
            setting.region.clone().unwrap_or_default(),
        ),
        clients,
        sdk,
        stack_env,
        json: format.is_document(),
        style: if format.is_document() {
            Style::plain()
        } else {
            Style::detect()
        },
    };
    // Ctrl-C (SIGINT) or SIGTERM while a command holds messages: they are made visible again
    // at once, not after their hold runs out, and the command exits 130. The handler can be
    // installed once per process; a second `run` keeps the first one's.
    let (interrupted, mut interrupt) = tokio::sync::mpsc::unbounded_channel::<()>();
    let _ = ctrlc::set_handler(move || {
        let _ = interrupted.send(());
    });
    let command = dispatch(&ctx, cli.command);
    tokio::pin!(command);
    let result = tokio::select! {
        result = &mut command => result,
        Some(()) = interrupt.recv() => {
            // Every scan stops at its next receive; a receive in flight lands first. The
            // command then ends its walk and releases what it holds; one that does not end
            // soon (a verdict window, a slow call) is dropped, and what is held released here.
            scan::interrupt();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut command).await;
            let released = scan::release_all(&ctx.queue()).await;
            eprintln!(
                "redrive: interrupted; the messages it held are visible again{}",
                if released > 0 { format!(" ({released} released at the interrupt)") } else { String::new() }
            );
            return ExitCode::from(exit::INTERRUPTED);
        }
    };
    match result {
        Ok(Outcome::Done) => ExitCode::from(exit::OK),
        Ok(Outcome::Incomplete) => ExitCode::from(exit::INCOMPLETE),
        Ok(Outcome::Refused) => ExitCode::from(exit::USAGE),
        Ok(Outcome::Failed) => ExitCode::from(exit::ERROR),
        Err(e) => fail(&e, &setting),
    }
}

/// Runs one command.
async fn dispatch(ctx: &Ctx, command: Command) -> Result<Outcome, CliError> {
    match command {
        Command::Stats(a) => stats::run(ctx, a).await,
        Command::Peek(a) => peek::run(ctx, a).await,
        Command::Drain(a) => drain::run(ctx, a).await,
        Command::Replay(a) => replay::run(ctx, a).await,
        Command::Discard(a) => discard::run(ctx, a).await,
        Command::Export(a) => export::run(ctx, a).await,
        Command::Import(a) => import::run(ctx, a).await,
        Command::Circuit(a) => circuit::run(ctx, a).await,
        Command::History(a) => history::run(ctx, a).await,
        Command::Status(a) => status::run(ctx, a).await,
        Command::Triage(a) => triage::run(ctx, *a).await,
        Command::Completions(_) | Command::Man(_) => Ok(Outcome::Done),
    }
}

/// Prints the error the AWS CLI's way (so that runbooks and searches match) and gives its
/// exit code.
fn fail(e: &CliError, setting: &errors::Setting) -> ExitCode {
    let (line, code) = errors::report(e, setting);
    eprintln!("redrive: {line}");
    ExitCode::from(code)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
