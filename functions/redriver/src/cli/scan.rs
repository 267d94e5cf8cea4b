//! Reading a queue without consuming it: every message received is held (invisible) until the
//! command ends, then released (visibility 0), unless the command deleted it. A command that
//! dies leaves them to reappear after the hold.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::ports::{HandleEntry, PortError, Queue, Received};

/// Visibility timeout of held messages: long enough for a scan, short enough that a command
/// killed mid-way hides nothing for long.
pub const HOLD_SECONDS: i32 = 120;
/// Long-poll wait of each receive: an empty answer then means nothing more is visible.
const WAIT_SECONDS: i32 = 1;

/// Tries a call up to three times while it fails in a retryable way.
pub async fn retry<T, F, Fut>(mut call: F) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PortError>>,
{
    let mut attempt = 0u32;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retryable && attempt < 2 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Walks a queue's visible messages once.
pub struct Scanner<'a, Q: Queue> {
    queue: &'a Q,
    url: &'a str,
    hold_seconds: i32,
    /// Message id -> latest receipt handle, for every message received and not settled.
    held: HashMap<String, String>,
    seen: HashSet<String>,
    exhausted: bool,
}

impl<'a, Q: Queue> Scanner<'a, Q> {
    pub fn new(queue: &'a Q, url: &'a str) -> Self {
        Self {
            queue,
            url,
            hold_seconds: HOLD_SECONDS,
            held: HashMap::new(),
            seen: HashSet::new(),
            exhausted: false,
        }
    }

    /// Up to `max` (1 to 10) messages not returned before in this scan, held until
    /// [`release`](Self::release); empty once nothing more is visible.
    pub async fn next(&mut self, max: usize) -> Result<Vec<Received>, PortError> {
        while !self.exhausted {
            let want = max.clamp(1, 10) as i32;
            let batch = retry(|| {
                self.queue
                    .receive(self.url, want, WAIT_SECONDS, self.hold_seconds)
            })
            .await?;
            if batch.is_empty() {
                self.exhausted = true;
                break;
            }
            let mut fresh = Vec::new();
            for m in batch {
                // A message seen before is back (its hold ran out, or SQS delivered it twice):
                // keep its newest handle, do not show it again.
                self.held
                    .insert(m.message_id.clone(), m.receipt_handle.clone());
                if self.seen.insert(m.message_id.clone()) {
                    fresh.push(m);
                }
            }
            if !fresh.is_empty() {
                return Ok(fresh);
            }
            // Only messages seen before: the scan went all the way round.
            self.exhausted = true;
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

    /// The message is gone from the queue (deleted): nothing to release.
    pub fn settled(&mut self, message_id: &str) {
        self.held.remove(message_id);
    }

    /// Makes every held message visible again at once; returns how many could not be released
    /// (they reappear when their hold runs out).
    pub async fn release(self) -> usize {
        let entries: Vec<HandleEntry> = self
            .held
            .into_values()
            .enumerate()
            .map(|(i, receipt_handle)| HandleEntry {
                id: i.to_string(),
                receipt_handle,
            })
            .collect();
        let mut unreleased = 0;
        for chunk in entries.chunks(10) {
            let batch: Vec<HandleEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, e)| HandleEntry {
                    id: i.to_string(),
                    receipt_handle: e.receipt_handle.clone(),
                })
                .collect();
            match retry(|| self.queue.change_visibility_batch(self.url, &batch, 0)).await {
                Ok(outcome) => unreleased += outcome.failed.len(),
                Err(e) => {
                    tracing::warn!(error = %e, "releasing held messages failed");
                    unreleased += batch.len();
                }
            }
        }
        if unreleased > 0 {
            eprintln!(
                "warning: {unreleased} message(s) could not be released; they are visible again within {}s",
                self.hold_seconds
            );
        }
        unreleased
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeSqs;
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

    #[tokio::test]
    async fn a_message_that_comes_back_during_a_scan_is_not_returned_twice() {
        let sqs = FakeSqs::new();
        sqs.create_queue(Q);
        for i in 0..3 {
            sqs.push(Q, &format!("m{i}"), Attributes::new(), None);
        }
        let mut scan = Scanner::new(&sqs, Q);
        assert_eq!(scan.next(10).await.unwrap().len(), 3);
        // Their hold runs out: they are visible again.
        sqs.expire_visibility(Q);
        assert!(scan.next(10).await.unwrap().is_empty());
        // The newest handles are the ones released.
        assert_eq!(scan.release().await, 0);
        assert_eq!(sqs.depth_visible(Q), 3);
    }
}
