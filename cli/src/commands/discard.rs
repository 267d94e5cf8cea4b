//! `redrive discard`: delete messages that cannot be recovered, saying what was deleted.
//! Without `--yes` it only lists what it would delete (the messages are released at once)
//! and exits with code 2.

use serde_json::{Value, json};

use crate::commands::replay::{line, outcome};
use crate::context::{CliError, Ctx, Outcome};
use crate::queues::QueueRef;
use crate::scan::{Reach, Scanner, Status};
use crate::select::Filter;
use crate::select::Selection;
use crate::view::MessageView;
use clap::Args;
use redrive_engine::engine::Transfer;
use redrive_engine::now_ms;
use redrive_engine::ports::{HandleEntry, PortError, Queue, Received};
use redrive_shared::config::QueueUrl;

#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The queue to delete from: name, ARN or URL (with --stack: its poison queue).
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub queue: Option<QueueRef>,
    #[command(flatten)]
    pub selection: Selection,
    /// Really delete. Without it, `discard` lists what it would delete and exits with code 2.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Default)]
struct Report {
    deleted: Vec<MessageView>,
    failed: Vec<(MessageView, String)>,
}

pub async fn run(ctx: &Ctx, args: DiscardArgs) -> Result<Outcome, CliError> {
    let target = ctx
        .resolve(crate::context::required(&args.queue, "--queue")?)
        .await?;
    let queue = ctx.queue();
    let url = target.as_str();
    let mut filter = Filter::new(&args.selection, now_ms());
    let mut scan = Scanner::new(&queue, url);
    let mut report = Report::default();
    let walked = walk(&queue, &mut scan, &mut filter, url, args.yes, &mut report).await;
    let reach = scan.reach(filter.stop(), filter.taken(), &walked).await;
    scan.release().await;

    let not_found = filter.not_found();
    if ctx.json {
        print_json(&args, &target, &report, &not_found, &reach);
    } else {
        print_text(ctx, &args, &target, &report, &not_found, &reach);
    }
    if let Some(e) = &reach.error {
        eprintln!("redrive: {e}");
    }
    Ok(if !args.yes && reach.status != Status::Failed {
        Outcome::Refused
    } else {
        outcome(&reach, !report.failed.is_empty() || !not_found.is_empty())
    })
}

async fn walk<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    filter: &mut Filter,
    url: &str,
    really: bool,
    report: &mut Report,
) -> Result<(), PortError> {
    while !filter.full() {
        let batch = scan.next(10).await?;
        if batch.is_empty() {
            break;
        }
        let chosen: Vec<Received> = batch.into_iter().filter(|m| filter.take(m)).collect();
        let now = now_ms();
        if !really {
            report
                .deleted
                .extend(chosen.iter().map(|m| MessageView::new(m, now, None)));
            continue;
        }
        let entries = HandleEntry::numbered(chosen.iter().map(|m| m.receipt_handle.clone()));
        if entries.is_empty() {
            continue;
        }
        let deleted = Transfer::new(queue).delete(url, entries).await;
        for (i, m) in chosen.iter().enumerate() {
            let id = i.to_string();
            let view = MessageView::new(m, now, None);
            if deleted.ok.contains(&id) {
                scan.settled(&m.message_id);
                report.deleted.push(view);
            } else {
                let why = deleted.failed.get(&id).cloned().unwrap_or_default();
                report.failed.push((view, why));
            }
        }
    }
    Ok(())
}

fn print_json(
    args: &DiscardArgs,
    target: &QueueUrl,
    report: &Report,
    not_found: &[String],
    reach: &Reach,
) {
    let failed: Vec<Value> = report
        .failed
        .iter()
        .map(|(m, e)| json!({"message": m, "error": e}))
        .collect();
    let (deleted, would) = if args.yes {
        (json!(report.deleted), json!([]))
    } else {
        (json!([]), json!(report.deleted))
    };
    crate::output::print_json(&json!({
        "queue": target.as_str(),
        "confirmed": args.yes,
        "deleted": deleted,
        "wouldDelete": would,
        "failed": failed,
        "notFound": not_found,
        "status": reach.status,
        "seen": reach.seen,
        "notSelected": reach.not_selected,
        "notReached": reach.not_reached,
        "error": reach.error,
    }));
}

fn print_text(
    ctx: &Ctx,
    args: &DiscardArgs,
    target: &QueueUrl,
    report: &Report,
    not_found: &[String],
    reach: &Reach,
) {
    let s = &ctx.style;
    let name = target.name();
    if args.yes {
        println!(
            "{} {} message(s) from {name}",
            s.bad("deleted"),
            report.deleted.len()
        );
    } else {
        println!(
            "{} {} message(s) from {name}; nothing was deleted",
            s.warn("would delete"),
            report.deleted.len()
        );
    }
    for m in &report.deleted {
        println!("  {}", line(m));
    }
    if !report.failed.is_empty() {
        println!("{} {} not deleted:", s.bad("failed:"), report.failed.len());
        for (m, why) in &report.failed {
            println!("  {}  {}", line(m), s.bad(why));
        }
    }
    reach.print_misses(s, not_found);
    if !args.yes {
        eprintln!("refusing to delete without --yes: re-run with --yes to delete these");
    }
}
