//! `redrive import`: the messages of an export or an archive, sent to a queue.
//!
//! The whole input is read, parsed and checked against the destination (SQS's limits, the
//! queue's own `MaximumMessageSize`, FIFO ids) before anything is sent: a bad line sends
//! nothing, and the error names the source, the line and what was wrong.
//!
//! Each message is sent with its body and attributes as archived, `x-redrive` included, so its
//! `originalMessageId`, and with it the consumer's idempotency key (`originalMessageId` and a
//! digest of the body), is the same however often the input is imported. A message archived
//! without `x-redrive` gets a fresh one keyed on its archived MessageId (the key its first
//! delivery had), when it has room for it. A message archived with its `AWSTraceHeader`
//! (`system.AWSTraceHeader`) is sent with it, so its processing joins the producer's trace.
//!
//! That key protects only while the consumer remembers it: `IDEMPOTENCY_TTL_SECONDS` after it
//! processed a copy. A line whose chain is older than that TTL is refused (the whole import
//! sends nothing) unless `--allow-past-ttl`: see [`past_ttl`].

use crate::queues::QueueRef;
use clap::Args;
use redrive_shared::archive::ArchivedMessage;
use redrive_shared::attributes::message_size;
use redrive_shared::config::DEFAULT_IDEMPOTENCY_TTL_SECONDS;
use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES};
use redrive_shared::meta::{MetaSource, RedriveMeta};
use redrive_shared::timefmt::{millis_from_rfc3339, rfc3339_from_millis};
use serde_json::{Value, json};

use crate::commands::replay::{copy_entry, fifo_group, line};
use crate::context::{CliError, Ctx, Outcome};
use crate::filter::{FilterArgs, MessageFilter};
use crate::jsonl::{self, Line};
use crate::progress::Progress;
use crate::view::MessageView;
use redrive_engine::engine::Transfer;
use redrive_engine::now_ms;
use redrive_engine::ports::{Queue, Received, SendEntry};

/// `kind` of the FIFO deduplication id of an imported copy: a retried import of the same
/// archived message within SQS's five-minute window is deduplicated by SQS itself.
const DEDUP_KIND: &str = "import";
/// Entries handed to the batch sender at once (it splits them into valid batches).
const CHUNK: usize = 100;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// An export file, or s3://bucket/prefix (every .jsonl object under it, in key order).
    #[arg(long, value_name = "FILE | s3://BUCKET/PREFIX")]
    pub from: String,
    /// The queue to send the messages to: name, ARN or URL.
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub to: QueueRef,
    /// Read, validate and list what would be sent; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long the consumer remembers a message it processed, its IDEMPOTENCY_TTL_SECONDS.
    /// Default: the IDEMPOTENCY_TTL_SECONDS environment variable, else the consumer's own
    /// default (3628800 s, 42 days).
    #[arg(long, value_name = "SECONDS")]
    pub idempotency_ttl_seconds: Option<u64>,
    /// Send lines older than the idempotency TTL too. The consumer has forgotten their keys:
    /// a message it already processed is processed again (its side effect runs twice).
    #[arg(long)]
    pub allow_past_ttl: bool,
    #[command(flatten)]
    pub filters: FilterArgs,
}

/// The variable (the consumer's) that gives `--idempotency-ttl-seconds` its default.
pub const TTL_VARIABLE: &str = "IDEMPOTENCY_TTL_SECONDS";
/// Lines named in the error when more are past the TTL.
const LISTED: usize = 10;

/// One archived message and where it was read.
impl Line {
    fn place(&self) -> String {
        format!("{}: line {}", self.source, self.line)
    }

    /// The message as a received one, for the filters and the listing.
    fn as_received(&self) -> Received {
        let m = &self.message;
        Received {
            message_id: m.message_id.clone(),
            receipt_handle: String::new(),
            body: m.body.clone(),
            attributes: m.attributes.clone(),
            group_id: m.system.message_group_id.clone(),
            receive_count: m
                .system
                .approximate_receive_count
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            sent_timestamp_ms: m.system.sent_timestamp_ms(),
            trace_header: m.system.trace_header(),
            dead_letter_source_arn: None,
        }
    }
}

