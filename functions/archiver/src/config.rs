//! The archiver's configuration, read once at init, and the check of its threshold against
//! every queue's retention.

use std::time::Duration;

use redrive_engine::ports::PortError;
use redrive_shared::config::{
    ConfigError, Env, QueueUrl, parse_bool, parse_bucket_name, parse_key_prefix, parse_table_name,
    parse_u32,
};
use redrive_shared::key::{KeySource, parse_namespace};

/// `ARCHIVE_AFTER_DAYS` when neither threshold variable is set.
pub const DEFAULT_ARCHIVE_AFTER_DAYS: f64 = 10.0;
/// `ARCHIVE_PREFIX` when unset: the first segment of every object key.
pub const DEFAULT_ARCHIVE_PREFIX: &str = "archive";
/// SQS's longest retention, 14 days: no threshold at or above it can ever be below a queue's.
pub const MAX_RETENTION_SECONDS: f64 = 1_209_600.0;

/// Configuration of the archiver, read once at init. Every error names the variable.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiverConfig {
    /// `ARCHIVE_BUCKET`, required.
    pub bucket: String,
    /// `ARCHIVE_PREFIX`, default `archive`: keys are `<prefix>/<queue name>/...`.
    pub prefix: String,
    /// `POISON_QUEUE_URL` (required), then `DLQ_URL` or every protected DLQ of `DLQ_URLS`
    /// (unless `ARCHIVE_DLQ=false`): the queues swept, in order.
    pub queues: Vec<QueueUrl>,
    /// Messages at least this old are archived.
    pub archive_after: Duration,
    /// The variable the threshold came from (`ARCHIVE_AFTER_SECONDS` or `ARCHIVE_AFTER_DAYS`),
    /// so that a threshold refused at init names what to change.
    pub archive_after_variable: &'static str,
    /// `MAX_MESSAGES_PER_INVOCATION` (default 1000): messages received per queue per run.
    pub max_messages_per_invocation: u32,
    /// `ARCHIVE_VISIBILITY_SECONDS` (default 120): how long a received message is hidden at
    /// most. A sweep ends before it, so held messages never come back mid-sweep.
    pub visibility_timeout_seconds: u32,
    /// `METRIC_NAMESPACE`, default `DLQRedriver`.
    pub metric_namespace: String,
    /// `ARCHIVE_DLQ` (default true): also sweep `DLQ_URL` (or `DLQ_URLS`) when it is set.
    pub archive_dlq: bool,
    /// The DLQs are protected ones (`DLQ_URLS`): each may set its own threshold by tag.
    pub protected: bool,
    /// The daily digest of the DLQs' triage books (`ALERTS_TOPIC_ARN`); `None`: no digest.
    pub digest: Option<DigestConfig>,
    /// `TRIAGE_TABLE`: the table of triage's books. Set, each sweep records the groups of the
    /// messages it left on the queue in the queue's book (the live index); `None`: no index.
    pub triage_table: Option<String>,
    /// `CAUSES_TABLE`: the consumer's idempotency table, where it records the cause of each
    /// failed attempt; the index groups a message that carries no cause by its record there.
    pub causes: Option<CausesConfig>,
}

/// Where the consumer records causes, and how it keys messages (as its own configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CausesConfig {
    /// `CAUSES_TABLE`.
    pub table: String,
    /// `CAUSES_KEY` (default `message`): the consumer's `IDEMPOTENCY_KEY`.
    pub key: KeySource,
    /// `CAUSES_NAMESPACE`: the consumer's `IDEMPOTENCY_NAMESPACE`, else its function's name.
    pub namespace: Option<String>,
}

/// `REMINDER_HOUR_UTC` when unset: the hour (UTC) of the daily digest.
pub const DEFAULT_REMINDER_HOUR_UTC: u32 = 9;

