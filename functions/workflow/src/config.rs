//! The orchestrator's configuration, read once at init.

use redrive_shared::backoff::{Backoff, MAX_DELAY_SECONDS, MAX_WAIT_SECONDS};
use redrive_shared::config::{ConfigError, Env, RedriverConfig, parse_u32};

use crate::MAX_PARALLEL;

/// The orchestrator's configuration: the re-driver's variables (its backoff capped at 900 s,
/// for the scale-out drains), the same backoff up to 12 h for waits, and the workflow's own.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowConfig {
    /// The re-driver's configuration; `backoff` capped at 900 s (what a drain sends).
    pub redriver: RedriverConfig,
    /// `BACKOFF_*` with `BACKOFF_MAX_SECONDS` up to 43,200 (12 h).
    pub wait_backoff: Backoff,
    /// `WORKFLOW_MAX_DELAY_SECONDS` (1..=900, default 900): the longest `DelaySeconds` of a
    /// copy. A longer backoff waits on the DLQ in hops of at most this (less where the DLQ's
    /// retention is short), `notBefore` in the message's `x-redrive`.
    pub max_delay_seconds: u32,
    /// `WORKFLOW_BATCH_SIZE` (1..=40, default 40): messages per `redriveBatch`.
    pub batch_size: u32,
    /// `WORKFLOW_HOPS_PER_ROUND` (1..=100,000, default 2,000): the hops a `redriveBatch` may
    /// send on besides its batch (messages that came waiting, not due yet), counted apart and
    /// bounded by the task's deadline too, so that a round redrives its batch of due messages
    /// however many waiting ones it meets first.
    pub hops_per_round: u32,
}

/// `WORKFLOW_HOPS_PER_ROUND` when unset.
pub const DEFAULT_HOPS_PER_ROUND: u32 = 2_000;
/// The most `WORKFLOW_HOPS_PER_ROUND` may be.
pub const MAX_HOPS_PER_ROUND: u32 = 100_000;

impl WorkflowConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let long_max = env.optional("BACKOFF_MAX_SECONDS", |v| {
            let n = redrive_shared::config::parse_u64(v)?;
            if n <= u64::from(MAX_WAIT_SECONDS) {
                Ok(n)
            } else {
                Err(format!(
                    "must be between 0 and {MAX_WAIT_SECONDS} seconds (12 h, the longest wait the Step Functions orchestrator offers)"
                ))
            }
        })?;
        // The re-driver's own rules read every other variable; its backoff, capped at 900 s, is
        // what a scale-out drain sends.
        let capped = Env(|k: &str| {
            if k == "BACKOFF_MAX_SECONDS" {
                long_max.map(|m| m.min(u64::from(MAX_DELAY_SECONDS)).to_string())
            } else {
                (env.0)(k)
            }
        });
        let redriver = RedriverConfig::from_env(&capped)?;
        let b = redriver.backoff;
        let wait_backoff = Backoff::new_long(
            b.base(),
            b.multiplier(),
            long_max.unwrap_or(u64::from(b.max())),
            b.jitter(),
        )
        .map_err(|e| ConfigError {
            variable: "BACKOFF_MAX_SECONDS",
            value: env.get("BACKOFF_MAX_SECONDS"),
            problem: e.to_string(),
        })?;
        let ranged = |lo: u32, hi: u32| {
            move |v: &str| {
                let n = parse_u32(v)?;
                if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(format!("must be a whole number from {lo} to {hi}"))
                }
            }
        };
        let max_delay_seconds = env.or(
            "WORKFLOW_MAX_DELAY_SECONDS",
            MAX_DELAY_SECONDS,
            ranged(1, MAX_DELAY_SECONDS),
        )?;
        let batch_size = env.or("WORKFLOW_BATCH_SIZE", MAX_PARALLEL, ranged(1, MAX_PARALLEL))?;
        let hops_per_round = env.or(
            "WORKFLOW_HOPS_PER_ROUND",
            DEFAULT_HOPS_PER_ROUND,
            ranged(1, MAX_HOPS_PER_ROUND),
        )?;
        for gone in ["WORKFLOW_SEARCH_RECEIVES", "WORKFLOW_HOLD_SLACK_SECONDS"] {
            if let Some(value) = env.get(gone) {
                return Err(ConfigError {
                    variable: gone,
                    value: Some(value),
                    problem: "is no longer read: a waiting message hops on the DLQ with notBefore in its x-redrive instead of being held there and searched for; remove it".to_string(),
                });
            }
        }
        Ok(Self {
            redriver,
            wait_backoff,
            max_delay_seconds,
            batch_size,
            hops_per_round,
        })
    }
}
