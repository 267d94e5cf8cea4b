//! Typed configuration of both Lambdas, read once at init from environment variables. Every
//! error names the variable and the offending value; a value that exists is valid.

use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::key::{KeySource, PayloadSource, parse_namespace};
use crate::limits::is_fifo;

/// A configuration error: which variable, what value, what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.variable, .value.as_deref(), .problem))]
pub struct ConfigError {
    pub variable: &'static str,
    /// `None` when the variable is missing.
    pub value: Option<String>,
    pub problem: String,
}

fn describe(variable: &str, value: Option<&str>, problem: &str) -> String {
    match value {
        Some(v) => format!("invalid {variable}={v:?}: {problem}"),
        None => format!("missing {variable}: {problem}"),
    }
}

/// Reads variables through a lookup function, so that tests need no process environment.
pub struct Env<F: Fn(&str) -> Option<String>>(pub F);

impl Env<fn(&str) -> Option<String>> {
    /// The process environment.
    pub fn process() -> Self {
        Env(|k| std::env::var(k).ok())
    }
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// The value, or `None` when unset or blank.
    pub fn get(&self, variable: &str) -> Option<String> {
        (self.0)(variable).filter(|v| !v.trim().is_empty())
    }

    fn err(&self, variable: &'static str, problem: impl Into<String>) -> ConfigError {
        ConfigError {
            variable,
            value: (self.0)(variable),
            problem: problem.into(),
        }
    }

    pub fn required<T>(
        &self,
        variable: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        match self.get(variable) {
            Some(v) => parse(v.trim()).map_err(|p| self.err(variable, p)),
            None => Err(ConfigError {
                variable,
                value: None,
                problem: "this variable is required".into(),
            }),
        }
    }

    pub fn optional<T>(
        &self,
        variable: &'static str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.get(variable)
            .map(|v| parse(v.trim()).map_err(|p| self.err(variable, p)))
            .transpose()
    }

    pub fn or<T>(
        &self,
        variable: &'static str,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        Ok(self.optional(variable, parse)?.unwrap_or(default))
    }

    fn backoff(
        &self,
        prefix: BackoffVars,
        defaults: (f64, f64, u64, Jitter),
    ) -> Result<Backoff, ConfigError> {
        let base = self.or(prefix.base, defaults.0, non_negative_f64)?;
        let multiplier = self.or(prefix.multiplier, defaults.1, |v| {
            let m = parse_f64(v)?;
            if m >= 1.0 {
                Ok(m)
            } else {
                Err("must be a number >= 1".into())
            }
        })?;
        let max = self.or(prefix.max, defaults.2, |v| {
            let n = parse_u64(v)?;
            if n <= 900 {
                Ok(n)
            } else {
                Err("must be between 0 and 900 seconds (the SQS DelaySeconds limit)".into())
            }
        })?;
        let jitter = self.or(prefix.jitter, defaults.3, |v| {
            v.parse::<Jitter>().map_err(|e| e.to_string())
        })?;
        Backoff::new(base, multiplier, max, jitter)
            .map_err(|e| self.err(prefix.base, e.to_string()))
    }
}

struct BackoffVars {
    base: &'static str,
    multiplier: &'static str,
    max: &'static str,
    jitter: &'static str,
}

pub fn parse_u64(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| "must be a whole number >= 0".to_string())
}

pub fn parse_u32(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .map_err(|_| format!("must be a whole number between 0 and {}", u32::MAX))
}

fn positive_u32(v: &str) -> Result<u32, String> {
    match parse_u32(v)? {
        0 => Err("must be a whole number >= 1".into()),
        n => Ok(n),
    }
}

fn parse_f64(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err("must be a number".into()),
    }
}

fn non_negative_f64(v: &str) -> Result<f64, String> {
    let f = parse_f64(v)?;
    if f >= 0.0 {
        Ok(f)
    } else {
        Err("must be a number >= 0".into())
    }
}

/// A CloudWatch namespace (`METRIC_NAMESPACE`): 1 to 255 characters, no control character,
/// not AWS's own `AWS/`.
pub fn parse_metric_namespace(v: &str) -> Result<String, String> {
    if v.len() > 255 || v.starts_with("AWS/") || v.contains(|c: char| c.is_control()) {
        Err("must be 1 to 255 characters and must not start with AWS/".into())
    } else {
        Ok(v.to_string())
    }
}

pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err("must be true or false".into()),
    }
}

/// An SQS queue URL such as `https://sqs.<region>.amazonaws.com/<account-id>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueUrl(String);

