//! `redrive triage`: a DLQ or poison queue (or an export file) grouped by cause in one pass,
//! each group with a stable id, its facts and one recommended action; `triage show G`: one
//! group's messages. The grouping is the shared crate's (`redrive_shared::triage`); this file
//! reads the messages and prints. docs/triage.md describes the output and the JSON schema.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

mod causes;
mod render;

pub use causes::{CauseLookup, CausesArgs};

use clap::{ArgGroup, Args, Subcommand};
use serde::Serialize;
use serde_json::{Value, json};

use redrive_console::Depth;
use redrive_engine::ports::Received;
use redrive_shared::archive::parse_jsonl;
use redrive_shared::meta::ATTRIBUTE_NAME;
use redrive_shared::triage::grouper::belongs;
use redrive_shared::triage::{
    Facts, GroupId, Grouper, GroupingConfig, Observation, RecordedCause, Rules, normalise,
};

use super::inspect::{facts, warn_if_receives_count};
use super::queues::QueueRef;
use super::scan::{Reach, Scanner, Status, Stop};
use super::triage_act::{
    self, BookArgs, GroupArgs, GroupDiscardArgs, GroupReplayArgs, HoldArgs, NoteArgs,
};
use super::view::MessageView;
use super::{CliError, Ctx, Outcome, now_ms};
use causes::{Batcher, Origins};
use render::{HtmlPage, print_group, print_groups};

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

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The group id, as `redrive triage` printed it (g<version>-<hex>, or r-<rule name>).
    #[arg(value_name = "GROUP", value_parser = GroupId::parse)]
    pub group: GroupId,
    #[command(flatten)]
    pub pass: PassArgs,
    /// Sample messages shown.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// Also show each sample's body, cut to --body-chars characters.
    #[arg(long)]
    pub bodies: bool,
    /// Characters of a body shown with --bodies.
    #[arg(long, value_name = "N", default_value_t = 200, requires = "bodies")]
    pub body_chars: usize,
}

/// Where the messages come from and how they are grouped.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["queue", "file"])))]
pub struct PassArgs {
    /// The DLQ or poison queue: name, ARN or URL.
    #[arg(value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub queue: Option<QueueRef>,
    /// An export file (JSON Lines, as `redrive export --to FILE` writes) instead of a queue.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Messages grouped at most; a deeper queue is grouped as a sample, and the output says so.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=110_000))]
    pub max: u32,
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

/// How much of the input one pass grouped.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Coverage {
    /// Distinct messages grouped.
    pub grouped: usize,
    /// Messages on the queue when the pass began (visible, in flight and delayed), or lines of
    /// the file.
    pub about: u64,
    /// `complete`, `sample` (--max reached), `incomplete` or `failed`.
    pub status: &'static str,
    /// Messages received more than once in the pass (counted once).
    pub repeats: usize,
    /// Visible on the queue when the pass ended: not reached (`null` for a file or unknown).
    pub not_reached: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// With `--causes-table`: messages whose cause was looked up in the consumer's records
    /// (their stamp carried none), and of those, found with a record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<RecordCoverage>,
    /// The queue's visible and in-flight messages when the pass began (none for a file).
    #[serde(skip)]
    pub depth: Option<Depth>,
}

/// Messages whose cause triage looked up in the consumer's records, and found.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordCoverage {
    pub looked_up: usize,
    pub found: usize,
}

/// One message read by a pass, with what triage needs of it.
pub struct Read {
    message: Received,
    /// The cause the consumer recorded outside the message (`--causes-table`), when its stamp
    /// carries none.
    cause: Option<RecordedCause>,
}

impl Read {
    /// What the message carries, read by `grouper`, completed by its recorded cause.
    fn facts(&self, grouper: &Grouper) -> Facts {
        let mut facts = grouper.facts(&self.observation());
        causes::complete(&mut facts, self.cause.as_ref());
        facts
    }

    fn observation(&self) -> Observation<'_> {
        let m = &self.message;
        Observation {
            message_id: &m.message_id,
            body: &m.body,
            attributes: &m.attributes,
            sent_timestamp_ms: m.sent_timestamp_ms,
            dead_letter_source_arn: m.dead_letter_source_arn.as_deref(),
        }
    }
}

pub async fn run(ctx: &Ctx, args: TriageArgs) -> Result<Outcome, CliError> {
    match args.command {
        Some(TriageCommand::Show(show)) => run_show(ctx, show).await,
        Some(TriageCommand::Ack(a)) => triage_act::ack(ctx, a).await,
        Some(TriageCommand::Hold(a)) => triage_act::hold(ctx, a).await,
        Some(TriageCommand::Release(a)) => triage_act::release(ctx, a).await,
        Some(TriageCommand::Note(a)) => triage_act::note(ctx, a).await,
        Some(TriageCommand::History(a)) => triage_act::history(ctx, a).await,
        Some(TriageCommand::Replay(a)) => triage_act::replay_group(ctx, a).await,
        Some(TriageCommand::Discard(a)) => triage_act::discard_group(ctx, a).await,
        None => {
            let html = args
                .html
                .map(|path| HtmlPage::open(path, &args.html_theme))
                .transpose()?;
            run_groups(ctx, args.pass, html).await
        }
    }
}

