//! The action function's replay and discard: the group's frozen plan (the one the widget showed,
//! of the size its confirmation named) moved with the engine's group actions
//! ([`redrive_engine::triage_act`]), begun, staged and finished in the book (the audit).
//!
//! - `replay-canary`: the canary alone ([`DEFAULT_CANARY`] message of the plan, the CLI's
//!   default) to the group's source queue, then its verdict: a copy back on the queue or on the
//!   poison queue within the window stops the replay and marks the group `replay-failed`. The
//!   rest stays on the queue for the next press or `redrive triage replay`, which widens.
//! - `discard`: each message of the plan archived to `ARCHIVE_BUCKET`/`ARCHIVE_PREFIX`, then
//!   deleted; only what was archived is deleted.
//!
//! Every queue is the function's configuration: the queue asked for is one of its queues, the
//! source is `SOURCE_QUEUE_URL` or one of the queue's dead-letter sources (SQS's redrive
//! policies), never a queue a request names.

use std::collections::BTreeSet;
use std::time::Duration;

use redrive_engine::aws::SqsQueue;
use redrive_engine::ports::Queue;
use redrive_engine::queue_facts::facts;
use redrive_engine::triage_act::archive::discard_plan;
use redrive_engine::triage_act::{
    ActError, DEFAULT_CANARY, DEFAULT_RATE, GroupPlan, ReplayPlan, StageMoved, StageMover,
    run_replay, sqs, verdict_window,
};
use redrive_engine::triage_store::TriageStore;
use redrive_shared::config::QueueUrl;
use redrive_shared::triage::state::Finish;
use tokio::time::Instant;

use crate::config::MoveConfig;
use crate::console::{BookReader, Console};
use crate::context::WidgetContext;
use crate::request::{ActionRequest, Kind};

/// Time kept after a verdict window for the verdict's walks, the book's writes and the answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(8);

/// The plan of `r`'s group that the widget showed (its plan id), as the book holds it; the
/// caller, for the audit, from the widget's context.
pub(crate) async fn shown_plan<S: TriageStore + BookReader + Clone>(
    console: &Console<S>,
    r: &ActionRequest,
    ctx: &WidgetContext,
) -> Result<GroupPlan<S>, ActError> {
    GroupPlan::load(
        console.store.clone(),
        r.queue.as_str(),
        &r.group,
        Some(&r.plan_id),
        &ctx.who(),
    )
    .await
}

/// Replays the canary of, or discards, the group's plan; answers what was done.
pub(crate) async fn act<S: TriageStore + BookReader + Clone>(
    console: &Console<S>,
    r: &ActionRequest,
    ctx: &WidgetContext,
    deadline: Option<Instant>,
) -> Result<String, ActError> {
    let moves = console.config.moves.as_ref().ok_or_else(|| {
        ActError::Refused("this function is not configured to move messages".into())
    })?;
    let op = shown_plan(console, r, ctx).await?;
    let current = op.record.plan_id.clone().unwrap_or_default();
    if current != r.plan_id {
        return Err(ActError::Refused(format!(
            "the widget showed plan {} of group {}, the book's current plan is {}: look at the group again (shown below) and act on what it holds now",
            r.plan_id,
            r.group,
            if current.is_empty() { "none" } else { &current }
        )));
    }
    let size = op.ids.len();
    if r.count != Some(size as u64) {
        return Err(ActError::Refused(format!(
            "the widget showed {} message(s) for plan {}, which holds {size}: look at the group again (shown below)",
            r.count.unwrap_or_default(),
            r.plan_id
        )));
    }
    let queue = SqsQueue {
        client: console.sqs.clone(),
    };
    match r.kind {
        Kind::Replay => replay(&queue, moves, &op, &r.queue, deadline).await,
        _ => discard(console, &queue, moves, &op, &r.queue).await,
    }
}

/// The replay's destination: the group's recorded source, when it is `SOURCE_QUEUE_URL` or a
/// queue whose redrive policy names `dlq`.
async fn source(
    queue: &SqsQueue,
    moves: &MoveConfig,
    dlq: &QueueUrl,
    recorded: Option<&str>,
) -> Result<QueueUrl, ActError> {
    let Some(name) = recorded.filter(|n| !n.is_empty()) else {
        return Err(ActError::Refused(
            "the group has no recorded source queue: replay it with `redrive triage replay --to QUEUE`".into(),
        ));
    };
    // The book records a source by its name (the last segment of an ARN or URL).
    let name = name.rsplit([':', '/']).next().unwrap_or(name);
    if let Some(s) = moves.source.as_ref().filter(|s| s.name() == name) {
        return Ok(s.clone());
    }
    let sources = queue.dead_letter_sources(dlq.as_str()).await?;
    sources
        .iter()
        .filter_map(|u| QueueUrl::parse(u).ok())
        .find(|u| u.name() == name)
        .ok_or_else(|| {
            ActError::Refused(format!(
                "the group's source {name} is neither SOURCE_QUEUE_URL nor a queue whose redrive policy names {}: replay it with `redrive triage replay --to QUEUE`",
                dlq.name()
            ))
        })
}

