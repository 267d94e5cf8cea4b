//! The tasks of one message through its wait: receive and decide a batch, hold a message on
//! the DLQ, then find it back and send it with the engine's send-then-delete.

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::{Delivery, Gate};
use redrive_engine::ports::{Alarms, Metrics, PortError, Queue, Received};
use redrive_shared::backoff::MAX_WAIT_SECONDS;
use redrive_shared::decision::Decision;
use redrive_shared::limits::MAX_RECEIVE;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::{TaskError, invalid};
use crate::state::{Batch, Item, ItemAction, MessageOutcome, Mode, Outcome, Run, Totals};
use crate::tally::tally;
use crate::workflow::Workflow;

impl<Q: Queue, A: Alarms, M: Metrics, X, C: CircuitStore> Workflow<Q, A, M, X, C> {
    /// Receives up to `maxMessages` (at most `WORKFLOW_BATCH_SIZE`) and decides each; sends
    /// nothing. A dry run releases what it received at once.
    pub async fn receive_batch(
        &self,
        max_messages: u32,
        dry_run: bool,
        deadline: Option<Instant>,
    ) -> Result<Batch, TaskError> {
        if self.engine.fifo() {
            return Err(invalid(
                "receiveBatch serves standard queues; a FIFO queue runs as drains (mode scaleOut, one drain)",
            ));
        }
        if let Err(e) = self.engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        let want = max_messages.min(self.config.batch_size);
        let mut messages: Vec<Received> = Vec::new();
        let mut queue_empty = false;
        while (messages.len() as u32) < want {
            let ask = (want - messages.len() as u32).min(MAX_RECEIVE as u32);
            match self
                .engine
                .receive_held(ask, self.config.hold_slack_seconds, deadline)
                .await
            {
                Ok(got) if got.is_empty() => {
                    queue_empty = true;
                    break;
                }
                Ok(got) => messages.extend(got),
                Err(e) if messages.is_empty() => {
                    tracing::error!(error = %e, action = "dlq-unreadable", "receiving from the DLQ failed");
                    return Err(if e.retryable {
                        TaskError::Port(e)
                    } else {
                        TaskError::DlqUnreadable(e)
                    });
                }
                Err(e) => {
                    // What was received is decided and returned; the rest waits for a round.
                    tracing::warn!(error = %e, "receiving more from the DLQ failed; continuing with what was received");
                    break;
                }
            }
        }
        let mut canary = false;
        let mut bounced = 0;
        if !dry_run && !messages.is_empty() {
            let (gate, seen) = self.engine.gate_batch(&messages).await;
            bounced = seen;
            match gate {
                Gate::Pass => {}
                Gate::Canary(size) => {
                    canary = true;
                    if messages.len() > size as usize {
                        let rest: Vec<String> = messages
                            .split_off(size as usize)
                            .into_iter()
                            .map(|m| m.receipt_handle)
                            .collect();
                        self.release(&rest, deadline).await;
                    }
                }
                Gate::Hold => {
                    let all: Vec<String> = messages.into_iter().map(|m| m.receipt_handle).collect();
                    self.release(&all, deadline).await;
                    tracing::warn!(
                        released = all.len(),
                        action = "circuit-open",
                        "the circuit holds: the batch went back on the DLQ, no attempt spent; the execution stops"
                    );
                    return Ok(Batch {
                        items: Vec::new(),
                        received: 0,
                        queue_empty: false,
                        dry_run,
                        circuit_opened: true,
                        bounced,
                    });
                }
            }
        }
        let received_at = (self.clock)();
        let decided = self.engine.decide(messages);
        let mut items: Vec<Item> = decided
            .iter()
            .map(|(m, d)| self.item(m, d, received_at))
            .collect();
        if canary {
            // As in the Lambda, a canary goes out without its backoff: a copy held or delayed
            // beyond the window would let the canary pass untried.
            for i in items.iter_mut().filter(|i| i.action == ItemAction::Redrive) {
                i.wait_seconds = 0;
                i.delay_seconds = 0;
            }
        }
        for item in &items {
            tracing::info!(message_id = %item.message_id, original_message_id = %item.original_message_id, attempt = item.attempt, backoff_seconds = item.backoff_seconds, wait_seconds = item.wait_seconds, delay_seconds = item.delay_seconds, action = if dry_run { "plan" } else { "decided" }, decision = ?item.action, "received");
        }
        if dry_run {
            let handles: Vec<String> = items.iter().map(|i| i.receipt_handle.clone()).collect();
            if let Err(e) = self.engine.set_visibility(&handles, 0, deadline).await {
                tracing::warn!(error = %e, "releasing dry-run messages failed; they reappear after their visibility timeout");
            }
        }
        Ok(Batch {
            received: items.len() as u32,
            items,
            queue_empty,
            dry_run,
            circuit_opened: false,
            bounced,
        })
    }

