//! The arguments of triage's group actions and the thresholds of their confirmation.

use std::collections::HashSet;
use std::time::Duration;

use clap::Args;

use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::triage::GroupId;

use crate::context::{CliError, Ctx};
use crate::queues::{QueueRef, parse_queue};
use crate::stack::{Stack, output};

/// Above this many messages an action needs `--yes` (or a typed yes at a terminal); above
/// `TYPED_ABOVE`, `--confirm GROUP` (or the group id typed).
pub use redrive_engine::triage_act::{CONFIRM_ABOVE, TYPED_ABOVE};

/// Where triage's book lives and who acts.
#[derive(Debug, Clone, Args)]
pub struct BookArgs {
    /// The DynamoDB table of triage's book (group states, holds, notes, audit, plans); the
    /// deployed stack's circuit table serves. A `triage` pass with a table records what it saw.
    #[arg(long = "table", value_name = "TABLE", env = "TRIAGE_TABLE")]
    pub table: Option<String>,
    /// An SNS topic for triage's alerts: a new group, a regression, a failed canary (one
    /// message per transition, never one per message).
    #[arg(
        long = "alert-topic",
        value_name = "ARN",
        env = "TRIAGE_ALERT_TOPIC_ARN"
    )]
    pub alert_topic: Option<String>,
    /// Who acts, for the audit (default: REDRIVE_OPERATOR, else the login name).
    #[arg(long = "operator", value_name = "NAME", env = "REDRIVE_OPERATOR")]
    pub operator: Option<String>,
}

impl BookArgs {
    pub fn store(&self, ctx: &Ctx) -> Result<DynamoDbTriageStore, CliError> {
        match self.table.as_deref().filter(|t| !t.is_empty()) {
            Some(table) => Ok(DynamoDbTriageStore::new(&ctx.sdk, table)),
            None => Err(CliError::Config(
                "triage's book needs a table: pass --table TABLE or set TRIAGE_TABLE".into(),
            )),
        }
    }

    /// `--stack`: the book's table (the stack's circuit table, which `needed` commands must
    /// have) and the alerts topic, where no flag names them.
    pub fn fill_from_stack(
        &mut self,
        stack: &Stack,
        given: &HashSet<String>,
        needed: bool,
    ) -> Result<(), CliError> {
        if !given.contains("table") {
            self.table = if needed {
                Some(stack.need(output::CIRCUIT_TABLE, "--table")?.to_string())
            } else {
                stack.get(output::CIRCUIT_TABLE).map(str::to_string)
            };
        }
        if !given.contains("alert_topic")
            && let Some(topic) = stack.get(output::ALERTS_TOPIC)
        {
            self.alert_topic = Some(topic.to_string());
        }
        Ok(())
    }

    pub(super) fn who(&self) -> String {
        self.operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// A group on a queue.
#[derive(Debug, Args)]
pub struct GroupArgs {
    /// The group id, as `redrive triage` printed it.
    #[arg(value_name = "GROUP", value_parser = GroupId::parse)]
    pub group: GroupId,
    /// The DLQ or poison queue: name, ARN or URL.
    #[arg(value_name = "QUEUE", value_parser = parse_queue)]
    pub queue: QueueRef,
    #[command(flatten)]
    pub book: BookArgs,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    /// The hold ends at this time (RFC 3339, e.g. 2026-12-01T09:00:00Z).
    #[arg(long, value_name = "TIME", conflicts_with = "for_")]
    pub until: Option<String>,
    /// The hold ends after this long (30m, 4h, 2d).
    #[arg(long = "for", id = "for_", value_name = "DURATION")]
    pub for_: Option<String>,
    /// The hold ends once the re-driver has left this many distinct messages of the group.
    #[arg(long, value_name = "N")]
    pub count: Option<u32>,
}

#[derive(Debug, Args)]
pub struct NoteArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    /// The note.
    #[arg(value_name = "TEXT")]
    pub text: String,
}

/// How much an action may move without asking.
#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// The plan to act on (default: the one the last `redrive triage` pass listed).
    #[arg(long, value_name = "PLAN")]
    pub plan: Option<String>,
    /// Show what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm an action on more than 10 messages.
    #[arg(long)]
    pub yes: bool,
    /// Confirm an action on more than 1,000 messages: the group id, typed.
    #[arg(long, value_name = "GROUP")]
    pub confirm: Option<String>,
}

#[derive(Debug, Args)]
pub struct GroupReplayArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Messages in the first stage (the canary); then 10, 100 and the rest.
    #[arg(long, value_name = "K", default_value_t = redrive_engine::triage_act::DEFAULT_CANARY, value_parser = clap::value_parser!(u64).range(1..=redrive_engine::triage_act::MAX_CANARY))]
    pub canary: u64,
    /// The verdict window after each stage (e.g. 90s, 5m). Default: the source queue's
    /// visibility timeout times its maxReceiveCount (1 without a redrive policy), plus 10 s.
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// The queue to send to (default: the group's source queue).
    #[arg(long, value_name = "QUEUE", value_parser = parse_queue)]
    pub to: Option<QueueRef>,
    /// A poison queue to look in for isolated canaries too.
    #[arg(long, value_name = "QUEUE", value_parser = parse_queue)]
    pub poison: Option<QueueRef>,
    /// Messages sent per second at most.
    #[arg(long, value_name = "N", default_value_t = redrive_engine::triage_act::DEFAULT_RATE, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: u64,
    /// FIFO: replay even where a message group holds messages of other causes before this
    /// group's (they would then be processed after them, out of their order).
    #[arg(long)]
    pub allow_interleaved: bool,
}

#[derive(Debug, Args)]
pub struct GroupDiscardArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Where each message is archived before its delete: s3://BUCKET/PREFIX (body,
    /// attributes and x-redrive, in the archive format `redrive import` restores).
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub archive: String,
}

/// Parses `90s`, `30m`, `4h`, `2d` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, CliError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        CliError::Config(format!(
            "{text:?} is not a duration (e.g. 90s, 30m, 4h, 2d)"
        ))
    })?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(CliError::Config(format!(
                "{text:?} is not a duration: the unit must be s, m, h or d"
            )));
        }
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_and_name_what_was_wrong() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        let e = parse_duration("5w").unwrap_err().to_string();
        assert!(e.contains("s, m, h or d"), "{e}");
        let e = parse_duration("soon").unwrap_err().to_string();
        assert!(e.contains("not a duration"), "{e}");
    }
}
