//! Command-line arguments of `redrive` (clap derive).

use clap::{ArgGroup, Args, Parser, Subcommand};
use redrive_shared::config::QueueUrl;
use redrive_shared::meta::IsolationReason;

pub const AFTER_HELP: &str = "\
Configuration:
  AWS region, credentials and profile come from the standard chain (AWS_REGION, AWS_PROFILE,
  ~/.aws/config, ...); AWS_ENDPOINT_URL points every call at an emulator. `drain` reads the
  re-driver Lambda's variables (DLQ_URL, SOURCE_QUEUE_URL, POISON_QUEUE_URL,
  MAX_REDRIVE_ATTEMPTS, BACKOFF_*, GUARD_ALARM_NAMES, METRIC_NAMESPACE, ...); its flags win.
  NO_COLOR turns colour off (CLICOLOR_FORCE turns it on when stdout is not a terminal);
  RUST_LOG=info shows the engine's JSON log lines on stderr.

Exit codes:
  0  done
  1  an AWS call failed; the command did not complete (nothing is lost: a message is deleted
     only after its copy was acknowledged, and held messages reappear after their timeout)
  2  usage or configuration error, or `discard` without --yes; nothing was changed
  3  incomplete: some messages failed, were refused or not found, a guard alarm or the
     adaptive circuit (CIRCUIT_TABLE) kept the circuit open, a `drain --canary` bounced, or `replay`/`discard` did not reach the end of the queue (the report says
     how many were not reached; --max reached is not an error)

Workflow: stats -> peek -> fix the cause -> replay in batches (--max) -> stats -> discard.";

/// Operate a redrive dead-letter queue by hand: inspect, drain, replay, discard.
#[derive(Debug, Parser)]
#[command(name = "redrive", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Print one JSON document on stdout instead of text (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// AWS region (default: the standard chain, e.g. AWS_REGION).
    #[arg(long, global = true, value_name = "REGION")]
    pub region: Option<String>,
    /// Named profile from the shared AWS config files (default: AWS_PROFILE or `default`).
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
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
    Stats(StatsArgs),
    /// Show messages without consuming them
    ///
    /// Id, originalMessageId, attempt, reason, lastError, age, size and attributes of each
    /// message; the body only with --body. The messages are visible again as soon as the
    /// command ends.
    Peek(PeekArgs),
    /// Drain the DLQ once, as the re-driver Lambda does
    ///
    /// The same engine as the Lambda: DLQ -> source queue with backoff, poison pills -> poison
    /// queue, a message deleted from the DLQ only after its copy was acknowledged, metrics
    /// published, guard alarms honoured. Configured from the Lambda's variables; flags win.
    Drain(DrainArgs),
    /// Send parked messages back to the source queue after a fix
    ///
    /// Each copy keeps its body, attributes and originalMessageId (the consumer's idempotency
    /// key); x-redrive gets attempt 0 and no lastError, isolatedAt or reason (the copy is no
    /// longer parked). A message is deleted from the poison queue only after its copy was
    /// acknowledged. A message parked without room for x-redrive (10 attributes, or too large
    /// for the destination) is refused unless --allow-unstamped. Exit code 3 when anything
    /// was not replayed or the walk did not reach the end of the queue.
    #[command(group(ArgGroup::new("select").required(true).args(["id", "all"])))]
    Replay(ReplayArgs),
    /// Delete messages that cannot be recovered (needs --yes)
    ///
    /// Lists every message it deleted. Without --yes it lists what it would delete, deletes
    /// nothing, and exits with code 2. Exit code 3 when anything was not deleted or the walk
    /// did not reach the end of the queue.
    #[command(group(ArgGroup::new("select").required(true).args(["id", "all"])))]
    Discard(DiscardArgs),
    // --- export / import
    /// Write messages to a JSON Lines file or to S3, optionally deleting them
    ///
    /// One line per message in the archive format (body, every attribute with its type,
    /// system attributes, x-redrive). Without --delete the queue is left as it was (the
    /// messages are visible again when the command ends); with --delete a message is deleted
    /// only after its line was written and fsync'd, or its S3 object acknowledged with a
    /// SHA-256 checksum. Takes the filters of peek, replay and discard.
    Export(super::export::ExportArgs),
    /// Send the messages of an export or archive to a queue
    ///
    /// The whole input is read and validated first: a file with a bad line sends nothing, and
    /// the error names the line and what was wrong. Bodies, attributes and x-redrive are sent
    /// as archived (originalMessageId kept, so the consumer's idempotency key is the same
    /// however often the file is imported); a message without x-redrive gets one keyed on
    /// its archived MessageId. FIFO destinations keep the group id and get a deduplication id
    /// derived from the archived MessageId.
    Import(super::import::ImportArgs),
    // --- adaptive circuit
    /// Show or override the adaptive circuit of a DLQ
    ///
    /// status: the state (closed, open, half-open), the operator's override, the next run's
    /// plan, the bounce-back counts over the window and the last transitions. open: hold it
    /// open (nothing is redriven). close: force it closed (drain whatever the measurements
    /// say). auto: hand it back to the measurements. Needs CIRCUIT_TABLE or --circuit-table.
    Circuit(super::circuit::CircuitArgs),
    // --- Step Functions history
    /// What the Step Functions orchestrator did with one message, across executions
    ///
    /// Lists the state machine's newest executions and reads their histories
    /// (GetExecutionHistory): each decision (attempt, backoff held on the DLQ and as
    /// DelaySeconds, destination, reason), hold and outcome recorded about the message, found
    /// by its originalMessageId (the same across redrives) or an SQS MessageId. Changes
    /// nothing. Exit code 3 when there is no record of it.
    History(super::history::HistoryArgs),
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Queue URL (DLQ, poison or source queue).
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub queue: QueueUrl,
    /// Messages sampled for the histograms (received and released at once); 0 skips the sample.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub sample: u32,
}

