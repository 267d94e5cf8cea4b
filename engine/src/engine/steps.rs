//! A run made of steps by another front end (the Step Functions workflow's tasks, each its own
//! invocation): receive and decide without sending, hold a message on the DLQ through a wait,
//! then send it with the drain's own send-then-delete-what-was-acknowledged. The circuit's
//! side of the steps is in `circuit.rs`, their end of a run in `finish.rs`.

use super::*;

/// What happened to one message sent by [`Engine::deliver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Its copy is on the source queue and the original deleted from the DLQ.
    Redriven,
    /// Its copy is on the poison queue and the original deleted from the DLQ.
    Isolated,
    /// Not acknowledged, or not deleted: the message stays on the DLQ.
    LeftOnDlq,
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// FIFO when the DLQ or the source is: one pipeline, one message per group per batch, a
    /// group with a failed entry held; no per-message delay.
    pub fn fifo(&self) -> bool {
        self.config.dlq_url.is_fifo() || self.config.source_queue_url.is_fifo()
    }

    /// One ReceiveMessage on the DLQ (bounded by the deadline), the messages hidden
    /// for `visibility_seconds`.
    pub async fn receive_held(
        &self,
        want: u32,
        visibility_seconds: u32,
        deadline: Option<Instant>,
    ) -> Result<Vec<Received>, PortError> {
        let dlq = self.config.dlq_url.as_str();
        let wait = self.settings.receive_wait_seconds;
        let visibility = i32::try_from(visibility_seconds).unwrap_or(i32::MAX);
        self.bounded(
            deadline,
            "ReceiveMessage",
            self.queue.receive(dlq, want as i32, wait, visibility),
        )
        .await
    }

    /// Sets the visibility of messages held on the DLQ (0 releases them). Entry failures are
    /// logged and returned as their codes.
    pub async fn set_visibility(
        &self,
        handles: &[String],
        seconds: u32,
        deadline: Option<Instant>,
    ) -> Result<Vec<String>, PortError> {
        let dlq = self.config.dlq_url.as_str();
        let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
        let mut failed = Vec::new();
        for chunk in handles.chunks(MAX_RECEIVE as usize) {
            let entries: Vec<HandleEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| HandleEntry {
                    id: i.to_string(),
                    receipt_handle: h.clone(),
                })
                .collect();
            let outcome = self
                .bounded(
                    deadline,
                    "ChangeMessageVisibilityBatch",
                    self.queue.change_visibility_batch(dlq, &entries, seconds),
                )
                .await?;
            for f in outcome.failed {
                tracing::warn!(entry = %f.id, code = %f.code, error = %f.message, "ChangeMessageVisibility entry failed");
                failed.push(f.code);
            }
        }
        Ok(failed)
    }

    /// Decides each message as a drain would, and sends nothing (the workflow decides before
    /// its wait).
    pub fn decide(&self, messages: Vec<Received>) -> Vec<(Received, Decision)> {
        self.decide_all(messages)
    }

    /// Decides one message found back on the DLQ and sends it as a drain's batch would: the
    /// copy, then the delete of what was acknowledged. `delay_seconds` replaces a redrive's
    /// drawn backoff (what is left of it after the wait); `None` keeps the decision's.
    pub async fn deliver(
        &self,
        message: Received,
        delay_seconds: Option<u32>,
        deadline: Option<Instant>,
    ) -> (Decision, Delivery) {
        let mut decided = self.decide_all(vec![message]);
        if let (Some(delay), Some((_, Decision::Redrive(plan)))) =
            (delay_seconds, decided.first_mut())
            && plan.delay_seconds.is_some()
        {
            plan.delay_seconds = Some(delay);
        }
        let decision = decided[0].1.clone();
        let summary = self.apply_decided(decided, deadline).await;
        let delivery = if summary.redriven > 0 {
            Delivery::Redriven
        } else if summary.isolated > 0 {
            Delivery::Isolated
        } else {
            Delivery::LeftOnDlq
        };
        (decision, delivery)
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// One drain of a run made of steps (a workflow's scale-out drain): under the adaptive
    /// circuit as the Lambda's drain, without the guard check (the steps check them first) and
    /// without the end of a run (the run's last step ends it once, [`Engine::finish`]).
    pub async fn drain_step(&self, request: &DrainRequest) -> Summary {
        self.drain_with_circuit(request).await
    }
}
