//! Command-line arguments of `redrive` (clap derive).

use clap::{ArgGroup, Parser, Subcommand};
use redrive_shared::config::QueueUrl;

use crate::context::Exit;

/// What `redrive --help` shows after the options: the exit codes come from [`Exit`].
pub fn after_help() -> String {
    format!("{AFTER_HELP_TOP}\n{}\n{AFTER_HELP_WORKFLOW}", Exit::help())
}

const AFTER_HELP_TOP: &str = "\
Queues:
  Wherever a queue is taken, it may be a name (orders-dlq), an ARN
  (arn:aws:sqs:REGION:ACCOUNT:orders-dlq; REGION must be the client's) or a URL.

Configuration:
  AWS region, credentials and profile come from the standard chain (AWS_REGION, AWS_PROFILE,
  ~/.aws/config with SSO and credential_process profiles, ...); AWS_ENDPOINT_URL (or
  --endpoint-url) points every call at an emulator or an endpoint of your own. --stack NAME
  takes the queues, tables and topics from a deployed stack's outputs (a flag given wins, and
  the stack wins over a variable). `drain` reads the
  re-driver Lambda's variables (DLQ_URL, SOURCE_QUEUE_URL, POISON_QUEUE_URL,
  MAX_REDRIVE_ATTEMPTS, BACKOFF_*, GUARD_ALARM_NAMES, METRIC_NAMESPACE, ...); its flags win.
  NO_COLOR turns colour off (CLICOLOR_FORCE turns it on when stdout is not a terminal);
  RUST_LOG=info shows the engine's JSON log lines on stderr.
";

const AFTER_HELP_WORKFLOW: &str = "\
Workflow: triage -> stats -> peek -> fix the cause -> replay in batches (--max) -> stats -> discard.";

