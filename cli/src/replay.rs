//! `redrive replay`: parked messages back to the source queue after a fix.
//!
//! Each copy carries the same body and attributes, with `x-redrive` rewritten: attempt 0,
//! `lastError` cleared (else the re-driver would isolate it again at once), no `isolatedAt` and
//! no `reason` (the copy is not parked any more: it must not look isolated to `stats` and
//! `--reason`, as the re-driver's redrives do not), `lastRedrivenAt` now; `originalMessageId`
//! and `firstRedrivenAt` are kept as history. The original is deleted from the poison queue
//! only after SQS acknowledged the copy. The copy carries the parked message's
//! `AWSTraceHeader`, so its processing joins the producer's trace.
//!
//! A message parked without room for `x-redrive` can only be sent as received; the consumer
//! then keys it on the copy's new MessageId, so a second replay runs it again. Those are
//! refused unless the operator passes `--allow-unstamped`, and said so before they are sent.

use redrive_shared::decision::dedup_id;
use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES};
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::{Attributes, TraceHeader};
use serde_json::{Value, json};

use super::queues::{QueueRef, Resolver};
use super::scan::{Reach, Scanner, Status};
use super::select::Filter;
use super::select::Selection;
use super::view::MessageView;
use super::{CliError, Ctx, Outcome, now_ms};
use clap::Args;
use redrive_engine::engine::{Moved, Transfer};
use redrive_engine::ports::{PortError, Queue, Received, SendEntry};
use redrive_shared::config::QueueUrl;
use std::collections::HashMap;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The poison queue to take messages from: name, ARN or URL.
    #[arg(long, value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub from: QueueRef,
    /// The queue to send them to: name, ARN or URL. Default: each message's own source
    /// queue, recorded in its x-redrive (`source`) when it was parked; a message with no
    /// recorded source is left where it is and listed.
    #[arg(long, visible_alias = "source", value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub to: Option<QueueRef>,
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

/// `kind` of the FIFO deduplication id of a replayed copy (the re-driver uses `r` and `p`).
const DEDUP_KIND: &str = "manual";

/// The copy `replay` sends for one parked message (entry id left empty). The flag is false
/// when the rewritten `x-redrive` does not fit (10 attributes already, or more than
/// `max_bytes`, the destination's `MaximumMessageSize`): the copy then carries the attributes
/// exactly as received.
pub fn replay_entry(
    m: &Received,
    to_fifo: bool,
    max_bytes: usize,
    now_ms: i64,
) -> (SendEntry, bool) {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    let mut replayed = RedriveMeta {
        attempt: 0,
        last_error: None,
        last_redriven_at: Some(rfc3339_from_millis(now_ms)),
        ..meta.clone()
    };
    replayed.clear_isolation();
    let mut attributes = m.attributes.clone();
    replayed.write_into(&mut attributes);
    let fits = attributes.len() <= MAX_ATTRIBUTES
        && redrive_shared::attributes::message_size(&m.body, &attributes) <= max_bytes;
    if !fits {
        attributes = m.attributes.clone();
    }
    let group = to_fifo.then(|| fifo_group(m.group_id.as_deref(), &meta));
    let trace = m.trace_header.clone();
    let entry = copy_entry(&m.message_id, &m.body, attributes, group, DEDUP_KIND, trace);
    (entry, fits)
}

/// The FIFO group of a moved message's copy: the message's own, else the one its isolation
/// recorded (a FIFO DLQ's message parked in a standard poison queue), else its chain's.
pub fn fifo_group(group: Option<&str>, meta: &RedriveMeta) -> String {
    group
        .filter(|g| !g.is_empty())
        .or(meta.group_id())
        .map_or_else(|| meta.original_message_id.clone(), str::to_string)
}

/// The copy of a message moved by hand (replayed, imported), entry id left empty. On a FIFO
/// destination it goes in `fifo_group` and is deduplicated on the id of the message being
/// moved, as the re-driver does: a retried move of the same message is deduplicated, a later
/// move of the same chain never is.
pub fn copy_entry(
    moved_id: &str,
    body: &str,
    attributes: Attributes,
    fifo_group: Option<String>,
    dedup_kind: &str,
    trace_header: Option<TraceHeader>,
) -> SendEntry {
    SendEntry {
        id: String::new(),
        body: body.to_string(),
        attributes,
        delay_seconds: None,
        dedup_id: fifo_group.is_some().then(|| dedup_id(moved_id, dedup_kind)),
        group_id: fifo_group,
        trace_header,
    }
}