    /// Releases held messages at once (visibility 0); a failure is logged: they reappear
    /// after their visibility timeout.
    async fn release(&self, handles: &[String], deadline: Option<Instant>) {
        if let Err(e) = self.engine.set_visibility(handles, 0, deadline).await {
            tracing::warn!(error = %e, "releasing messages failed; they reappear after their visibility timeout");
        }
    }

    /// [`tally`], and the copies the round redrove (messages mode) counted into the circuit
    /// record, so that the bounce-back rate has its denominator (a scale-out round's counts
    /// land once, `land_drains`, and the next round's drains get their shares of the plan,
    /// `admit`). They count from the batch's receive, no later than any `lastRedrivenAt`
    /// they carry, so that a canary recognises all its copies.
    pub async fn tally_round(
        &self,
        run: &Run,
        totals: Totals,
        batch: Option<&Batch>,
        results: &[Value],
    ) -> Totals {
        let before = totals.redriven;
        self.land_drains(run, &totals, results).await;
        let mut after = tally(run, totals, batch, results);
        self.admit(&mut after.drain_plan).await;
        let n = after.redriven.saturating_sub(before);
        if run.mode != Mode::Messages || run.dry_run || n == 0 {
            return after;
        }
        let now = (self.clock)();
        let sent = batch
            .and_then(|b| b.items.iter().map(|i| i.received_at).min())
            .unwrap_or(now);
        self.engine.count_redriven(sent, n).await;
        after
    }

    fn item(&self, m: &Received, d: &Decision, received_at: i64) -> Item {
        let cfg = &self.config.redriver;
        let meta = d.meta();
        let (action, reason, destination) = match d {
            Decision::Redrive(_) => (ItemAction::Redrive, None, cfg.source_queue_url.name()),
            Decision::Isolate(p) => (
                ItemAction::Isolate,
                Some(p.reason.to_string()),
                cfg.poison_queue_url.name(),
            ),
        };
        let backoff = d.delay_seconds().unwrap_or(0);
        let delay = backoff.min(self.config.max_delay_seconds);
        Item {
            message_id: m.message_id.clone(),
            receipt_handle: m.receipt_handle.clone(),
            received_at,
            group_id: m.group_id.clone(),
            original_message_id: meta.original_message_id.clone(),
            attempt: meta.attempt,
            action,
            reason,
            backoff_seconds: backoff,
            wait_seconds: backoff - delay,
            delay_seconds: delay,
            destination: destination.to_string(),
        }
    }

