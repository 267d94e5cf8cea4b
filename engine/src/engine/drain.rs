//! One drain: pipelines that receive from the DLQ and hand each batch on, under the run's
//! budget, deadline, pacer and gate; one tally of what happened to each message.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redrive_shared::decision::Decision;
use redrive_shared::limits::{HeldGroups, MAX_RECEIVE};
use tokio::time::Instant;

use super::action::Action;
use super::gate::{Gate, Verdict};
use super::onhold::OnHold;
use super::pacer::Pacer;
use super::{DrainError, DrainRequest, Engine, MessageRecord, StopReason, Summary};
use crate::circuit::CircuitStore;
use crate::lock;
use crate::ports::{Alarms, HandleEntry, Metrics, PortError, Queue, ReceiveRequest, Received};

/// What happened to the messages of a run, counted.
#[derive(Default)]
pub(super) struct Tally {
    received: AtomicU64,
    redriven: AtomicU64,
    isolated: AtomicU64,
    failed: AtomicU64,
    waiting: AtomicU64,
    hops: AtomicU64,
    unplaceable: AtomicU64,
    on_hold: AtomicU64,
    ungranted: AtomicU64,
}

impl Tally {
    pub(super) fn received(&self, n: u64) {
        self.received.fetch_add(n, Ordering::SeqCst);
    }

    /// Messages received and then kept on the DLQ untouched: not counted as received, so that
    /// received is still redriven + isolated + failed (+ waiting).
    pub(super) fn kept(&self, n: u64) {
        self.received.fetch_sub(n, Ordering::SeqCst);
    }