#[derive(Debug, Default)]
struct Report {
    replayed: Vec<MessageView>,
    /// Sent without a new `x-redrive` (`--allow-unstamped`).
    unstamped: Vec<String>,
    /// No room for `x-redrive` and no `--allow-unstamped`: left where they were.
    refused_unstamped: Vec<MessageView>,
    /// Copy sent, original not deleted: it will be seen again (the consumer's idempotency
    /// keeps the side effect single).
    duplicate_possible: Vec<(MessageView, String)>,
    failed: Vec<(MessageView, String)>,
    /// FIFO: not sent because an earlier message of its group was not (order kept).
    held: Vec<MessageView>,
    /// No `--to` and no source known for the message (none recorded, or the recorded one
    /// cannot be used): left where it was, never guessed.
    no_source: Vec<(MessageView, String)>,
}

impl Report {
    fn shortfall(&self) -> bool {
        !self.failed.is_empty()
            || !self.duplicate_possible.is_empty()
            || !self.refused_unstamped.is_empty()
            || !self.held.is_empty()
            || !self.no_source.is_empty()
    }
}

/// Where copies go: a queue and its `MaximumMessageSize`.
#[derive(Debug, Clone)]
struct Destination {
    url: QueueUrl,
    max_bytes: usize,
}

/// What one run works with.
struct Plan<'a> {
    args: &'a ReplayArgs,
    from: QueueUrl,
    /// `--to`; None: each message to the source its `x-redrive` records, found by `sources`.
    to: Option<Destination>,
    sources: Option<&'a Resolver>,
}

/// The destination's own limit (as the re-driver reads it), never above SQS's.
async fn destination<Q: Queue>(queue: &Q, url: QueueUrl) -> Result<Destination, PortError> {
    let max_bytes = queue
        .max_message_size(url.as_str())
        .await?
        .unwrap_or(MAX_MESSAGE_BYTES)
        .min(MAX_MESSAGE_BYTES);
    Ok(Destination { url, max_bytes })
}

