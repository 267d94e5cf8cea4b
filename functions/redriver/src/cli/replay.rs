//! `redrive replay`: parked messages back to the source queue after a fix.
//!
//! Each copy carries the same body and attributes, with `x-redrive` rewritten: attempt 0,
//! `lastError` cleared (else the re-driver would isolate it again at once), `reason: manual`
//! (an operator sent it back), `lastRedrivenAt` now; `originalMessageId`, `firstRedrivenAt`
//! and `isolatedAt` are kept as history. The original is deleted from the poison queue only
//! after SQS acknowledged the copy.

use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_MESSAGE_BYTES};
use redrive_shared::meta::{IsolationReason, RedriveMeta};
use redrive_shared::timefmt::rfc3339_from_millis;
use serde_json::{Value, json};

use super::args::ReplayArgs;
use super::scan::Scanner;
use super::select::Filter;
use super::view::MessageView;
use super::{CliError, Ctx, Outcome, batch, now_ms};
use crate::ports::{HandleEntry, Queue, Received, SendEntry};

/// The copy `replay` sends for one parked message (entry id left empty). The flag is false
/// when the rewritten `x-redrive` does not fit (10 attributes already, or 1 MiB): the copy
/// then carries the attributes exactly as received.
pub fn replay_entry(m: &Received, to_fifo: bool, now_ms: i64) -> (SendEntry, bool) {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    let replayed = RedriveMeta {
        attempt: 0,
        last_error: None,
        reason: Some(IsolationReason::Manual),
        last_redriven_at: Some(rfc3339_from_millis(now_ms)),
        ..meta.clone()
    };
    let mut attributes = m.attributes.clone();
    replayed.write_into(&mut attributes);
    let fits = attributes.len() <= MAX_ATTRIBUTES
        && redrive_shared::attributes::message_size(&m.body, &attributes) <= MAX_MESSAGE_BYTES;
    if !fits {
        attributes = m.attributes.clone();
    }
    let entry = SendEntry {
        id: String::new(),
        body: m.body.clone(),
        attributes,
        delay_seconds: None,
        group_id: to_fifo.then(|| {
            m.group_id
                .clone()
                .unwrap_or_else(|| meta.original_message_id.clone())
        }),
        // One per parked message: a retried replay of the same message is deduplicated, a
        // later replay of a new parked copy is not.
        dedup_id: to_fifo.then(|| format!("{}-manual", m.message_id)),
    };
    (entry, fits)
}

#[derive(Debug, Default)]
struct Report {
    replayed: Vec<MessageView>,
    unstamped: Vec<String>,
    /// Copy sent, original not deleted: it will be seen again (the consumer's idempotency
    /// keeps the side effect single).
    duplicate_possible: Vec<(MessageView, String)>,
    failed: Vec<(MessageView, String)>,
}

pub async fn run(ctx: &Ctx, args: ReplayArgs) -> Result<Outcome, CliError> {
    if args.from == args.to {
        return Err(CliError::Config(
            "--from and --to name the same queue".into(),
        ));
    }
    let queue = ctx.queue();
    let mut filter = Filter::new(&args.selection);
    let mut scan = Scanner::new(&queue, args.from.as_str());
    let mut report = Report::default();
    let walked = walk(&queue, &mut scan, &mut filter, &args, &mut report).await;
    scan.release().await;
    walked?;

    let not_found = filter.not_found();
    let incomplete =
        !report.failed.is_empty() || !report.duplicate_possible.is_empty() || !not_found.is_empty();
    if ctx.json {
        let pairs = |v: &[(MessageView, String)]| -> Vec<Value> {
            v.iter()
                .map(|(m, e)| json!({"message": m, "error": e}))
                .collect()
        };
        super::output::print_json(&json!({
            "from": args.from.as_str(),
            "to": args.to.as_str(),
            "dryRun": args.dry_run,
            "replayed": report.replayed,
            "unstamped": report.unstamped,
            "duplicatePossible": pairs(&report.duplicate_possible),
            "failed": pairs(&report.failed),
            "notFound": not_found,
        }));
    } else {
        print_text(ctx, &args, &report, &not_found);
    }
    Ok(if incomplete {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}

async fn walk<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    filter: &mut Filter,
    args: &ReplayArgs,
    report: &mut Report,
) -> Result<(), CliError> {
    let to = args.to.as_str();
    let to_fifo = args.to.is_fifo();
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
        if args.dry_run {
            report
                .replayed
                .extend(chosen.iter().map(|m| MessageView::new(m, now, None)));
            continue;
        }
        // Entry ids are positions in `chosen`.
        let mut entries = Vec::with_capacity(chosen.len());
        for (i, m) in chosen.iter().enumerate() {
            let (mut entry, stamped) = replay_entry(m, to_fifo, now);
            entry.id = i.to_string();
            if !stamped {
                report.unstamped.push(m.message_id.clone());
            }
            entries.push(entry);
        }
        let sent = batch::send(queue, to, entries).await;
        let deletes: Vec<HandleEntry> = chosen
            .iter()
            .enumerate()
            .filter(|(i, _)| sent.ok.contains(&i.to_string()))
            .map(|(i, m)| HandleEntry {
                id: i.to_string(),
                receipt_handle: m.receipt_handle.clone(),
            })
            .collect();
        let deleted = batch::delete(queue, args.from.as_str(), deletes).await;
        for (i, m) in chosen.iter().enumerate() {
            let id = i.to_string();
            let view = MessageView::new(m, now, None);
            if deleted.ok.contains(&id) {
                scan.settled(&m.message_id);
                report.replayed.push(view);
            } else if sent.ok.contains(&id) {
                let why = deleted.failed.get(&id).cloned().unwrap_or_default();
                report.duplicate_possible.push((view, why));
            } else {
                let why = sent.failed.get(&id).cloned().unwrap_or_default();
                report.failed.push((view, why));
            }
        }
    }
    Ok(())
}

