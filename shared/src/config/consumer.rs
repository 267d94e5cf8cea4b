//! The idempotent consumer's configuration, and the shipped consumer's downstream.

use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::key::{KeySource, PayloadSource, parse_namespace};

use super::{BackoffVars, ConfigError, Env, QueueUrl, parse_bool, parse_table_name, parse_u64};

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
