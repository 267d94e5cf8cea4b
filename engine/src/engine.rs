//! The drain: receive from the DLQ, decide each message, send the copies, and delete from the
//! DLQ only what the destination acknowledged.
//!
//! [`Engine`] holds the ports, the configuration and what outlives one drain; each concern is a
//! type of its own:
//! - `Destinations` (`destinations.rs`): where a message's copy goes (the configured source,
//!   or for a protected DLQ the source it names) and what the destinations allow (their
//!   `MaximumMessageSize`, the DLQ's retention), read from the queues and kept;
//! - `Drain` (`drain.rs`): one run's pipelines, its pacer, its tally and what it holds;
//! - `Batch` (`batch.rs`): one received batch as steps over one value: plan the sends, send,
//!   handle rejections (`rejected.rs`), delete what was acknowledged, settle each message's
//!   [`Action`](action);
//! - `Gate` (`gate.rs`): what the drain asks before each batch ("may I?"), which the adaptive
//!   circuit answers (`circuit.rs`, `steps.rs` for runs made of steps);
//! - `Calls` (`calls.rs`): bounded port calls, valid batches and retries of failed entries,
//!   shared with [`Transfer`], the operator CLI's moves.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use redrive_shared::backoff::{JitterRng, os_seeded_rng, seeded_rng};
use redrive_shared::config::RedriverConfig;
use tokio::time::Instant;

mod action;
mod admission;
mod batch;
mod calls;
mod circuit;
mod decide;
mod destinations;
mod drain;
mod finish;
mod gate;
mod invoke;
mod onhold;
mod pacer;
mod rejected;
mod request;
mod steps;
#[cfg(test)]
mod tests;
mod transfer;

use crate::circuit::{CircuitStore, NoCircuit};
use crate::lock;
use crate::ports::{Alarms, Metrics, PortError, Queue};
pub use admission::{Admission, CircuitCheck, CircuitSummary, DrainCounts};
use calls::Calls;
use destinations::Destinations;
pub use destinations::{DestinationLimits, RETENTION_MARGIN_SECONDS, hop_cap};
pub use finish::StepTotals;
pub use onhold::TriageBooks;
pub use rejected::{SEND_REJECTED_AFTER, SEND_REJECTIONS_FIELD};
pub use request::{DrainError, DrainRequest, MessageRecord, Settings, StopReason, Summary};
pub use transfer::{Acks, HeldDeletes, Holds, Moved, Transfer, delete_held};

/// The engine. `C` is the adaptive circuit's store ([`NoCircuit`] by default: off, as when
/// `CIRCUIT_TABLE` is unset); see [`Engine::with_circuit`].
pub struct Engine<Q, A, M, C = NoCircuit> {
    pub queue: Q,
    pub alarms: A,
    pub metrics: M,
    /// The adaptive circuit's record; used only when `config.circuit` is set too.
    pub circuit: C,
    pub config: RedriverConfig,
    pub settings: Settings,
    /// Where copies go and what the destinations allow, as last read.
    destinations: Destinations,
    /// The jitter's random source.
    rng: Mutex<JitterRng>,
    /// The wall clock (epoch milliseconds) of the stamps and of the circuit.
    clock: fn() -> i64,
    /// When each trigger alarm was last re-armed by this process (at most once per period
    /// while a drain makes no progress).
    rearmed: Mutex<HashMap<String, Instant>>,
    /// Triage's book, whose holds the drains keep (`TRIAGE_TABLE`); see
    /// [`Engine::with_triage`].
    pub triage: Option<TriageBooks>,
}