fn config(args: &PassArgs) -> Result<GroupingConfig, CliError> {
    let rules = match &args.rules {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::Config(format!(
                    "cannot read the rules file {}: {e}",
                    path.display()
                ))
            })?;
            Rules::parse(&text).map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?
        }
        None => Rules::default(),
    };
    Ok(GroupingConfig {
        version: normalise::CURRENT,
        rules,
        key_attributes: args.by_attribute.clone(),
        max_attempts: args.max_attempts,
        fallback_source: args.source.clone(),
    })
}

/// One pass over the input: every message read is handed to `each` (with its recorded cause,
/// with `--causes-table`); the queue's messages are held while the pass runs and released when
/// it ends.
async fn pass(
    ctx: &Ctx,
    args: &PassArgs,
    mut each: impl FnMut(&Read) -> bool,
) -> Result<(String, Coverage), CliError> {
    let mut batcher = Batcher::new(CauseLookup::new(ctx, &args.causes));
    let (mut grouped, mut repeats) = (0, 0);
    let mut hand_on = |reads: Vec<Read>, grouped: &mut usize, repeats: &mut usize| {
        for read in &reads {
            if each(read) {
                *grouped += 1;
            } else {
                *repeats += 1;
            }
        }
    };
    if let Some(path) = &args.file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Config(format!("cannot read {}: {e}", path.display())))?;
        let lines =
            parse_jsonl(&text).map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?;
        let about = lines.len() as u64;
        for line in lines.into_iter().take(args.max as usize) {
            let message = Received {
                message_id: line.message_id,
                receipt_handle: String::new(),
                body: line.body,
                attributes: line.attributes,
                group_id: line.system.message_group_id.clone(),
                receive_count: 0,
                sent_timestamp_ms: line.system.sent_timestamp_ms(),
                trace_header: None,
                dead_letter_source_arn: None,
            };
            let ready = batcher.push(message).await?;
            hand_on(ready, &mut grouped, &mut repeats);
        }
        let ready = batcher.flush().await?;
        hand_on(ready, &mut grouped, &mut repeats);
        let status = if grouped + repeats < about as usize {
            "sample"
        } else {
            "complete"
        };
        let coverage = Coverage {
            grouped,
            about,
            status,
            repeats,
            not_reached: None,
            note: None,
            records: records(&batcher),
            depth: None,
        };
        return Ok((path.display().to_string(), coverage));
    }
    let Some(queue_ref) = &args.queue else {
        return Err(CliError::Config("name a queue or pass --file".into()));
    };
    let target = ctx.resolve(queue_ref).await?;
    let queue = ctx.queue();
    let url = target.as_str();
    let before = facts(&queue, url).await?;
    warn_if_receives_count(&before, target.name());
    let mut scan = Scanner::new(&queue, url);
    let max = args.max as usize;
    let walked: Result<(), CliError> = async {
        loop {
            // Messages waiting for their cause lookup count against --max already.
            let taken = grouped + batcher.pending();
            if taken >= max {
                let ready = batcher.flush().await?;
                hand_on(ready, &mut grouped, &mut repeats);
                if grouped >= max {
                    break;
                }
                continue;
            }
            let batch = scan
                .next((max - taken).min(10))
                .await
                .map_err(CliError::Aws)?;
            if batch.is_empty() {
                break;
            }
            for message in batch {
                let ready = batcher.push(message).await?;
                hand_on(ready, &mut grouped, &mut repeats);
            }
        }
        let ready = batcher.flush().await?;
        hand_on(ready, &mut grouped, &mut repeats);
        Ok(())
    }
    .await;
    let stop = if grouped >= max {
        Stop::Limit
    } else {
        Stop::Exhausted
    };
    let scanned = match &walked {
        Err(CliError::Aws(e)) => Err(e.clone()),
        _ => Ok(()),
    };
    let reach: Reach = scan.reach(stop, grouped + repeats, &scanned).await;
    scan.release().await;
    walked?;
    let status = match reach.status {
        Status::Complete => "complete",
        Status::Limit => "sample",
        Status::Incomplete => "incomplete",
        Status::Failed => "failed",
    };
    let coverage = Coverage {
        grouped,
        about: before.visible + before.in_flight + before.delayed,
        status,
        repeats,
        not_reached: reach.not_reached,
        note: reach.shortfall(),
        records: records(&batcher),
        depth: Some(Depth {
            visible: before.visible,
            in_flight: before.in_flight,
        }),
    };
    Ok((url.to_string(), coverage))
}

fn records(batcher: &Batcher) -> Option<RecordCoverage> {
    batcher
        .counts()
        .map(|(looked_up, found)| RecordCoverage { looked_up, found })
}

