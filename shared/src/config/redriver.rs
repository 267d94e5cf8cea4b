//! The re-driver's configuration: one DLQ, or every protected DLQ of an install.

use crate::backoff::{Backoff, Jitter};

use super::{
    BackoffVars, CircuitConfig, ConfigError, Env, QueueUrl, non_negative_f64, parse_bool,
    parse_metric_namespace, parse_table_name, parse_u32, positive_u32,
};

/// Configuration of the re-driver (see the contract's table).
#[derive(Debug, Clone, PartialEq)]
pub struct RedriverConfig {
    pub dlq_url: QueueUrl,
    /// `SOURCE_QUEUE_URL`: where every redriven message goes (a DLQ redrive created). `None`
    /// for a protected DLQ: each message goes back to its own source ([`crate::source`]).
    pub source_queue_url: Option<QueueUrl>,
    pub poison_queue_url: QueueUrl,
    pub max_redrive_attempts: u32,
    pub backoff: Backoff,
    pub max_messages_per_invocation: u32,
    /// 0 = no cap.
    pub max_messages_per_second: f64,
    pub guard_alarm_names: Vec<String>,
    pub rearm_alarm: bool,
    /// `TRIGGER_ALARM_NAME` (empty: none): the DLQ's trigger alarm, which scheduled and manual
    /// drains re-arm too (an alarm-triggered drain re-arms the alarm that notified it).
    pub trigger_alarm_name: Option<String>,
    pub metric_namespace: String,
    pub dry_run: bool,
    /// Receive/send/delete pipelines in flight at once (`MAX_CONCURRENT_BATCHES`, default 4;
    /// FIFO queues always use 1 to keep order within a group).
    pub max_concurrent_batches: u32,
    /// The adaptive circuit: `None` when `CIRCUIT_TABLE` is unset (circuit off).
    pub circuit: Option<CircuitConfig>,
    /// `TRIAGE_TABLE`, else the circuit table (where a deployed stack keeps it): triage's book,
    /// whose holds every drain keeps. `None` when neither is set (no holds).
    pub triage_table: Option<String>,
}

