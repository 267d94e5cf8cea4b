//! `redrive triage QUEUE`'s pass over a deep DLQ on the port fake: the CLI's own walk
//! (`redrive_cli::commands::triage::walk::group_queue`), `concurrency` receives at once, against
//! the same walk one receive after another.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redrive_cli::commands::triage::walk::group_queue;
use redrive_cli::scan::{HOLD_SECONDS, Status};
use redrive_engine::fake::FakeSqs;
use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
use redrive_shared::triage::GroupingConfig;
use serde::Serialize;
use tokio::time::Instant;

use crate::bench::{attributes, body};

/// The requirement: a pass over 100,000 messages costs at most 21,000 SQS calls...
pub const CALL_BUDGET_PER_100K: u64 = 21_000;
/// ...and takes at most 60 s on the fake at 20 ms per call.
pub const SECONDS_BUDGET_PER_100K: f64 = 60.0;

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/bench-triage-dlq";

/// Causes the benchmark's messages failed with: one group each.
const CAUSES: [&str; 7] = [
    "HTTP_503",
    "HTTP_429",
    "SCHEMA_INVALID",
    "TIMEOUT",
    "CARD_DECLINED",
    "HTTP_500",
    "DUPLICATE_ORDER",
];

/// One timed, counted pass.
#[derive(Debug, Clone, Serialize)]
pub struct ScanRun {
    pub who: String,
    pub concurrency: usize,
    pub messages: u64,
    pub grouped: u64,
    pub groups: usize,
    /// `complete`, `sample`, `incomplete`, `failed`.
    pub status: String,
    pub seconds: f64,
    /// Calls by operation.
    pub calls: BTreeMap<String, u64>,
    /// Messages visible on the queue after the pass (all of them: every held one released).
    pub visible_after: u64,
}

impl ScanRun {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn seconds_per_message(&self) -> f64 {
        self.seconds / self.messages.max(1) as f64
    }

    /// Grouped completely, and left as found.
    pub fn complete(&self) -> bool {
        self.status == "complete"
            && self.grouped == self.messages
            && self.visible_after == self.messages
    }
}

/// A DLQ of `n` messages that failed for one of [`CAUSES`], `latency` per call.
pub fn failed_dlq(n: u64, latency: Duration) -> Arc<FakeSqs> {
    let sqs = FakeSqs::with_latency(latency);
    sqs.create_queue(DLQ);
    for i in 0..n {
        let mut attrs = attributes(i);
        let mut meta = RedriveMeta::fresh(&format!("orig-{i:08}"));
        meta.attempt = 1 + (i % 5) as u32;
        meta.last_error = Some(LastError::new(
            ErrorClass::Transient,
            CAUSES[(i % CAUSES.len() as u64) as usize],
            "the downstream refused the order",
            "2026-11-21T10:00:00Z".into(),
        ));
        meta.write_into(&mut attrs);
        sqs.push(DLQ, &body(i), attrs, None);
    }
    sqs
}

/// One pass of `redrive triage` over `n` messages, `concurrency` receives at once, on the
/// current runtime's clock (a paused runtime for the modelled time, a normal one for wall time).
pub async fn triage_pass(n: u64, latency: Duration, concurrency: usize) -> ScanRun {
    let sqs = failed_dlq(n, latency);
    let max = usize::try_from(n).unwrap_or(usize::MAX);
    let started = Instant::now();
    let (groups, walk) = group_queue(&sqs, DLQ, GroupingConfig::default(), max, concurrency)
        .await
        .unwrap_or_else(|e| panic!("the pass failed: {e}"));
    let seconds = started.elapsed().as_secs_f64();
    let c = &sqs.calls;
    let mut calls = BTreeMap::new();
    for (name, count) in [
        ("ReceiveMessage", c.receive.load(Ordering::SeqCst)),
        (
            "ChangeMessageVisibilityBatch",
            c.change_visibility.load(Ordering::SeqCst),
        ),
        ("GetQueueAttributes", c.depth.load(Ordering::SeqCst)),
        ("DeleteMessageBatch", c.delete_batch.load(Ordering::SeqCst)),
        ("SendMessageBatch", c.send_batch.load(Ordering::SeqCst)),
    ] {
        if count > 0 {
            calls.insert(name.to_string(), count);
        }
    }
    let status = match walk.reach.status {
        Status::Complete => "complete",
        Status::Limit => "sample",
        Status::Incomplete => "incomplete",
        Status::Failed => "failed",
    };
    ScanRun {
        who: if concurrency == 1 {
            "one receive after another".into()
        } else {
            format!("{concurrency} receives at once")
        },
        concurrency,
        messages: n,
        grouped: walk.grouped as u64,
        groups: groups.len(),
        status: status.into(),
        seconds,
        calls,
        visible_after: sqs.depth_visible(DLQ) as u64,
    }
}

/// The most messages a one-by-one pass at `latency` per call can walk before the first ones
/// it holds come back ([`HOLD_SECONDS`]): one receive of 10 per call.
pub fn sequential_reach(latency: Duration) -> u64 {
    (f64::from(HOLD_SECONDS) / latency.as_secs_f64()) as u64 * 10
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::on_modelled_clock;

    #[test]
    fn a_pass_of_8_receives_at_once_costs_the_calls_of_one_by_one_in_an_eighth_of_the_time() {
        let latency = Duration::from_millis(20);
        let ours = on_modelled_clock(triage_pass(2_000, latency, 8));
        let base = on_modelled_clock(triage_pass(2_000, latency, 1));
        assert!(ours.complete() && base.complete(), "{ours:?} {base:?}");
        assert_eq!(ours.groups, CAUSES.len());
        // 200 receives, 200 releases, one depth: the same for both.
        assert_eq!(ours.total_calls(), 401, "{ours:?}");
        assert_eq!(base.calls, ours.calls);
        assert!(
            (base.seconds - 401.0 * 0.020).abs() < 0.001,
            "{}",
            base.seconds
        );
        assert!(
            ours.seconds <= (2.0 * 25.0 + 1.0) * 0.020 + 0.001,
            "{}",
            ours.seconds
        );
        // 120 s of hold at 20 ms per receive of 10.
        assert_eq!(sequential_reach(latency), 60_000);
    }
}