/// The copy sent for one archived message, and whether it carries an `x-redrive` the consumer
/// can key on.
pub fn import_entry(m: &ArchivedMessage, to_fifo: bool, max_bytes: usize) -> (SendEntry, bool) {
    let (meta, source) = RedriveMeta::read(&m.attributes, &m.message_id);
    let mut attributes = m.attributes.clone();
    let mut keyed = matches!(source, MetaSource::Current);
    if matches!(source, MetaSource::Absent) {
        let mut stamped = attributes.clone();
        RedriveMeta::fresh(&m.message_id).write_into(&mut stamped);
        if stamped.len() <= MAX_ATTRIBUTES && message_size(&m.body, &stamped) <= max_bytes {
            attributes = stamped;
            keyed = true;
        }
    }
    let group = to_fifo.then(|| fifo_group(m.system.message_group_id.as_deref(), &meta));
    // The producer's trace, when the archive kept it (`system.AWSTraceHeader`).
    let trace = m.system.trace_header();
    let entry = copy_entry(&m.message_id, &m.body, attributes, group, DEDUP_KIND, trace);
    (entry, keyed)
}

pub async fn run(ctx: &Ctx, args: ImportArgs) -> Result<Outcome, CliError> {
    // 1. Read and parse everything: a bad line stops here, before the queue is touched.
    let lines = jsonl::read(ctx, &args.from, "nothing was sent").await?;
    let filter = MessageFilter::new(&args.filters, now_ms());
    let selected: Vec<Line> = lines
        .into_iter()
        .filter(|l| filter.matches(&l.as_received()))
        .collect();

    // 2. Refuse what the consumer may have forgotten, then check every copy against the
    //    destination.
    let ttl_seconds = idempotency_ttl_seconds(args.idempotency_ttl_seconds)?;
    let expired = past_ttl(&selected, now_ms(), ttl_seconds);
    if !expired.is_empty() {
        if !args.allow_past_ttl {
            return Err(CliError::Config(past_ttl_error(&expired, ttl_seconds)));
        }
        eprintln!(
            "warning: --allow-past-ttl: {} message(s) older than the idempotency TTL ({ttl_seconds} s) are sent; the consumer processes any it already processed again",
            expired.len()
        );
    }
    let target = ctx.resolve(&args.to).await?;
    let queue = ctx.queue();
    let to = target.as_str();
    let to_fifo = target.is_fifo();
    let max_bytes = queue
        .max_message_size(to)
        .await?
        .unwrap_or(MAX_MESSAGE_BYTES)
        .min(MAX_MESSAGE_BYTES);
    let mut entries = Vec::with_capacity(selected.len());
    let mut unkeyed = Vec::new();
    for (i, l) in selected.iter().enumerate() {
        let (mut entry, keyed) = import_entry(&l.message, to_fifo, max_bytes);
        let outgoing = &entry.message;
        let size = outgoing.size();
        let problem = outgoing
            .validate(to_fifo)
            .err()
            .map(|e| e.to_string())
            .or_else(|| {
                (size > max_bytes).then(|| {
                    format!("message is {size} bytes with its attributes; {to} accepts {max_bytes}")
                })
            });
        if let Some(problem) = problem {
            return Err(CliError::Config(format!(
                "{}: message {} cannot be sent to {}: {problem}; nothing was sent",
                l.place(),
                l.message.message_id,
                target.name()
            )));
        }
        if !keyed {
            unkeyed.push(l.message.message_id.clone());
        }
        entry.id = i.to_string();
        entries.push(entry);
    }

    // 3. Send (or list).
    let now = now_ms();
    let view = |i: usize| MessageView::new(&selected[i].as_received(), now, None);
    let mut sent = Vec::new();
    let mut failed: Vec<(usize, String)> = Vec::new();
    let mut held = Vec::new();
    if !args.dry_run {
        if !unkeyed.is_empty() {
            eprintln!(
                "warning: {} message(s) carry no readable x-redrive and have no room for one; the consumer keys each copy on its new MessageId, so importing them again processes them again: {}",
                unkeyed.len(),
                unkeyed.join(", ")
            );
        }
        let progress = Progress::new(ctx.json, "sent");
        let total = entries.len();
        let transfer = Transfer::new(&queue);
        let mut chunks = entries.into_iter().peekable();
        while chunks.peek().is_some() {
            let chunk: Vec<SendEntry> = chunks.by_ref().take(CHUNK).collect();
            let ids: Vec<String> = chunk.iter().map(|e| e.id.clone()).collect();
            let acks = transfer.send(to, chunk, to_fifo).await;
            for id in ids {
                let i: usize = id.parse().unwrap_or_default();
                if acks.ok.contains(&id) {
                    sent.push(i);
                } else if acks.held.contains(&id) {
                    held.push(i);
                } else {
                    let why = acks.failed.get(&id).cloned().unwrap_or_default();
                    failed.push((i, why));
                }
            }
            progress.show(sent.len(), Some(total), &format!("failed {}", failed.len()));
        }
        progress.finish();
    } else {
        sent = (0..selected.len()).collect();
    }

    if ctx.json {
        let views: Vec<Value> = sent.iter().map(|&i| json!(view(i))).collect();
        let failed_json: Vec<Value> = failed
            .iter()
            .map(|(i, e)| json!({"line": selected[*i].place(), "message": view(*i), "error": e}))
            .collect();
        let held_json: Vec<Value> = held
            .iter()
            .map(|&i| json!({"line": selected[i].place(), "message": view(i)}))
            .collect();
        crate::output::print_json(&json!({
            "from": args.from,
            "to": to,
            "dryRun": args.dry_run,
            (if args.dry_run { "wouldSend" } else { "sent" }): views,
            "unkeyed": unkeyed,
            "failed": failed_json,
            "heldForOrder": held_json,
        }));
    } else {
        let s = &ctx.style;
        let verb = if args.dry_run {
            s.warn("would send")
        } else {
            s.good("sent")
        };
        println!(
            "{verb} {} message(s) from {} to {}",
            sent.len(),
            args.from,
            target.name()
        );
        for &i in &sent {
            println!("  {}", line(&view(i)));
        }
        if !unkeyed.is_empty() {
            println!(
                "{} {} without a readable x-redrive (no room for one): imported again, they are processed again: {}",
                s.warn("note:"),
                unkeyed.len(),
                unkeyed.join(", ")
            );
        }
        if !failed.is_empty() {
            println!("{} {} not sent:", s.bad("failed:"), failed.len());
            for (i, why) in &failed {
                println!(
                    "  {}  {}  {}",
                    selected[*i].place(),
                    line(&view(*i)),
                    s.bad(why)
                );
            }
        }
        if !held.is_empty() {
            println!(
                "{} {} not sent: an earlier message of their group was not sent, and FIFO order is kept:",
                s.bad("held:"),
                held.len()
            );
            for &i in &held {
                println!("  {}  {}", selected[i].place(), line(&view(i)));
            }
        }
    }
    Ok(if failed.is_empty() && held.is_empty() {
        Outcome::Done
    } else {
        Outcome::Incomplete
    })
}

