//! Reading a queue without consuming it: every message received is held (invisible) until the
//! command ends, then released (visibility 0), unless the command deleted it. A command
//! interrupted (Ctrl-C, SIGINT, SIGTERM) releases what every scan of the process holds at once
//! ([`release_all`]); one killed outright leaves them to reappear after the hold.
//!
//! A scan receives with up to [`Scanner::with_concurrency`] ReceiveMessage calls in flight at
//! once (1 unless the command asks for more) and releases what it holds with as many
//! ChangeMessageVisibilityBatch calls of 10 at once. Messages are handed on in the order their
//! receives answered, each once (a message received twice is handed on the first time).
//!
//! Whole calls are retried by the SDK (its retry configuration), not here.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use serde::Serialize;

use redrive_engine::engine::{Holds, Transfer};
use redrive_engine::ports::{HandleEntry, PortError, Queue, ReceiveRequest, Received};
use redrive_shared::archive::SystemAttributes;

use super::output::Style;

/// Visibility timeout of held messages: long enough for a scan, short enough that a command
/// killed mid-way hides nothing for long.
pub const HOLD_SECONDS: i32 = 120;
/// Long-poll wait of each receive: an empty answer then means nothing more is visible.
const WAIT_SECONDS: i32 = 1;
/// Receives (and releases) a `triage` pass has in flight at once unless `--concurrency` says
/// otherwise: 100,000 messages cost 10,000 receives and 10,000 releases, 1,250 round trips
/// of 16 calls, 25 s at 20 ms per call (at 8, 50 s: too close to the 60 s the pass is allowed
/// on a loaded machine).
pub const DEFAULT_CONCURRENCY: usize = 16;
/// The most `--concurrency` accepts: SQS serves far more, but each receive in flight holds up
/// to 10 messages the walk may not need, and a wider walk only adds throttling risk.
pub const MAX_CONCURRENCY: usize = 64;
/// Messages one ReceiveMessage (and one ChangeMessageVisibilityBatch) takes at most.
const PER_CALL: usize = 10;

/// What every scan of this process holds: queue URL -> message id -> latest receipt handle.
static HELD: Mutex<BTreeMap<String, BTreeMap<String, String>>> = Mutex::new(BTreeMap::new());

fn held() -> std::sync::MutexGuard<'static, BTreeMap<String, BTreeMap<String, String>>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set when the command is interrupted: every scan stops at its next receive (a receive in
/// flight lands first, so that what it took is held, and released, like the rest).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks every scan of this process to stop at its next receive.
pub fn interrupt() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Makes every message any scan of this process holds visible again at once (an interrupted
/// command); returns how many were released.
pub async fn release_all<Q: Queue>(queue: &Q) -> usize {
    let all = std::mem::take(&mut *held());
    let mut released = 0;
    for (url, messages) in all {
        released += release_handles(queue, &url, messages.into_values(), DEFAULT_CONCURRENCY).await;
    }
    released
}

/// Makes the messages of `handles` visible again: one ChangeMessageVisibilityBatch per 10,
/// `concurrency` calls at once (each chain retries its failed entries as the engine does);
/// returns how many were released.
async fn release_handles<Q: Queue>(
    queue: &Q,
    url: &str,
    handles: impl IntoIterator<Item = String>,
    concurrency: usize,
) -> usize {
    let entries = HandleEntry::numbered(handles);
    if entries.is_empty() {
        return 0;
    }
    // Whole batches of 10 per chain, so that the calls are as few as one after another.
    let per_chain = entries
        .len()
        .div_ceil(concurrency.max(1))
        .next_multiple_of(PER_CALL);
    let chains = entries.chunks(per_chain).map(|chain| async move {
        Transfer::new(queue)
            .hold(url, chain.to_vec(), 0)
            .await
            .ok
            .len()
    });
    join_all(chains).await.into_iter().sum()
}

/// One ReceiveMessage in flight: the messages it asked for, and its answer.
type Receiving<'a> = Pin<
    Box<
        dyn Future<Output = (usize, Result<Vec<(Received, SystemAttributes)>, PortError>)>
            + Send
            + 'a,
    >,
>;

/// Walks a queue's visible messages once.
pub struct Scanner<'a, Q: Queue> {
    queue: &'a Q,
    url: &'a str,
    hold_seconds: i32,
    /// Message id -> latest receipt handle, for every message received and not settled.
    held: HashMap<String, String>,
    seen: HashSet<String>,
    /// Message id -> the system attributes it was received with (the ones an archive keeps).
    system: HashMap<String, SystemAttributes>,
    exhausted: bool,
    /// The scan met only messages it had returned before (their hold ran out): it cannot
    /// tell whether messages it never saw are left.
    came_back: bool,
    /// Receives in flight at once, at most.
    concurrency: usize,
    /// Messages the caller takes at most: no receive asks beyond them.
    budget: usize,
    /// The receives in flight, and the messages they asked for.
    receiving: FuturesUnordered<Receiving<'a>>,
    asked: usize,
    /// Received, not yet handed on.
    ready: VecDeque<Received>,
    /// Messages handed on.
    returned: usize,
    /// Receives that brought a message again (SQS delivers at least once).
    repeats: usize,
}

