//! The arguments of `redrive triage`: a pass, `show`, and the actions on a group.

use std::collections::HashSet;
use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};

use super::act::{BookArgs, GroupArgs, GroupDiscardArgs, GroupReplayArgs, HoldArgs, NoteArgs};
use super::causes::CausesArgs;
use super::show::ShowArgs;
use crate::context::CliError;
use crate::queues::QueueRef;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TriageArgs {
    #[command(subcommand)]
    pub command: Option<TriageCommand>,
    #[command(flatten)]
    pub pass: PassArgs,
    /// Also write the groups as a standalone HTML page (no script, nothing fetched: for an
    /// incident ticket or a post-mortem), rendered as the dashboard's triage widget renders them.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The page's theme.
    #[arg(long, value_name = "THEME", default_value = "light", value_parser = ["light", "dark"], requires = "html")]
    pub html_theme: String,
    /// Print the groups the queue's triage book holds, as the last pass recorded them (the
    /// archiver's hourly sweep keeps it: the live index), with one GetItem: no message is
    /// received. Needs the book's table (--table, TRIAGE_TABLE or --stack).
    #[arg(long, conflicts_with_all = ["html", "file"])]
    pub index: bool,
    /// With --index: the resolved groups too.
    #[arg(long, requires = "index")]
    pub resolved: bool,
}

impl TriageArgs {
    /// `--stack`: the book's table and alerts topic, and the consumer's table of causes, where
    /// no flag names them. An action on a group needs the book; a pass records in it when the
    /// stack has one.
    pub fn apply_stack(
        &mut self,
        stack: &crate::stack::Stack,
        given: &HashSet<String>,
    ) -> Result<(), CliError> {
        use crate::stack::output;
        let pass = match &mut self.command {
            None => &mut self.pass,
            Some(TriageCommand::Show(a)) => &mut a.pass,
            Some(TriageCommand::Ack(g) | TriageCommand::Release(g) | TriageCommand::History(g)) => {
                return g.book.fill_from_stack(stack, given, true);
            }
            Some(TriageCommand::Hold(a)) => {
                return a.target.book.fill_from_stack(stack, given, true);
            }
            Some(TriageCommand::Note(a)) => {
                return a.target.book.fill_from_stack(stack, given, true);
            }
            Some(TriageCommand::Replay(a)) => {
                return a.target.book.fill_from_stack(stack, given, true);
            }
            Some(TriageCommand::Discard(a)) => {
                return a.target.book.fill_from_stack(stack, given, true);
            }
        };
        pass.book.fill_from_stack(stack, given, false)?;
        if !given.contains("causes_table")
            && let Some(table) = stack.get(output::IDEMPOTENCY_TABLE)
        {
            pass.causes.causes_table = Some(table.to_string());
        }
        // The deployed consumer keys its records under its function's name.
        if !given.contains("causes_namespace")
            && let Some(name) = stack.get(output::CONSUMER_FUNCTION)
        {
            pass.causes.causes_namespace = Some(name.to_string());
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub enum TriageCommand {
    /// One group's messages: samples with their x-redrive (bodies only with --bodies)
    ///
    /// Reads the queue (or file) once more and lists the messages of the group: an id printed
    /// by an older build (another normaliser version) still finds its messages. Exit code 3
    /// when no message of the group was found.
    Show(ShowArgs),
    /// Acknowledge a group: someone is on it (state acknowledged)
    Ack(GroupArgs),
    /// Hold a group: the re-driver leaves its messages on the DLQ until a time or a count
    ///
    /// "Never replay before the fix", enforced: while the rest of the DLQ drains, the held
    /// group's messages stay where they are, neither redriven nor isolated.
    Hold(HoldArgs),
    /// End a hold now
    Release(GroupArgs),
    /// Add a note to a group
    Note(NoteArgs),
    /// A group's state, hold, replay counts, notes and audit
    History(GroupArgs),
    /// Replay a group's plan canary first: k messages, a verdict window, then 10, 100, the rest
    ///
    /// A canary that comes back to the DLQ (or is isolated on --poison) within the window
    /// stops the replay and marks the group replay-failed (exit code 3). Send, check, then
    /// delete, as everywhere: a replay killed part-way is resumed by running it again.
    Replay(GroupReplayArgs),
    /// Discard a group's plan: each message archived to S3 before its delete
    ///
    /// `redrive import` of the archive prefix restores the group, with its history.
    Discard(GroupDiscardArgs),
}

/// Where the messages come from and how they are grouped.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["queue", "file"])))]
pub struct PassArgs {
    /// The DLQ or poison queue: name, ARN or URL.
    #[arg(value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub queue: Option<QueueRef>,
    /// Messages kept as JSON Lines instead of a queue: an export file (`redrive export --to
    /// FILE`), or s3://BUCKET/PREFIX, every .jsonl object under it in key order (the archiver's
    /// archive of a queue, a `triage discard --archive`, an `export --to s3://`).
    #[arg(long, value_name = "FILE | s3://BUCKET/PREFIX")]
    pub file: Option<String>,
    /// Messages grouped at most; a deeper queue is grouped as a sample, and the output says so.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=110_000))]
    pub max: u32,
    /// Receives in flight at once while the pass walks the queue (and releases of 10 held
    /// messages at once when it ends), 1 to 64: 1 walks one receive after another. The groups
    /// are the same at any value.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::scan::DEFAULT_CONCURRENCY,
        value_parser = parse_concurrency
    )]
    pub concurrency: usize,
    /// An ordered rules file (JSON) that names, merges or splits groups (docs/triage.md).
    #[arg(long, value_name = "PATH")]
    pub rules: Option<PathBuf>,
    /// A message attribute whose value splits the messages without a recorded cause (repeatable).
    #[arg(long = "by-attribute", value_name = "NAME")]
    pub by_attribute: Vec<String>,
    /// The re-driver's attempt limit: below it, a transient failure is retried by the re-driver.
    #[arg(
        long,
        value_name = "N",
        env = "MAX_REDRIVE_ATTEMPTS",
        default_value_t = 5
    )]
    pub max_attempts: u32,
    /// The source queue's name for messages that name none (a poison queue the re-driver fed
    /// from one source queue).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    #[command(flatten)]
    pub book: BookArgs,
    #[command(flatten)]
    pub causes: CausesArgs,
}

/// `--concurrency`: a whole number from 1 to [`crate::scan::MAX_CONCURRENCY`].
fn parse_concurrency(value: &str) -> Result<usize, String> {
    let max = crate::scan::MAX_CONCURRENCY;
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "the receives in flight at once must be a whole number from 1 to {max}, not {value:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_a_whole_number_from_1_to_the_maximum() {
        assert_eq!(parse_concurrency("8"), Ok(8));
        assert_eq!(parse_concurrency("1"), Ok(1));
        assert_eq!(parse_concurrency("64"), Ok(64));
        for wrong in ["0", "65", "-1", "eight", ""] {
            let e = parse_concurrency(wrong).unwrap_err();
            assert!(
                e.contains("from 1 to 64") && e.contains(&format!("{wrong:?}")),
                "{e}"
            );
        }
    }
}