impl<Q: Queue, A: Alarms, M: Metrics> Engine<Q, A, M> {
    pub fn new(queue: Q, alarms: A, metrics: M, config: RedriverConfig) -> Self {
        Self {
            queue,
            alarms,
            metrics,
            circuit: NoCircuit,
            config,
            settings: Settings::default(),
            destinations: Destinations::default(),
            rng: Mutex::new(os_seeded_rng()),
            clock: crate::now_ms,
            rearmed: Mutex::new(HashMap::new()),
            triage: None,
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// The adaptive circuit's store: used when `config.circuit` is set
    /// (`CIRCUIT_TABLE`); `None` or [`NoCircuit`] keep the circuit off.
    pub fn with_circuit<S: CircuitStore>(self, store: S) -> Engine<Q, A, M, S> {
        Engine {
            queue: self.queue,
            alarms: self.alarms,
            metrics: self.metrics,
            circuit: store,
            config: self.config,
            settings: self.settings,
            destinations: self.destinations,
            rng: self.rng,
            clock: self.clock,
            rearmed: self.rearmed,
            triage: self.triage,
        }
    }

    /// The longest `DelaySeconds` a copy gets (1..=900; SQS's 900 by default). A backoff
    /// longer than this waits on the DLQ: the message goes back there with this delay and
    /// `notBefore` in its `x-redrive`, hop after hop, until it is due (the Step Functions
    /// orchestrator's long waits; tests scale it down).
    pub fn with_max_delay(mut self, seconds: u32) -> Self {
        self.destinations.set_max_delay(seconds);
        self
    }

    /// True when this engine's backoff can outgrow a copy's delay.
    pub fn can_wait(&self) -> bool {
        !self.fifo() && self.config.backoff.max() > self.destinations.max_delay_seconds()
    }

    /// The wall clock (epoch milliseconds) of the stamps and of the circuit (tests, simulations).
    pub fn with_clock(mut self, clock: fn() -> i64) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Fixes the jitter's random source (tests, benchmarks).
    pub fn with_seed(self, seed: u64) -> Self {
        *lock(&self.rng) = seeded_rng(seed);
        self
    }

    /// FIFO when the DLQ or the source is (a protected DLQ's sources are FIFO exactly when it
    /// is): one pipeline, one message per group per batch, a group with a failed entry held;
    /// no per-message delay.
    pub fn fifo(&self) -> bool {
        destinations::is_fifo(&self.config)
    }

    /// Reads the DLQ's `MessageRetentionPeriod` (GetQueueAttributes), which bounds every hop
    /// of a wait: called before each round of an engine that can decide waits, so that a
    /// retention changed on the queue applies at once. A failure is logged and the last value
    /// read (or none: hops of the delay cap) stays.
    pub async fn read_dlq_retention(&self) {
        self.destinations
            .read_retention(&self.queue, self.calls(None), &self.config)
            .await;
    }

    /// A protected DLQ's sources (ListDeadLetterSourceQueues), listed at the start of each
    /// drain so that a source added or removed applies at once, and the `MaximumMessageSize` of
    /// each new one. A DLQ with a configured source lists nothing. Until a first list
    /// succeeds, the drain receives nothing: a message is never isolated `unknown-source`
    /// because the list could not be read.
    pub async fn read_sources(&self) -> Result<(), PortError> {
        self.destinations
            .read_sources(&self.queue, self.calls(None), &self.config)
            .await
    }

    /// Reads the destinations' `MaximumMessageSize` once (at init through [`Self::warm_up`],
    /// else at the first drain); until it is known, SQS's largest is assumed and an oversize
    /// copy is caught by the send-rejected rule.
    pub async fn load_limits(&self) -> Result<DestinationLimits, PortError> {
        self.destinations
            .load_limits(&self.queue, self.calls(None), &self.config)
            .await
    }

    /// The calls of a run that no call may outlive past `end`.
    fn calls(&self, end: Option<Instant>) -> Calls<'_> {
        Calls {
            settings: &self.settings,
            end,
        }
    }

    /// One port call, given at most `call_timeout` and never past `end`.
    async fn bounded<T>(
        &self,
        end: Option<Instant>,
        operation: &'static str,
        call: impl Future<Output = Result<T, PortError>>,
    ) -> Result<T, PortError> {
        self.calls(end).bounded(operation, call).await
    }
}
