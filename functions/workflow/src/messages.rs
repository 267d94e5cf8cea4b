//! The tasks of one message through its wait: receive and decide a batch, hold a message on
//! the DLQ, then find it back and send it with the engine's send-then-delete.

use redrive_engine::circuit::{self, CircuitError, CircuitStore};
use redrive_engine::ports::{Alarms, Metrics, PortError, Queue, Received};
use redrive_shared::backoff::MAX_WAIT_SECONDS;
use redrive_shared::circuit::{CircuitSettings, Event, Plan, State, Transition, bounce_of};
use redrive_shared::decision::Decision;
use redrive_shared::limits::MAX_RECEIVE;
use redrive_shared::meta::RedriveMeta;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::{TaskError, invalid};
use crate::executions::Executions;
use crate::state::{Batch, Item, ItemAction, Mode, Outcome, Run, Totals};
use crate::tally::tally;
use crate::workflow::Workflow;

impl<Q, A, M, X, C> Workflow<Q, A, M, X, C>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    X: Executions,
    C: CircuitStore + Clone + Send,
{
    /// Receives up to `maxMessages` (at most `WORKFLOW_BATCH_SIZE`) and decides each; sends
    /// nothing. A dry run releases what it received at once.
    pub async fn receive_batch(
        &self,
        max_messages: u32,
        dry_run: bool,
        deadline: Option<Instant>,
    ) -> Result<Batch, TaskError> {
        if self.fifo() {
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
                .receive(ask, self.config.hold_slack_seconds, deadline)
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
                        TaskError::DlqUnreadable(e.to_string())
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
            let (gate, seen) = self.circuit_gate(&messages).await;
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
        let decided = self.engine.decide_all(messages);
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
            if let Err(e) = self.set_visibility(&handles, 0, deadline).await {
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
        if let Err(e) = self.set_visibility(handles, 0, deadline).await {
            tracing::warn!(error = %e, "releasing messages failed; they reappear after their visibility timeout");
        }
    }

    /// The adaptive circuit's settings when it is on (`CIRCUIT_TABLE` set and a store given).
    fn circuit_settings(&self) -> Option<CircuitSettings> {
        let cfg = self.config.redriver.circuit.as_ref()?;
        self.circuit.enabled().then_some(cfg.settings)
    }

    /// What the adaptive circuit lets a received batch do, as the Lambda's run does: the
    /// batch's bounced copies are counted into the record (a write on the version read; none
    /// when there are none), then the record's plan decides. A record that cannot be read or
    /// written holds (fail closed). With the gate: the bounced copies counted into the record.
    async fn circuit_gate(&self, messages: &[Received]) -> (Gate, u64) {
        let Some(settings) = self.circuit_settings() else {
            return (Gate::Pass, 0);
        };
        let dlq = self.config.redriver.dlq_url.as_str();
        let now = (self.clock)();
        let bounces: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                bounce_of(&meta, now, &settings)
            })
            .collect();
        let bounced = bounces.len();
        let looked = if bounces.is_empty() {
            redrive_engine::circuit::load_or_new(&self.circuit, dlq, &settings, now)
                .await
                .map(|(_, mut record)| {
                    record.tick(&settings, now);
                    (record, Vec::new())
                })
                .map_err(CircuitError::from)
        } else {
            let events = [Event::Tick { now }, Event::Bounces { now, bounces }];
            circuit::update(&self.circuit, dlq, &settings, now, &events).await
        };
        let (record, transitions) = match looked {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read or write the circuit record; treating the circuit as open");
                return (Gate::Hold, 0);
            }
        };
        log_transitions(dlq, &transitions);
        let plan = record.plan(&settings);
        tracing::info!(queue = dlq, bounced, state = %record.state, plan = plan.as_str(), "circuit");
        let gate = match plan {
            Plan::Hold | Plan::Watch => Gate::Hold,
            Plan::Canary { size } => Gate::Canary(size),
            Plan::Drain { .. } => Gate::Pass,
        };
        (gate, bounced as u64)
    }

    /// [`tally`], and the copies the round redrove (messages mode) counted into the circuit
    /// record, so that the bounce-back rate has its denominator (the scale-out drains count
    /// their own). They count from the batch's receive, no later than any `lastRedrivenAt`
    /// they carry, so that a canary recognises all its copies.
    pub async fn tally_round(
        &self,
        run: &Run,
        totals: Totals,
        batch: Option<&Batch>,
        results: &[Value],
    ) -> Totals {
        let before = totals.redriven;
        let after = tally(run, totals, batch, results);
        let n = after.redriven.saturating_sub(before);
        if run.mode != Mode::Messages || run.dry_run || n == 0 {
            return after;
        }
        let Some(settings) = self.circuit_settings() else {
            return after;
        };
        let dlq = self.config.redriver.dlq_url.as_str();
        let now = (self.clock)();
        let sent = batch
            .and_then(|b| b.items.iter().map(|i| i.received_at).min())
            .unwrap_or(now);
        let events = [
            Event::Tick { now },
            Event::Redriven {
                now: sent,
                n: u32::try_from(n).unwrap_or(u32::MAX),
            },
        ];
        match circuit::update(&self.circuit, dlq, &settings, now, &events).await {
            Ok((_, transitions)) => log_transitions(dlq, &transitions),
            Err(e) => {
                tracing::error!(error = %e, redriven = n, "saving the circuit record failed; this round's redriven count is lost")
            }
        }
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
        self.set_visibility(std::slice::from_ref(&item.receipt_handle), 0, deadline)
            .await?;
        let mut others: Vec<String> = Vec::new();
        let mut found: Option<Received> = None;
        let mut error: Option<PortError> = None;
        for _ in 0..self.config.search_receives {
            match self
                .receive(MAX_RECEIVE as u32, self.config.hold_slack_seconds, deadline)
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
            && let Err(e) = self.set_visibility(&others, 0, deadline).await
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
        let mut decided = self.engine.decide_all(vec![message]);
        if let Some((_, Decision::Redrive(plan))) = decided.first_mut()
            && plan.delay_seconds.is_some()
        {
            // The wait is over: what is left of the drawn backoff is the copy's delay.
            plan.delay_seconds = Some(item.delay_seconds);
        }
        let decision = decided[0].1.clone();
        let action = if decision.is_redrive() {
            ItemAction::Redrive
        } else {
            ItemAction::Isolate
        };
        if action != item.action {
            tracing::warn!(message_id = %item.message_id, decided = ?item.action, now = ?action, "the decision changed since the batch was received; the new one applies");
        }
        let summary = self.engine.apply_decided(decided, deadline).await;
        let outcome = if summary.redriven > 0 {
            "redriven"
        } else if summary.isolated > 0 {
            "isolated"
        } else {
            "failed"
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
            outcome: outcome.to_string(),
        })
    }
}

/// What the adaptive circuit lets a received batch do.
enum Gate {
    /// Closed (or off): decide the batch as usual.
    Pass,
    /// Half-open: this many messages are the canary; the rest go back on the DLQ.
    Canary(u32),
    /// Open, or watching for the canary: the whole batch goes back on the DLQ.
    Hold,
}

fn log_transitions(queue: &str, transitions: &[Transition]) {
    for t in transitions {
        if t.to == State::Open {
            tracing::warn!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit opened: nothing is redriven until a canary comes through");
        } else {
            tracing::info!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit transition");
        }
    }
}