async fn run_groups(
    ctx: &Ctx,
    args: PassArgs,
    html: Option<HtmlPage>,
) -> Result<Outcome, CliError> {
    let mut grouper = Grouper::new(config(&args)?);
    let mut origins = Origins::default();
    let mut oldest_sent: Option<i64> = None;
    let passed = pass(ctx, &args, |r| {
        if let Some(sent) = r.message.sent_timestamp_ms {
            oldest_sent = Some(oldest_sent.map_or(sent, |o| o.min(sent)));
        }
        let facts = r.facts(&grouper);
        let origin = facts.cause.as_ref().map(|c| c.origin);
        match grouper.add_facts(&r.observation(), facts) {
            Some(id) => {
                origins.add(&id, origin);
                true
            }
            None => false,
        }
    })
    .await;
    let (input, coverage) = match passed {
        Ok(passed) => passed,
        Err(e) => {
            // No page rather than an empty one.
            if let Some(page) = html {
                page.discard();
            }
            return Err(e);
        }
    };
    let rules = grouper.config().rules.len();
    let groups = grouper.finish();
    // With a table, the pass is recorded in the queue's book (states, plans, alerts).
    let book = match (&args.book.table, &args.file) {
        (Some(_), None) => Some(
            triage_act::record_pass(
                ctx,
                &args.book,
                &input,
                &groups,
                coverage.status == "complete",
            )
            .await?,
        ),
        _ => None,
    };
    if let Some(page) = html {
        // The age of the oldest message read means the queue's only when a queue was read.
        let oldest = oldest_sent.filter(|_| args.file.is_none());
        // With a table, each group's state as the book now has it.
        let states: HashMap<String, String> = book
            .as_ref()
            .and_then(|b| b["states"].as_object())
            .map(|m| {
                m.iter()
                    .map(|(g, s)| (g.clone(), s.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        page.write(&input, &coverage, &groups, oldest, &states)?;
    }
    if ctx.json {
        super::output::print_json(&json!({
            "input": input,
            "normaliserVersion": normalise::CURRENT.number(),
            "rules": rules,
            "maxAttempts": args.max_attempts,
            "coverage": coverage,
            "groups": origins.annotate(&groups),
            "book": book,
        }));
    } else {
        print_groups(&ctx.style, &input, &coverage, &groups, &origins);
        if let Some(book) = &book {
            let states = book["states"].as_object().map(|m| {
                m.iter()
                    .map(|(g, s)| format!("{g} {}", s.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            println!("book: {}", states.unwrap_or_default());
        }
    }
    Ok(outcome(&coverage))
}

fn outcome(coverage: &Coverage) -> Outcome {
    match coverage.status {
        "complete" | "sample" => Outcome::Done,
        _ => Outcome::Incomplete,
    }
}

/// A sample of `triage show`: the message as `peek` shows it, and its `x-redrive` as written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Sample {
    #[serde(flatten)]
    view: MessageView,
    x_redrive: Option<Value>,
}

async fn run_show(ctx: &Ctx, args: ShowArgs) -> Result<Outcome, CliError> {
    let cfg = config(&args.pass)?;
    let mut members = Grouper::new(config(&args.pass)?);
    let mut origins = Origins::default();
    let mut samples = Vec::new();
    let now = now_ms();
    let body_chars = args.bodies.then_some(args.body_chars);
    let want = args.samples as usize;
    let mut seen = HashSet::new();
    let (input, coverage) = pass(ctx, &args.pass, |r| {
        if !seen.insert(r.message.message_id.clone()) {
            return false;
        }
        let m = r.observation();
        let facts = r.facts(&members);
        if belongs(&args.group, &m, &facts, &cfg) {
            let origin = facts.cause.as_ref().map(|c| c.origin);
            if let Some(id) = members.add_facts(&m, facts) {
                origins.add(&id, origin);
            }
            if samples.len() < want {
                let x_redrive = r.message.attributes.get(ATTRIBUTE_NAME).and_then(|a| {
                    let text = a.as_str()?;
                    Some(serde_json::from_str(text).unwrap_or(Value::String(text.to_string())))
                });
                samples.push(Sample {
                    view: MessageView::new(&r.message, now, body_chars),
                    x_redrive,
                });
            }
        }
        true
    })
    .await?;
    let groups = members.finish();
    let found = groups.iter().map(|g| g.count).sum::<usize>();
    if ctx.json {
        super::output::print_json(&json!({
            "input": input,
            "group": args.group.to_string(),
            "found": found,
            "coverage": coverage,
            "groups": origins.annotate(&groups),
            "samples": samples,
        }));
    } else {
        let s = &ctx.style;
        println!(
            "{}: {found} message(s) of {} among {} grouped ({})",
            s.bold(&input),
            s.bold(&args.group.to_string()),
            coverage.grouped,
            coverage.status
        );
        for g in &groups {
            if g.id != args.group.to_string() {
                println!(
                    "{}",
                    s.dim(&format!("{} is now {} in this build", args.group, g.id))
                );
            }
            print_group(s, 0, g, origins.of(&g.id));
        }
        for (i, sample) in samples.iter().enumerate() {
            print!("{}", sample.view.render(i + 1, s));
            if let Some(x) = &sample.x_redrive {
                println!("   {}{x}", s.dim(&format!("{:<11}", "x-redrive")));
            }
        }
    }
    if found == 0 {
        return Ok(Outcome::Incomplete);
    }
    Ok(outcome(&coverage))
}