impl<'a, Q: Queue> Scanner<'a, Q> {
    pub fn new(queue: &'a Q, url: &'a str) -> Self {
        Self {
            queue,
            url,
            hold_seconds: HOLD_SECONDS,
            held: HashMap::new(),
            seen: HashSet::new(),
            system: HashMap::new(),
            exhausted: false,
            came_back: false,
            concurrency: 1,
            budget: usize::MAX,
            receiving: FuturesUnordered::new(),
            asked: 0,
            ready: VecDeque::new(),
            returned: 0,
            repeats: 0,
        }
    }

    /// Up to `n` receives (and releases) in flight at once (1 to [`MAX_CONCURRENCY`]).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.clamp(1, MAX_CONCURRENCY);
        self
    }

    /// The caller takes at most `n` messages: the receives in flight never ask for more than
    /// are still to come, so that a walk stopped at `--max` holds no more than it needs.
    pub fn with_budget(mut self, n: usize) -> Self {
        self.budget = n;
        self
    }

    /// Up to `max` (1 to 10) messages not returned before in this scan, held until
    /// [`release`](Self::release); empty once nothing more is visible. With a concurrency
    /// above 1, receives beyond this one are started, and what they bring is handed on by the
    /// next calls.
    pub async fn next(&mut self, max: usize) -> Result<Vec<Received>, PortError> {
        let max = max.clamp(1, PER_CALL);
        loop {
            if interrupted() {
                // What is in flight lands and is held (and released with the rest); nothing
                // more is handed on.
                self.exhausted = true;
                self.settle().await;
                self.ready.clear();
                return Ok(Vec::new());
            }
            if !self.ready.is_empty() {
                let n = max.min(self.ready.len());
                let out: Vec<Received> = self.ready.drain(..n).collect();
                self.returned += out.len();
                return Ok(out);
            }
            self.start_receives(max);
            let Some((asked, answer)) = self.receiving.next().await else {
                return Ok(Vec::new());
            };
            self.asked -= asked;
            match answer {
                Ok(batch) => self.take(batch),
                Err(e) => {
                    // Stop, and hold what the other receives in flight bring, so that the
                    // release covers it.
                    self.exhausted = true;
                    self.settle().await;
                    return Err(e);
                }
            }
        }
    }

    /// Starts receives until `concurrency` are in flight, none beyond the end of the queue
    /// (an empty answer), an interrupt, or the caller's budget.
    fn start_receives(&mut self, max: usize) {
        while !self.exhausted && !interrupted() && self.receiving.len() < self.concurrency {
            let coming = self.returned + self.ready.len() + self.asked;
            let want = max.min(self.budget.saturating_sub(coming));
            if want == 0 {
                break;
            }
            self.asked += want;
            let request = ReceiveRequest::new(want as i32, WAIT_SECONDS, self.hold_seconds);
            let (queue, url) = (self.queue, self.url);
            self.receiving.push(Box::pin(async move {
                (want, queue.receive_with_system(url, request).await)
            }));
        }
    }

    /// One receive's answer: each message held (its newest handle), the fresh ones queued to
    /// be handed on. An empty answer ends the walk; so does one that brought only messages
    /// seen before (their hold ran out, or the queue was walked round): the end was then not
    /// proven.
    fn take(&mut self, batch: Vec<(Received, SystemAttributes)>) {
        if batch.is_empty() {
            self.exhausted = true;
            return;
        }
        let mut fresh = 0;
        for (m, system) in batch {
            // A message seen before is back (its hold ran out, or SQS delivered it twice):
            // keep its newest handle, do not hand it on again.
            self.held
                .insert(m.message_id.clone(), m.receipt_handle.clone());
            held()
                .entry(self.url.to_string())
                .or_default()
                .insert(m.message_id.clone(), m.receipt_handle.clone());
            if self.seen.insert(m.message_id.clone()) {
                self.system.insert(m.message_id.clone(), system);
                self.ready.push_back(m);
                fresh += 1;
            } else {
                self.repeats += 1;
            }
        }
        if fresh == 0 {
            self.exhausted = true;
            self.came_back = true;
        }
    }

    /// Waits for every receive in flight and holds what they bring (handed on only if the walk
    /// goes on).
    async fn settle(&mut self) {
        while let Some((asked, answer)) = self.receiving.next().await {
            self.asked -= asked;
            if let Ok(batch) = answer {
                self.take(batch);
            }
        }
    }

    /// Receives until `n` messages were collected or nothing more is visible.
    pub async fn collect(&mut self, n: usize) -> Result<Vec<Received>, PortError> {
        let mut out = Vec::new();
        while out.len() < n {
            let batch = self.next(n - out.len()).await?;
            if batch.is_empty() {
                break;
            }
            out.extend(batch);
        }
        Ok(out)
    }

    /// Messages returned by this scan so far.
    pub fn seen(&self) -> usize {
        self.returned
    }

    /// Messages received again after this scan had received them (counted once).
    pub fn repeats(&self) -> usize {
        self.repeats
    }

    /// Where the walk ended, measured before [`release`](Self::release) (while what the scan
    /// holds is still in flight): what is left visible on the queue is what it did not reach.
    pub async fn reach(
        &mut self,
        stop: Stop,
        taken: usize,
        walked: &Result<(), PortError>,
    ) -> Reach {
        // Receives still in flight (a walk stopped at its limit) land first: what they hold
        // is not left on the queue.
        self.settle().await;
        let left = self.queue.depth(self.url).await.map(|d| d.visible);
        let not_reached = left.as_ref().ok().copied();
        let status = match (walked, stop) {
            (Err(_), _) => Status::Failed,
            (Ok(()), Stop::Limit) => Status::Limit,
            (Ok(()), Stop::AllFound) => Status::Complete,
            (Ok(()), Stop::Exhausted) if !self.came_back && not_reached == Some(0) => {
                Status::Complete
            }
            (Ok(()), Stop::Exhausted) => Status::Incomplete,
        };
        Reach {
            status,
            seen: self.returned,
            not_selected: self.returned.saturating_sub(taken),
            not_reached,
            came_back: self.came_back,
            error: walked.as_ref().err().map(super::errors::describe),
        }
    }

    /// The latest receipt handle the scan holds for a message (it may have come back and been
    /// received again since it was returned).
    pub fn handle(&self, message_id: &str) -> Option<&str> {
        self.held.get(message_id).map(String::as_str)
    }

    /// The system attributes a message of this scan was received with.
    pub fn system(&self, message_id: &str) -> SystemAttributes {
        self.system.get(message_id).cloned().unwrap_or_default()
    }

    /// The message is gone from the queue (deleted): nothing to release.
    pub fn settled(&mut self, message_id: &str) {
        self.held.remove(message_id);
        if let Some(q) = held().get_mut(self.url) {
            q.remove(message_id);
        }
    }

    /// Makes every held message visible again at once; returns how many could not be released
    /// (they reappear when their hold runs out).
    pub async fn release(mut self) -> usize {
        // What the receives in flight bring is held too.
        self.settle().await;
        if let Some(q) = held().get_mut(self.url) {
            for id in self.held.keys() {
                q.remove(id);
            }
        }
        let asked = self.held.len();
        let released = release_handles(
            self.queue,
            self.url,
            self.held.into_values(),
            self.concurrency,
        )
        .await;
        let unreleased = asked - released;
        if unreleased > 0 {
            eprintln!(
                "warning: {unreleased} message(s) could not be released; they are visible again within {}s",
                self.hold_seconds
            );
        }
        unreleased
    }
}