    /// Hides a message on the DLQ for its wait plus the slack, capped at 12 h from its receive.
    /// A hold that SQS refuses (the handle went stale) is reported, not failed: the message is
    /// then visible on the DLQ, where the redrive task finds it after the wait.
    pub async fn extend_visibility(
        &self,
        item: &Item,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        let elapsed = ((self.clock)() - item.received_at).max(0) as u64;
        let left = u64::from(MAX_WAIT_SECONDS).saturating_sub(elapsed.div_ceil(1000));
        let hold =
            (u64::from(item.wait_seconds) + u64::from(self.config.hold_slack_seconds)).min(left);
        let failed = self
            .engine
            .set_visibility(
                std::slice::from_ref(&item.receipt_handle),
                hold as u32,
                deadline,
            )
            .await?;
        let held = failed.is_empty();
        tracing::info!(message_id = %item.message_id, original_message_id = %item.original_message_id, held, hold_seconds = hold, action = "hold", "message held on the DLQ for its wait");
        Ok(json!({
            "messageId": item.message_id,
            "held": held,
            "heldSeconds": if held { hold } else { 0 },
        }))
    }

    /// Releases the held message, receives until it comes back, and sends it with its decision
    /// (the engine's send, then delete only what was acknowledged).
    pub async fn redeliver(
        &self,
        item: Item,
        task: ItemAction,
        deadline: Option<Instant>,
    ) -> Result<Outcome, TaskError> {
        if item.action != task {
            return Err(invalid(format!(
                "message {} was decided {:?}, not {:?}",
                item.message_id, item.action, task
            )));
        }
        if let Err(e) = self.engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        // Stale (the hold lapsed, or a retry of this task already released it): it is visible.
        self.engine
            .set_visibility(std::slice::from_ref(&item.receipt_handle), 0, deadline)
            .await?;
        let mut others: Vec<String> = Vec::new();
        let mut found: Option<Received> = None;
        let mut error: Option<PortError> = None;
        for _ in 0..self.config.search_receives {
            match self
                .engine
                .receive_held(MAX_RECEIVE as u32, self.config.hold_slack_seconds, deadline)
                .await
            {
                Ok(got) => {
                    for m in got {
                        if m.message_id == item.message_id && found.is_none() {
                            found = Some(m);
                        } else {
                            others.push(m.receipt_handle);
                        }
                    }
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            if found.is_some() {
                break;
            }
        }
        // Everything else seen goes back at once, whatever happened.
        if !others.is_empty()
            && let Err(e) = self.engine.set_visibility(&others, 0, deadline).await
        {
            tracing::warn!(error = %e, "releasing messages seen while searching failed; they reappear after their visibility timeout");
        }
        let Some(message) = found else {
            if let Some(e) = error {
                return Err(TaskError::Port(e));
            }
            tracing::warn!(message_id = %item.message_id, action = "not-found:left-on-dlq", "the message did not come back from the DLQ");
            return Err(TaskError::MessageNotFound {
                message_id: item.message_id,
                receives: self.config.search_receives,
            });
        };
        // The wait is over: what is left of the drawn backoff is the copy's delay.
        let (decision, delivery) = self
            .engine
            .deliver(message, Some(item.delay_seconds), deadline)
            .await;
        let action = if decision.is_redrive() {
            ItemAction::Redrive
        } else {
            ItemAction::Isolate
        };
        if action != item.action {
            tracing::warn!(message_id = %item.message_id, decided = ?item.action, now = ?action, "the decision changed since the batch was received; the new one applied");
        }
        let outcome = match delivery {
            Delivery::Redriven => MessageOutcome::Redriven,
            Delivery::Isolated => MessageOutcome::Isolated,
            Delivery::LeftOnDlq => MessageOutcome::Failed,
        };
        let cfg = &self.config.redriver;
        let (reason, destination) = match &decision {
            Decision::Redrive(_) => (None, cfg.source_queue_url.name()),
            Decision::Isolate(p) => (Some(p.reason.to_string()), cfg.poison_queue_url.name()),
        };
        Ok(Outcome {
            message_id: item.message_id,
            original_message_id: decision.meta().original_message_id.clone(),
            attempt: decision.meta().attempt,
            action,
            reason,
            delay_seconds: decision.delay_seconds().unwrap_or(0),
            waited_seconds: item.wait_seconds,
            destination: destination.to_string(),
            outcome,
        })
    }
}
