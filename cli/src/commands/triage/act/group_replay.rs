//! `triage replay`: a group's plan sent back in stages, the canary first, each stage judged
//! by what comes back to the DLQ (or lands on the poison queue) within the verdict window.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use redrive_engine::ports::{PortError, Received};
use redrive_engine::triage_act::sqs::{CameBack, Interleaved};
use redrive_engine::triage_act::{ReplayPlan, StageMoved, StageMover, run_replay, verdict_window};
use redrive_shared::config::QueueUrl;

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
    Ok(verdict_window(
        f.visibility_timeout_seconds,
        f.max_receive_count(),
    ))
}

/// FIFO: the message groups in which a message outside the plan comes before one of the plan,
/// as far as a pass can read them ([`Interleaved`]).
async fn interleaved(
    ctx: &Ctx,
    url: &str,
    plan: &BTreeSet<String>,
) -> Result<Vec<String>, CliError> {
    let mut seen = Interleaved::new(plan);
    each_message(ctx, url, |m| seen.see(m)).await?;
    Ok(seen.groups())
}

/// Copies of `originals` found on `url` that are not the plan's own messages.
async fn came_back(
    ctx: &Ctx,
    url: &str,
    originals: &BTreeSet<String>,
    plan: &BTreeSet<String>,
) -> Result<u64, CliError> {
    let mut back = CameBack::new(originals, plan);
    each_message(ctx, url, |m| back.see(m)).await?;
    Ok(back.count)
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

/// The CLI's stages: each sent with `replay` (its report printed), the copies that came back
/// looked for on the DLQ and the poison queue.
struct CliMover<'a> {
    ctx: &'a Ctx,
    from: &'a QueueRef,
    to: &'a QueueRef,
    url: &'a str,
    poison: Option<&'a str>,
    plan_id: &'a str,
}

impl StageMover for CliMover<'_> {
    type Error = CliError;

    async fn send(&mut self, remaining: &BTreeSet<String>, n: u64) -> Result<StageMoved, CliError> {
        let args = ReplayArgs {
            from: Some(self.from.clone()),
            to: Some(self.to.clone()),
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
        let done = replay::execute(self.ctx, &args).await?;
        if !self.ctx.json {
            replay::print(self.ctx, &args, &done);
        }
        Ok(StageMoved {
            sent: done
                .sent()
                .iter()
                .map(|m| (m.message_id.clone(), m.original_message_id.clone()))
                .collect(),
            deleted: done.deleted() as u64,
            shortfall: done.shortfall() as u64,
        })
    }

    async fn came_back(
        &mut self,
        originals: &BTreeSet<String>,
        plan: &BTreeSet<String>,
    ) -> Result<(u64, u64), CliError> {
        let back = came_back(self.ctx, self.url, originals, plan).await?;
        let isolated = match self.poison {
            Some(p) => came_back(self.ctx, p, originals, plan).await?,
            None => 0,
        };
        Ok((back, isolated))
    }

    async fn wait(&mut self, verdict: Duration, sent: u64) {
        eprintln!(
            "sent {sent} of plan {}; verdict in {} s",
            self.plan_id,
            verdict.as_secs()
        );
        tokio::time::sleep(verdict).await;
    }
}

pub async fn replay_group(ctx: &Ctx, a: GroupReplayArgs) -> Result<Outcome, CliError> {
    let op = Operation::load(ctx, &a.target, &a.confirm).await?;
    let url = &op.url;
    let (group, plan_id, ids) = (&op.plan.group, &op.plan.plan_id, &op.plan.ids);
    let to = match (&a.to, &op.plan.record.source) {
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
    let how = ReplayPlan::staged(ids.len(), a.canary, window, a.rate);
    let preview = format!(
        "would replay {} of plan {plan_id} (group {group}) from {} to {} in stages {:?}, a verdict window of {} s after each",
        ids.len(),
        url.name(),
        to_url.name(),
        how.stages,
        window.as_secs()
    );
    eprintln!("{preview}");
    if a.confirm.dry_run {
        if ctx.json {
            print_json(&json!({"group": group, "plan": plan_id, "dryRun": true,
                "messages": ids.len(), "stages": how.stages, "windowSeconds": window.as_secs(), "to": to_url.as_str()}));
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
    let mut mover = CliMover {
        ctx,
        from: &a.target.queue,
        to: &to,
        url: url.as_str(),
        poison: poison.as_ref().map(QueueUrl::as_str),
        plan_id,
    };
    let done = run_replay(&op.plan, &mut mover, &how).await?;
    let (stopped, left, r) = (&done.stopped, done.left, &done.record);
    publish(
        ctx,
        &a.target.book,
        &done.alert.iter().cloned().collect::<Vec<_>>(),
    )
    .await;
    if ctx.json {
        print_json(
            &json!({"queue": url.as_str(), "group": group, "plan": plan_id,
            "stopped": stopped, "record": r}),
        );
    } else {
        if let Some(why) = stopped {
            println!(
                "{} the replay stopped: {why}",
                ctx.style.bad("canary failed:")
            );
        }
        print_record(ctx, group, r);
    }
    Ok(if stopped.is_some() || left > 0 {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}