/// Operate a redrive dead-letter queue by hand: inspect, drain, replay, discard.
#[derive(Debug, Parser)]
#[command(name = "redrive", version, after_help = after_help())]
pub struct Cli {
    /// Print one JSON document on stdout instead of text (for scripts); the same as
    /// `--output json`.
    #[arg(long, global = true)]
    pub json: bool,
    /// How results are printed, with one meaning for every command, as in the AWS CLI:
    /// `table` (the default) aligned columns for people, `json` the command's documented JSON
    /// document, `text` that document as tab-separated lines for grep, cut and awk.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<super::output::Format>,
    /// AWS region (default: the standard chain, e.g. AWS_REGION).
    #[arg(long, global = true, value_name = "REGION")]
    pub region: Option<String>,
    /// Named profile from the shared AWS config files (default: AWS_PROFILE or `default`).
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send every AWS call to this URL, as the AWS CLI's --endpoint-url does (default: the
    /// standard chain, e.g. AWS_ENDPOINT_URL; an emulator, a VPC endpoint).
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// Take the queues, tables and topics a command needs from the outputs of this deployed
    /// stack (the STACK_NAME of `make deploy`; DescribeStacks); a flag given wins.
    #[arg(long, global = true, value_name = "NAME")]
    pub stack: Option<String>,
    /// The arguments given on the command line (not by a variable or a default): those
    /// `--stack` does not replace.
    #[arg(skip)]
    pub given: std::collections::HashSet<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Depth, redrive policy, and histograms of attempts and reasons over a sample
    ///
    /// Visible, in-flight and delayed counts, the queue's RedrivePolicy and retention, then a
    /// sample of messages (received and released at once) summarised by attempt, isolation
    /// reason and lastError code.
    Stats(crate::commands::stats::StatsArgs),
    /// Show messages without consuming them
    ///
    /// Id, originalMessageId, attempt, reason, lastError, age, size and attributes of each
    /// message; the body only with --body. The messages are visible again as soon as the
    /// command ends.
    Peek(crate::commands::peek::PeekArgs),
    /// Drain the DLQ once, as the re-driver Lambda does
    ///
    /// The same engine as the Lambda: DLQ -> source queue with backoff, poison pills -> poison
    /// queue, a message deleted from the DLQ only after its copy was acknowledged, metrics
    /// published, guard alarms honoured. Configured from the Lambda's variables; flags win.
    Drain(crate::commands::drain::DrainArgs),
    /// Send parked messages back to the source queue after a fix
    ///
    /// Each copy keeps its body, attributes and originalMessageId (the consumer's idempotency
    /// key); x-redrive gets attempt 0 and no lastError, isolatedAt or reason (the copy is no
    /// longer parked). A message is deleted from the poison queue only after its copy was
    /// acknowledged. A message parked without room for x-redrive (10 attributes, or too large
    /// for the destination) is refused unless --allow-unstamped. Exit code 3 when anything
    /// was not replayed or the walk did not reach the end of the queue.
    #[command(group(ArgGroup::new("select").required(true).args(["id", "all"])))]
    Replay(crate::commands::replay::ReplayArgs),
    /// Delete messages that cannot be recovered (needs --yes)
    ///
    /// Lists every message it deleted. Without --yes it lists what it would delete, deletes
    /// nothing, and exits with code 2. Exit code 3 when anything was not deleted or the walk
    /// did not reach the end of the queue.
    #[command(group(ArgGroup::new("select").required(true).args(["id", "all"])))]
    Discard(crate::commands::discard::DiscardArgs),
    /// Write messages to a JSON Lines file or to S3, optionally deleting them
    ///
    /// One line per message in the archive format (body, every attribute with its type,
    /// system attributes, x-redrive). Without --delete the queue is left as it was (the
    /// messages are visible again when the command ends); with --delete a message is deleted
    /// only after its line was written and fsync'd, or its S3 object acknowledged with a
    /// SHA-256 checksum. Takes the filters of peek, replay and discard.
    Export(crate::commands::export::ExportArgs),
    /// Send the messages of an export or archive to a queue
    ///
    /// The whole input is read and validated first: a file with a bad line sends nothing, and
    /// the error names the line and what was wrong. Bodies, attributes and x-redrive are sent
    /// as archived (originalMessageId kept, so the consumer's idempotency key is the same
    /// however often the file is imported); a message without x-redrive gets one keyed on
    /// its archived MessageId. FIFO destinations keep the group id and get a deduplication id
    /// derived from the archived MessageId.
    Import(crate::commands::import::ImportArgs),
    /// Show or override the adaptive circuit of a DLQ
    ///
    /// status: the state (closed, open, half-open), the operator's override, the next run's
    /// plan, the bounce-back counts over the window and the last transitions. open: hold it
    /// open (nothing is redriven). close: force it closed (drain whatever the measurements
    /// say). auto: hand it back to the measurements. Needs CIRCUIT_TABLE or --circuit-table.
    Circuit(crate::commands::circuit::CircuitArgs),
    /// What the Step Functions orchestrator did with one message, across executions
    ///
    /// Lists the state machine's newest executions and reads their histories
    /// (GetExecutionHistory): each round's record of the message (redriven, waiting on the
    /// DLQ until its notBefore, isolated, planned, or left on the DLQ; attempt, destination,
    /// DelaySeconds), found by its originalMessageId (the same across redrives and waits) or
    /// the SQS MessageId of any of its copies. Changes nothing. Exit code 3 when there is no
    /// record of it.
    History(crate::commands::history::HistoryArgs),
    /// One table of every protected DLQ
    ///
    /// Per DLQ: depth, in flight, the oldest message's age (CloudWatch
    /// ApproximateAgeOfOldestMessage), the circuit (with CIRCUIT_TABLE or --circuit-table),
    /// the last drain (the re-driver's Received or SuccessfulRedrives metric), its source queues
    /// (ListDeadLetterSourceQueues) and the settings its `redrive:*` tags put in force over the
    /// defaults. Which DLQs: --dlq (repeatable) and --tag, else PROTECT_DLQS and PROTECT_TAG
    /// as in infra/redrive.env. Changes nothing.
    Status(crate::commands::status::StatusArgs),
    /// Group a DLQ or poison queue by cause, with one recommended action per group
    ///
    /// One pass over the queue (held while it runs, released at once) or an export file
    /// (--file): per group its id (the same across builds and deploys), title (the failure's
    /// normalised text), count, first and last failure, source, class and code, attempts (from
    /// x-redrive, never ApproximateReceiveCount), isolation, the top values of each masked part,
    /// and one action from a fixed table. Messages without a recorded cause are grouped by what
    /// they carry (source, body shape, attributes). `triage show GROUP QUEUE` lists a group's
    /// messages. Exit code 3 when the pass did not reach the end of the queue, or `show` found
    /// none of the group. See docs/triage.md.
    Triage(Box<crate::commands::triage::TriageArgs>),
    /// Print a shell completion script on stdout
    ///
    /// bash: `redrive completions bash > ~/.local/share/bash-completion/completions/redrive`;
    /// zsh: `redrive completions zsh > "${fpath[1]}/_redrive"`;
    /// fish: `redrive completions fish > ~/.config/fish/completions/redrive.fish`.
    Completions(crate::commands::generate::CompletionsArgs),
    /// Print the man page (roff) on stdout, or write one page per command with --dir
    ///
    /// `redrive man > ~/.local/share/man/man1/redrive.1`, then `man redrive`; or
    /// `redrive man --dir ~/.local/share/man/man1`, then `man redrive-triage-replay`.
    Man(crate::commands::generate::ManArgs),
}