impl RedriverConfig {
    /// One DLQ: `DLQ_URL`, and `SOURCE_QUEUE_URL` when every message goes to one source.
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let dlq_url = env.required("DLQ_URL", QueueUrl::parse)?;
        let source_queue_url = env.optional("SOURCE_QUEUE_URL", QueueUrl::parse)?;
        if source_queue_url.as_ref() == Some(&dlq_url) {
            return Err(env.err("SOURCE_QUEUE_URL", "must name a queue other than DLQ_URL"));
        }
        Self::for_dlq(env, dlq_url, source_queue_url)
    }

    /// Every DLQ this install serves: the protected DLQs of `DLQ_URLS` (a comma list; each
    /// message goes back to its own source), else the one of [`Self::from_env`].
    pub fn fleet_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Vec<Self>, ConfigError> {
        let Some(list) = env.get("DLQ_URLS") else {
            return Ok(vec![Self::from_env(env)?]);
        };
        for other in ["DLQ_URL", "SOURCE_QUEUE_URL"] {
            if env.get(other).is_some() {
                return Err(env.err(
                    "DLQ_URLS",
                    format!("cannot be set with {other}: a protected DLQ's messages go back each to its own source"),
                ));
            }
        }
        let mut urls: Vec<QueueUrl> = Vec::new();
        for item in super::list_items(&list) {
            let url =
                QueueUrl::parse(item).map_err(|p| env.err("DLQ_URLS", format!("{item:?}: {p}")))?;
            if urls.contains(&url) {
                return Err(env.err("DLQ_URLS", format!("{item:?} is listed twice")));
            }
            urls.push(url);
        }
        if urls.is_empty() {
            return Err(env.err("DLQ_URLS", "must list at least one queue URL"));
        }
        urls.into_iter()
            .map(|dlq| Self::for_dlq(env, dlq, None))
            .collect()
    }

    /// The settings of one DLQ (read from `env`, which [`super::tags`] layers a queue's tags over).
    pub fn for_dlq<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
        dlq_url: QueueUrl,
        source_queue_url: Option<QueueUrl>,
    ) -> Result<Self, ConfigError> {
        let poison_queue_url = env.required("POISON_QUEUE_URL", QueueUrl::parse)?;
        if poison_queue_url == dlq_url || Some(&poison_queue_url) == source_queue_url.as_ref() {
            return Err(env.err(
                "POISON_QUEUE_URL",
                "must name a queue other than the DLQs and SOURCE_QUEUE_URL",
            ));
        }
        let max_redrive_attempts = env.or("MAX_REDRIVE_ATTEMPTS", 5, parse_u32)?;
        let backoff = env.backoff(
            BackoffVars {
                base: "BACKOFF_BASE_SECONDS",
                multiplier: "BACKOFF_MULTIPLIER",
                max: "BACKOFF_MAX_SECONDS",
                jitter: "BACKOFF_JITTER",
            },
            (60.0, 2.0, 900, Jitter::Full),
        )?;
        let max_messages_per_invocation =
            env.or("MAX_MESSAGES_PER_INVOCATION", 100, positive_u32)?;
        let max_messages_per_second = env.or("MAX_MESSAGES_PER_SECOND", 0.0, non_negative_f64)?;
        let guard_alarm_names = env
            .get("GUARD_ALARM_NAMES")
            .map(|v| super::list_items(&v).map(str::to_string).collect())
            .unwrap_or_default();
        let rearm_alarm = env.or("REARM_ALARM", true, parse_bool)?;
        let trigger_alarm_name = env.optional("TRIGGER_ALARM_NAME", |v| {
            // One setting for a fleet: `{queue}` stands for each DLQ's name.
            let v = v.trim().replace("{queue}", dlq_url.name());
            let v = v.as_str();
            if v.len() > 255 || v.contains(|c: char| c.is_control()) {
                Err("must be a CloudWatch alarm name (1 to 255 characters)".into())
            } else {
                Ok(v.to_string())
            }
        })?;
        let metric_namespace = env.or(
            "METRIC_NAMESPACE",
            "DLQRedriver".to_string(),
            parse_metric_namespace,
        )?;
        let dry_run = env.or("DRY_RUN", false, parse_bool)?;
        let max_concurrent_batches = env.or("MAX_CONCURRENT_BATCHES", 4, |v| {
            let n = parse_u32(v)?;
            if (1..=50).contains(&n) {
                Ok(n)
            } else {
                Err("must be between 1 and 50".into())
            }
        })?;
        Self {
            dlq_url,
            source_queue_url,
            poison_queue_url,
            max_redrive_attempts,
            backoff,
            max_messages_per_invocation,
            max_messages_per_second,
            guard_alarm_names,
            rearm_alarm,
            trigger_alarm_name,
            metric_namespace,
            dry_run,
            max_concurrent_batches,
            triage_table: None,
            circuit: CircuitConfig::from_env(env)?,
        }
        .with_triage_table(env)
    }

    /// Reads `TRIAGE_TABLE` (set but blank is refused: unset means the circuit table).
    fn with_triage_table<F: Fn(&str) -> Option<String>>(
        mut self,
        env: &Env<F>,
    ) -> Result<Self, ConfigError> {
        self.triage_table = match (env.0)("TRIAGE_TABLE") {
            Some(v) if v.trim().is_empty() => {
                return Err(env.err(
                    "TRIAGE_TABLE",
                    "empty: name the table of triage's book, or unset it to keep the book in the circuit table (CIRCUIT_TABLE)",
                ));
            }
            Some(_) => env.optional("TRIAGE_TABLE", parse_table_name)?,
            None => self.circuit.as_ref().map(|c| c.table.clone()),
        };
        Ok(self)
    }
}
