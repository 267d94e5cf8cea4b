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
    /// `WORKFLOW_MAX_DELAY_SECONDS` (0..=900, default 900): the part of a backoff left to the
    /// copy's `DelaySeconds`; the rest is waited by the state machine, the message held on the
    /// DLQ.
    pub max_delay_seconds: u32,
    /// `WORKFLOW_HOLD_SLACK_SECONDS` (1..=3600, default 300): a held message stays hidden this
    /// long beyond its wait, for the redrive task to reach it.
    pub hold_slack_seconds: u32,
    /// `WORKFLOW_BATCH_SIZE` (1..=40, default 40): messages per `receiveBatch`.
    pub batch_size: u32,
    /// `WORKFLOW_SEARCH_RECEIVES` (1..=100, default 10): receives a redrive task makes to find
    /// its message back on the DLQ.
    pub search_receives: u32,
}

impl WorkflowConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let long_max = env.optional("BACKOFF_MAX_SECONDS", |v| {
            let n = redrive_shared::config::parse_u64(v)?;
            if n <= u64::from(MAX_WAIT_SECONDS) {
                Ok(n)
            } else {
                Err(format!(
                    "must be between 0 and {MAX_WAIT_SECONDS} seconds (12 h, the longest a message can be held on the DLQ) in the Step Functions orchestrator"
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
            ranged(0, MAX_DELAY_SECONDS),
        )?;
        let hold_slack_seconds = env.or("WORKFLOW_HOLD_SLACK_SECONDS", 300, ranged(1, 3600))?;
        let batch_size = env.or("WORKFLOW_BATCH_SIZE", MAX_PARALLEL, ranged(1, MAX_PARALLEL))?;
        let search_receives = env.or("WORKFLOW_SEARCH_RECEIVES", 10, ranged(1, 100))?;
        // The longest hold must fit in SQS's 12 h from the receive.
        let longest_hold = u64::from(wait_backoff.max().saturating_sub(max_delay_seconds))
            + u64::from(hold_slack_seconds);
        if longest_hold > u64::from(MAX_WAIT_SECONDS) {
            return Err(ConfigError {
                variable: "BACKOFF_MAX_SECONDS",
                value: env.get("BACKOFF_MAX_SECONDS"),
                problem: format!(
                    "a wait of BACKOFF_MAX_SECONDS - WORKFLOW_MAX_DELAY_SECONDS ({}) plus WORKFLOW_HOLD_SLACK_SECONDS ({hold_slack_seconds}) must fit in {MAX_WAIT_SECONDS} seconds (12 h from the receive)",
                    wait_backoff.max().saturating_sub(max_delay_seconds)
                ),
            });
        }
        Ok(Self {
            redriver,
            wait_backoff,
            max_delay_seconds,
            hold_slack_seconds,
            batch_size,
            search_receives,
        })
    }
}