#[derive(Debug, Args)]
pub struct PeekArgs {
    /// Queue URL.
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub queue: QueueUrl,
    /// How many messages to show.
    #[arg(short = 'n', long = "max", value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max: u32,
    /// Also show each body, truncated to --body-chars characters.
    #[arg(long)]
    pub body: bool,
    /// Characters of a body shown with --body.
    #[arg(long, value_name = "N", default_value_t = 200, requires = "body")]
    pub body_chars: usize,
    // --- filters: the messages shown are those selected.
    #[command(flatten)]
    pub filters: super::filter::FilterArgs,
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Messages to take from the DLQ at most (default MAX_MESSAGES_PER_INVOCATION, else 100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// Messages per second at most (default MAX_MESSAGES_PER_SECOND; 0 = no cap).
    #[arg(long, value_name = "R", value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Receive and plan only: nothing is sent or deleted, the messages are released at once.
    #[arg(long)]
    pub dry_run: bool,
    /// DLQ to drain (overrides DLQ_URL).
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub dlq: Option<QueueUrl>,
    /// Where redriven messages go (overrides SOURCE_QUEUE_URL).
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub source: Option<QueueUrl>,
    /// Where poison pills go (overrides POISON_QUEUE_URL).
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub poison: Option<QueueUrl>,
    // --- adaptive circuit
    /// Replay N messages first, wait for the verdict (do their copies come back to the DLQ
    /// within the window?), and drain the rest only if they do not; exit code 3 if they do.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub canary: Option<u32>,
    /// How long the canary's copies have to come back (default CIRCUIT_WINDOW_SECONDS, 900).
    #[arg(long, value_name = "SECONDS", requires = "canary", value_parser = clap::value_parser!(u64).range(1..))]
    pub canary_window: Option<u64>,
}

/// Which messages `replay` and `discard` act on.
#[derive(Debug, Args)]
pub struct Selection {
    /// A message to act on, by MessageId or originalMessageId (repeatable).
    #[arg(long, value_name = "ID", num_args = 1.., action = clap::ArgAction::Append)]
    pub id: Vec<String>,
    /// Every message (narrowed by the filters, bounded by --max).
    #[arg(long)]
    pub all: bool,
    // --- filters: shared with peek, export and import.
    #[command(flatten)]
    pub filters: super::filter::FilterArgs,
    /// Act on this many messages at most: replay in batches, check, go on.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The poison queue to take messages from.
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub from: QueueUrl,
    /// The queue to send them to (normally the source queue).
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub to: QueueUrl,
    #[command(flatten)]
    pub selection: Selection,
    /// Show what would be replayed; send and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also replay messages with no room for x-redrive, as received. The consumer then keys
    /// each copy on its new MessageId: replayed again (or delivered twice), it is processed
    /// again. Without this flag they are left where they are and listed.
    #[arg(long)]
    pub allow_unstamped: bool,
}

#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The queue to delete from.
    #[arg(long, value_name = "URL", value_parser = parse_queue_url)]
    pub queue: QueueUrl,
    #[command(flatten)]
    pub selection: Selection,
    /// Really delete. Without it, `discard` lists what it would delete and exits with code 2.
    #[arg(long)]
    pub yes: bool,
}

pub fn parse_queue_url(v: &str) -> Result<QueueUrl, String> {
    QueueUrl::parse(v)
}

fn parse_rate(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err("must be a number of messages per second >= 0".into()),
    }
}

pub fn parse_reason(v: &str) -> Result<IsolationReason, String> {
    IsolationReason::ALL
        .into_iter()
        .find(|r| r.as_str() == v)
        .ok_or_else(|| {
            let names: Vec<&str> = IsolationReason::ALL.iter().map(|r| r.as_str()).collect();
            format!("must be one of {}", names.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
    fn bad_values_are_usage_errors() {
        for args in [
            &["redrive", "stats", "--queue", "not-a-url"][..],
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
