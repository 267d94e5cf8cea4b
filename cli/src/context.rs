//! What every command shares: its context ([`Ctx`]), why it stopped early ([`CliError`]), how
//! it went ([`Outcome`]) and the exit code that says so ([`Exit`]).

use aws_config::SdkConfig;
use redrive_engine::aws::{Clients, SqsQueue};
use redrive_engine::ports::PortError;
use redrive_shared::config::QueueUrl;

use crate::output::Style;
use crate::queues::{QueueRef, Resolver};
use crate::stack;

/// The exit codes of `redrive`, defined once: the commands end with them, `redrive --help` and
/// the man page show [`Exit::help`], and docs/cli.md's table is [`Exit::markdown`] (a test
/// compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// An AWS call failed; the command did not complete.
    Error,
    /// Usage or configuration error (clap uses 2 too), or `discard` without `--yes`.
    Usage,
    /// Some of the work was not done.
    Incomplete,
    /// Interrupted (Ctrl-C, SIGTERM): what the command held was made visible again.
    Interrupted,
}

impl Exit {
    pub const ALL: [Exit; 5] = [
        Exit::Ok,
        Exit::Error,
        Exit::Usage,
        Exit::Incomplete,
        Exit::Interrupted,
    ];

    pub const fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Error => 1,
            Exit::Usage => 2,
            Exit::Incomplete => 3,
            Exit::Interrupted => 130,
        }
    }

    /// What the code tells a script or an operator.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "done (`--max` reached is `status: limit`, exit 0)",
            Exit::Error => {
                "an AWS call failed (including a queue that does not exist, or an endpoint that \
                 cannot be reached); the command did not complete (nothing is lost: a message is \
                 deleted only after its copy was acknowledged, and held messages reappear after \
                 their timeout)"
            }
            Exit::Usage => {
                "usage or configuration error (bad flags or values, a missing setting or region, \
                 an unknown profile, no credentials, a `--stack` that does not exist or lacks an \
                 output the command needs), or `discard` without `--yes`; nothing was changed"
            }
            Exit::Incomplete => {
                "incomplete: some messages failed, were refused (unstamped), held for order or \
                 had no known source (`replay` without `--to`), an `--id` was not found, a guard \
                 alarm or the adaptive circuit kept the circuit open, a `drain --canary` \
                 bounced, a `replay`/`discard` walk or a `triage` pass did not reach the end of \
                 the queue (`status: incomplete`, with `notReached`), `triage show` found no \
                 message of the group, or `history` found no record of the message"
            }
            Exit::Interrupted => {
                "interrupted (Ctrl-C, SIGTERM): every message the command held was made visible \
                 again at once (a copy already sent may be delivered again; the consumer's key \
                 absorbs it)"
            }
        }
    }

    /// The "Exit codes" section of `redrive --help`: one code a line, its meaning wrapped
    /// under it at 92 columns.
    pub fn help() -> String {
        const WIDTH: usize = 92;
        const INDENT: usize = 7;
        let mut out = String::from("Exit codes:\n");
        for exit in Exit::ALL {
            let mut line = format!("  {:<width$}", exit.code(), width = INDENT - 2);
            let mut empty = true;
            for word in exit.meaning().split(' ') {
                if !empty && line.len() + 1 + word.len() > WIDTH {
                    out.push_str(&line);
                    out.push('\n');
                    line = " ".repeat(INDENT);
                    empty = true;
                }
                if !empty {
                    line.push(' ');
                }
                line.push_str(word);
                empty = false;
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// The exit-code table of docs/cli.md.
    pub fn markdown() -> String {
        let mut out = String::from("| code | meaning |\n|---|---|\n");
        for exit in Exit::ALL {
            out.push_str(&format!("| `{}` | {} |\n", exit.code(), exit.meaning()));
        }
        out
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
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

impl Outcome {
    pub const fn exit(self) -> Exit {
        match self {
            Outcome::Done => Exit::Ok,
            Outcome::Incomplete => Exit::Incomplete,
            Outcome::Refused => Exit::Usage,
            Outcome::Failed => Exit::Error,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The table under docs/cli.md's "## Exit codes" heading.
    fn docs_table() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");
        let docs = std::fs::read_to_string(path).expect("docs/cli.md");
        let section = docs
            .split("\n## Exit codes\n")
            .nth(1)
            .expect("docs/cli.md has an \"## Exit codes\" section");
        let section = section.split("\n## ").next().unwrap_or_default();
        section
            .lines()
            .filter(|line| line.starts_with('|'))
            .map(|line| format!("{line}\n"))
            .collect()
    }

    #[test]
    fn the_docs_exit_code_table_is_the_one_the_cli_renders() {
        assert_eq!(
            docs_table(),
            Exit::markdown(),
            "docs/cli.md's exit codes are not the code's: put Exit::markdown() under its heading"
        );
    }

    #[test]
    fn the_help_lists_each_code_once_within_its_width() {
        let help = Exit::help();
        for exit in Exit::ALL {
            let starts = help
                .lines()
                .filter(|line| line.trim_start().starts_with(&format!("{} ", exit.code())))
                .count();
            assert_eq!(starts, 1, "{exit:?} in:\n{help}");
        }
        assert!(help.lines().all(|line| line.len() <= 92), "{help}");
        // Every word of every meaning is there, in order.
        let words: Vec<String> = help.split_whitespace().skip(2).map(String::from).collect();
        let expected: Vec<String> = Exit::ALL
            .iter()
            .flat_map(|e| {
                std::iter::once(e.code().to_string())
                    .chain(e.meaning().split_whitespace().map(String::from))
            })
            .collect();
        assert_eq!(words, expected, "{help}");
    }

    #[test]
    fn each_outcome_exits_with_its_code() {
        assert_eq!(Outcome::Done.exit().code(), 0);
        assert_eq!(Outcome::Failed.exit().code(), 1);
        assert_eq!(Outcome::Refused.exit().code(), 2);
        assert_eq!(Outcome::Incomplete.exit().code(), 3);
    }
}