impl QueueUrl {
    pub fn parse(v: &str) -> Result<Self, String> {
        let problem = || {
            "must be an SQS queue URL such as https://sqs.<region>.amazonaws.com/<account-id>/<queue-name>".to_string()
        };
        let rest = v
            .strip_prefix("https://")
            .or_else(|| v.strip_prefix("http://"))
            .ok_or_else(problem)?;
        let (host, path) = rest.split_once('/').ok_or_else(problem)?;
        // The path is exactly `<account-id>/<queue-name>`.
        let (account, name) = path.split_once('/').ok_or_else(problem)?;
        let stem = name.strip_suffix(".fifo").unwrap_or(name);
        let name_ok = !stem.is_empty()
            && name.len() <= 80
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let account_ok = !account.is_empty() && account.bytes().all(|b| b.is_ascii_alphanumeric());
        if host.is_empty() || !name_ok || !account_ok {
            return Err(problem());
        }
        Ok(Self(v.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The queue name: the last path segment (also the CloudWatch `QueueName` dimension).
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    pub fn is_fifo(&self) -> bool {
        is_fifo(&self.0)
    }
}

impl std::fmt::Display for QueueUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
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

    /// The settings of one DLQ (read from `env`, which [`tags`] layers a queue's tags over).
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
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
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
        Ok(Self {
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
            circuit: CircuitConfig::from_env(env)?,
        })
    }
}

// Adaptive circuit

/// The adaptive circuit's configuration: its DynamoDB table and the rule's tunables (see
/// [`crate::circuit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitConfig {
    /// `CIRCUIT_TABLE`: one item per DLQ, partition key `queue`.
    pub table: String,
    pub settings: crate::circuit::CircuitSettings,
}

/// A DynamoDB table name: 3 to 255 of `a-z A-Z 0-9 _ - .`.
pub fn parse_table_name(v: &str) -> Result<String, String> {
    let ok = (3..=255).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be a DynamoDB table name (3 to 255 of a-z A-Z 0-9 _ - .)".into())
    }
}