/// `--idempotency-ttl-seconds`, else `IDEMPOTENCY_TTL_SECONDS`, else the consumer's default.
fn idempotency_ttl_seconds(flag: Option<u64>) -> Result<u64, CliError> {
    if let Some(ttl) = flag {
        return Ok(ttl);
    }
    match std::env::var(TTL_VARIABLE) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            CliError::Config(format!(
                "{TTL_VARIABLE}={v:?} must be a whole number of seconds (the consumer's idempotency TTL); nothing was sent"
            ))
        }),
        _ => Ok(DEFAULT_IDEMPOTENCY_TTL_SECONDS),
    }
}

/// A selected line whose chain began longer ago than the consumer's idempotency TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastTtl {
    pub place: String,
    pub message_id: String,
    /// The chain's earliest known time ([`chain_began_ms`]).
    pub began_ms: i64,
    pub age_seconds: u64,
}

/// The earliest time the archive knows of a message's chain: its `SentTimestamp` or its
/// `x-redrive` `firstRedrivenAt`, whichever is earlier (a redriven copy's `SentTimestamp` is
/// its own send). The consumer cannot have processed any copy of the chain before it, so its
/// record of the key (kept `IDEMPOTENCY_TTL_SECONDS` from the processing) outlives this time by
/// the TTL at least. `None`: neither is known (the line is not refused).
pub fn chain_began_ms(m: &ArchivedMessage) -> Option<i64> {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    let first_redriven = meta
        .first_redriven_at
        .as_deref()
        .and_then(millis_from_rfc3339);
    [m.system.sent_timestamp_ms(), first_redriven]
        .into_iter()
        .flatten()
        .min()
}

