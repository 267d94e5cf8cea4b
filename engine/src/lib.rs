//! The redrive engine: drains a bounded batch from an SQS dead-letter queue back to its source
//! queue with backoff, isolates poison pills, and never deletes a message before its copy was
//! acknowledged. Every front end (the re-driver Lambda, the Step Functions task Lambda, the
//! archiver Lambda and the `redrive` CLI) runs on this crate and on nothing of another front end:
//! each asks for a drain with a [`DrainRequest`] and [`Engine::run`]; the re-driver's fleet of
//! protected DLQs and the events it answers are its own (`redrive_redriver`).

pub mod aws;
pub mod circuit;
pub mod engine;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod fleet_list;
pub mod ports;
pub mod queue_facts;
pub mod replay_copy;
#[cfg(feature = "s3")]
pub mod s3;
pub mod tap;
pub mod triage_act;
pub mod triage_causes;
pub mod triage_store;

pub use engine::{DrainError, DrainRequest, Engine, Settings, StopReason, Summary};

#[doc(hidden)]
pub use tracing as __tracing;

/// An INFO line of a run's counts: `received`, `redriven`, `isolated` and `failed` read from
/// `$counts` (a [`Summary`], the fleet's total), then the fields and message given, so that
/// every front end names the counts alike.
#[macro_export]
macro_rules! info_counts {
    ($counts:expr, $($fields_and_message:tt)+) => {{
        let counts = &$counts;
        $crate::__tracing::info!(
            received = counts.received,
            redriven = counts.redriven,
            isolated = counts.isolated,
            failed = counts.failed,
            $($fields_and_message)+
        )
    }};
}

/// Locks `m`, taking over a lock a panicking holder poisoned: every value the engine guards
/// stays consistent between its statements, so a panic elsewhere never leaves one half-written.
pub(crate) use redrive_shared::sync::lock;

/// JSON logs, one line per event, level from `RUST_LOG` (default `info`). Never message bodies:
/// no code path logs one. The Lambdas use [`lambda_init`], which also honours Lambda's logging
/// controls.
pub fn init_logging() {
    redrive_shared::logging::init_json_logging("info", false);
}

/// The init every Lambda shares (re-driver, workflow tasks, archiver): logs as Lambda's
/// advanced logging controls choose them (`AWS_LAMBDA_LOG_LEVEL` before `RUST_LOG`, default
/// `info`; `AWS_LAMBDA_LOG_FORMAT` JSON or Text; see [`redrive_shared::logging`]), then the
/// configuration (an error is logged and fails init, naming the variable, before any
/// queue is touched), then the SDK configuration with attempt and operation timeouts on every
/// client, so that a stalled call cannot outlive the deadline margin, and the one retry
/// configuration of whole calls ([`aws::retry_config`]).
/// [`lambda_init`] for a function that serves the protected DLQs (the re-driver, the archiver,
/// the triage console): when `DLQ_LIST_TABLE` or `DLQ_TAG_KEY` is set, the SDK is loaded first
/// and the DLQs' list read from that table or from the queues' tags ([`fleet_list`]); `config`
/// then reads the process environment with `DLQ_URLS` set to it. A list that is missing or
/// unreadable fails init, naming the variable and why.
pub async fn lambda_init_fleet<
    T,
    E: std::fmt::Display + From<redrive_shared::config::ConfigError>,
>(
    config: impl FnOnce(
        &redrive_shared::config::Env<Box<dyn Fn(&str) -> Option<String>>>,
    ) -> Result<T, E>,
) -> Result<(T, aws_config::SdkConfig), E> {
    redrive_shared::logging::init_lambda_logging("info")?;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(redrive_shared::sdk::timeout_config())
        .retry_config(aws::retry_config())
        .load()
        .await;
    let listed = fleet_list::dlq_urls(
        |k| std::env::var(k).ok(),
        || aws_sdk_dynamodb::Client::new(&sdk),
        || aws_sdk_sqs::Client::new(&sdk),
    )
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
        E::from(e)
    })?;
    let env = redrive_shared::config::Env::process_with_dlq_urls(listed);
    let config = config(&env).map_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
        e
    })?;
    Ok((config, sdk))
}

pub async fn lambda_init<T, E: std::fmt::Display + From<redrive_shared::config::ConfigError>>(
    config: impl FnOnce() -> Result<T, E>,
) -> Result<(T, aws_config::SdkConfig), E> {
    redrive_shared::logging::init_lambda_logging("info")?;
    let config = config().map_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
        e
    })?;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(redrive_shared::sdk::timeout_config())
        .retry_config(aws::retry_config())
        .load()
        .await;
    Ok((config, sdk))
}

/// The wall clock, epoch milliseconds (0 before 1970): the one every front end reads.
pub use redrive_shared::clock::now_ms;

/// Converts the Lambda context deadline (epoch milliseconds) to a monotonic instant.
/// See [`redrive_shared::timefmt::deadline_epoch_ms`] for deadlines sent as durations.
pub fn deadline_instant(deadline_epoch_ms: u64) -> tokio::time::Instant {
    let now_ms = u64::try_from(now_ms()).unwrap_or(0);
    let deadline = redrive_shared::timefmt::deadline_epoch_ms(deadline_epoch_ms, now_ms);
    tokio::time::Instant::now() + std::time::Duration::from_millis(deadline.saturating_sub(now_ms))
}
