//! The consumer's knobs outside the contract's configuration.

use std::time::Duration;

/// Knobs that are not part of the contract's configuration. Built from
/// [`Settings::default`] with the `with_*` methods.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub(crate) max_concurrency: usize,
    pub(crate) fallback_claim: Duration,
    pub(crate) complete_retries: u32,
    pub(crate) complete_retry_base: Duration,
    pub(crate) deadline_margin: Duration,
    pub(crate) emit_metrics: bool,
}

impl Settings {
    /// Records of a standard queue processed at once (default 10; at least 1).
    pub fn with_max_concurrency(mut self, records: usize) -> Self {
        self.max_concurrency = records.max(1);
        self
    }

    /// How long a claim lasts when the invocation has no usable deadline (a local emulator
    /// reports one in the past). Default 900 s: the longest a Lambda invocation can run.
    pub fn with_fallback_claim(mut self, claim: Duration) -> Self {
        self.fallback_claim = claim;
        self
    }

    /// Further tries of a COMPLETED write that failed (beyond the SDK's own retries), each
    /// after twice the previous wait, from `base`, while the claim holds. Default 3 from
    /// 100 ms.
    pub fn with_complete_retries(mut self, retries: u32, base: Duration) -> Self {
        self.complete_retries = retries;
        self.complete_retry_base = base;
        self
    }

    /// Time a record needs besides its processing step (claim, COMPLETED write and its
    /// retries, release, visibility change, DLQ copy and delete). A record is started only
    /// while the processor's [`Processor::time_limit`](crate::Processor::time_limit) plus this margin is left before the
    /// invocation deadline; the others are reported failed untouched. Default 3 s.
    pub fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    pub fn fallback_claim(&self) -> Duration {
        self.fallback_claim
    }

    pub fn deadline_margin(&self) -> Duration {
        self.deadline_margin
    }

    /// Whether each invocation prints its metrics as an Embedded Metric Format line on stdout
    /// (see [`crate::metrics`]). Default on; off for in-process simulations that run
    /// thousands of batches.
    pub fn with_emit_metrics(mut self, emit: bool) -> Self {
        self.emit_metrics = emit;
        self
    }

    pub fn emit_metrics(&self) -> bool {
        self.emit_metrics
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_concurrency: 10,
            fallback_claim: Duration::from_secs(900),
            complete_retries: 3,
            complete_retry_base: Duration::from_millis(100),
            deadline_margin: Duration::from_secs(3),
            emit_metrics: true,
        }
    }
}