/// The lines whose chain began more than `ttl_seconds` before `now_ms`: the consumer may have
/// forgotten their keys, so importing them can run their side effects again.
fn past_ttl(lines: &[Line], now_ms: i64, ttl_seconds: u64) -> Vec<PastTtl> {
    let ttl_ms = i64::try_from(ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    lines
        .iter()
        .filter_map(|l| {
            let began_ms = chain_began_ms(&l.message)?;
            let age_ms = now_ms.saturating_sub(began_ms);
            (age_ms > ttl_ms).then(|| PastTtl {
                place: l.place(),
                message_id: l.message.message_id.clone(),
                began_ms,
                age_seconds: u64::try_from(age_ms / 1000).unwrap_or(0),
            })
        })
        .collect()
}

fn days(seconds: u64) -> String {
    format!("{:.1} days", seconds as f64 / 86_400.0)
}

/// Which lines, how old, the TTL, and how to go on.
fn past_ttl_error(expired: &[PastTtl], ttl_seconds: u64) -> String {
    let mut text = format!(
        "{} message(s) are older than the consumer's idempotency TTL of {ttl_seconds} s ({}): it forgets a key that long after processing it, so importing them may run their side effects again; nothing was sent",
        expired.len(),
        days(ttl_seconds)
    );
    for e in expired.iter().take(LISTED) {
        text.push_str(&format!(
            "\n  {}: message {} is {} s old ({}; its chain began {})",
            e.place,
            e.message_id,
            e.age_seconds,
            days(e.age_seconds),
            rfc3339_from_millis(e.began_ms)
        ));
    }
    if expired.len() > LISTED {
        text.push_str(&format!("\n  ... and {} more", expired.len() - LISTED));
    }
    text.push_str(&format!(
        "\nLeave them out with the filters (e.g. --newer-than), set --idempotency-ttl-seconds (or {TTL_VARIABLE}) if the consumer's TTL is longer, or pass --allow-past-ttl to send them anyway."
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_shared::archive::SystemAttributes;
    use redrive_shared::attributes::Attributes;

    const DAY_MS: i64 = 86_400_000;
    const NOW: i64 = 1_800_000_000_000;

    fn line(n: usize, sent_ms: Option<i64>, first_redriven_ms: Option<i64>) -> Line {
        let mut attributes = Attributes::new();
        if let Some(first) = first_redriven_ms {
            RedriveMeta {
                attempt: 1,
                first_redriven_at: Some(rfc3339_from_millis(first)),
                last_redriven_at: Some(rfc3339_from_millis(first)),
                ..RedriveMeta::fresh("chain")
            }
            .write_into(&mut attributes);
        }
        let sent = sent_ms.map(|t| t.to_string());
        Line {
            source: "old.jsonl".into(),
            line: n,
            message: ArchivedMessage {
                queue: "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison".into(),
                archived_at_ms: NOW,
                message_id: format!("m-{n}"),
                body: "{}".into(),
                attributes,
                system: SystemAttributes::from_pairs(sent.as_deref().map(|s| ("SentTimestamp", s))),
            },
        }
    }

    #[test]
    fn a_line_older_than_the_ttl_by_its_sent_time_or_first_redrive_is_past_it() {
        let ttl = 10 * 86_400;
        let lines = [
            line(1, Some(NOW - 9 * DAY_MS), None),
            line(2, Some(NOW - 11 * DAY_MS), None),
            // a copy redriven yesterday whose chain was first redriven 12 days ago
            line(3, Some(NOW - DAY_MS), Some(NOW - 12 * DAY_MS)),
            line(4, None, None),
        ];
        let past = past_ttl(&lines, NOW, ttl);
        let which: Vec<(&str, u64)> = past
            .iter()
            .map(|p| (p.message_id.as_str(), p.age_seconds))
            .collect();
        assert_eq!(which, [("m-2", 11 * 86_400), ("m-3", 12 * 86_400)]);
        assert_eq!(past[1].place, "old.jsonl: line 3");
        assert!(past_ttl(&lines, NOW, 13 * 86_400).is_empty());
    }

    #[test]
    fn the_error_names_the_lines_their_age_the_ttl_and_the_way_out() {
        let lines: Vec<Line> = (1..=12)
            .map(|n| line(n, Some(NOW - 50 * DAY_MS), None))
            .collect();
        let text = past_ttl_error(&past_ttl(&lines, NOW, 3_628_800), 3_628_800);
        for needle in [
            "12 message(s)",
            "3628800 s (42.0 days)",
            "old.jsonl: line 1: message m-1 is 4320000 s old (50.0 days",
            "... and 2 more",
            "--allow-past-ttl",
            "--idempotency-ttl-seconds",
            "IDEMPOTENCY_TTL_SECONDS",
            "nothing was sent",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }
}