/// What one replay did.
pub struct Replayed {
    pub from: QueueUrl,
    pub to: Option<QueueUrl>,
    report: Report,
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

pub async fn run(ctx: &Ctx, args: ReplayArgs) -> Result<Outcome, CliError> {
    let done = execute(ctx, &args).await?;
    print(ctx, &args, &done);
    Ok(done.outcome())
}

/// Replays what `args` selects, printing nothing.
pub async fn execute(ctx: &Ctx, args: &ReplayArgs) -> Result<Replayed, CliError> {
    let from = ctx.resolve(&args.from).await?;
    let to = match &args.to {
        Some(to) => Some(ctx.resolve(to).await?),
        None => None,
    };
    if to.as_ref() == Some(&from) {
        return Err(CliError::Config(
            "--from and --to name the same queue".into(),
        ));
    }
    let queue = ctx.queue();
    let to = match to {
        Some(url) => Some(destination(&queue, url).await?),
        None => None,
    };
    let plan = Plan {
        args,
        from,
        to,
        sources: Some(&ctx.queues),
    };
    let mut filter = Filter::new(&args.selection, now_ms());
    let mut scan = Scanner::new(&queue, plan.from.as_str());
    let mut report = Report::default();
    let walked = walk(&queue, &mut scan, &mut filter, &plan, &mut report).await;
    let reach = scan.reach(filter.stop(), filter.taken(), &walked).await;
    scan.release().await;
    Ok(Replayed {
        from: plan.from,
        to: plan.to.map(|d| d.url),
        report,
        not_found: filter.not_found(),
        reach,
    })
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
        super::output::print_json(&json!({
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

/// The exit of `replay` and `discard`: a failed AWS call, then anything not done or not
/// reached, is not success.
pub fn outcome(reach: &Reach, shortfall: bool) -> Outcome {
    match reach.status {
        Status::Failed => Outcome::Failed,
        Status::Incomplete => Outcome::Incomplete,
        _ if shortfall => Outcome::Incomplete,
        _ => Outcome::Done,
    }
}

async fn walk<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    filter: &mut Filter,
    plan: &Plan<'_>,
    report: &mut Report,
) -> Result<(), PortError> {
    // FIFO: groups held behind a message that was not sent, for the whole run.
    let transfer = Transfer::new(queue);
    // Recorded source ARN -> where its messages go, or why they cannot.
    let mut routes: HashMap<String, Result<Destination, String>> = HashMap::new();
    while !filter.full() {
        let batch = scan.next(10).await?;
        if batch.is_empty() {
            break;
        }
        let chosen: Vec<Received> = batch.into_iter().filter(|m| filter.take(m)).collect();
        if chosen.is_empty() {
            continue;
        }
        let now = now_ms();
        // Positions in `chosen` by destination, in the order first seen.
        let mut groups: Vec<(Destination, Vec<usize>)> = Vec::new();
        for (i, m) in chosen.iter().enumerate() {
            let dest = match &plan.to {
                Some(to) => to.clone(),
                None => match route(queue, plan, &mut routes, m).await? {
                    Ok(dest) => dest,
                    Err(why) => {
                        report.no_source.push((MessageView::new(m, now, None), why));
                        continue;
                    }
                },
            };
            match groups.iter_mut().find(|(d, _)| d.url == dest.url) {
                Some((_, members)) => members.push(i),
                None => groups.push((dest, vec![i])),
            }
        }
        for (dest, members) in &groups {
            move_group(&transfer, scan, plan, dest, &chosen, members, now, report).await;
        }
    }
    Ok(())
}

/// Where a message goes without `--to`: the source queue its `x-redrive` records.
async fn route<Q: Queue>(
    queue: &Q,
    plan: &Plan<'_>,
    routes: &mut HashMap<String, Result<Destination, String>>,
    m: &Received,
) -> Result<Result<Destination, String>, PortError> {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    if meta.reason == Some(IsolationReason::UnknownSource) {
        // The re-driver refused to guess where it goes: neither does replay, whatever source
        // the message claims.
        let claimed = meta.claimed_source().or(meta.source());
        return Ok(Err(match claimed {
            Some(claimed) => format!(
                "isolated unknown-source: its source was never known (it claims {claimed}, which is not a source of its DLQ): pass --to QUEUE"
            ),
            None => {
                "isolated unknown-source: its source was never known: pass --to QUEUE".to_string()
            }
        }));
    }
    let Some(source) = meta.source().filter(|s| !s.is_empty()) else {
        return Ok(Err(
            "no source recorded in its x-redrive: pass --to QUEUE".to_string()
        ));
    };
    if let Some(known) = routes.get(source) {
        return Ok(known.clone());
    }
    let found = match (QueueRef::parse(source), plan.sources) {
        (Ok(q @ QueueRef::Arn { .. }), Some(sources)) => match sources.resolve(&q).await {
            Ok(url) if url == plan.from => Err(format!(
                "its recorded source {source} is the queue it is on: pass --to QUEUE"
            )),
            Ok(url) => Ok(destination(queue, url).await?),
            Err(CliError::Aws(e)) => return Err(e),
            Err(e) => Err(format!("its recorded source cannot be used: {e}")),
        },
        _ => Err(format!(
            "its recorded source {source:?} is not a queue ARN: pass --to QUEUE"
        )),
    };
    routes.insert(source.to_string(), found.clone());
    Ok(found)
}

/// Sends the copies of `chosen[members]` to `dest` and deletes each original whose copy was
/// acknowledged; the report says what became of each.
#[allow(clippy::too_many_arguments)]
async fn move_group<Q: Queue>(
    transfer: &Transfer<'_, Q>,
    scan: &mut Scanner<'_, Q>,
    plan: &Plan<'_>,
    dest: &Destination,
    chosen: &[Received],
    members: &[usize],
    now: i64,
    report: &mut Report,
) {
    let args = plan.args;
    let to = dest.url.as_str();
    let to_fifo = dest.url.is_fifo();
    // Entry ids are positions in `chosen`.
    let mut entries = Vec::with_capacity(members.len());
    let mut unstamped = Vec::new();
    let mut refused = std::collections::HashSet::new();
    for &i in members {
        let m = &chosen[i];
        let (mut entry, stamped) = replay_entry(m, to_fifo, dest.max_bytes, now);
        if !stamped {
            if !args.allow_unstamped {
                // Left in place; on a FIFO destination nothing later of its group may pass.
                transfer.hold_group(entry.group_id.as_deref());
                refused.insert(i);
                report
                    .refused_unstamped
                    .push(MessageView::new(m, now, None));
                continue;
            }
            unstamped.push(m.message_id.clone());
        }
        entry.id = i.to_string();
        entries.push(entry);
    }
    if args.dry_run {
        report.replayed.extend(
            members
                .iter()
                .filter(|i| !refused.contains(*i))
                .map(|&i| MessageView::new(&chosen[i], now, None)),
        );
        report.unstamped.extend(unstamped);
        return;
    }
    if !unstamped.is_empty() {
        eprintln!(
            "warning: sending {} message(s) without x-redrive (--allow-unstamped): the consumer keys each copy on its new MessageId, so a copy replayed again or delivered twice is processed again: {}",
            unstamped.len(),
            unstamped.join(", ")
        );
        report.unstamped.extend(unstamped);
    }
    if entries.is_empty() {
        return;
    }
    let entries = entries
        .into_iter()
        .map(|e| {
            let handle =
                e.id.parse::<usize>()
                    .ok()
                    .and_then(|i| chosen.get(i))
                    .map(|m| m.receipt_handle.clone())
                    .unwrap_or_default();
            (e, handle)
        })
        .collect();
    let Moved { sent, deleted } = transfer
        .send_then_delete(plan.from.as_str(), to, to_fifo, entries)
        .await;
    for &i in members {
        if refused.contains(&i) {
            continue;
        }
        let m = &chosen[i];
        let id = i.to_string();
        let view = MessageView::new(m, now, None);
        if deleted.ok.contains(&id) {
            scan.settled(&m.message_id);
            report.replayed.push(view);
        } else if sent.ok.contains(&id) {
            let why = deleted.failed.get(&id).cloned().unwrap_or_default();
            report.duplicate_possible.push((view, why));
        } else if sent.held.contains(&id) {
            report.held.push(view);
        } else {
            let why = sent.failed.get(&id).cloned().unwrap_or_default();
            report.failed.push((view, why));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_engine::fake::FakeSqs;
    use redrive_engine::ports::EntryFailure;
    use redrive_shared::{Attributes, ErrorClass, LastError, MessageAttribute};

    const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";
    const SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";

    fn parked_attributes() -> Attributes {
        let mut attrs = Attributes::new();
        attrs.insert("tenant".into(), MessageAttribute::string("acme"));
        RedriveMeta {
            attempt: 5,
            first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
            last_redriven_at: Some("2026-11-21T10:30:00Z".into()),
            isolated_at: Some("2026-11-21T11:00:00Z".into()),
            reason: Some(IsolationReason::PermanentFailure),
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "HTTP_400",
                "bad",
                "2026-11-21T10:59:00Z".into(),
            )),
            ..RedriveMeta::fresh("orig-1")
        }
        .write_into(&mut attrs);
        attrs
    }

    fn received(attributes: Attributes) -> Received {
        crate::fixtures::received("poison-copy-1", "{\"order\":1}", attributes)
    }

    #[test]
    fn the_copy_resets_the_attempt_and_clears_last_error_and_the_isolation() {
        let mut attributes = parked_attributes();
        let (mut parked, _) = RedriveMeta::read(&attributes, "x");
        parked.set_dlq("https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq");
        parked.write_into(&mut attributes);
        let m = received(attributes);
        let (entry, stamped) = replay_entry(&m, false, MAX_MESSAGE_BYTES, 1_795_300_000_000);
        assert!(stamped);
        assert_eq!(entry.body, m.body);
        assert_eq!(entry.attributes["tenant"], m.attributes["tenant"]);
        assert_eq!((entry.group_id, entry.dedup_id), (None, None));
        let (meta, _) = RedriveMeta::read(&entry.attributes, "new-id");
        assert_eq!(meta.attempt, 0);
        assert_eq!(meta.last_error, None);
        assert_eq!((&meta.reason, meta.isolated_at.as_deref()), (&None, None));
        assert_eq!(meta.dlq(), None, "the copy is not parked any more");
        assert_eq!(meta.original_message_id, "orig-1");
        assert_eq!(
            meta.first_redriven_at.as_deref(),
            Some("2026-11-21T10:00:00Z")
        );
        assert_eq!(
            meta.last_redriven_at.as_deref(),
            Some(rfc3339_from_millis(1_795_300_000_000).as_str())
        );
        assert!(
            !meta.is_permanent_failure(),
            "the re-driver will not isolate it again"
        );
    }

    #[test]
    fn a_fifo_destination_gets_a_group_and_a_per_copy_dedup_id() {
        let mut m = received(parked_attributes());
        let (entry, _) = replay_entry(&m, true, MAX_MESSAGE_BYTES, 0);
        assert_eq!(entry.group_id.as_deref(), Some("orig-1"));
        assert_eq!(entry.dedup_id, Some(dedup_id("poison-copy-1", DEDUP_KIND)));
        m.group_id = Some("customer-7".into());
        assert_eq!(
            replay_entry(&m, true, MAX_MESSAGE_BYTES, 0)
                .0
                .group_id
                .as_deref(),
            Some("customer-7")
        );
    }

    #[test]
    fn a_fifo_dlqs_message_parked_in_a_standard_queue_is_replayed_into_its_own_group() {
        let mut attributes = parked_attributes();
        let (mut meta, _) = RedriveMeta::read(&attributes, "x");
        meta.extra
            .insert("groupId".into(), serde_json::json!("customer-7"));
        meta.write_into(&mut attributes);
        let m = received(attributes);
        let (entry, stamped) = replay_entry(&m, true, MAX_MESSAGE_BYTES, 0);
        assert!(stamped);
        assert_eq!(entry.group_id.as_deref(), Some("customer-7"));
        // The copy is not parked any more: the group is its MessageGroupId, not in the stamp.
        let (copy, _) = RedriveMeta::read(&entry.attributes, "new-id");
        assert!(!copy.to_json().contains("groupId"), "{}", copy.to_json());
    }

    #[test]
    fn a_message_with_no_room_for_the_stamp_is_sent_as_received() {
        let mut attrs = Attributes::new();
        for i in 0..10 {
            attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        let m = received(attrs.clone());
        let (entry, stamped) = replay_entry(&m, false, MAX_MESSAGE_BYTES, 0);
        assert!(!stamped);
        assert_eq!(entry.attributes, attrs);
        // Too large for the destination's own limit, with the stamp: sent as received too.
        let m = received(parked_attributes());
        let (entry, stamped) = replay_entry(&m, false, m.body.len() + 10, 0);
        assert!(!stamped);
        assert_eq!(entry.attributes, m.attributes);
    }

    #[tokio::test]
    async fn nothing_is_deleted_from_poison_unless_its_copy_was_acknowledged() {
        // GIVEN two parked messages, and a source queue that refuses the copy of one of them
        let sqs = FakeSqs::new();
        sqs.create_queue(POISON);
        sqs.create_queue(SOURCE);
        sqs.push(POISON, "keep-me", parked_attributes(), None);
        sqs.push(POISON, "send-me", parked_attributes(), None);
        sqs.fail_send_entries(|_, e| (e.body == "keep-me").then(|| refuse(e)));

        // WHEN everything is replayed
        let report = replay_all(&sqs, POISON, SOURCE).await;

        // THEN the refused one is still parked (and visible again), the other moved
        assert_eq!(report.replayed.len(), 1);
        assert_eq!(report.failed.len(), 1);
        assert!(
            report.failed[0].1.starts_with("InternalError"),
            "{:?}",
            report.failed
        );
        let parked: Vec<String> = sqs.messages(POISON).into_iter().map(|m| m.body).collect();
        assert_eq!(parked, ["keep-me"]);
        assert_eq!(sqs.depth_visible(POISON), 1);
        let sent: Vec<String> = sqs.messages(SOURCE).into_iter().map(|m| m.body).collect();
        assert_eq!(sent, ["send-me"]);
    }

    const POISON_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison.fifo";
    const SOURCE_FIFO: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo";

    async fn replay_all(sqs: &std::sync::Arc<FakeSqs>, from: &str, to: &str) -> Report {
        let args = ReplayArgs {
            from: QueueRef::parse(from).unwrap(),
            to: Some(QueueRef::parse(to).unwrap()),
            selection: super::super::select::Selection {
                id: vec![],
                all: true,
                filters: Default::default(),
                max: None,
                plan: None,
            },
            dry_run: false,
            allow_unstamped: false,
        };
        let plan = Plan {
            args: &args,
            from: QueueUrl::parse(from).unwrap(),
            to: Some(Destination {
                url: QueueUrl::parse(to).unwrap(),
                max_bytes: MAX_MESSAGE_BYTES,
            }),
            sources: None,
        };
        let mut filter = Filter::new(&args.selection, now_ms());
        let mut scan = Scanner::new(sqs, from);
        let mut report = Report::default();
        walk(sqs, &mut scan, &mut filter, &plan, &mut report)
            .await
            .unwrap();
        scan.release().await;
        report
    }

    fn refuse(e: &SendEntry) -> EntryFailure {
        EntryFailure {
            id: e.id.clone(),
            code: "InternalError".into(),
            message: "injected".into(),
            sender_fault: false,
        }
    }

    fn bodies(sqs: &FakeSqs, url: &str) -> Vec<String> {
        sqs.messages(url).into_iter().map(|m| m.body).collect()
    }

    #[tokio::test]
    async fn replay_fifo_keeps_group_order() {
        // GIVEN a1 then a2 of group a parked on a FIFO queue, and a source queue that refuses
        // the first try of a1 (a partial batch failure, worth a retry)
        let sqs = FakeSqs::new();
        sqs.create_queue(POISON_FIFO);
        sqs.create_queue(SOURCE_FIFO);
        for body in ["a1", "a2"] {
            sqs.push(POISON_FIFO, body, parked_attributes(), Some("a"));
        }
        let tries = std::sync::atomic::AtomicUsize::new(0);
        sqs.fail_send_entries(move |_, e| {
            (e.body == "a1" && tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0)
                .then(|| refuse(e))
        });

        // WHEN both are replayed
        let report = replay_all(&sqs, POISON_FIFO, SOURCE_FIFO).await;

        // THEN a1 was retried before a2 was sent: the group's order is kept
        assert_eq!(report.replayed.len(), 2, "{report:?}");
        assert_eq!(bodies(&sqs, SOURCE_FIFO), ["a1", "a2"]);
        assert!(sqs.is_empty(POISON_FIFO));
    }

    #[tokio::test]
    async fn replay_fifo_holds_a_group_behind_a_failed_message() {
        // GIVEN a1, a2 of group a and b1 of group b, and a source that keeps refusing a1
        let sqs = FakeSqs::new();
        sqs.create_queue(POISON_FIFO);
        sqs.create_queue(SOURCE_FIFO);
        sqs.push(POISON_FIFO, "a1", parked_attributes(), Some("a"));
        sqs.push(POISON_FIFO, "b1", parked_attributes(), Some("b"));
        sqs.push(POISON_FIFO, "a2", parked_attributes(), Some("a"));
        sqs.fail_send_entries(|_, e| (e.body == "a1").then(|| refuse(e)));

        // WHEN everything is replayed
        let report = replay_all(&sqs, POISON_FIFO, SOURCE_FIFO).await;

        // THEN a2 is not sent past a1: both stay parked and are reported; b1 went
        assert_eq!(bodies(&sqs, SOURCE_FIFO), ["b1"]);
        assert_eq!(bodies(&sqs, POISON_FIFO), ["a1", "a2"]);
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.held.len(), 1, "{report:?}");
        assert!(report.shortfall());
    }
}
