//! A run made of steps by another front end (the Step Functions workflow's tasks, each its own
//! invocation): bounded drains under the circuit, ended once by the run's last step. The
//! circuit's side of the steps is in `circuit.rs`, their end of a run in `finish.rs`.

use super::*;

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// FIFO when the DLQ or the source is (a protected DLQ's sources are FIFO exactly when it
    /// is): one pipeline, one message per group per batch, a group with a failed entry held;
    /// no per-message delay.
    pub fn fifo(&self) -> bool {
        self.config.dlq_url.is_fifo()
            || self
                .config
                .source_queue_url
                .as_ref()
                .is_some_and(QueueUrl::is_fifo)
    }

    /// One drain of a run made of steps (a workflow's scale-out drain): under the adaptive
    /// circuit as the Lambda's drain, without the guard check (the steps check them first) and
    /// without the end of a run (the run's last step ends it once, [`Engine::finish`]).
    pub async fn drain_step(&self, request: &DrainRequest) -> Summary {
        self.drain_with_circuit(request).await
    }
}
