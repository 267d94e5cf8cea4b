//! Typed configuration of both Lambdas, read once at init from environment variables. Every
//! error names the variable and the offending value; a value that exists is valid.

use crate::backoff::{Backoff, Jitter};
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

impl Env<Box<dyn Fn(&str) -> Option<String>>> {
    /// The process environment, with `DLQ_URLS` replaced by `dlq_urls` when it is `Some` (the
    /// protected DLQs' list read from `DLQ_LIST_TABLE` at init).
    pub fn process_with_dlq_urls(dlq_urls: Option<String>) -> Self {
        Self::with_dlq_urls(|k| std::env::var(k).ok(), dlq_urls)
    }

    /// `lookup`, with `DLQ_URLS` replaced by `dlq_urls` when it is `Some`.
    pub fn with_dlq_urls(
        lookup: impl Fn(&str) -> Option<String> + 'static,
        dlq_urls: Option<String>,
    ) -> Self {
        Env(Box::new(move |k: &str| match (&dlq_urls, k) {
            (Some(list), "DLQ_URLS") => Some(list.clone()),
            _ => lookup(k),
        }))
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

/// The items of a comma-separated setting (`DLQ_URLS`, `GUARD_ALARM_NAMES`, `PROTECT_DLQS`, ...):
/// each trimmed, empty ones skipped, so `a, b,` is `a` and `b`. Every list setting of every
/// front end is read through this one function.
pub fn list_items(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
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

/// An S3 bucket name (`ARCHIVE_BUCKET`).
pub fn parse_bucket_name(v: &str) -> Result<String, String> {
    let ok = (3..=63).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && v.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit".into())
    }
}

/// An S3 key prefix without leading, trailing or doubled `/` (`ARCHIVE_PREFIX`).
pub fn parse_key_prefix(v: &str) -> Result<String, String> {
    let ok = v.len() <= 200
        && !v.starts_with('/')
        && !v.ends_with('/')
        && !v.contains("//")
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./!*'()".contains(&b));
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be a key prefix of letters, digits and - _ . / ! * ' ( ), with no leading, trailing or doubled /".into())
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

mod circuit;
mod consumer;
mod redriver;
pub mod tags;

pub use circuit::CircuitConfig;
pub use consumer::{
    CLAIM_MARGIN_SECONDS, ConsumerConfig, DEFAULT_CONSUMER_METRIC_NAMESPACE,
    DEFAULT_IDEMPOTENCY_TTL_SECONDS, DownstreamConfig, FifoOnFailure, LONGEST_CLAIM_SECONDS,
    MAX_IDEMPOTENCY_CACHE_SIZE, MIN_IDEMPOTENCY_TTL_SECONDS,
};
pub use redriver::RedriverConfig;

#[cfg(test)]
mod tests;
