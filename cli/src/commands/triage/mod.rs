//! `redrive triage`: a DLQ or poison queue (or an export file) grouped by cause in one pass,
//! each group with a stable id, its facts and one recommended action; `triage show G`: one
//! group's messages. The grouping is the shared crate's (`redrive_shared::triage`); this file
//! reads the messages and prints. docs/triage.md describes the output and the JSON schema.

use std::collections::HashMap;

pub mod act;
mod args;
mod causes;
mod index;
mod render;
mod show;
pub mod walk;

pub use args::{PassArgs, TriageArgs, TriageCommand};
pub use causes::{CauseLookup, CausesArgs};
pub use show::ShowArgs;

use serde::Serialize;
use serde_json::json;

use redrive_console::Depth;
use redrive_engine::ports::Received;
use redrive_shared::triage::{
    Facts, Grouper, GroupingConfig, Observation, RecordedCause, Rules, normalise,
};

use crate::context::{CliError, Ctx, Outcome};
use crate::inspect::{facts, warn_if_receives_count};
use crate::scan::Status;
use causes::{Batcher, Origins};
use render::{HtmlPage, print_groups};

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
        Some(TriageCommand::Show(show)) => show::run(ctx, show).await,
        Some(TriageCommand::Ack(a)) => act::ack(ctx, a).await,
        Some(TriageCommand::Hold(a)) => act::hold(ctx, a).await,
        Some(TriageCommand::Release(a)) => act::release(ctx, a).await,
        Some(TriageCommand::Note(a)) => act::note(ctx, a).await,
        Some(TriageCommand::History(a)) => act::history(ctx, a).await,
        Some(TriageCommand::Replay(a)) => act::replay_group(ctx, a).await,
        Some(TriageCommand::Discard(a)) => act::discard_group(ctx, a).await,
        None if args.index => index::run(ctx, &args.pass, args.resolved).await,
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
    if let Some(from) = &args.file {
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
        let lines = crate::jsonl::read(ctx, from, "nothing was grouped").await?;
        let about = lines.len() as u64;
        for crate::jsonl::Line { message: line, .. } in lines.into_iter().take(args.max as usize) {
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
        return Ok((from.clone(), coverage));
    }
    let Some(queue_ref) = &args.queue else {
        return Err(CliError::Config("name a queue or pass --file".into()));
    };
    let target = ctx.resolve(queue_ref).await?;
    let queue = ctx.queue();
    let url = target.as_str();
    let before = facts(&queue, url).await?;
    warn_if_receives_count(&before, target.name());
    let (walked, result) = walk::walk(
        &queue,
        url,
        args.max as usize,
        args.concurrency,
        &mut batcher,
        each,
    )
    .await;
    result?;
    let walk::Walk {
        grouped,
        repeats,
        reach,
        ..
    } = walked;
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
            act::record_pass(
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
        crate::output::print_json(&json!({
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
            // Each group's state, and its trend against the pass before.
            let states = book["states"].as_object().map(|m| {
                m.iter()
                    .map(|(g, s)| {
                        let trend = book["trends"][g].as_str().unwrap_or("");
                        format!("{g} {} ({trend})", s.as_str().unwrap_or(""))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            println!("book: {}", states.unwrap_or_default());
            if let Some(gone) = book["gone"].as_array().filter(|g| !g.is_empty()) {
                let ids: Vec<&str> = gone.iter().filter_map(serde_json::Value::as_str).collect();
                println!("gone since the last pass (resolved): {}", ids.join(", "));
            }
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
