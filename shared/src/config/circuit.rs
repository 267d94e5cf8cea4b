//! The adaptive circuit's configuration: its table and the rule's tunables.

use crate::circuit::CircuitSettings;

use super::{ConfigError, Env, parse_f64, parse_table_name, parse_u32, parse_u64, positive_u32};

/// The adaptive circuit's configuration: its DynamoDB table and the rule's tunables (see
/// [`crate::circuit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitConfig {
    /// `CIRCUIT_TABLE`: one item per DLQ, partition key `queue`.
    pub table: String,
    pub settings: CircuitSettings,
}

impl CircuitConfig {
    /// The rule's tunables (`CIRCUIT_THRESHOLD`, `CIRCUIT_MIN_BOUNCES`, `CIRCUIT_WINDOW_SECONDS`,
    /// `CIRCUIT_COOLDOWN_SECONDS`, `CIRCUIT_MAX_COOLDOWN_SECONDS`, `CIRCUIT_CANARY_SIZE`), with
    /// or without a table (the CLI's `drain --canary` uses them without one).
    pub fn settings_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<CircuitSettings, ConfigError> {
        let defaults = CircuitSettings::default();
        let seconds = |max: u64| {
            move |v: &str| {
                let n = parse_u64(v)?;
                if (1..=max).contains(&n) {
                    Ok(n as i64 * 1000)
                } else {
                    Err(format!("must be a whole number of seconds from 1 to {max}"))
                }
            }
        };
        let threshold = env.or("CIRCUIT_THRESHOLD", defaults.threshold, |v| {
            let t = parse_f64(v)?;
            if t > 0.0 && t <= 1.0 {
                Ok(t)
            } else {
                Err("must be a fraction of bounced copies greater than 0 and at most 1".into())
            }
        })?;
        let min_bounces = env.or("CIRCUIT_MIN_BOUNCES", defaults.min_bounces, positive_u32)?;
        // Windows and cool-downs up to 14 days, the longest SQS retention.
        let window_ms = env.or(
            "CIRCUIT_WINDOW_SECONDS",
            defaults.window_ms,
            seconds(1_209_600),
        )?;
        let cooldown_ms = env.or(
            "CIRCUIT_COOLDOWN_SECONDS",
            defaults.cooldown_ms,
            seconds(1_209_600),
        )?;
        let max_cooldown_ms = env.or(
            "CIRCUIT_MAX_COOLDOWN_SECONDS",
            defaults.max_cooldown_ms.max(cooldown_ms),
            seconds(1_209_600),
        )?;
        if max_cooldown_ms < cooldown_ms {
            return Err(env.err(
                "CIRCUIT_MAX_COOLDOWN_SECONDS",
                format!(
                    "must be at least CIRCUIT_COOLDOWN_SECONDS ({} s)",
                    cooldown_ms / 1000
                ),
            ));
        }
        let canary_size = env.or("CIRCUIT_CANARY_SIZE", defaults.canary_size, |v| {
            let n = parse_u32(v)?;
            if (1..=10_000).contains(&n) {
                Ok(n)
            } else {
                Err("must be a whole number of messages from 1 to 10000".into())
            }
        })?;
        Ok(CircuitSettings {
            threshold,
            min_bounces,
            window_ms,
            cooldown_ms,
            max_cooldown_ms,
            canary_size,
        })
    }

    /// `None` when `CIRCUIT_TABLE` is unset or blank (the circuit is off, and the other
    /// `CIRCUIT_*` variables are still checked so that a typo is not silently ignored).
    pub fn from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Option<Self>, ConfigError> {
        let settings = Self::settings_from_env(env)?;
        let Some(table) = env.optional("CIRCUIT_TABLE", parse_table_name)? else {
            return Ok(None);
        };
        Ok(Some(Self { table, settings }))
    }
}