pub fn parse_queue_url(v: &str) -> Result<QueueUrl, String> {
    QueueUrl::parse(v)
}

/// A queue URL flag whose default is the variable `var`: a bad value names the variable too,
/// since it may have come from there.
pub fn queue_url_from(
    var: &'static str,
) -> impl Fn(&str) -> Result<QueueUrl, String> + Clone + Send + Sync + 'static {
    move |v| QueueUrl::parse(v).map_err(|e| format!("{e} (the flag or {var})"))
}

pub fn parse_rate(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err("must be a number of messages per second >= 0".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use redrive_shared::meta::IsolationReason;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn replay_needs_a_selection_and_ids_exclude_all() {
        let base = [
            "redrive",
            "replay",
            "--from",
            "https://sqs.us-east-1.amazonaws.com/1/p",
            "--to",
            "https://sqs.us-east-1.amazonaws.com/1/s",
        ];
        let err = Cli::try_parse_from(base).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let mut both = base.to_vec();
        both.extend(["--all", "--id", "x"]);
        let err = Cli::try_parse_from(both).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let mut ids = base.to_vec();
        ids.extend(["--id", "a", "b", "--id", "c", "--reason", "max-attempts"]);
        let Command::Replay(r) = Cli::try_parse_from(ids).unwrap().command else {
            panic!("not replay")
        };
        assert_eq!(r.selection.id, ["a", "b", "c"]);
        assert_eq!(r.selection.filters.reason, [IsolationReason::MaxAttempts]);
    }

    #[test]
    fn the_stack_is_global_and_stands_in_for_the_queue_flags() {
        for args in [
            &["redrive", "--stack", "orders", "stats"][..],
            &["redrive", "stats", "--stack", "orders"],
            &["redrive", "--stack", "orders", "circuit", "status"],
            &["redrive", "--stack", "orders", "replay", "--all"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.stack.as_deref(), Some("orders"), "{args:?}");
        }
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["redrive", "stats", "--queue", "not a queue"][..],
            &["redrive", "drain", "--rate", "-1"],
            &["redrive", "drain", "--max", "0"],
            &[
                "redrive",
                "discard",
                "--queue",
                "https://sqs.us-east-1.amazonaws.com/1/p",
                "--all",
                "--reason",
                "bogus",
            ],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }
}
