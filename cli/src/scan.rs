//! Reading a queue without consuming it: every message received is held (invisible) until the
//! command ends, then released (visibility 0), unless the command deleted it. A command
//! interrupted (Ctrl-C, SIGINT, SIGTERM) releases what every scan of the process holds at once
//! ([`release_all`]); one killed outright leaves them to reappear after the hold.
//!
//! Whole calls are retried by the SDK (its retry configuration), not here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use serde::Serialize;

use redrive_engine::engine::Transfer;
use redrive_engine::ports::{HandleEntry, PortError, Queue, ReceiveRequest, Received};
use redrive_shared::archive::SystemAttributes;

use super::output::Style;

/// Visibility timeout of held messages: long enough for a scan, short enough that a command
/// killed mid-way hides nothing for long.
pub const HOLD_SECONDS: i32 = 120;
/// Long-poll wait of each receive: an empty answer then means nothing more is visible.
const WAIT_SECONDS: i32 = 1;

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
        let entries = HandleEntry::numbered(messages.into_values());
        released += Transfer::new(queue).hold(&url, entries, 0).await.ok.len();
    }
    released
}

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
        }
    }

    /// Up to `max` (1 to 10) messages not returned before in this scan, held until
    /// [`release`](Self::release); empty once nothing more is visible.
    pub async fn next(&mut self, max: usize) -> Result<Vec<Received>, PortError> {
        while !self.exhausted && !interrupted() {
            let want = max.clamp(1, 10) as i32;
            let batch = self
                .queue
                .receive_with_system(
                    self.url,
                    ReceiveRequest::new(want, WAIT_SECONDS, self.hold_seconds),
                )
                .await?;
            if batch.is_empty() {
                self.exhausted = true;
                break;
            }
            let mut fresh = Vec::new();
            for (m, system) in batch {
                // A message seen before is back (its hold ran out, or SQS delivered it twice):
                // keep its newest handle, do not show it again.
                self.held
                    .insert(m.message_id.clone(), m.receipt_handle.clone());
                held()
                    .entry(self.url.to_string())
                    .or_default()
                    .insert(m.message_id.clone(), m.receipt_handle.clone());
                if self.seen.insert(m.message_id.clone()) {
                    self.system.insert(m.message_id.clone(), system);
                    fresh.push(m);
                }
            }
            if interrupted() {
                // Held, and released with the rest; not handed on.
                self.exhausted = true;
                break;
            }
            if !fresh.is_empty() {
                return Ok(fresh);
            }
            // Only messages seen before: their hold ran out (a long scan) or the queue was
            // walked round. Stop, and say that the end was not proven.
            self.exhausted = true;
            self.came_back = true;
        }
        Ok(Vec::new())
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
        self.seen.len()
    }

    /// Where the walk ended, measured before [`release`](Self::release) (while what the scan
    /// holds is still in flight): what is left visible on the queue is what it did not reach.
    pub async fn reach(&self, stop: Stop, taken: usize, walked: &Result<(), PortError>) -> Reach {
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
            seen: self.seen.len(),
            not_selected: self.seen.len().saturating_sub(taken),
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
    pub async fn release(self) -> usize {
        if let Some(q) = held().get_mut(self.url) {
            for id in self.held.keys() {
                q.remove(id);
            }
        }
        let entries = HandleEntry::numbered(self.held.into_values());
        let asked = entries.len();
        let released = Transfer::new(self.queue).hold(self.url, entries, 0).await;
        let unreleased = asked - released.ok.len();
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
        let scan = scan_whose_messages_came_back(&sqs).await;

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
