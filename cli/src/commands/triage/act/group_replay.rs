//! `triage replay`: a group's plan sent back in stages, the canary first, each stage judged
//! by what comes back to the DLQ (or lands on the poison queue) within the verdict window.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use redrive_engine::ports::{PortError, Received};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::triage::state::{Finish, stages};

use super::args::{GroupReplayArgs, parse_duration};
use super::book::{print_record, publish};
use super::confirm::Operation;
use crate::commands::replay::{self, ReplayArgs};
use crate::context::{CliError, Ctx, Outcome};
use crate::filter::FilterArgs;
use crate::inspect::facts;
use crate::output::print_json;
use crate::queues::QueueRef;
use crate::scan::Scanner;
use crate::select::Selection;

/// The source queue's verdict window: visibility timeout × maxReceiveCount + 10 s.
async fn default_window(ctx: &Ctx, to: &str) -> Result<Duration, CliError> {
    let f = facts(&ctx.queue(), to).await?;
    let visibility = f.visibility_timeout_seconds.unwrap_or(30);
    let receives = f.max_receive_count().unwrap_or(1);
    Ok(Duration::from_secs(visibility * receives + 10))
}

/// FIFO: the message groups in which a message outside the plan comes before one of the plan,
/// as far as a pass can read them (SQS hands out a message group's head only).
async fn interleaved(
    ctx: &Ctx,
    url: &str,
    plan: &BTreeSet<String>,
) -> Result<Vec<String>, CliError> {
    let mut other_first: BTreeSet<String> = BTreeSet::new();
    let mut mixed: BTreeSet<String> = BTreeSet::new();
    each_message(ctx, url, |m| {
        let group = m.group_id.clone().unwrap_or_default();
        if !plan.contains(&m.message_id) {
            other_first.insert(group);
        } else if other_first.contains(&group) {
            mixed.insert(group);
        }
    })
    .await?;
    Ok(mixed.into_iter().collect())
}

/// Copies of `originals` found on `url` that are not the plan's own messages.
async fn came_back(
    ctx: &Ctx,
    url: &str,
    originals: &BTreeSet<String>,
    plan: &BTreeSet<String>,
) -> Result<u64, CliError> {
    let mut back = 0;
    each_message(ctx, url, |m| {
        let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
        if !plan.contains(&m.message_id) && originals.contains(&meta.original_message_id) {
            back += 1;
        }
    })
    .await?;
    Ok(back)
}

/// Hands every message visible on `url` to `each`, in the order received, holding them until
/// the walk ends and then releasing them all.
async fn each_message(
    ctx: &Ctx,
    url: &str,
    mut each: impl FnMut(&Received),
) -> Result<(), CliError> {
    let queue = ctx.queue();
    let mut scan = Scanner::new(&queue, url);
    let walked: Result<(), PortError> = async {
        loop {
            let batch = scan.next(10).await?;
            if batch.is_empty() {
                return Ok(());
            }
            batch.iter().for_each(&mut each);
        }
    }
    .await;
    scan.release().await;
    Ok(walked?)
}

