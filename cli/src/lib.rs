//! `redrive`, the operator CLI: the replay workflow (inspect, fix, replay in batches, verify,
//! discard) on the same engine and ports as the Lambda. The reference is docs/cli.md.
//!
//! Every command that reads messages holds them (invisible) only while it runs and releases
//! them at once when it ends; a message is deleted only after its copy was acknowledged
//! (`replay`, `drain`) or when the operator said `--yes` (`discard`).

pub mod args;
pub mod commands;
pub mod context;
pub mod errors;
pub mod filter;
#[cfg(test)]
mod fixtures;
mod inspect;
mod jsonl;
pub mod output;
mod progress;
pub mod queues;
pub mod scan;
mod select;
pub mod stack;
pub mod view;

use std::process::ExitCode;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use queues::Resolver;

pub use args::Cli;
use commands::generate;
pub use commands::replay::replay_entry;
use context::{CliError, Ctx, Exit};
use output::Style;
use redrive_engine::aws::Clients;

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

/// Runs one parsed command line; the exit code is one of [`Exit`].
pub async fn run(mut cli: Cli) -> ExitCode {
    // Completions and man pages need no AWS: they are generated from the command definition.
    if let Some(exit) = generate::run(&cli.command) {
        return exit.into();
    }
    let format = match output::Format::choose(cli.output, cli.json) {
        Ok(format) => format,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage.into();
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
    let command = commands::run(&ctx, cli.command);
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
            return Exit::Interrupted.into();
        }
    };
    match result {
        Ok(outcome) => outcome.exit().into(),
        Err(e) => fail(&e, &setting),
    }
}

/// Prints the error the AWS CLI's way (so that runbooks and searches match) and gives its
/// exit code.
fn fail(e: &CliError, setting: &errors::Setting) -> ExitCode {
    let (line, code) = errors::report(e, setting);
    eprintln!("redrive: {line}");
    code.into()
}