fn print_text(ctx: &Ctx, args: &ReplayArgs, report: &Report, not_found: &[String]) {
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
        args.from.name(),
        args.to.name(),
        s.dim("(as parked; the copies carry attempt 0, reason manual, no lastError)")
    );
    for m in &report.replayed {
        println!("  {}", line(m));
    }
    if !report.unstamped.is_empty() {
        println!(
            "{} {} sent without a new x-redrive (it did not fit: 10 attributes or 1 MiB): {}",
            s.warn("note:"),
            report.unstamped.len(),
            report.unstamped.join(", ")
        );
    }
    if !report.duplicate_possible.is_empty() {
        println!(
            "{} {} copied but not deleted from {} (they will be seen again; the consumer's idempotency delivers them once):",
            s.warn("warning:"),
            report.duplicate_possible.len(),
            args.from.name()
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
            args.from.name()
        );
        for (m, why) in &report.failed {
            println!("  {}  {}", line(m), s.bad(why));
        }
    }
    if !not_found.is_empty() {
        println!(
            "{} {} (not visible: in flight, or not on this queue)",
            s.bad("not found:"),
            not_found.join(", ")
        );
    }
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
    use crate::fake::FakeSqs;
    use crate::ports::EntryFailure;
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
        Received {
            message_id: "poison-copy-1".into(),
            receipt_handle: "h".into(),
            body: "{\"order\":1}".into(),
            attributes,
            group_id: None,
            receive_count: 1,
            sent_timestamp_ms: None,
        }
    }

    #[test]
    fn the_copy_resets_the_attempt_clears_last_error_and_records_manual() {
        let m = received(parked_attributes());
        let (entry, stamped) = replay_entry(&m, false, 1_795_300_000_000);
        assert!(stamped);
        assert_eq!(entry.body, m.body);
        assert_eq!(entry.attributes["tenant"], m.attributes["tenant"]);
        assert_eq!((entry.group_id, entry.dedup_id), (None, None));
        let (meta, _) = RedriveMeta::read(&entry.attributes, "new-id");
        assert_eq!(meta.attempt, 0);
        assert_eq!(meta.last_error, None);
        assert_eq!(meta.reason, Some(IsolationReason::Manual));
        assert_eq!(meta.original_message_id, "orig-1");
        assert_eq!(
            meta.first_redriven_at.as_deref(),
            Some("2026-11-21T10:00:00Z")
        );
        assert_eq!(meta.isolated_at.as_deref(), Some("2026-11-21T11:00:00Z"));
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
        let (entry, _) = replay_entry(&m, true, 0);
        assert_eq!(entry.group_id.as_deref(), Some("orig-1"));
        assert_eq!(entry.dedup_id.as_deref(), Some("poison-copy-1-manual"));
        m.group_id = Some("customer-7".into());
        assert_eq!(
            replay_entry(&m, true, 0).0.group_id.as_deref(),
            Some("customer-7")
        );
    }

    #[test]
    fn a_message_with_no_room_for_the_stamp_is_sent_as_received() {
        let mut attrs = Attributes::new();
        for i in 0..10 {
            attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        let m = received(attrs.clone());
        let (entry, stamped) = replay_entry(&m, false, 0);
        assert!(!stamped);
        assert_eq!(entry.attributes, attrs);
    }

    #[tokio::test]
    async fn nothing_is_deleted_from_poison_unless_its_copy_was_acknowledged() {
        // GIVEN two parked messages, and a source queue that refuses the copy of one of them
        let sqs = FakeSqs::new();
        sqs.create_queue(POISON);
        sqs.create_queue(SOURCE);
        sqs.push(POISON, "keep-me", parked_attributes(), None);
        sqs.push(POISON, "send-me", parked_attributes(), None);
        sqs.fail_send_entries(|_, e| {
            (e.body == "keep-me").then(|| EntryFailure {
                id: e.id.clone(),
                code: "InternalError".into(),
                message: "injected".into(),
                sender_fault: false,
            })
        });
        let args = ReplayArgs {
            from: redrive_shared::config::QueueUrl::parse(POISON).unwrap(),
            to: redrive_shared::config::QueueUrl::parse(SOURCE).unwrap(),
            selection: super::super::args::Selection {
                id: vec![],
                all: true,
                reason: vec![],
                max: None,
            },
            dry_run: false,
        };

        // WHEN everything is replayed
        let mut filter = Filter::new(&args.selection);
        let mut scan = Scanner::new(&sqs, POISON);
        let mut report = Report::default();
        walk(&sqs, &mut scan, &mut filter, &args, &mut report)
            .await
            .unwrap();
        scan.release().await;

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
}
