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

mod entry;
mod report;
#[cfg(test)]
mod tests;
mod walk;

use clap::Args;

use crate::context::{CliError, Ctx, Outcome};
use crate::queues::{QueueRef, parse_queue};
use crate::scan::{Reach, Scanner, Status};
use crate::select::{Filter, Selection};
use redrive_engine::now_ms;

pub use entry::{copy_entry, fifo_group, replay_entry};
use report::Report;
pub use report::{Replayed, line, print};
use walk::{Plan, destination, walk};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The poison queue to take messages from: name, ARN or URL (with --stack: its poison queue).
    #[arg(long, value_name = "QUEUE", value_parser = parse_queue)]
    pub from: Option<QueueRef>,
    /// The queue to send them to: name, ARN or URL. Default: each message's own source
    /// queue, recorded in its x-redrive (`source`) when it was parked; a message with no
    /// recorded source is left where it is and listed.
    #[arg(long, visible_alias = "source", value_name = "QUEUE", value_parser = parse_queue)]
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

pub async fn run(ctx: &Ctx, args: ReplayArgs) -> Result<Outcome, CliError> {
    let done = execute(ctx, &args).await?;
    print(ctx, &args, &done);
    Ok(done.outcome())
}

/// Replays what `args` selects, printing nothing.
pub async fn execute(ctx: &Ctx, args: &ReplayArgs) -> Result<Replayed, CliError> {
    let from = ctx
        .resolve(crate::context::required(&args.from, "--from")?)
        .await?;
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