/// The daily digest: where it goes, where the books are, and at which hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestConfig {
    /// `ALERTS_TOPIC_ARN`: the SNS topic the digest is published to.
    pub topic_arn: String,
    /// `TRIAGE_TABLE`: the table of the triage books, where the day is claimed too.
    pub table: String,
    /// `REMINDER_HOUR_UTC` (0-23, default 9): the first run in this hour (UTC) sends it.
    pub hour_utc: u32,
}

fn parse_topic_arn(v: &str) -> Result<String, String> {
    let parts: Vec<&str> = v.split(':').collect();
    let ok = parts.len() == 6
        && parts[0] == "arn"
        && !parts[1].is_empty()
        && parts[2] == "sns"
        && !parts[3].is_empty()
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && (1..=256).contains(&parts[5].len())
        && parts[5]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be an SNS topic ARN: arn:<partition>:sns:<region>:<account>:<topic>".into())
    }
}

fn parse_hour(v: &str) -> Result<u32, String> {
    match parse_u32(v) {
        Ok(h) if h <= 23 => Ok(h),
        _ => Err("must be an hour of the day, a whole number from 0 to 23 (UTC)".into()),
    }
}

fn invalid(variable: &'static str, value: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        value: Some(value.to_string()),
        problem: problem.into(),
    }
}

fn parse_seconds(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if (0.0..MAX_RETENTION_SECONDS).contains(&s) => Ok(s),
        _ => Err(format!(
            "must be a number of seconds >= 0 and below {MAX_RETENTION_SECONDS} (14 days, SQS's longest retention)"
        )),
    }
}

fn parse_days(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d < 14.0 => Ok(d),
        _ => Err(
            "must be a number of days above 0 and below 14 (SQS's longest retention), such as 10 or 0.5"
                .into(),
        ),
    }
}

