//! Triage's group actions that move messages, for every front end that offers them (the CLI's
//! `redrive triage replay` and `discard`, the triage console's action function): the group's
//! frozen plan loaded from its queue's book, the confirmation its size needs, the operation
//! begun, staged and finished in the book (the audit), and the replay's stages judged one by
//! one, stopping by itself when a canary comes back.
//!
//! What a front end brings is how it moves a stage's messages ([`StageMover`]): the CLI moves
//! them with its `replay` and `export` walks, which print their reports; the console moves them
//! with [`sqs`] (and [`archive`]), which print nothing. Every move sends a copy (or stores an
//! archive object) first and deletes an original only once that was acknowledged.

#[cfg(feature = "s3")]
pub mod archive;
pub mod sqs;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redrive_shared::triage::state::{Alert, Book, Finish, GroupRecord, Refused, stages};

use crate::now_ms;
use crate::ports::PortError;
use crate::triage_store::{self, TriageError, TriageStore};

/// Above this many messages an action needs an explicit confirmation (`--yes`, a typed yes).
pub const CONFIRM_ABOVE: usize = 10;
/// Above this many messages an action needs the group id typed (`--confirm GROUP`).
pub const TYPED_ABOVE: usize = 1000;
/// Messages in a replay's first stage, the canary, unless the operator asks for more.
pub const DEFAULT_CANARY: u64 = 1;
/// The most a canary may be.
pub const MAX_CANARY: u64 = 100;
/// Messages a replay sends per second at most, unless the operator asks otherwise.
pub const DEFAULT_RATE: u64 = 50;
/// Added to a source's visibility timeout × maxReceiveCount for the verdict window: the time a
/// consumer takes to fail a message back to the DLQ.
pub const WINDOW_MARGIN: Duration = Duration::from_secs(10);

/// Why a group action was not done.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// Refused before or without moving a message (an unknown group or plan, a busy group, a
    /// size not confirmed, a configuration that does not allow it): nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// An AWS call failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

impl From<TriageError> for ActError {
    fn from(e: TriageError) -> Self {
        match e {
            TriageError::Port(p) => Self::Port(p),
            other => Self::Refused(other.to_string()),
        }
    }
}

/// The confirmation acting on `n` messages of `group` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// Up to [`CONFIRM_ABOVE`]: none.
    None,
    /// Up to [`TYPED_ABOVE`]: a yes.
    Yes,
    /// More: the group id, typed.
    TypedGroup,
}

impl Confirmation {
    pub fn for_size(n: usize) -> Self {
        if n > TYPED_ABOVE {
            Self::TypedGroup
        } else if n > CONFIRM_ABOVE {
            Self::Yes
        } else {
            Self::None
        }
    }
}

/// The verdict window after a replay stage: the source's visibility timeout (30 s when it does
/// not say) × its maxReceiveCount (1 without a redrive policy), plus [`WINDOW_MARGIN`].
pub fn verdict_window(visibility_seconds: Option<u64>, max_receive_count: Option<u64>) -> Duration {
    Duration::from_secs(visibility_seconds.unwrap_or(30) * max_receive_count.unwrap_or(1))
        + WINDOW_MARGIN
}

/// An action about to move a group's frozen plan: the queue's book, the plan the book names
/// (or the one asked for), its message ids as the last pass stored them, and the group's record.
pub struct GroupPlan<S> {
    store: S,
    /// The queue's URL, as its book is kept.
    pub queue: String,
    pub group: String,
    /// Who acts, for the audit.
    pub who: String,
    pub plan_id: String,
    pub ids: Vec<String>,
    pub record: GroupRecord,
}

impl<S: TriageStore> GroupPlan<S> {
    /// The group's plan from its queue's book (`plan`: a plan id asked for; default the one
    /// the book holds), refused when the group or the plan is unknown.
    pub async fn load(
        store: S,
        queue: &str,
        group: &str,
        plan: Option<&str>,
        who: &str,
    ) -> Result<Self, ActError> {
        let book = triage_store::load_or_new(&store, queue).await?;
        let record = book
            .get(group)
            .map_err(|e| ActError::Refused(e.to_string()))?
            .clone();
        let plan_id = plan
            .map(str::to_string)
            .or_else(|| record.plan_id.clone())
            .ok_or_else(|| {
                ActError::Refused(format!(
                    "group {group} has no plan: run `redrive triage` on the queue with the table first"
                ))
            })?;
        let ids = store.load_plan(&plan_id).await?.ok_or_else(|| {
            ActError::Refused(format!(
                "no plan {plan_id} is stored: run `redrive triage` again"
            ))
        })?;
        Ok(Self {
            store,
            queue: queue.to_string(),
            group: group.to_string(),
            who: who.to_string(),
            plan_id,
            ids,
            record,
        })
    }

