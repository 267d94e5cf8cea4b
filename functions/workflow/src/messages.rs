//! `messages` mode: each round is one bounded engine drain that keeps a record of every
//! message in its output, the execution history's audit trail.
//!
//! A backoff longer than a copy's `DelaySeconds` (`WORKFLOW_MAX_DELAY_SECONDS`, 900 at most)
//! is not waited by the state machine: the engine sends the message back to the DLQ with that
//! delay and `notBefore` in its `x-redrive`, and whichever drain receives it next either sends
//! it on again (not yet due) or redrives it (due). No task ever has to find a message again,
//! a waiting message is always in a queue that acknowledged it (each hop starting a new
//! retention period, and no hop longer than the DLQ's retention allows), and a long wait
//! blocks nothing: the execution ends and later ones redrive new messages on time.
//!
//! At scale too: a round's batch counts only the messages it decides (redriven, isolated, a
//! wait begun); the later hops of waits begun earlier are counted apart, up to
//! `WORKFLOW_HOPS_PER_ROUND` and the task's deadline, without a record each, so a round
//! redrives its batch of due messages however many waiting ones (a random share of every
//! receive) it meets first, and its answer stays bounded.

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::{DrainError, DrainRequest, Summary};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use tokio::time::Instant;

use crate::error::{TaskError, invalid};
use crate::workflow::Workflow;

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Workflow<Q, A, M, C> {
    /// One round of `messages` mode: the engine's drain of up to `maxMessages` (at most
    /// `WORKFLOW_BATCH_SIZE`) under the adaptive circuit, with the long backoff, each
    /// message's record in the answer. A later hop of a wait (a message that came waiting,
    /// not due yet) takes nothing of that batch: up to `WORKFLOW_HOPS_PER_ROUND` of them are
    /// sent on besides it, counted in `hops`, no record each. A dry run plans and releases.
    pub async fn redrive_batch(
        &self,
        max_messages: u32,
        dry_run: bool,
        deadline: Option<Instant>,
    ) -> Result<Summary, TaskError> {
        if self.engine.fifo() {
            return Err(invalid(
                "redriveBatch serves standard queues; a FIFO queue runs as drains (mode scaleOut, one drain)",
            ));
        }
        if max_messages == 0 {
            return Err(invalid("maxMessages must be >= 1"));
        }
        if let Err(e) = self.engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        // Every round, whatever this engine's own backoff: a message may arrive waiting (its
        // notBefore set by an earlier round or another front end), and its hop must end before
        // the DLQ's retention as it is now could expire the copy.
        self.engine.read_dlq_retention().await;
        let request = DrainRequest {
            dry_run,
            deadline,
            ..DrainRequest::new(max_messages.min(self.config.batch_size))
        }
        .with_records()
        .with_max_hops(self.config.hops_per_round);
        finished("round", None, self.engine.drain_step(&request).await)
    }
}

/// A round's or a drain's end: a DLQ that could not be read fails the task (`Sqs.Retryable`,
/// which the state machine retries, or `DlqUnreadable`), anything else is logged and answered.
pub(crate) fn finished(
    what: &'static str,
    index: Option<u32>,
    outcome: Result<Summary, DrainError>,
) -> Result<Summary, TaskError> {
    let summary = match outcome {
        Ok(summary) => summary,
        Err(DrainError::DlqUnreadable { reason, summary }) => {
            tracing::error!(error = %reason, action = "dlq-unreadable", received = summary.received, redriven = summary.redriven, "the {what} could not read the DLQ");
            return Err(if reason.retryable {
                TaskError::Port(reason)
            } else {
                TaskError::DlqUnreadable(reason)
            });
        }
    };
    redrive_engine::info_counts!(
        summary,
        index,
        waiting = summary.waiting,
        stopped_because = summary.stopped_because.as_str(),
        "{what}"
    );
    Ok(summary)
}