impl ArchiverConfig {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let bucket = env.required("ARCHIVE_BUCKET", parse_bucket_name)?;
        let prefix = env.or(
            "ARCHIVE_PREFIX",
            DEFAULT_ARCHIVE_PREFIX.to_string(),
            parse_key_prefix,
        )?;
        let poison = env.required("POISON_QUEUE_URL", QueueUrl::parse)?;
        let dlq = env.optional("DLQ_URL", QueueUrl::parse)?;
        let archive_dlq = env.or("ARCHIVE_DLQ", true, parse_bool)?;
        let mut queues = vec![poison];
        if let Some(dlq) = dlq.filter(|_| archive_dlq) {
            if dlq == queues[0] {
                return Err(invalid(
                    "DLQ_URL",
                    dlq.as_str(),
                    "must name a queue other than POISON_QUEUE_URL",
                ));
            }
            queues.push(dlq);
        }
        // The protected DLQs of an install that serves several.
        let protected = env.get("DLQ_URLS").is_some();
        if let Some(list) = env.get("DLQ_URLS").filter(|_| archive_dlq) {
            if let Some(one) = env.get("DLQ_URL") {
                return Err(invalid(
                    "DLQ_URLS",
                    &list,
                    format!("cannot be set with DLQ_URL ({one})"),
                ));
            }
            for item in redrive_shared::config::list_items(&list) {
                let url = QueueUrl::parse(item)
                    .map_err(|p| invalid("DLQ_URLS", &list, format!("{item:?}: {p}")))?;
                if queues.contains(&url) {
                    return Err(invalid(
                        "DLQ_URLS",
                        &list,
                        format!("{item:?} is listed twice or is POISON_QUEUE_URL"),
                    ));
                }
                queues.push(url);
            }
        }
        // Seconds win over days: tests and short-retention queues set a threshold in seconds.
        let (archive_after, archive_after_variable) = match env
            .optional("ARCHIVE_AFTER_SECONDS", parse_seconds)?
        {
            Some(s) => (Duration::from_secs_f64(s), "ARCHIVE_AFTER_SECONDS"),
            None => {
                let days = env.or("ARCHIVE_AFTER_DAYS", DEFAULT_ARCHIVE_AFTER_DAYS, parse_days)?;
                (
                    Duration::from_secs_f64(days * 86_400.0),
                    "ARCHIVE_AFTER_DAYS",
                )
            }
        };
        let max_messages_per_invocation = env.or("MAX_MESSAGES_PER_INVOCATION", 1000, |v| {
            match parse_u32(v)? {
                n if n >= 1 => Ok(n),
                _ => Err("must be a whole number >= 1".into()),
            }
        })?;
        let visibility_timeout_seconds =
            env.or("ARCHIVE_VISIBILITY_SECONDS", 120, |v| match parse_u32(v)? {
                n if (30..=43_200).contains(&n) => Ok(n),
                _ => Err("must be between 30 and 43200 seconds (12 hours, the SQS maximum)".into()),
            })?;
        let metric_namespace = env.or("METRIC_NAMESPACE", "DLQRedriver".to_string(), |v| {
            if v.len() > 255 || v.starts_with("AWS/") || v.contains(|c: char| c.is_control()) {
                Err("must be 1 to 255 characters and must not start with AWS/".into())
            } else {
                Ok(v.to_string())
            }
        })?;
        // The hour is checked whether or not a topic is set: a typo fails now, not on the day
        // the topic is added.
        let hour_utc = env.or("REMINDER_HOUR_UTC", DEFAULT_REMINDER_HOUR_UTC, parse_hour)?;
        let triage_table = env.optional("TRIAGE_TABLE", parse_table_name)?;
        // Checked whether or not a table is set: a typo fails now.
        let causes_key = env.or("CAUSES_KEY", KeySource::Message, KeySource::parse)?;
        let causes_namespace = env.optional("CAUSES_NAMESPACE", parse_namespace)?;
        let causes = env
            .optional("CAUSES_TABLE", parse_table_name)?
            .map(|table| CausesConfig {
                table,
                key: causes_key,
                namespace: causes_namespace,
            });
        let digest = match env.optional("ALERTS_TOPIC_ARN", parse_topic_arn)? {
            Some(topic_arn) => Some(DigestConfig {
                topic_arn,
                table: env.required("TRIAGE_TABLE", parse_table_name)?,
                hour_utc,
            }),
            None => None,
        };
        Ok(Self {
            bucket,
            prefix,
            queues,
            archive_after,
            archive_after_variable,
            max_messages_per_invocation,
            visibility_timeout_seconds,
            metric_namespace,
            archive_dlq,
            protected,
            digest,
            triage_table,
            causes,
        })
    }
}

/// Why the archiver refused to start. Nothing was received when one of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum ArchiverInitError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "{variable} gives a threshold of {threshold_seconds} s, which is not below the MessageRetentionPeriod of queue {queue} ({retention_seconds} s): SQS would delete its messages before they are archived. Set {variable} below {retention_days} days ({retention_seconds} s), with room for the schedule's period"
    )]
    ThresholdNotBelowRetention {
        variable: &'static str,
        threshold_seconds: f64,
        queue: String,
        retention_seconds: u64,
        retention_days: f64,
    },
    #[error("cannot read the MessageRetentionPeriod of queue {queue}: {source}")]
    RetentionUnreadable {
        queue: String,
        #[source]
        source: PortError,
    },
}

/// The threshold must be below the queue's retention (pure; see [`crate::Archiver::init`]).
pub fn check_threshold(
    config: &ArchiverConfig,
    queue: &QueueUrl,
    retention_seconds: u64,
) -> Result<(), ArchiverInitError> {
    if config.archive_after.as_secs_f64() < retention_seconds as f64 {
        Ok(())
    } else {
        Err(ArchiverInitError::ThresholdNotBelowRetention {
            variable: config.archive_after_variable,
            threshold_seconds: config.archive_after.as_secs_f64(),
            queue: queue.to_string(),
            retention_seconds,
            retention_days: retention_seconds as f64 / 86_400.0,
        })
    }
}
