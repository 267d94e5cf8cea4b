//! The simulation's knobs, its schedules, and the configurations of both sides' functions.

use std::collections::HashMap;
use std::time::Duration;

use redrive_shared::config::{Env, RedriverConfig};
use redrive_tests::QueueSet;
use serde::Serialize;

/// The simulation's knobs. Durations in whole seconds where the shipped configuration takes
/// whole seconds.
#[derive(Debug, Clone, Serialize)]
pub struct SimSettings {
    /// Messages produced at the start of the outage, per side.
    pub messages: u64,
    /// The source queue's RedrivePolicy.
    pub max_receive_count: i32,
    /// `MAX_REDRIVE_ATTEMPTS`.
    pub max_redrive_attempts: u32,
    /// `BACKOFF_BASE_SECONDS`, `BACKOFF_MULTIPLIER`, `BACKOFF_MAX_SECONDS` (no jitter, so that
    /// the schedule is exact).
    pub backoff_base_seconds: u32,
    pub backoff_multiplier: u32,
    pub backoff_max_seconds: u32,
    /// The consumer's retry delay (`RETRY_BASE_SECONDS` = `RETRY_MAX_SECONDS`).
    pub consumer_retry_seconds: u32,
    /// CloudWatch's evaluation of the DLQ alarm (60 s in AWS), compressed.
    pub alarm_period: Duration,
    /// The safety-net schedule (5 minutes in the stack), compressed.
    pub schedule_period: Duration,
    /// The outage lasts this many times the whole backoff schedule.
    pub outage_factor: u32,
    /// Event source mapping pollers per side.
    pub pollers: usize,
    /// Give up waiting for the DLQ to empty after the recovery after this long.
    pub max_recovery: Duration,
    /// The circuit's tuning, as re-driver environment variables (besides `CIRCUIT_TABLE`,
    /// which the simulation sets): window, cool-down, canary size, thresholds.
    pub circuit_env: Vec<(String, String)>,
}

impl SimSettings {
    /// `make soak`: the production schedule (5 attempts at 60 s doubling, about 31
    /// minutes) at 1/60 scale: 1 s doubling, 31 s; 50 messages per side (moto delivers a few
    /// dozen failing deliveries a second on a shared machine: more messages would queue in the
    /// source for longer than the schedule itself).
    pub fn full() -> Self {
        Self {
            messages: 50,
            max_receive_count: 2,
            max_redrive_attempts: 5,
            backoff_base_seconds: 1,
            backoff_multiplier: 2,
            backoff_max_seconds: 16,
            consumer_retry_seconds: 1,
            alarm_period: Duration::from_secs(1),
            schedule_period: Duration::from_secs(5),
            outage_factor: 3,
            // One event source mapping poller per side: concurrent receives that both move the
            // same message to the DLQ make moto answer 500 (a race in its RedrivePolicy).
            pollers: 1,
            max_recovery: Duration::from_secs(180),
            // The production defaults at the same 1/60 scale (900 s, 300 s, 3600 s); the
            // canary's size and the threshold at their defaults.
            circuit_env: env_pairs(&[
                ("CIRCUIT_WINDOW_SECONDS", "15"),
                ("CIRCUIT_COOLDOWN_SECONDS", "5"),
                ("CIRCUIT_MAX_COOLDOWN_SECONDS", "60"),
            ]),
        }
    }

    /// `make test`: three attempts 1 s apart, 20 messages per side; an outage of 33 s, the
    /// whole run under a minute.
    pub fn short() -> Self {
        Self {
            messages: 20,
            max_redrive_attempts: 3,
            backoff_base_seconds: 1,
            backoff_multiplier: 1,
            backoff_max_seconds: 1,
            max_recovery: Duration::from_secs(45),
            // A window well beyond a copy's round trip (about 4 s here), a canary of 4.
            circuit_env: env_pairs(&[
                ("CIRCUIT_WINDOW_SECONDS", "10"),
                ("CIRCUIT_COOLDOWN_SECONDS", "2"),
                ("CIRCUIT_MAX_COOLDOWN_SECONDS", "8"),
                ("CIRCUIT_CANARY_SIZE", "4"),
            ]),
            ..Self::full()
        }
    }