    /// A message the poison queue rejects too: it stays on the DLQ for a human.
    pub(super) fn unplaceable(&self) {
        self.unplaceable.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts one message's action.
    pub(super) fn count(&self, action: &Action) {
        let counter = match action {
            // Counted apart, with the messages left for their source ([`Drain::leave_ungranted`]).
            Action::Ungranted => return,
            Action::Redriven | Action::Plan(super::action::Move::Redrive, _) => &self.redriven,
            Action::Isolated(_) | Action::Plan(super::action::Move::Isolate, _) => &self.isolated,
            Action::Waiting | Action::Plan(super::action::Move::Wait, _) => &self.waiting,
            Action::SendFailed | Action::DeleteFailed | Action::HeldForOrder | Action::Requeued => {
                &self.failed
            }
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts the action of a hop counted apart ([`DrainRequest::max_hops`]): sent on, it is
    /// a hop, not a message received; anything else (its send or its delete failed) counts
    /// as any message's.
    pub(super) fn count_hop(&self, action: &Action) {
        if *action == Action::Waiting {
            self.kept(1);
            self.hops.fetch_add(1, Ordering::SeqCst);
        } else {
            self.count(action);
        }
    }

    pub(super) fn redriven_so_far(&self) -> u64 {
        self.redriven.load(Ordering::SeqCst)
    }
}

/// A message this run received.
struct Claim {
    /// Its latest receipt handle: the one a delete or a change of visibility must use (SQS
    /// answers a delete with an older one with success, and deletes nothing).
    handle: String,
    /// Its copy was acknowledged: the original is deleted, or meant to be.
    moved: bool,
}

/// One drain's state, shared by its pipelines.
pub(super) struct Drain<'a> {
    remaining: AtomicU32,
    /// Hops this run may still send on, when they are counted apart from `remaining`
    /// ([`DrainRequest::max_hops`]); `None`: a hop is a message of the budget.
    hops_left: Option<AtomicU32>,
    stop: Mutex<Option<StopReason>>,
    pub(super) tally: Tally,
    /// Each message's record, when the request asked for them.
    records: Option<Mutex<Vec<MessageRecord>>>,
    /// Messages kept until the end, then made visible again: a dry run's, and those the gate
    /// kept from being handled.
    held: Mutex<Vec<HandleEntry>>,
    /// FIFO: the groups held back for the rest of the run.
    pub(super) held_groups: Mutex<HeldGroups>,
    pacer: Option<Pacer>,
    /// No drain call runs past this (the deadline minus the post-drain reserve).
    pub(super) calls_end: Option<Instant>,
    dlq_unreadable: Mutex<Option<PortError>>,
    /// What the drain asks before each batch; `None` when the circuit is off.
    pub(super) gate: Option<&'a dyn Gate>,
    /// Each message this run received, by MessageId.
    claims: Mutex<HashMap<String, Claim>>,
    /// The groups an operator held, and the messages left under each.
    on_hold: Option<OnHold>,
    /// The sources this run may not send to (AccessDenied, KMS): their messages stay on the
    /// DLQ for the rest of the run, untried.
    ungranted: Mutex<HashSet<String>>,
}

impl Drain<'_> {
    pub(super) fn stop(&self, reason: StopReason) {
        lock(&self.stop).get_or_insert(reason);
    }

    fn stopped(&self) -> bool {
        lock(&self.stop).is_some()
    }

    fn reserve(&self, want: u32) -> u32 {
        let mut got = 0;
        let _ = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                got = r.min(want);
                Some(r - got)
            });
        got
    }

    fn unreserve(&self, n: u32) {
        self.remaining.fetch_add(n, Ordering::SeqCst);
    }

    /// Hops are counted apart from the budget ([`DrainRequest::max_hops`]).
    pub(super) fn counts_hops(&self) -> bool {
        self.hops_left.is_some()
    }

    /// `n` hops of a batch handled: their share of the budget given back, taken from the hops
    /// left instead; once those are spent the drain stops at its limit.
    fn spend_hops(&self, n: u32) {
        let Some(left) = &self.hops_left else {
            return;
        };
        if n == 0 {
            return;
        }
        self.unreserve(n);
        let before = left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| {
                Some(l.saturating_sub(n))
            })
            .unwrap_or(0);
        if before <= n {
            self.stop(StopReason::Limit);
        }
    }

    pub(super) fn hold(&self, entries: impl IntoIterator<Item = HandleEntry>) {
        lock(&self.held).extend(entries);
    }

    /// Claims each received message for this run: the messages it does not have yet, and the
    /// handles of those received again after their copy was acknowledged (to delete with). A
    /// message this run already has (SQS is at-least-once; a hold can lapse) is never handled
    /// twice: one still being handled keeps its place, this receive's handle its latest.
    fn claim(&self, messages: Vec<Received>) -> (Vec<Received>, Vec<HandleEntry>) {
        let mut claims = lock(&self.claims);
        let mut fresh = Vec::with_capacity(messages.len());
        let mut moved = Vec::new();
        for m in messages {
            let Some(claim) = claims.get_mut(&m.message_id) else {
                claims.insert(
                    m.message_id.clone(),
                    Claim {
                        handle: m.receipt_handle.clone(),
                        moved: false,
                    },
                );
                fresh.push(m);
                continue;
            };
            claim.handle.clone_from(&m.receipt_handle);
            if claim.moved {
                tracing::info!(message_id = %m.message_id, action = "duplicate:deleted", "received again after its copy was acknowledged: deleted, no second copy");
                moved.push(HandleEntry {
                    id: moved.len().to_string(),
                    receipt_handle: m.receipt_handle,
                });
            } else {
                tracing::info!(message_id = %m.message_id, action = "duplicate:skipped", "received again while being handled: no second copy");
            }
        }
        (fresh, moved)
    }

    /// The latest receipt handle of `message_id`, `given` when this run does not know it.
    pub(super) fn latest_handle(&self, message_id: &str, given: &str) -> String {
        lock(&self.claims)
            .get(message_id)
            .map_or_else(|| given.to_string(), |c| c.handle.clone())
    }

    /// After its batch: a message whose copy was acknowledged stays claimed, as moved; another
    /// is left to a later receive of this run.
    pub(super) fn settled(&self, message_id: &str, moved: bool) {
        let mut claims = lock(&self.claims);
        if moved {
            if let Some(c) = claims.get_mut(message_id) {
                c.moved = true;
            }
        } else {
            claims.remove(message_id);
        }
    }

    /// The latest handles of the messages among `ids` still being handled.
    fn in_hand(&self, ids: &[String]) -> Vec<HandleEntry> {
        let claims = lock(&self.claims);
        HandleEntry::numbered(
            ids.iter()
                .filter_map(|id| claims.get(id).filter(|c| !c.moved))
                .map(|c| c.handle.clone()),
        )
    }

    /// Whether the source at `url` refused this run's sends (see [`Self::deny`]).
    pub(super) fn ungranted(&self, url: &str) -> bool {
        lock(&self.ungranted).contains(url)
    }

    /// The source at `url` refused to let this run send to it: its messages are left on the
    /// DLQ from now on. True the first time.
    pub(super) fn deny(&self, url: &str) -> bool {
        lock(&self.ungranted).insert(url.to_string())
    }

    /// Messages received for an ungranted source: kept on the DLQ untouched (made visible
    /// again at the end of the run), counted apart from what was received, taking nothing of
    /// the budget. They stay claimed, so that a receive of them again in this run does not try
    /// them again.
    pub(super) fn leave_ungranted(&self, entries: Vec<HandleEntry>) {
        let n = entries.len() as u64;
        self.unreserve(u32::try_from(n).unwrap_or(u32::MAX));
        self.tally.kept(n);
        self.tally.ungranted.fetch_add(n, Ordering::SeqCst);
        self.hold(entries);
    }

    /// `d` is a hop counted apart: a later hop of a wait begun earlier, in a run that counts
    /// hops apart.
    pub(super) fn is_hop(&self, d: &Decision) -> bool {
        self.counts_hops() && matches!(d, Decision::Wait(w) if w.continued)
    }

    pub(super) fn keeps_records(&self) -> bool {
        self.records.is_some()
    }

    pub(super) fn record(&self, record: MessageRecord) {
        if let Some(records) = &self.records {
            lock(records).push(record);
        }
    }

    /// The summary of the drain, once its pipelines ended; a DLQ that could not be read fails
    /// it, with what it did before.
    fn outcome(self, dry_run: bool) -> Result<Summary, DrainError> {
        let stopped_because = lock(&self.stop).unwrap_or(StopReason::Limit);
        let unreadable = lock(&self.dlq_unreadable).take();
        let t = &self.tally;
        let summary = Summary {
            received: t.received.load(Ordering::SeqCst),
            redriven: t.redriven.load(Ordering::SeqCst),
            isolated: t.isolated.load(Ordering::SeqCst),
            failed: t.failed.load(Ordering::SeqCst),
            unplaceable: t.unplaceable.load(Ordering::SeqCst),
            waiting: t.waiting.load(Ordering::SeqCst),
            hops: t.hops.load(Ordering::SeqCst),
            on_hold: t.on_hold.load(Ordering::SeqCst),
            ungranted: t.ungranted.load(Ordering::SeqCst),
            records: self
                .records
                .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
                .unwrap_or_default(),
            ..Summary::new(dry_run, stopped_because)
        };
        match unreadable {
            Some(reason) => Err(DrainError::DlqUnreadable {
                reason,
                summary: Box::new(summary),
            }),
            None => Ok(summary),
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Drains up to `request.max_messages`, several pipelines at once (one for FIFO queues).
    /// A DLQ that cannot be read fails the drain ([`DrainError`], with what it did before).
    pub async fn drain(&self, request: &DrainRequest) -> Result<Summary, DrainError> {
        self.drain_with(request, None).await
    }

    /// [`Self::drain`], asking `gate` before each batch when there is one.
    pub(super) async fn drain_with(
        &self,
        request: &DrainRequest,
        gate: Option<&dyn Gate>,
    ) -> Result<Summary, DrainError> {
        if let Err(reason) = self.read_sources().await {
            tracing::error!(error = %reason, action = "sources-unknown", "cannot list the DLQ's sources: nothing is received");
            return Err(DrainError::DlqUnreadable {
                reason,
                summary: Box::new(Summary::new(request.dry_run, StopReason::Other)),
            });
        }
        // Any message may arrive already waiting (its notBefore set by another front end, the
        // workflow's long backoffs): its hop must end before the DLQ's retention could expire
        // its copy, whatever this engine's own backoff. Read once; the workflow re-reads it
        // every round.
        if !self.fifo() && !self.destinations.retention_known() {
            self.read_dlq_retention().await;
        }
        // The margin is at most a quarter of the time left, so that a short Lambda timeout
        // still drains; the reserve for the calls after the drain at most half the margin.
        let margin = request.deadline.map_or(self.settings.deadline_margin, |d| {
            self.settings
                .deadline_margin
                .min(d.saturating_duration_since(Instant::now()) / 4)
        });
        let reserve = self.settings.post_drain_reserve.min(margin / 2);
        let on_hold = match self.holds().await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, action = "holds-unknown", "cannot read triage's book: nothing is received, so that no held group is redriven");
                return Ok(Summary::new(request.dry_run, StopReason::Other));
            }
        };
        let drain = Drain {
            remaining: AtomicU32::new(request.max_messages),
            // A dry run holds what it receives: its hops take the budget.
            hops_left: request
                .max_hops
                .filter(|_| !request.dry_run)
                .map(AtomicU32::new),
            stop: Mutex::new(None),
            tally: Tally::default(),
            records: request.records.then(|| Mutex::new(Vec::new())),
            held: Mutex::new(Vec::new()),
            held_groups: Mutex::new(HeldGroups::default()),
            pacer: Pacer::new(self.config.max_messages_per_second),
            calls_end: request.deadline.map(|d| d - reserve),
            dlq_unreadable: Mutex::new(None),
            gate,
            claims: Mutex::new(HashMap::new()),
            on_hold,
            ungranted: Mutex::new(HashSet::new()),
        };
        let pipelines = if self.fifo() {
            1
        } else {
            self.config.max_concurrent_batches.max(1)
        };
        // A dry run (and a half-open circuit watching for its canary) holds what it received
        // until the end, so it never sees a message twice.
        let visibility = if request.dry_run || gate.is_some_and(|g| g.holds_all()) {
            let until_deadline = request.deadline.map_or(900, |d| {
                d.saturating_duration_since(Instant::now()).as_secs() + 60
            });
            until_deadline.clamp(60, 43_200) as i32
        } else {
            self.settings.visibility_seconds
        };
        join_all((0..pipelines).map(|_| self.pipeline(&drain, request, visibility, margin))).await;

        let held = std::mem::take(&mut *lock(&drain.held));
        if !held.is_empty() {
            self.release(&drain, held).await;
        }
        let mut drain = drain;
        if let Some(on_hold) = drain.on_hold.take() {
            self.record_left(on_hold, request.dry_run).await;
        }
        drain.outcome(request.dry_run)
    }

    async fn pipeline(
        &self,
        drain: &Drain<'_>,
        request: &DrainRequest,
        visibility: i32,
        margin: Duration,
    ) {
        let dlq = self.config.dlq_url.as_str();
        let near_deadline = |at: Instant| request.deadline.is_some_and(|d| at + margin >= d);
        loop {
            if drain.stopped() {
                return;
            }
            if near_deadline(Instant::now()) {
                drain.stop(StopReason::Deadline);
                return;
            }
            let most = drain
                .pacer
                .as_ref()
                .map_or(MAX_RECEIVE as u32, Pacer::batch);
            let want = drain.reserve(most);
            if want == 0 {
                // The budget is spent or held by other pipelines, which finish their share:
                // a drain that ends with no other reason ends at its limit.
                return;
            }
            let wait = self.settings.receive_wait_seconds;
            let end = drain.calls_end;
            let received = self
                .bounded(
                    end,
                    "ReceiveMessage",
                    self.queue
                        .receive(dlq, ReceiveRequest::new(want as i32, wait, visibility)),
                )
                .await;
            let messages = match received {
                Ok(m) => m,
                Err(_) if end.is_some_and(|e| Instant::now() >= e) => {
                    drain.unreserve(want);
                    drain.stop(StopReason::Deadline);
                    return;
                }
                Err(e) => {
                    // AccessDenied, KMS, a deleted queue, or a service that keeps failing: the
                    // invocation fails (and says so in a metric) instead of ending quietly.
                    tracing::error!(error = %e, action = "dlq-unreadable", "receiving from the DLQ failed for good; the invocation fails");
                    drain.unreserve(want);
                    lock(&drain.dlq_unreadable).get_or_insert(e);
                    drain.stop(StopReason::Other);
                    return;
                }
            };
            let got = messages.len().min(want as usize) as u32;
            drain.unreserve(want - got);
            if messages.is_empty() {
                drain.stop(StopReason::QueueEmpty);
                return;
            }
            let (messages, again) = drain.claim(messages);
            // A message received again takes nothing of the budget.
            drain.unreserve(got.saturating_sub(messages.len() as u32));
            if !again.is_empty() {
                self.delete_from_dlq(drain, again).await;
            }
            // A held group's messages stay on the DLQ: kept until the end, then visible
            // again; they take nothing of the budget.
            let messages = match &drain.on_hold {
                Some(on_hold) => {
                    let (held, rest) = on_hold.split(messages);
                    if !held.is_empty() {
                        drain.unreserve(held.len() as u32);
                        drain
                            .tally
                            .on_hold
                            .fetch_add(held.len() as u64, Ordering::SeqCst);
                        drain.hold(held.into_iter().map(|m| HandleEntry {
                            id: m.message_id,
                            receipt_handle: m.receipt_handle,
                        }));
                    }
                    rest
                }
                None => messages,
            };
            if messages.is_empty() {
                continue;
            }
            // The velocity cap paces the sends: the batch waits, held, until it may go.
            let due = drain.pacer.as_ref().map(|p| p.grant(messages.len() as u32));
            if due.is_some_and(near_deadline) {
                // Too late to send them: kept, and made visible again at the end.
                drain.unreserve(messages.len() as u32);
                drain.hold(messages.into_iter().map(|m| HandleEntry {
                    id: m.message_id,
                    receipt_handle: m.receipt_handle,
                }));
                drain.stop(StopReason::Deadline);
                return;
            }
            let ids: Vec<String> = messages.iter().map(|m| m.message_id.clone()).collect();
            let batch = async {
                if let Some(at) = due {
                    tokio::time::sleep_until(at).await;
                }
                self.handle_batch(drain, request, messages).await;
            };
            self.holding(drain, &ids, visibility, batch).await;
        }
    }

    /// One received batch: the gate asked, each message decided and handled.
    async fn handle_batch(
        &self,
        drain: &Drain<'_>,
        request: &DrainRequest,
        messages: Vec<Received>,
    ) {
        drain.tally.received(messages.len() as u64);
        // The gate (the adaptive circuit) counts bounced copies before anything is sent;
        // an open circuit (or a watch for the canary) keeps the batch on the DLQ.
        if let Some(gate) = drain.gate {
            let verdict = gate.admit(&messages, (self.clock)());
            if verdict == Verdict::Stop {
                drain.stop(StopReason::CircuitOpen);
            }
            if verdict != Verdict::Pass {
                drain.tally.kept(messages.len() as u64);
                drain.hold(messages.into_iter().map(|m| HandleEntry {
                    id: m.message_id,
                    receipt_handle: m.receipt_handle,
                }));
                return;
            }
        }
        let at_once = request.no_delay || drain.gate.is_some_and(|g| g.at_once());
        for (route, mut decided) in self.decide_routed(messages) {
            if at_once {
                // A canary goes out at once, a waiting message too: a copy delayed beyond
                // the window would let the canary pass untried.
                let now = (self.clock)();
                decided = decided
                    .into_iter()
                    .map(|(m, d)| (m, d.at_once(now)))
                    .collect();
            }
            let hops = decided.iter().filter(|(_, d)| drain.is_hop(d)).count();
            self.process_decided(drain, route.as_ref(), decided, request.dry_run)
                .await;
            drain.spend_hops(u32::try_from(hops).unwrap_or(u32::MAX));
        }
        if let Some(gate) = drain.gate {
            gate.redriven(drain.tally.redriven_so_far(), request.dry_run);
        }
    }

    /// Runs `work` on the received messages `ids` while holding them: every half of their
    /// visibility timeout (`visibility` seconds, from their receive), the timeout of those
    /// still in hand is set again, with their latest handles, so that it never lapses while
    /// they are handled and no other receiver gets them meanwhile.
    async fn holding(
        &self,
        drain: &Drain<'_>,
        ids: &[String],
        visibility: i32,
        work: impl Future<Output = ()>,
    ) {
        let every = Duration::from_millis(u64::from(visibility.max(1).unsigned_abs()) * 500);
        let renew = async {
            loop {
                tokio::time::sleep(every).await;
                let entries = drain.in_hand(ids);
                if entries.is_empty() {
                    continue;
                }
                let dlq = self.config.dlq_url.as_str();
                let queue = &self.queue;
                let renewed = self
                    .calls(drain.calls_end)
                    .by_handle(
                        "ChangeMessageVisibilityBatch",
                        dlq,
                        entries,
                        |batch| async move {
                            queue.change_visibility_batch(dlq, &batch, visibility).await
                        },
                    )
                    .await;
                tracing::debug!(renewed = renewed.ok.len(), visibility, "hold renewed");
            }
        };
        tokio::select! {
            () = work => {}
            _ = renew => {}
        }
    }

    /// Deletes from the DLQ by receipt handle; the ids deleted.
    pub(super) async fn delete_from_dlq(
        &self,
        drain: &Drain<'_>,
        entries: Vec<HandleEntry>,
    ) -> HashSet<String> {
        let dlq = self.config.dlq_url.as_str();
        let queue = &self.queue;
        self.calls(drain.calls_end)
            .by_handle("DeleteMessageBatch", dlq, entries, |batch| async move {
                queue.delete_batch(dlq, &batch).await
            })
            .await
            .ok
    }

    /// Makes every held message visible again at once (a dry run's, those the gate kept).
    async fn release(&self, drain: &Drain<'_>, held: Vec<HandleEntry>) {
        let dlq = self.config.dlq_url.as_str();
        let end = drain.calls_end;
        for chunk in held.chunks(10) {
            let entries = HandleEntry::numbered(chunk.iter().map(|e| e.receipt_handle.clone()));
            match self
                .bounded(
                    end,
                    "ChangeMessageVisibilityBatch",
                    self.queue.change_visibility_batch(dlq, &entries, 0),
                )
                .await
            {
                Ok(o) => super::calls::log_entry_failures("ChangeMessageVisibilityBatch", dlq, &o),
                Err(e) => {
                    tracing::warn!(error = %e, "releasing dry-run messages failed; they reappear after their visibility timeout")
                }
            }
        }
    }
}