impl CircuitConfig {
    /// The rule's tunables (`CIRCUIT_THRESHOLD`, `CIRCUIT_MIN_BOUNCES`, `CIRCUIT_WINDOW_SECONDS`,
    /// `CIRCUIT_COOLDOWN_SECONDS`, `CIRCUIT_MAX_COOLDOWN_SECONDS`, `CIRCUIT_CANARY_SIZE`), with
    /// or without a table (the CLI's `drain --canary` uses them without one).
    pub fn settings_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<crate::circuit::CircuitSettings, ConfigError> {
        let defaults = crate::circuit::CircuitSettings::default();
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
        Ok(crate::circuit::CircuitSettings {
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

/// The longest an IN_PROGRESS claim lasts: the consumer claims until the invocation's deadline
/// (or, without a usable one, for its fallback), and a Lambda invocation runs 900 s at most.
pub const LONGEST_CLAIM_SECONDS: u64 = 900;
/// Slack between the record's `expiration` (whole epoch seconds, rounded down) and the claim's
/// end in milliseconds, and for clock skew between the hosts of two invocations.
pub const CLAIM_MARGIN_SECONDS: u64 = 60;
/// `IDEMPOTENCY_TTL_SECONDS` below this is an init error: the claim condition lets anyone take a
/// record whose `expiration` passed, so a TTL shorter than a claim would let a second
/// invocation run a key whose side effect is still under way.
pub const MIN_IDEMPOTENCY_TTL_SECONDS: u64 = LONGEST_CLAIM_SECONDS + CLAIM_MARGIN_SECONDS;
/// Default `IDEMPOTENCY_TTL_SECONDS`: the whole retention chain a message can live through,
/// source queue (at most 14 days) + DLQ (14 days) + poison queue (14 days) = 42 days, so that
/// a copy replayed at the very end of it is still recognised as processed.
pub const DEFAULT_IDEMPOTENCY_TTL_SECONDS: u64 = 3 * 14 * 86_400;

/// Default `METRIC_NAMESPACE` of the consumer's metrics (the re-driver's is `DLQRedriver`).
pub const DEFAULT_CONSUMER_METRIC_NAMESPACE: &str = "RedriveConsumer";

/// The largest `IDEMPOTENCY_CACHE_SIZE`: a key costs a few hundred bytes (the key twice and its
/// recency), so a million is a few hundred MB, beyond what a Lambda instance should hold.
pub const MAX_IDEMPOTENCY_CACHE_SIZE: usize = 1_000_000;

/// What a FIFO batch does after a record is reported failed (`FIFO_ON_FAILURE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FifoOnFailure {
    /// `skip-group`: the later records of that message group are reported unprocessed; the
    /// other groups go on.
    #[default]
    SkipGroup,
    /// `stop-batch`: every later record of the batch is reported unprocessed, whatever its
    /// group (as Powertools' `SqsFifoPartialProcessor` does by default).
    StopBatch,
}

impl FifoOnFailure {
    pub fn parse(v: &str) -> Result<Self, String> {
        match v {
            "skip-group" => Ok(Self::SkipGroup),
            "stop-batch" => Ok(Self::StopBatch),
            _ => Err("must be skip-group or stop-batch".into()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SkipGroup => "skip-group",
            Self::StopBatch => "stop-batch",
        }
    }
}

/// Configuration of the idempotent consumer library.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerConfig {
    pub idempotency_table: String,
    pub key_source: KeySource,
    /// Prefixes every record id (`<namespace>#<hash>`): `IDEMPOTENCY_NAMESPACE`, else the
    /// function's name (`AWS_LAMBDA_FUNCTION_NAME`), else none.
    pub key_namespace: Option<String>,
    /// The payload check (`IDEMPOTENCY_PAYLOAD`), off when unset.
    pub payload: Option<PayloadSource>,
    pub ttl_seconds: u64,
    pub dlq_url: Option<QueueUrl>,
    pub retry: Backoff,
    /// `IDEMPOTENCY_CACHE_SIZE`: completed keys a warm instance remembers; 0 (default) = off.
    pub cache_size: usize,
    /// `FAIL_WHEN_ALL_FAILED`: the invocation fails when every record of a batch failed.
    pub fail_when_all_failed: bool,
    /// `FIFO_ON_FAILURE`.
    pub fifo_on_failure: FifoOnFailure,
    /// `METRIC_NAMESPACE` of the Embedded Metric Format line each invocation prints.
    pub metric_namespace: String,
}

impl ConsumerConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let idempotency_table = env.required("IDEMPOTENCY_TABLE", parse_table_name)?;
        let key_source = env.or("IDEMPOTENCY_KEY", KeySource::Message, KeySource::parse)?;
        let key_namespace = match env.optional("IDEMPOTENCY_NAMESPACE", parse_namespace)? {
            Some(namespace) => Some(namespace),
            None => env.optional("AWS_LAMBDA_FUNCTION_NAME", parse_namespace)?,
        };
        let payload = env.optional("IDEMPOTENCY_PAYLOAD", PayloadSource::parse)?;
        let ttl_seconds = env.or(
            "IDEMPOTENCY_TTL_SECONDS",
            DEFAULT_IDEMPOTENCY_TTL_SECONDS,
            |v| {
                let n = parse_u64(v)?;
                if n >= MIN_IDEMPOTENCY_TTL_SECONDS {
                    Ok(n)
                } else {
                    Err(format!(
                        "must be at least {MIN_IDEMPOTENCY_TTL_SECONDS} seconds: a record must outlive the longest claim ({LONGEST_CLAIM_SECONDS} s, the Lambda maximum timeout) plus {CLAIM_MARGIN_SECONDS} s, or two invocations can run one key at once"
                    ))
                }
            },
        )?;
        let dlq_url = env.optional("DLQ_URL", QueueUrl::parse)?;
        let retry = env.backoff(
            BackoffVars {
                base: "RETRY_BASE_SECONDS",
                multiplier: "RETRY_MULTIPLIER",
                max: "RETRY_MAX_SECONDS",
                jitter: "RETRY_JITTER",
            },
            (2.0, 3.0, 900, Jitter::Full),
        )?;
        let cache_size = env.or("IDEMPOTENCY_CACHE_SIZE", 0, |v| {
            let n = parse_u64(v)?;
            match usize::try_from(n) {
                Ok(n) if n <= MAX_IDEMPOTENCY_CACHE_SIZE => Ok(n),
                _ => Err(format!(
                    "must be between 0 (off) and {MAX_IDEMPOTENCY_CACHE_SIZE} keys"
                )),
            }
        })?;
        let fail_when_all_failed = env.or("FAIL_WHEN_ALL_FAILED", false, parse_bool)?;
        let fifo_on_failure = env.or(
            "FIFO_ON_FAILURE",
            FifoOnFailure::default(),
            FifoOnFailure::parse,
        )?;
        let metric_namespace = env.or(
            "METRIC_NAMESPACE",
            DEFAULT_CONSUMER_METRIC_NAMESPACE.to_string(),
            |v| {
                crate::emf::validate_namespace(v)
                    .map(|()| v.to_string())
                    .map_err(|e| e.problem.to_string())
            },
        )?;
        Ok(Self {
            idempotency_table,
            key_source,
            key_namespace,
            payload,
            ttl_seconds,
            dlq_url,
            retry,
            cache_size,
            fail_when_all_failed,
            fifo_on_failure,
            metric_namespace,
        })
    }
}

/// Configuration of the shipped consumer's HTTP processing step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamConfig {
    pub url: String,
    /// `DOWNSTREAM_TIMEOUT_SECONDS`, default 10: a timed-out delivery is a transient failure.
    pub timeout: Duration,
}

impl DownstreamConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let url = env.required("DOWNSTREAM_URL", |v| {
            let rest = v
                .strip_prefix("https://")
                .or_else(|| v.strip_prefix("http://"));
            match rest {
                Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(v.to_string()),
                _ => Err("must be an http:// or https:// URL".into()),
            }
        })?;
        let secs = env.or("DOWNSTREAM_TIMEOUT_SECONDS", 10, |v| {
            let n = parse_u64(v)?;
            if (1..=900).contains(&n) {
                Ok(n)
            } else {
                Err("must be between 1 and 900 seconds".into())
            }
        })?;
        Ok(Self {
            url,
            timeout: Duration::from_secs(secs),
        })
    }
}

pub mod tags;

#[cfg(test)]
mod tests;