    /// The re-driver's delay before attempt `n` (1-based), as the shipped backoff computes it
    /// without jitter: `min(max, base * multiplier^(n-1))`.
    pub fn redrive_delay(&self, attempt: u32) -> u64 {
        let d = u64::from(self.backoff_base_seconds)
            .saturating_mul(u64::from(self.backoff_multiplier).saturating_pow(attempt - 1));
        d.min(u64::from(self.backoff_max_seconds))
    }

    /// The re-driver's whole backoff schedule: the sum of its delays over every attempt.
    pub fn backoff_schedule(&self) -> Duration {
        Duration::from_secs(
            (1..=self.max_redrive_attempts)
                .map(|a| self.redrive_delay(a))
                .sum(),
        )
    }

    /// The consumer's retries along the way: each pass through the source queue (the first
    /// and one per attempt) waits its retry delay before each receive but the first.
    pub fn consumer_schedule(&self) -> Duration {
        let passes = u64::from(self.max_redrive_attempts) + 1;
        let retries = (self.max_receive_count.max(1) - 1) as u64;
        Duration::from_secs(passes * retries * u64::from(self.consumer_retry_seconds))
    }

    /// The alarm's part: each arrival on the DLQ waits up to one evaluation of the alarm.
    pub fn alarm_schedule(&self) -> Duration {
        self.alarm_period * (self.max_redrive_attempts + 1)
    }

    /// The whole schedule of one message, from its first failure to the poison queue: the
    /// re-driver's backoff, the consumer's retries and the alarm's evaluations.
    pub fn whole_schedule(&self) -> Duration {
        self.backoff_schedule() + self.consumer_schedule() + self.alarm_schedule()
    }

    /// The outage: `outage_factor` times the whole schedule, so that without a circuit every
    /// message exhausts its attempts during the outage.
    pub fn outage(&self) -> Duration {
        self.whole_schedule() * self.outage_factor
    }

    /// The re-driver's configuration for one side.
    pub(super) fn redriver_config(
        &self,
        queues: &QueueSet,
        circuit_table: Option<&str>,
    ) -> RedriverConfig {
        let mut map: HashMap<String, String> = [
            ("DLQ_URL", queues.dlq_url.clone()),
            ("SOURCE_QUEUE_URL", queues.source_url.clone()),
            ("POISON_QUEUE_URL", queues.poison_url.clone()),
            (
                "MAX_REDRIVE_ATTEMPTS",
                self.max_redrive_attempts.to_string(),
            ),
            (
                "BACKOFF_BASE_SECONDS",
                self.backoff_base_seconds.to_string(),
            ),
            ("BACKOFF_MULTIPLIER", self.backoff_multiplier.to_string()),
            ("BACKOFF_MAX_SECONDS", self.backoff_max_seconds.to_string()),
            ("BACKOFF_JITTER", "none".into()),
            ("METRIC_NAMESPACE", "RedriveCircuitSim".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(table) = circuit_table {
            map.insert("CIRCUIT_TABLE".into(), table.to_string());
            map.extend(self.circuit_env.iter().cloned());
        }
        RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .unwrap_or_else(|e| panic!("the simulation's re-driver configuration: {e}"))
    }

    pub(super) fn consumer_config(
        &self,
        table: &str,
        dlq: &str,
    ) -> redrive_consumer::ConsumerConfig {
        let retry = self.consumer_retry_seconds.to_string();
        let map: HashMap<&str, String> = [
            ("IDEMPOTENCY_TABLE", table.to_string()),
            ("DLQ_URL", dlq.to_string()),
            ("RETRY_BASE_SECONDS", retry.clone()),
            ("RETRY_MULTIPLIER", "1".into()),
            ("RETRY_MAX_SECONDS", retry),
            ("RETRY_JITTER", "none".into()),
        ]
        .into();
        redrive_consumer::ConsumerConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .unwrap_or_else(|e| panic!("the simulation's consumer configuration: {e}"))
    }
}

fn env_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