/// Why a walk over a queue stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `--max` messages were taken.
    Limit,
    /// Every `--id` asked for was found (the rest of the queue is not asked for).
    AllFound,
    /// Nothing more could be received (or an AWS call failed).
    Exhausted,
}

redrive_shared::text_enum! {
    /// How a walk ended.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Status {
        /// Every message of the queue was looked at (or every `--id` was found).
        Complete,
        /// `--max` was reached: the rest is for the next run.
        Limit,
        /// The walk stopped before the end of the queue: messages are left that it never saw.
        Incomplete,
        /// An AWS call failed part-way.
        Failed,
    }
}

/// How far a walk over a queue got, so that an early stop never reads as success.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reach {
    pub status: Status,
    /// Messages looked at.
    pub seen: usize,
    /// Looked at but not selected (another reason, another id, over `--max`): left in place.
    pub not_selected: usize,
    /// Messages visible on the queue when the walk ended (ApproximateNumberOfMessages; `None`
    /// when it could not be read): the ones it did not reach. On a FIFO queue they include
    /// the messages behind a held message of their group.
    pub not_reached: Option<u64>,
    /// Messages came back during the walk (their hold ran out): the end was not proven.
    pub came_back: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reach {
    /// Text output of what a selection missed: the `--id`s not found, and how far short of
    /// the queue's end the walk stopped.
    pub fn print_misses(&self, s: &Style, not_found: &[String]) {
        if !not_found.is_empty() {
            println!(
                "{} {} (not visible: in flight, or not on this queue)",
                s.bad("not found:"),
                not_found.join(", ")
            );
        }
        if let Some(short) = self.shortfall() {
            let label = match self.status {
                Status::Limit => s.warn("note:"),
                _ => s.bad("not reached:"),
            };
            println!("{label} {short}");
        }
    }

    /// One line for text output when the walk did not cover the queue, else `None`.
    pub fn shortfall(&self) -> Option<String> {
        let left = self
            .not_reached
            .map_or("an unknown number of".to_string(), |n| n.to_string());
        match self.status {
            Status::Complete => None,
            Status::Limit => Some(format!(
                "stopped at --max; {left} message(s) not reached (run again for the next batch)"
            )),
            Status::Incomplete => {
                let why = if self.came_back {
                    "messages came back before the walk ended (a long walk outlived its hold)"
                } else {
                    "messages were left that it could not receive (on a FIFO queue: behind a held message of their group)"
                };
                Some(format!(
                    "incomplete: the queue was not exhausted; {left} message(s) not reached, {} seen but not selected: {why}; run again",
                    self.not_selected
                ))
            }
            Status::Failed => Some(format!(
                "failed part-way ({}); {left} message(s) not reached",
                self.error.as_deref().unwrap_or("an AWS call failed")
            )),
        }
    }
}

