//! The queue side of a pass: the messages received with up to `--concurrency` receives in
//! flight, each handed on once, whatever order the receives answered in, and every message held
//! released when the walk ends, on every path (the limit, the end of the queue, a failed call).

use redrive_engine::ports::{PortError, Queue};
use redrive_shared::triage::{Group, Grouper, GroupingConfig};

use super::Read;
use super::causes::Batcher;
use crate::context::CliError;
use crate::scan::{Reach, Scanner, Status, Stop};

/// What a walk over a queue handed on, and how far it got.
pub struct Walk {
    /// Messages handed on that `each` grouped.
    pub grouped: usize,
    /// Messages received more than once (counted once): received again by the scan, or
    /// handed on and refused by `each` as seen.
    pub repeats: usize,
    /// Measured before the release, while what the walk held was still in flight.
    pub reach: Reach,
    /// Messages the release could not make visible again (they reappear after the hold).
    pub unreleased: usize,
}

/// Walks `url` once, `max` messages at most, `concurrency` receives at once: each message goes
/// through `batcher` (its recorded cause) to `each`, which says whether it grouped it. Releases
/// every held message before returning, the walk's error included.
pub async fn walk<Q: Queue>(
    queue: &Q,
    url: &str,
    max: usize,
    concurrency: usize,
    batcher: &mut Batcher,
    mut each: impl FnMut(&Read) -> bool,
) -> (Walk, Result<(), CliError>) {
    let mut scan = Scanner::new(queue, url)
        .with_concurrency(concurrency)
        .with_budget(max);
    let (mut grouped, mut repeats) = (0, 0);
    let mut hand_on = |reads: Vec<Read>, grouped: &mut usize, repeats: &mut usize| {
        for read in &reads {
            if each(read) {
                *grouped += 1;
            } else {
                *repeats += 1;
            }
        }
    };
    let walked: Result<(), CliError> = async {
        loop {
            // Messages waiting for their cause lookup count against --max already.
            let taken = grouped + batcher.pending();
            if taken >= max {
                let ready = batcher.flush().await?;
                hand_on(ready, &mut grouped, &mut repeats);
                if grouped >= max {
                    break;
                }
                continue;
            }
            let batch = scan
                .next((max - taken).min(10))
                .await
                .map_err(CliError::Aws)?;
            if batch.is_empty() {
                break;
            }
            for message in batch {
                let ready = batcher.push(message).await?;
                hand_on(ready, &mut grouped, &mut repeats);
            }
        }
        let ready = batcher.flush().await?;
        hand_on(ready, &mut grouped, &mut repeats);
        Ok(())
    }
    .await;
    let stop = if grouped >= max {
        Stop::Limit
    } else {
        Stop::Exhausted
    };
    let scanned = match &walked {
        Err(CliError::Aws(e)) => Err(e.clone()),
        _ => Ok(()),
    };
    let mut reach = scan.reach(stop, grouped + repeats, &scanned).await;
    if reach.status == Status::Limit && !reach.came_back && reach.not_reached == Some(0) {
        // The limit was the queue's depth: nothing was left to reach (a queue of exactly
        // `--max` messages is grouped completely, not sampled).
        reach.status = Status::Complete;
    }
    repeats += scan.repeats();
    let unreleased = scan.release().await;
    let walk = Walk {
        grouped,
        repeats,
        reach,
        unreleased,
    };
    (walk, walked)
}

