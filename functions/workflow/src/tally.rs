//! The end of a round: its results added to the totals, and whether another round follows.

use redrive_engine::engine::StopReason;
use serde_json::Value;

use crate::MAX_ROUNDS_PER_EXECUTION;
use crate::state::{DrainItem, Mode, Run, Totals};

/// The drains of the next scale-out round: the remaining budget split K ways. Their shares of
/// the circuit's plan are given by the task that plans the round (`Workflow::admit`).
pub(crate) fn drain_plan(run: &Run, remaining: u32) -> Vec<DrainItem> {
    if run.mode != Mode::ScaleOut || remaining == 0 {
        return Vec::new();
    }
    let share = remaining.div_ceil(run.drains);
    let mut left = remaining;
    (0..run.drains)
        .map_while(|index| {
            let n = share.min(left);
            left -= n;
            (n > 0).then_some(DrainItem {
                index,
                drains: run.drains,
                max_messages: n,
                dry_run: run.dry_run,
                circuit: None,
            })
        })
        .collect()
}

/// Adds a round's results to the totals and decides whether another round follows: the
/// `redriveBatch` answer (`messages` mode) or the drains' answers (`scaleOut`), each shaped as
/// the Lambda's response.
pub fn tally(run: &Run, mut totals: Totals, batch: Option<&Value>, results: &[Value]) -> Totals {
    let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut received = 0u64;
    let mut queue_empty = false;
    let mut progress = 0u64;
    let mut circuit_open = false;
    for r in batch.into_iter().chain(results) {
        received += count(r, "received");
        totals.redriven += count(r, "redriven");
        totals.isolated += count(r, "isolated");
        totals.failed += count(r, "failed");
        totals.waiting += count(r, "waiting");
        totals.hops += count(r, "hops");
        totals.ungranted += count(r, "ungranted");
        // A message sent back to wait has left the DLQ's visible set: the round moved it.
        progress +=
            count(r, "redriven") + count(r, "isolated") + count(r, "waiting") + count(r, "hops");
        let stopped = r
            .get("stoppedBecause")
            .cloned()
            .and_then(|v| serde_json::from_value::<StopReason>(v).ok());
        queue_empty |= stopped == Some(StopReason::QueueEmpty);
        circuit_open |= stopped == Some(StopReason::CircuitOpen);
        totals.bounced += r.get("circuit").map_or(0, |c| count(c, "bounced"));
    }
    totals.received += received;
    totals.rounds += 1;
    totals.remaining = totals
        .remaining
        .saturating_sub(u32::try_from(received).unwrap_or(u32::MAX));
    totals.queue_empty = queue_empty;
    totals.stopped_because = if queue_empty {
        StopReason::QueueEmpty
    } else {
        StopReason::Limit
    };
    // A dry run plans one round (it releases what it saw, so a second would see it again);
    // a round that moved nothing stops rather than spin on messages that keep failing.
    totals.more = !run.dry_run && !queue_empty && totals.remaining > 0 && progress > 0;
    if !totals.more && !queue_empty && totals.remaining > 0 && !run.dry_run {
        totals.stopped_because = StopReason::Other;
    }
    if totals.more && totals.rounds >= MAX_ROUNDS_PER_EXECUTION {
        // The history's bound: the next trigger continues (the summary re-arms the alarm).
        totals.more = false;
    }
    if circuit_open {
        // The adaptive circuit opened (or holds): no further round; the summary says why.
        totals.more = false;
        totals.stopped_because = StopReason::CircuitOpen;
    }
    totals.drain_plan = if totals.more {
        drain_plan(run, totals.remaining)
    } else {
        Vec::new()
    };
    totals
}