pub async fn replay_group(ctx: &Ctx, a: GroupReplayArgs) -> Result<Outcome, CliError> {
    let op = Operation::load(ctx, &a.target, &a.confirm).await?;
    let (group, url, plan_id, ids) = (&op.group, &op.url, &op.plan_id, &op.ids);
    let to = match (&a.to, &op.record.source) {
        (Some(q), _) => q.clone(),
        (None, Some(name)) => QueueRef::parse(name).map_err(CliError::Config)?,
        (None, None) => {
            return Err(CliError::Config(format!(
                "group {group} has no known source queue: pass --to QUEUE"
            )));
        }
    };
    let to_url = ctx.resolve(&to).await?;
    let window = match &a.window {
        Some(w) => parse_duration(w)?,
        None => default_window(ctx, to_url.as_str()).await?,
    };
    let plan: BTreeSet<String> = ids.iter().cloned().collect();
    // FIFO: triage never reorders. A message group whose head holds another cause before this
    // group's messages would see them overtake it.
    if url.is_fifo() && !a.allow_interleaved {
        let mixed = interleaved(ctx, url.as_str(), &plan).await?;
        if !mixed.is_empty() {
            return Err(CliError::Config(format!(
                "message group(s) {} hold messages of other causes before this group's: replaying it would reorder them; replay or discard those first, or pass --allow-interleaved",
                mixed.join(", ")
            )));
        }
    }
    let sizes = stages(ids.len() as u64, a.canary);
    let preview = format!(
        "would replay {} of plan {plan_id} (group {group}) from {} to {} in stages {sizes:?}, a verdict window of {} s after each",
        ids.len(),
        url.name(),
        to_url.name(),
        window.as_secs()
    );
    eprintln!("{preview}");
    if a.confirm.dry_run {
        if ctx.json {
            print_json(&json!({"group": group, "plan": plan_id, "dryRun": true,
                "messages": ids.len(), "stages": sizes, "windowSeconds": window.as_secs(), "to": to_url.as_str()}));
        }
        return Ok(Outcome::Done);
    }
    let poison = match &a.poison {
        Some(p) => Some(ctx.resolve(p).await?),
        None => None,
    };
    if let Some(refused) = op.confirm_and_begin("replay", &a.confirm).await? {
        return Ok(refused);
    }

    let mut remaining = plan.clone();
    let mut left = 0u64;
    let mut stopped = None;
    for n in sizes {
        if remaining.is_empty() {
            break;
        }
        let started = Instant::now();
        let args = ReplayArgs {
            from: Some(a.target.queue.clone()),
            to: Some(to.clone()),
            selection: Selection {
                id: Vec::new(),
                all: true,
                filters: FilterArgs::default(),
                max: Some(n as u32),
                plan: Some(remaining.clone()),
            },
            dry_run: false,
            allow_unstamped: false,
        };
        let done = replay::execute(ctx, &args).await?;
        if !ctx.json {
            replay::print(ctx, &args, &done);
        }
        let sent = done.sent();
        let originals: BTreeSet<String> =
            sent.iter().map(|m| m.original_message_id.clone()).collect();
        for m in &sent {
            remaining.remove(&m.message_id);
        }
        let (sent_n, deleted) = (sent.len() as u64, done.deleted() as u64);
        left = done.shortfall() as u64;
        if sent_n == 0 {
            op.replay_stage(0, 0, 0, 0).await?;
            break;
        }
        let pace = Duration::from_millis(sent_n * 1000 / a.rate);
        let verdict = window.max(pace.saturating_sub(started.elapsed()));
        eprintln!(
            "sent {sent_n} of plan {plan_id}; verdict in {} s",
            verdict.as_secs()
        );
        tokio::time::sleep(verdict).await;
        let back = came_back(ctx, url.as_str(), &originals, &plan).await?;
        let isolated = match &poison {
            Some(p) => came_back(ctx, p.as_str(), &originals, &plan).await?,
            None => 0,
        };
        op.replay_stage(sent_n, deleted, back, isolated).await?;
        if back + isolated > 0 {
            stopped = Some(format!(
                "{back} of {sent_n} came back to the DLQ and {isolated} were isolated within {} s",
                verdict.as_secs()
            ));
            break;
        }
        if left > 0 {
            break;
        }
    }
    let outcome = match stopped.clone() {
        Some(why) => Finish::CanaryFailed(why),
        None => Finish::Done { left },
    };
    let (alert, r) = op.finish(outcome).await?;
    publish(ctx, &a.target.book, &alert.into_iter().collect::<Vec<_>>()).await;
    if ctx.json {
        print_json(
            &json!({"queue": url.as_str(), "group": group, "plan": plan_id,
            "stopped": stopped, "record": &r}),
        );
    } else {
        if let Some(why) = &stopped {
            println!(
                "{} the replay stopped: {why}",
                ctx.style.bad("canary failed:")
            );
        }
        print_record(ctx, group, &r);
    }
    Ok(if stopped.is_some() || left > 0 {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}