/// One pass over a queue through any queue port, grouped by `config` (no `--causes-table`):
/// what `redrive triage QUEUE` computes, for the benchmarks and the tests on the port fake.
pub async fn group_queue<Q: Queue>(
    queue: &Q,
    url: &str,
    config: GroupingConfig,
    max: usize,
    concurrency: usize,
) -> Result<(Vec<Group>, Walk), PortError> {
    let mut grouper = Grouper::new(config);
    let mut batcher = Batcher::new(None);
    let (walk, walked) = walk(queue, url, max, concurrency, &mut batcher, |r| {
        let facts = r.facts(&grouper);
        grouper.add_facts(&r.observation(), facts).is_some()
    })
    .await;
    match walked {
        Ok(()) => Ok((grouper.finish(), walk)),
        Err(CliError::Aws(e)) => Err(e),
        Err(other) => Err(PortError::new("triage", "Failed", other.to_string(), false)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use redrive_engine::fake::{FakeSqs, throttled};
    use redrive_engine::ports::{
        BatchOutcome, Depth, HandleEntry, ReceiveRequest, Received, SendEntry,
    };
    use redrive_shared::Attributes;
    use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
    use tokio::time::Instant;

    use super::*;

    const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/parked";
    const LATENCY: Duration = Duration::from_millis(20);

    /// A DLQ of `n` messages that failed for one of five causes, 20 ms per call.
    fn dlq(n: usize) -> Arc<FakeSqs> {
        let sqs = FakeSqs::with_latency(LATENCY);
        sqs.create_queue(Q);
        for i in 0..n {
            let mut attributes = Attributes::new();
            let mut meta = RedriveMeta::fresh(&format!("orig-{i}"));
            meta.last_error = Some(LastError::new(
                ErrorClass::Permanent,
                format!("CODE_{}", i % 5),
                "the order was refused",
                "2026-11-21T10:00:00Z".into(),
            ));
            meta.write_into(&mut attributes);
            sqs.push(Q, &format!(r#"{{"order":{i}}}"#), attributes, None);
        }
        sqs
    }

    /// What a pass's groups say, whatever order the messages came in: id -> (count, the
    /// sorted message ids, the plan id).
    fn digest(groups: &[Group]) -> BTreeMap<String, (usize, Vec<String>, String)> {
        groups
            .iter()
            .map(|g| {
                let mut ids = g.message_ids.clone();
                ids.sort();
                (g.id.clone(), (g.count, ids, g.plan_id.clone()))
            })
            .collect()
    }

    /// ReceiveMessage, ChangeMessageVisibilityBatch and GetQueueAttributes calls so far.
    fn calls(sqs: &FakeSqs) -> (u64, u64, u64) {
        let c = &sqs.calls;
        (
            c.receive.load(Ordering::SeqCst),
            c.change_visibility.load(Ordering::SeqCst),
            c.depth.load(Ordering::SeqCst),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn eight_receives_at_once_group_as_one_after_another_in_an_eighth_of_the_time() {
        // GIVEN two identical DLQs of 1,000 failed messages, 20 ms per call
        let n = 1000;
        let (one, eight) = (dlq(n), dlq(n));

        // WHEN one is grouped one receive after another, the other 8 receives at once
        let started = Instant::now();
        let (seq_groups, seq) = group_queue(&one, Q, GroupingConfig::default(), n, 1)
            .await
            .unwrap();
        let seq_time = started.elapsed();
        let started = Instant::now();
        let (groups, walk) = group_queue(&eight, Q, GroupingConfig::default(), n, 8)
            .await
            .unwrap();
        let time = started.elapsed();

        // THEN the groups, their counts and plans and the coverage are the same
        assert_eq!(digest(&groups), digest(&seq_groups));
        assert_eq!(groups.len(), 5);
        assert_eq!((walk.grouped, walk.repeats), (n, 0));
        assert_eq!((seq.grouped, seq.repeats), (n, 0));
        assert_eq!(walk.reach.status, Status::Complete);
        assert_eq!(seq.reach.status, Status::Complete);
        assert_eq!((walk.unreleased, walk.reach.not_reached), (0, Some(0)));
        // AND the calls are the same: a receive per 10 (none beyond --max), a release per 10,
        // the depth once
        assert_eq!(calls(&one), (100, 100, 1));
        assert_eq!(calls(&eight), (100, 100, 1));
        // AND every message is visible again
        assert_eq!(eight.depth_visible(Q), n);
        // AND the time is the sequential walk's divided by the receivers, give or take the
        // last round trip
        assert_eq!(seq_time, LATENCY * 201);
        assert!(
            time <= LATENCY * (2 * 100usize.div_ceil(8) as u32 + 1),
            "{time:?} vs {seq_time:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_received_twice_is_grouped_once() {
        // GIVEN 60 messages, and SQS delivering messages in flight again on the next receive
        // that finds some (at-least-once delivery)
        let n = 60;
        let sqs = dlq(n);
        sqs.redeliver_in_flight(1);

        // WHEN a pass groups them 4 receives at once
        let (groups, walk) = group_queue(&sqs, Q, GroupingConfig::default(), n, 4)
            .await
            .unwrap();

        // THEN each message is in one group, once; the repeats are counted apart
        let mut ids: Vec<String> = groups.iter().flat_map(|g| g.message_ids.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert_eq!(groups.iter().map(|g| g.count).sum::<usize>(), n);
        assert_eq!(walk.grouped, n);
        assert!(walk.repeats > 0, "the fake delivered messages twice");
        assert_eq!(walk.reach.status, Status::Complete);
        // AND all of them are released with their newest handle
        assert_eq!(walk.unreleased, 0);
        assert_eq!(sqs.depth_visible(Q), n);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_stopped_at_its_limit_receives_no_more_than_it_needs() {
        // GIVEN 1,000 messages
        let sqs = dlq(1000);

        // WHEN a pass of 8 receives at once stops at 25
        let (groups, walk) = group_queue(&sqs, Q, GroupingConfig::default(), 25, 8)
            .await
            .unwrap();

        // THEN it asked for 10, 10 and 5, grouped 25, says it is a sample, released them all
        assert_eq!(groups.iter().map(|g| g.count).sum::<usize>(), 25);
        assert_eq!(walk.reach.status, Status::Limit);
        assert_eq!(calls(&sqs), (3, 3, 1));
        assert_eq!(sqs.depth_visible(Q), 1000);
    }

    /// The fake, whose `fail_at`th ReceiveMessage fails (throttled, the SDK's retries spent).
    struct FailingReceive {
        sqs: Arc<FakeSqs>,
        receives: AtomicU64,
        fail_at: u64,
    }

    impl Queue for FailingReceive {
        async fn receive(
            &self,
            url: &str,
            request: ReceiveRequest,
        ) -> Result<Vec<Received>, PortError> {
            if self.receives.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
                tokio::time::sleep(LATENCY).await;
                return Err(throttled("ReceiveMessage"));
            }
            self.sqs.receive(url, request).await
        }
        async fn send_batch(&self, url: &str, e: &[SendEntry]) -> Result<BatchOutcome, PortError> {
            self.sqs.send_batch(url, e).await
        }
        async fn delete_batch(
            &self,
            url: &str,
            e: &[HandleEntry],
        ) -> Result<BatchOutcome, PortError> {
            self.sqs.delete_batch(url, e).await
        }
        async fn change_visibility_batch(
            &self,
            url: &str,
            e: &[HandleEntry],
            seconds: i32,
        ) -> Result<BatchOutcome, PortError> {
            self.sqs.change_visibility_batch(url, e, seconds).await
        }
        async fn depth(&self, url: &str) -> Result<Depth, PortError> {
            self.sqs.depth(url).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_receive_releases_everything_held_including_what_was_in_flight() {
        // GIVEN 200 messages, and the 12th receive failing while 7 others are in flight
        let sqs = dlq(200);
        let queue = FailingReceive {
            sqs: sqs.clone(),
            receives: AtomicU64::new(0),
            fail_at: 12,
        };

        // WHEN a pass of 8 receives at once meets the failure
        let mut batcher = Batcher::new(None);
        let (walk, walked) = walk(&queue, Q, 1000, 8, &mut batcher, |_| true).await;

        // THEN it fails, says so, and every message it received (the receives in flight at
        // the failure included) is visible again
        assert!(matches!(walked, Err(CliError::Aws(ref e)) if e.code == "ThrottlingException"));
        assert_eq!(walk.reach.status, Status::Failed);
        assert!(
            sqs.calls.receive.load(Ordering::SeqCst) > 11,
            "receives in flight landed"
        );
        assert_eq!(walk.unreleased, 0);
        assert_eq!(sqs.depth_visible(Q), 200);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_deeper_than_its_in_flight_limit_fails_over_limit_and_releases_what_was_held() {
        // GIVEN 200 messages on a queue whose in-flight limit is 100 (SQS: 120,000)
        let sqs = dlq(200);
        sqs.set_in_flight_limit(Q, 100);

        // WHEN a pass of 8 receives at once walks it
        let mut batcher = Batcher::new(None);
        let (walk, walked) = walk(&sqs, Q, 1000, 8, &mut batcher, |_| true).await;

        // THEN SQS's OverLimit fails the pass, which says so and how much it did not reach,
        // and the 100 messages it held are visible again
        assert!(matches!(walked, Err(CliError::Aws(ref e)) if e.code == "OverLimit"));
        assert_eq!(walk.reach.status, Status::Failed);
        assert_eq!(walk.grouped, 100);
        assert_eq!(walk.reach.not_reached, Some(100));
        assert_eq!(walk.unreleased, 0);
        assert_eq!(sqs.depth_visible(Q), 200);
    }
}