    /// The plan's message ids.
    pub fn plan(&self) -> BTreeSet<String> {
        self.ids.iter().cloned().collect()
    }

    /// Marks `operation` (`replay`, `discard`) begun on the plan in the book, audited with the
    /// plan and its size; refused while another operation runs on the group.
    pub async fn begin(&self, operation: &str) -> Result<(), ActError> {
        let size = self.ids.len() as u64;
        self.update(|b| {
            b.begin(
                &self.group,
                operation,
                &self.who,
                &self.plan_id,
                size,
                now_ms(),
            )
        })
        .await?;
        Ok(())
    }

    /// Adds what one replay stage moved to the group's record, before its verdict.
    pub async fn replay_stage(&self, sent: u64, deleted: u64) -> Result<(), ActError> {
        self.update(|b| {
            b.replay_stage(&self.group, sent, deleted);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Adds a replay stage's verdict to the group's record.
    pub async fn replay_verdict(&self, back: u64, isolated: u64) -> Result<(), ActError> {
        self.update(|b| {
            b.replay_verdict(&self.group, back, isolated);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Ends the operation in the book: the alert it raised (a failed canary), and the group's
    /// record as saved.
    pub async fn finish(&self, outcome: Finish) -> Result<(Option<Alert>, GroupRecord), ActError> {
        let (alert, book) = self
            .update(|b| Ok(b.finish(&self.group, &self.who, outcome.clone(), now_ms())))
            .await?;
        let record = book
            .get(&self.group)
            .map_err(|e| ActError::Refused(e.to_string()))?
            .clone();
        Ok((alert, record))
    }

    async fn update<T>(
        &self,
        apply: impl FnMut(&mut Book) -> Result<T, Refused>,
    ) -> Result<(T, Book), ActError> {
        Ok(triage_store::update(&self.store, &self.queue, apply).await?)
    }
}

/// What one stage moved: each message sent (its MessageId on the queue and its chain's
/// original MessageId), how many of them were deleted from the queue, and how many messages
/// the stage meant to move were not (failed, refused, held for order, no source).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageMoved {
    pub sent: Vec<(String, String)>,
    pub deleted: u64,
    pub shortfall: u64,
}

/// How a front end moves a replay's stages and looks for copies that came back.
pub trait StageMover {
    type Error: From<ActError>;

    /// Replays up to `n` messages of `remaining` (the plan's ids not sent yet) to the source.
    fn send(
        &mut self,
        remaining: &BTreeSet<String>,
        n: u64,
    ) -> impl Future<Output = Result<StageMoved, Self::Error>>;

    /// Copies of `originals` (chains' original MessageIds) on the DLQ and on the poison queue
    /// that are not the plan's own messages: (back on the DLQ, isolated).
    fn came_back(
        &mut self,
        originals: &BTreeSet<String>,
        plan: &BTreeSet<String>,
    ) -> impl Future<Output = Result<(u64, u64), Self::Error>>;

    /// Waits out a stage's verdict (`sent` messages went out).
    fn wait(&mut self, verdict: Duration, sent: u64) -> impl Future<Output = ()> {
        let _ = sent;
        tokio::time::sleep(verdict)
    }
}

/// How a replay runs: its stages' sizes, the verdict window after each, the send rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayPlan {
    pub stages: Vec<u64>,
    pub window: Duration,
    /// Messages per second at most (at least 1).
    pub rate: u64,
}

impl ReplayPlan {
    /// The whole plan in stages: `canary` first, then 10, 100 and the rest.
    pub fn staged(size: usize, canary: u64, window: Duration, rate: u64) -> Self {
        Self {
            stages: stages(size as u64, canary),
            window,
            rate: rate.max(1),
        }
    }

    /// The canary alone: `canary` messages of the plan (at most its size), judged once.
    pub fn canary_only(size: usize, canary: u64, window: Duration, rate: u64) -> Self {
        let mut plan = Self::staged(size, canary, window, rate);
        plan.stages.truncate(1);
        plan
    }
}

/// How a replay ended.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// Why it stopped by itself: copies came back to the DLQ or were isolated within the
    /// verdict window.
    pub stopped: Option<String>,
    /// Messages of the plan not moved, over every run of it: what a stage could not move, what
    /// no stage was meant to move, and what no stage found visible.
    pub left: u64,
    /// Messages sent, over every stage.
    pub sent: u64,
    /// The alert the book raised (a failed canary).
    pub alert: Option<Alert>,
    /// The group's record as the book now holds it.
    pub record: GroupRecord,
}

/// Runs a begun replay's stages: each stage sent, its verdict waited for (the window, at least
/// the time its sends take at the rate), the copies that came back counted and recorded in the
/// book; a stage with copies back stops the replay (`canary-failed`), one that could not move
/// all it meant to ends it. Then the operation is finished in the book.
pub async fn run_replay<S: TriageStore, M: StageMover>(
    op: &GroupPlan<S>,
    mover: &mut M,
    how: &ReplayPlan,
) -> Result<ReplayOutcome, M::Error> {
    let plan = op.plan();
    let mut remaining = plan.clone();
    let mut stopped = None;
    let mut sent_total = 0u64;
    // What the runs of this plan before this one deleted (a run killed part-way, or one that
    // finished with messages left): only a message deleted is moved.
    let mut deleted = op
        .record
        .replay
        .as_ref()
        .filter(|t| t.plan_id == op.plan_id)
        .map_or(0, |t| t.deleted);
    for &n in &how.stages {
        if remaining.is_empty() {
            break;
        }
        let started = Instant::now();
        let moved = mover.send(&remaining, n).await?;
        let originals: BTreeSet<String> = moved.sent.iter().map(|(_, o)| o.clone()).collect();
        for (id, _) in &moved.sent {
            remaining.remove(id);
        }
        let sent = moved.sent.len() as u64;
        sent_total += sent;
        deleted += moved.deleted;
        op.replay_stage(sent, moved.deleted).await?;
        if sent == 0 {
            break;
        }
        let pace = Duration::from_millis(sent * 1000 / how.rate.max(1));
        let verdict = how.window.max(pace.saturating_sub(started.elapsed()));
        mover.wait(verdict, sent).await;
        let (back, isolated) = mover.came_back(&originals, &plan).await?;
        op.replay_verdict(back, isolated).await?;
        if back + isolated > 0 {
            stopped = Some(format!(
                "{back} of {sent} came back to the DLQ and {isolated} were isolated within {} s",
                verdict.as_secs()
            ));
            break;
        }
        if moved.shortfall > 0 {
            break;
        }
    }
    // Not moved: what a stage could not move (failed, refused, sent but not deleted), what no
    // stage was meant to move (a canary-only replay), and what no stage found visible (held by
    // a run killed part-way until its hold ends). A group is resolved only when every message
    // of its plan was deleted after its copy was sent.
    let left = (plan.len() as u64).saturating_sub(deleted);
    let finish = match stopped.clone() {
        Some(why) => Finish::CanaryFailed(why),
        None => Finish::Done { left },
    };
    let (alert, record) = op.finish(finish).await?;
    Ok(ReplayOutcome {
        stopped,
        left,
        sent: sent_total,
        alert,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirmation_grows_with_the_size() {
        assert_eq!(Confirmation::for_size(10), Confirmation::None);
        assert_eq!(Confirmation::for_size(11), Confirmation::Yes);
        assert_eq!(Confirmation::for_size(1000), Confirmation::Yes);
        assert_eq!(Confirmation::for_size(1001), Confirmation::TypedGroup);
    }

    #[test]
    fn the_window_is_the_sources_retries_plus_a_margin() {
        assert_eq!(verdict_window(Some(20), Some(3)), Duration::from_secs(70));
        assert_eq!(verdict_window(None, None), Duration::from_secs(40));
    }

    #[test]
    fn a_canary_only_replay_is_the_first_stage() {
        let w = Duration::from_secs(1);
        assert_eq!(ReplayPlan::staged(12, 1, w, 50).stages, [1, 10, 1]);
        assert_eq!(ReplayPlan::canary_only(12, 1, w, 50).stages, [1]);
        assert_eq!(
            ReplayPlan::canary_only(0, 1, w, 50).stages,
            Vec::<u64>::new()
        );
    }
}

#[cfg(test)]
mod replay_tests {
    use std::sync::Arc;

    use redrive_shared::config::QueueUrl;
    use redrive_shared::triage::state::State;

    use super::*;
    use crate::fake::FakeSqs;
    use crate::triage_store::MemoryTriageStore;

    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";
    const POISON: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-poison";
    const SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
    const G: &str = "g2-00000000000000aa";

    struct FakeMover {
        sqs: Arc<FakeSqs>,
        /// Fails each canary back to the DLQ, as a consumer whose cause is not fixed.
        fail_back: bool,
        /// Never ends a verdict window, as a run killed in it.
        hang_in_window: bool,
    }

    impl StageMover for FakeMover {
        type Error = ActError;

        async fn send(
            &mut self,
            remaining: &BTreeSet<String>,
            n: u64,
        ) -> Result<StageMoved, ActError> {
            let (from, to) = (
                QueueUrl::parse(DLQ).unwrap(),
                QueueUrl::parse(SOURCE).unwrap(),
            );
            let moved = sqs::replay_stage(&self.sqs, &from, &to, 262_144, remaining, n).await?;
            if self.fail_back {
                for m in self.sqs.messages(SOURCE) {
                    self.sqs.push(DLQ, &m.body, m.attributes.clone(), None);
                }
            }
            Ok(moved)
        }

        async fn came_back(
            &mut self,
            originals: &BTreeSet<String>,
            plan: &BTreeSet<String>,
        ) -> Result<(u64, u64), ActError> {
            let back = sqs::came_back(&self.sqs, DLQ, originals, plan).await?;
            let isolated = sqs::came_back(&self.sqs, POISON, originals, plan).await?;
            Ok((back, isolated))
        }

        async fn wait(&mut self, verdict: Duration, _: u64) {
            if self.hang_in_window {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(verdict).await;
        }
    }

    async fn world(n: usize) -> (Arc<FakeSqs>, MemoryTriageStore, Vec<String>, String) {
        let sqs = FakeSqs::new();
        for url in [DLQ, POISON, SOURCE] {
            sqs.create_queue(url);
        }
        let ids: Vec<String> = (0..n)
            .map(|i| sqs.push(DLQ, &format!("order {i}"), Default::default(), None))
            .collect();
        let other = sqs.push(DLQ, "another cause", Default::default(), None);
        let store = MemoryTriageStore::default();
        store.save_plan("plan-1", &ids).await.unwrap();
        triage_store::update(&store, DLQ, |b| {
            b.observe(
                G,
                "order rejected",
                Some("orders"),
                n as u64,
                Some(("plan-1", n as u64)),
                0,
            );
            Ok(())
        })
        .await
        .unwrap();
        (sqs, store, ids, other)
    }

    #[tokio::test]
    async fn a_canary_only_replay_moves_one_message_of_the_plan_and_leaves_the_rest() {
        let (sqs, store, ids, other) = world(3).await;
        let op = GroupPlan::load(store, DLQ, G, None, "tester")
            .await
            .unwrap();
        assert_eq!(op.ids, ids);
        op.begin("replay").await.unwrap();
        let how = ReplayPlan::canary_only(op.ids.len(), 1, Duration::ZERO, 50);
        let mut mover = FakeMover {
            sqs: sqs.clone(),
            fail_back: false,
            hang_in_window: false,
        };
        let done = run_replay(&op, &mut mover, &how).await.unwrap();

        assert_eq!(
            (done.stopped.as_deref(), done.left, done.sent),
            (None, 2, 1)
        );
        let on_source = sqs.messages(SOURCE);
        assert_eq!(on_source.len(), 1);
        let on_dlq: Vec<String> = sqs
            .messages(DLQ)
            .into_iter()
            .map(|m| m.message_id)
            .collect();
        assert_eq!(on_dlq.len(), 3);
        assert!(
            on_dlq.contains(&other),
            "a message outside the plan never moves"
        );
        let r = &done.record;
        assert_eq!(r.state, State::Acknowledged);
        assert_eq!(r.replay.as_ref().unwrap().stages, vec![1]);
        let audit: Vec<&str> = r.audit.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(audit, ["replay", "replay-finished"]);
        assert_eq!(r.audit[0].count, Some(3));
    }

    #[tokio::test]
    async fn a_canary_that_comes_back_stops_the_staged_replay_after_its_first_stage() {
        let (sqs, store, _, _) = world(12).await;
        let op = GroupPlan::load(store, DLQ, G, None, "tester")
            .await
            .unwrap();
        op.begin("replay").await.unwrap();
        let how = ReplayPlan::staged(op.ids.len(), 1, Duration::ZERO, 50);
        assert_eq!(how.stages, [1, 10, 1]);
        let mut mover = FakeMover {
            sqs: sqs.clone(),
            fail_back: true,
            hang_in_window: false,
        };
        let done = run_replay(&op, &mut mover, &how).await.unwrap();

        assert!(
            done.stopped
                .as_deref()
                .unwrap()
                .starts_with("1 of 1 came back"),
            "{done:?}"
        );
        assert_eq!(done.sent, 1, "no stage after the failed canary");
        assert_eq!(done.record.state, State::ReplayFailed);
        assert_eq!(done.alert.map(|a| a.kind).as_deref(), Some("canary-failed"));
        let audit: Vec<&str> = done
            .record
            .audit
            .iter()
            .map(|e| e.action.as_str())
            .collect();
        assert_eq!(audit, ["replay", "replay-stopped"]);
    }

    #[tokio::test]
    async fn a_run_resumed_while_a_killed_run_holds_the_plan_is_not_resolved_until_all_moved() {
        // GIVEN a replay of five killed in its canary's window, the other four then held by a
        // run killed while it walked the queue
        let (sqs, store, ids, _) = world(5).await;
        let how = ReplayPlan::staged(ids.len(), 1, Duration::ZERO, 50);
        let op = GroupPlan::load(store.clone(), DLQ, G, None, "tester")
            .await
            .unwrap();
        op.begin("replay").await.unwrap();
        let mut mover = FakeMover {
            sqs: sqs.clone(),
            fail_back: false,
            hang_in_window: true,
        };
        let killed = tokio::time::timeout(
            Duration::from_millis(200),
            run_replay(&op, &mut mover, &how),
        )
        .await;
        assert!(killed.is_err(), "the run was stopped in its window");
        assert_eq!(sqs.messages(SOURCE).len(), 1, "the canary moved");
        let held = sqs.receive_now(DLQ, 10, 120).unwrap();
        assert_eq!(
            held.len(),
            5,
            "four of the plan and the other cause, in flight"
        );
        mover.hang_in_window = false;

        // A run of the plan as the operator starts one: loaded from the book, begun, run.
        let run_again = async |mover: &mut FakeMover| {
            let op = GroupPlan::load(store.clone(), DLQ, G, None, "tester")
                .await
                .unwrap();
            op.begin("replay").await.unwrap();
            run_replay(&op, mover, &how).await.unwrap()
        };

        // WHEN it is run again while they are held
        let done = run_again(&mut mover).await;

        // THEN nothing more moved and the group is not resolved: four of the plan are not moved
        assert_eq!(
            (done.stopped.as_deref(), done.left, done.sent),
            (None, 4, 0)
        );
        assert_eq!(done.record.state, State::Acknowledged);
        assert!(
            done.record
                .audit
                .last()
                .unwrap()
                .detail
                .as_deref()
                .unwrap()
                .starts_with("4 message(s) of the plan not moved"),
            "{:?}",
            done.record.audit
        );

        // WHEN the hold ends and it is run once more
        sqs.expire_visibility(DLQ);
        let done = run_again(&mut mover).await;

        // THEN the four move, counted on from the runs before, and the group is resolved
        assert_eq!(
            (done.stopped.as_deref(), done.left, done.sent),
            (None, 0, 4)
        );
        assert_eq!(done.record.state, State::Resolved);
        let t = done.record.replay.as_ref().unwrap();
        assert_eq!((t.sent, t.deleted), (5, 5));
        assert_eq!(sqs.messages(SOURCE).len(), 5);
        assert_eq!(sqs.messages(DLQ).len(), 1, "the other cause stays");
    }
}
