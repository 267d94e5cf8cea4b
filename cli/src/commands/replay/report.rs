//! What a replay did, message by message, and how it is printed.

use serde_json::{Value, json};

use redrive_shared::config::QueueUrl;

use super::{ReplayArgs, outcome};
use crate::context::{Ctx, Outcome};
use crate::output::print_json;
use crate::scan::Reach;
use crate::view::MessageView;

#[derive(Debug, Default)]
pub(super) struct Report {
    pub(super) replayed: Vec<MessageView>,
    /// Sent without a new `x-redrive` (`--allow-unstamped`).
    pub(super) unstamped: Vec<String>,
    /// No room for `x-redrive` and no `--allow-unstamped`: left where they were.
    pub(super) refused_unstamped: Vec<MessageView>,
    /// Copy sent, original not deleted: it will be seen again (the consumer's idempotency
    /// keeps the side effect single).
    pub(super) duplicate_possible: Vec<(MessageView, String)>,
    pub(super) failed: Vec<(MessageView, String)>,
    /// FIFO: not sent because an earlier message of its group was not (order kept).
    pub(super) held: Vec<MessageView>,
    /// No `--to` and no source known for the message (none recorded, or the recorded one
    /// cannot be used): left where it was, never guessed.
    pub(super) no_source: Vec<(MessageView, String)>,
}

impl Report {
    pub(super) fn shortfall(&self) -> bool {
        !self.failed.is_empty()
            || !self.duplicate_possible.is_empty()
            || !self.refused_unstamped.is_empty()
            || !self.held.is_empty()
            || !self.no_source.is_empty()
    }
}

/// What one replay did.
pub struct Replayed {
    pub from: QueueUrl,
    pub to: Option<QueueUrl>,
    pub(super) report: Report,
    pub not_found: Vec<String>,
    pub reach: Reach,
}

impl Replayed {
    /// The messages whose copy was sent and acknowledged (deleted or not).
    pub fn sent(&self) -> Vec<&MessageView> {
        self.report
            .replayed
            .iter()
            .chain(self.report.duplicate_possible.iter().map(|(m, _)| m))
            .collect()
    }

    /// Sent, and deleted from the queue it was on.
    pub fn deleted(&self) -> usize {
        self.report.replayed.len()
    }

    /// Messages not moved for any reason (failed, refused, held for order, no source).
    pub fn shortfall(&self) -> usize {
        let r = &self.report;
        r.failed.len() + r.refused_unstamped.len() + r.held.len() + r.no_source.len()
    }

    pub fn outcome(&self) -> Outcome {
        outcome(
            &self.reach,
            self.report.shortfall() || !self.not_found.is_empty(),
        )
    }
}

/// Prints what a replay did, as text or one JSON document.
pub fn print(ctx: &Ctx, args: &ReplayArgs, done: &Replayed) {
    let (report, not_found, reach) = (&done.report, &done.not_found, &done.reach);
    if ctx.json {
        let pairs = |v: &[(MessageView, String)]| -> Vec<Value> {
            v.iter()
                .map(|(m, e)| json!({"message": m, "error": e}))
                .collect()
        };
        print_json(&json!({
            "from": done.from.as_str(),
            "to": done.to.as_ref().map(|d| d.as_str()),
            "dryRun": args.dry_run,
            "status": reach.status,
            "replayed": report.replayed,
            "unstamped": report.unstamped,
            "refusedUnstamped": report.refused_unstamped,
            "duplicatePossible": pairs(&report.duplicate_possible),
            "failed": pairs(&report.failed),
            "heldForOrder": report.held,
            "noSource": pairs(&report.no_source),
            "notFound": not_found,
            "seen": reach.seen,
            "notSelected": reach.not_selected,
            "notReached": reach.not_reached,
            "error": reach.error,
        }));
    } else {
        print_text(
            ctx,
            args,
            &done.from,
            done.to.as_ref(),
            report,
            not_found,
            reach,
        );
    }
    if let Some(e) = &reach.error {
        eprintln!("redrive: {e}");
    }
}

fn print_text(
    ctx: &Ctx,
    args: &ReplayArgs,
    from: &QueueUrl,
    to: Option<&QueueUrl>,
    report: &Report,
    not_found: &[String],
    reach: &Reach,
) {
    let s = &ctx.style;
    let verb = if args.dry_run {
        "would replay"
    } else {
        "replayed"
    };
    println!(
        "{} {} message(s) from {} to {} {}",
        if args.dry_run {
            s.warn(verb)
        } else {
            s.good(verb)
        },
        report.replayed.len(),
        from.name(),
        to.map_or("each message's own source", |d| d.name()),
        s.dim("(the copies carry attempt 0, no lastError, no isolation reason)")
    );
    for m in &report.replayed {
        println!("  {}", line(m));
    }
    if !report.unstamped.is_empty() {
        println!(
            "{} {} sent without a new x-redrive (no room: 10 attributes, or the destination's size limit); the consumer keys each on its new MessageId, so replaying it again processes it again: {}",
            s.warn("note:"),
            report.unstamped.len(),
            report.unstamped.join(", ")
        );
    }
    if !report.refused_unstamped.is_empty() {
        println!(
            "{} {} not replayed (still on {}): no room for x-redrive, so the consumer could not recognise a second delivery; pass --allow-unstamped to send them as received:",
            s.bad("refused:"),
            report.refused_unstamped.len(),
            from.name()
        );
        for m in &report.refused_unstamped {
            println!("  {}", line(m));
        }
    }
    if !report.duplicate_possible.is_empty() {
        println!(
            "{} {} copied but not deleted from {} (they will be seen again; the consumer's idempotency delivers them once):",
            s.warn("warning:"),
            report.duplicate_possible.len(),
            from.name()
        );
        for (m, why) in &report.duplicate_possible {
            println!("  {}  {}", line(m), s.dim(why));
        }
    }
    if !report.failed.is_empty() {
        println!(
            "{} {} not sent (still on {}):",
            s.bad("failed:"),
            report.failed.len(),
            from.name()
        );
        for (m, why) in &report.failed {
            println!("  {}  {}", line(m), s.bad(why));
        }
    }
    if !report.held.is_empty() {
        println!(
            "{} {} not sent (still on {}): an earlier message of their group was not sent, and FIFO order is kept:",
            s.bad("held:"),
            report.held.len(),
            from.name()
        );
        for m in &report.held {
            println!("  {}", line(m));
        }
    }
    if !report.no_source.is_empty() {
        println!(
            "{} {} not replayed (still on {}): no known source queue; pass --to QUEUE to send them:",
            s.bad("no source:"),
            report.no_source.len(),
            from.name()
        );
        for (m, why) in &report.no_source {
            println!("  {}  {}", line(m), s.dim(why));
        }
    }
    reach.print_misses(s, not_found);
}

/// One line per message: id, original id, why it was parked.
pub fn line(m: &MessageView) -> String {
    let mut out = m.message_id.clone();
    if m.original_message_id != m.message_id {
        out.push_str(&format!("  original {}", m.original_message_id));
    }
    out.push_str(&format!("  attempt {}  {}", m.attempt, m.reason_label()));
    if let Some(e) = &m.last_error {
        out.push_str(&format!("  ({})", e.code));
    }
    out
}