/// The console's stages: moved with [`sqs::replay_stage`], judged on the queue and the poison
/// queue.
struct ConsoleMover<'a> {
    queue: &'a SqsQueue,
    from: &'a QueueUrl,
    to: &'a QueueUrl,
    to_max_bytes: usize,
    poison: Option<&'a QueueUrl>,
}

impl StageMover for ConsoleMover<'_> {
    type Error = ActError;

    async fn send(&mut self, remaining: &BTreeSet<String>, n: u64) -> Result<StageMoved, ActError> {
        Ok(sqs::replay_stage(
            self.queue,
            self.from,
            self.to,
            self.to_max_bytes,
            remaining,
            n,
        )
        .await?)
    }

    async fn came_back(
        &mut self,
        originals: &BTreeSet<String>,
        plan: &BTreeSet<String>,
    ) -> Result<(u64, u64), ActError> {
        let back = sqs::came_back(self.queue, self.from.as_str(), originals, plan).await?;
        let isolated = match self.poison.filter(|p| *p != self.from) {
            Some(p) => sqs::came_back(self.queue, p.as_str(), originals, plan).await?,
            None => 0,
        };
        Ok((back, isolated))
    }
}

async fn replay<S: TriageStore>(
    queue: &SqsQueue,
    moves: &MoveConfig,
    op: &GroupPlan<S>,
    from: &QueueUrl,
    deadline: Option<Instant>,
) -> Result<String, ActError> {
    let to = source(queue, moves, from, op.record.source.as_deref()).await?;
    if from.is_fifo() {
        let mixed = sqs::interleaved(queue, from.as_str(), &op.plan()).await?;
        if !mixed.is_empty() {
            return Err(ActError::Refused(format!(
                "message group(s) {} hold messages of other causes before this group's: replaying it would reorder them; replay or discard those first",
                mixed.join(", ")
            )));
        }
    }
    let full = match moves.canary_window {
        Some(w) => w,
        None => {
            let source = facts(queue, to.as_str()).await?;
            verdict_window(
                source.visibility_timeout_seconds,
                source.max_receive_count(),
            )
        }
    };
    let window = match deadline {
        Some(d) => full.min(
            d.saturating_duration_since(Instant::now())
                .saturating_sub(ANSWER_MARGIN),
        ),
        None => full,
    };
    if window.is_zero() {
        return Err(ActError::Refused(
            "the function has no time left for a verdict: raise its timeout (TRIAGE_CONSOLE_TIMEOUT_SECONDS)".into(),
        ));
    }
    let to_max_bytes = sqs::max_bytes(queue, to.as_str()).await?;
    let how = ReplayPlan::canary_only(op.ids.len(), DEFAULT_CANARY, window, DEFAULT_RATE);
    op.begin("replay").await?;
    let mut mover = ConsoleMover {
        queue,
        from,
        to: &to,
        to_max_bytes,
        poison: moves.poison.as_ref(),
    };
    let done = run_replay(op, &mut mover, &how).await?;
    let size = op.ids.len();
    let cut = if window < full {
        format!(
            " (the window, {} s, was cut to the function's time; `redrive triage replay` waits it whole)",
            full.as_secs()
        )
    } else {
        String::new()
    };
    Ok(match &done.stopped {
        Some(why) => format!(
            "Canary failed: {why}. The replay of plan {} (group {}) stopped and the group is marked replay-failed; the other {} message(s) stay on {}.",
            op.plan_id,
            op.group,
            done.left,
            from.name()
        ),
        None if done.sent == 0 => format!(
            "No message of plan {} (group {}) was replayed: none could be moved from {} (see the audit).",
            op.plan_id,
            op.group,
            from.name()
        ),
        None => format!(
            "Replayed a canary of {} of the {size} message(s) of plan {} (group {}) from {} to {}: none came back within {} s{cut}. {} message(s) stay on {}: press Replay with canary again, or widen with `redrive triage replay`.",
            done.sent,
            op.plan_id,
            op.group,
            from.name(),
            to.name(),
            window.as_secs(),
            done.left,
            from.name()
        ),
    })
}

async fn discard<S: TriageStore + BookReader + Clone>(
    console: &Console<S>,
    queue: &SqsQueue,
    moves: &MoveConfig,
    op: &GroupPlan<S>,
    from: &QueueUrl,
) -> Result<String, ActError> {
    op.begin("discard").await?;
    let done = discard_plan(queue, &console.s3, from, &moves.archive, &op.plan()).await?;
    op.finish(Finish::Done { left: done.left() }).await?;
    let location = format!(
        "s3://{}/{}/{}",
        moves.archive.bucket,
        moves.archive.prefix,
        from.name()
    );
    let mut text = format!(
        "Discarded {} of the {} message(s) of plan {} (group {}) from {}, each archived first to {location} ({} object(s)); restore with: redrive import --from {location} --to QUEUE.",
        done.deleted,
        op.ids.len(),
        op.plan_id,
        op.group,
        from.name(),
        done.objects.len()
    );
    if done.left() > 0 {
        text.push_str(&format!(
            " {} archived message(s) could not be deleted and stay on the queue.",
            done.left()
        ));
    }
    if done.not_found > 0 {
        text.push_str(&format!(
            " {} message(s) of the plan were no longer on the queue.",
            done.not_found
        ));
    }
    Ok(text)
}
