//! The console's configuration, read once at init; every error names its variable.

use std::collections::BTreeSet;
use std::time::Duration;

use redrive_shared::archive::S3Location;
use redrive_shared::config::{
    ConfigError, Env, QueueUrl, parse_bool, parse_bucket_name, parse_key_prefix, parse_table_name,
};

/// `ARCHIVE_PREFIX` when unset, as the archiver's.
pub const DEFAULT_ARCHIVE_PREFIX: &str = "archive";

/// The console's configuration, read once at init; every error names its variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// `TRIAGE_TABLE`: the table of the triage books (the stack's circuit table).
    pub table: String,
    /// `TRIAGE_QUEUE_URLS`: the DLQs and poison queue the console may show and act on; with
    /// `DLQ_LIST_TABLE` (attach mode), the protected DLQs listed in that table come first.
    pub queues: Vec<QueueUrl>,
    /// `TRIAGE_ACTION_FUNCTION`: the function the widget's buttons call (the widget's only).
    pub action_function: Option<String>,
    /// `TRIAGE_SHOW_BODIES` (default false): whether the samples popup shows message bodies
    /// (escaped; never logged).
    pub show_bodies: bool,
    /// What the action function's replay and discard move messages with (the widget's: none).
    pub moves: Option<MoveConfig>,
}

/// Where the action function's replay and discard move messages: read from its environment at
/// init, never from a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveConfig {
    /// `ARCHIVE_BUCKET` (required) and `ARCHIVE_PREFIX` (default `archive`): where a discard
    /// archives each message before its delete, as the archiver does.
    pub archive: S3Location,
    /// `SOURCE_QUEUE_URL`: a source queue a replay may send to, besides the DLQ's own sources
    /// (the queues whose redrive policy names it, from SQS).
    pub source: Option<QueueUrl>,
    /// `POISON_QUEUE_URL`: the poison queue (one of the console's queues), where a replay's
    /// verdict looks for isolated canaries too.
    pub poison: Option<QueueUrl>,
    /// `TRIAGE_CANARY_WINDOW_SECONDS` (1..=900): the canary's verdict window. Default: the
    /// source's visibility timeout × its maxReceiveCount + 10 s, as the CLI's; either way cut
    /// to the invocation's time left.
    pub canary_window: Option<Duration>,
}

fn parse_queue_urls(v: &str) -> Result<Vec<QueueUrl>, String> {
    let mut urls = Vec::new();
    let mut names = BTreeSet::new();
    for part in redrive_shared::config::list_items(v) {
        let url = QueueUrl::parse(part).map_err(|e| format!("{part:?} {e}"))?;
        if !names.insert(url.name().to_string()) {
            return Err(format!(
                "two queues are named {:?}: the widget's params name a queue by its name or URL, so names must differ",
                url.name()
            ));
        }
        urls.push(url);
    }
    if urls.is_empty() {
        return Err("must list at least one queue URL (comma-separated)".into());
    }
    Ok(urls)
}

fn parse_function(v: &str) -> Result<String, String> {
    let ok = v.len() <= 256
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be a Lambda function name or ARN (a-z A-Z 0-9 - _ : .)".into())
    }
}

impl ConsoleConfig {
    fn common<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            table: env.required("TRIAGE_TABLE", parse_table_name)?,
            // DLQ_URLS: the list read from DLQ_LIST_TABLE at init (Env::process_with_dlq_urls).
            queues: match env.get("DLQ_URLS") {
                None => env.required("TRIAGE_QUEUE_URLS", parse_queue_urls)?,
                Some(listed) => env.required("TRIAGE_QUEUE_URLS", |v| {
                    parse_queue_urls(&format!("{listed},{v}"))
                })?,
            },
            action_function: None,
            show_bodies: env.or("TRIAGE_SHOW_BODIES", false, parse_bool)?,
            moves: None,
        })
    }

    /// The widget's configuration: the action function is required (its buttons call it).
    pub fn widget_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = Self::common(env)?;
        cfg.action_function = Some(env.required("TRIAGE_ACTION_FUNCTION", parse_function)?);
        Ok(cfg)
    }

    /// The action function's configuration (it re-renders the widget with buttons that call
    /// itself, `TRIAGE_ACTION_FUNCTION` when set, else its own name from the runtime).
    pub fn action_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = Self::common(env)?;
        cfg.action_function = env
            .optional("TRIAGE_ACTION_FUNCTION", parse_function)?
            .or_else(|| env.get("AWS_LAMBDA_FUNCTION_NAME"));
        let archive = S3Location {
            bucket: env.required("ARCHIVE_BUCKET", parse_bucket_name)?,
            prefix: env.or(
                "ARCHIVE_PREFIX",
                DEFAULT_ARCHIVE_PREFIX.to_string(),
                parse_key_prefix,
            )?,
        };
        let source = env.optional("SOURCE_QUEUE_URL", |v| {
            let url = QueueUrl::parse(v)?;
            match cfg.queue(url.as_str()).or_else(|| cfg.queue(url.name())) {
                Some(_) => Err(
                    "must name a source queue, not one of the console's DLQs or its poison queue"
                        .to_string(),
                ),
                None => Ok(url),
            }
        })?;
        let poison = env.optional("POISON_QUEUE_URL", |v| {
            let url = QueueUrl::parse(v)?;
            cfg.queue(url.as_str()).cloned().ok_or_else(|| {
                "must be one of the console's queues (TRIAGE_QUEUE_URLS)".to_string()
            })
        })?;
        let canary_window =
            env.optional("TRIAGE_CANARY_WINDOW_SECONDS", |v| match v.parse::<u64>() {
                Ok(n) if (1..=900).contains(&n) => Ok(Duration::from_secs(n)),
                _ => Err("must be a whole number of seconds in 1..=900".to_string()),
            })?;
        cfg.moves = Some(MoveConfig {
            archive,
            source,
            poison,
            canary_window,
        });
        Ok(cfg)
    }

    /// The configured queue `text` names (its URL, or its name); `None` for any other.
    pub fn queue(&self, text: &str) -> Option<&QueueUrl> {
        self.queues
            .iter()
            .find(|q| q.as_str() == text || q.name() == text)
    }
}

/// Why a queue asked for is refused: it is not one of the configured ones.
pub(crate) fn not_configured(asked: &str, cfg: &ConsoleConfig) -> String {
    let names: Vec<&str> = cfg.queues.iter().map(QueueUrl::name).collect();
    format!(
        "the queue {asked:?} is not one this console shows (its TRIAGE_QUEUE_URLS: {})",
        names.join(", ")
    )
}