impl<Q: Queue> Holds for Scanner<'_, Q> {
    fn handle(&self, message_id: &str) -> Option<&str> {
        Scanner::handle(self, message_id)
    }

    fn settled(&mut self, message_id: &str) {
        Scanner::settled(self, message_id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use redrive_engine::fake::FakeSqs;
    use redrive_shared::Attributes;

    const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/parked";

    #[tokio::test]
    async fn a_scan_sees_each_message_once_and_releases_what_it_did_not_settle() {
        // GIVEN 25 visible messages
        let sqs = FakeSqs::new();
        sqs.create_queue(Q);
        let ids: Vec<String> = (0..25)
            .map(|i| sqs.push(Q, &format!("m{i}"), Attributes::new(), None))
            .collect();

        // WHEN a scan walks the queue and settles two of them
        let mut scan = Scanner::new(&sqs, Q);
        let got = scan.collect(100).await.unwrap();
        assert_eq!(got.len(), 25);
        assert_eq!(sqs.depth_visible(Q), 0, "held while scanning");
        scan.settled(&ids[0]);
        scan.settled(&ids[1]);
        let unreleased = scan.release().await;

        // THEN the others are visible again at once; the settled ones stay hidden
        assert_eq!(unreleased, 0);
        assert_eq!(sqs.depth_visible(Q), 23);
    }

    /// Three messages on `Q`.
    fn three_messages() -> Arc<FakeSqs> {
        let sqs = FakeSqs::new();
        sqs.create_queue(Q);
        for i in 0..3 {
            sqs.push(Q, &format!("m{i}"), Attributes::new(), None);
        }
        sqs
    }

    /// A scan that received the three messages of [`three_messages`], whose hold then ran
    /// out (they are visible again), and that met only those again.
    async fn scan_whose_messages_came_back(sqs: &Arc<FakeSqs>) -> Scanner<'_, Arc<FakeSqs>> {
        let mut scan = Scanner::new(sqs, Q);
        assert_eq!(scan.next(10).await.unwrap().len(), 3);
        sqs.expire_visibility(Q);
        assert!(scan.next(10).await.unwrap().is_empty());
        scan
    }

    #[tokio::test]
    async fn a_message_that_comes_back_during_a_scan_is_not_returned_twice() {
        // GIVEN three messages that came back during a scan
        let sqs = three_messages();
        let scan = scan_whose_messages_came_back(&sqs).await;

        // THEN the newest handles are the ones released
        assert_eq!(scan.release().await, 0);
        assert_eq!(sqs.depth_visible(Q), 3);
    }

    #[tokio::test]
    async fn a_walk_whose_messages_came_back_is_not_complete() {
        // GIVEN a walk that met only messages it had seen (a long walk outlived its hold)
        let sqs = three_messages();
        let mut scan = scan_whose_messages_came_back(&sqs).await;

        // THEN it does not call itself complete
        let reach = scan.reach(Stop::Exhausted, 0, &Ok(())).await;
        assert_eq!(reach.status, Status::Incomplete);
        assert!(reach.came_back);
        assert_eq!((reach.seen, reach.not_selected), (3, 3));
        assert!(reach.shortfall().unwrap().contains("came back"));
        scan.release().await;

        // AND a walk that received everything and saw nothing come back is complete
        let mut scan = Scanner::new(&sqs, Q);
        assert_eq!(scan.collect(10).await.unwrap().len(), 3);
        let reach = scan.reach(Stop::Exhausted, 3, &Ok(())).await;
        assert_eq!(
            (reach.status, reach.not_reached),
            (Status::Complete, Some(0))
        );
        assert_eq!(reach.shortfall(), None);
        scan.release().await;
    }
}
