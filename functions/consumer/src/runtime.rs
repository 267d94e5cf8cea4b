//! A whole Lambda: [`run`] (or [`Runner`] for settings) reads the configuration and builds the
//! clients once at init, then handles each typed SQS event with the invocation's deadline and
//! answers with the partial batch response.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_shared::config::{ConfigError, ConsumerConfig, Env, FifoOnFailure};

use crate::aws::{DynamoDbStore, SqsOps};
use crate::engine::{Consumer, Settings};
use crate::process::{FromBody, Processor};

/// Runs `processor` as the Lambda's handler of SQS events, configured by the environment
/// (`IDEMPOTENCY_TABLE`, `IDEMPOTENCY_KEY`, `IDEMPOTENCY_TTL_SECONDS`, `DLQ_URL`,
/// `RETRY_*`, `IDEMPOTENCY_CACHE_SIZE`, `FAIL_WHEN_ALL_FAILED`, `FIFO_ON_FAILURE`,
/// `METRIC_NAMESPACE`): `Runner::new(processor).run()`.
///
/// At init: JSON logging, the configuration (an invalid or missing variable fails init with
/// an error naming it, before any record is touched), the SDK clients, the DynamoDB store and
/// the SQS calls, once. Per invocation: the typed `SqsEvent`, the deadline from
/// `Context::deadline`, and the `SqsBatchResponse`.
pub async fn run<T, P>(processor: P) -> Result<(), Error>
where
    T: FromBody,
    P: Processor<T>,
{
    Runner::new(processor).run().await
}

/// [`run`] with settings in code. A value set here wins over its environment variable.
///
/// ```no_run
/// # use redrive_consumer::{ProcessError, Record, Runner};
/// # async fn charge(_: &serde_json::Value) -> Result<(), ProcessError> { Ok(()) }
/// # async fn demo() -> Result<(), lambda_runtime::Error> {
/// Runner::new(|order: serde_json::Value, _record: Record| async move { charge(&order).await })
///     .table("orders-idempotency")
///     .key("/orderId")
///     .ttl(std::time::Duration::from_secs(7 * 24 * 3600))
///     .max_concurrency(5)
///     .run()
///     .await
/// # }
/// ```
///
/// The AWS clients come from the SDK's default configuration (the Lambda's role, region and
/// `AWS_*` variables), loaded at init. Pass your own instead, built once the way the rest of
/// your code builds it (another region, an assumed role, a custom endpoint or retry policy),
/// with [`Runner::sdk_config`], or pass built clients with [`Runner::clients`]:
///
/// ```no_run
/// # use redrive_consumer::{ProcessError, Record, Runner};
/// use redrive_consumer::aws_config::{self, BehaviorVersion, Region};
///
/// # async fn demo() -> Result<(), redrive_consumer::Error> {
/// let sdk = aws_config::defaults(BehaviorVersion::latest())
///     .region(Region::new("eu-west-1"))
///     .load()
///     .await;
/// Runner::new(|order: serde_json::Value, _record: Record| async move {
///     let _ = order;
///     Ok::<(), ProcessError>(())
/// })
/// .sdk_config(sdk)
/// .run()
/// .await
/// # }
/// ```
#[must_use = "a Runner does nothing until `run` is awaited"]
pub struct Runner<P, T> {
    processor: P,
    overrides: Vec<(&'static str, String)>,
    settings: Settings,
    aws: Aws,
    input: std::marker::PhantomData<fn() -> T>,
}

/// Where the clients come from.
enum Aws {
    /// The SDK's default configuration, loaded at init.
    Load,
    /// The user's own configuration.
    Config(Box<SdkConfig>),
    /// The user's own clients.
    Clients(aws_sdk_dynamodb::Client, aws_sdk_sqs::Client),
}

impl<T, P> Runner<P, T>
where
    T: FromBody,
    P: Processor<T>,
{
    pub fn new(processor: P) -> Self {
        Self {
            processor,
            overrides: Vec::new(),
            settings: Settings::default(),
            aws: Aws::Load,
            input: std::marker::PhantomData,
        }
    }

    fn set(mut self, variable: &'static str, value: String) -> Self {
        self.overrides.retain(|(v, _)| *v != variable);
        self.overrides.push((variable, value));
        self
    }

    /// The idempotency table (`IDEMPOTENCY_TABLE`).
    pub fn table(self, name: impl Into<String>) -> Self {
        self.set("IDEMPOTENCY_TABLE", name.into())
    }

    /// Where the idempotency key comes from, in the syntax of `IDEMPOTENCY_KEY` (`message`,
    /// or a JSON pointer into the body such as `/paymentId`).
    pub fn key(self, source: impl Into<String>) -> Self {
        self.set("IDEMPOTENCY_KEY", source.into())
    }

    /// How long a record is kept (`IDEMPOTENCY_TTL_SECONDS`, whole seconds).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.set("IDEMPOTENCY_TTL_SECONDS", ttl.as_secs().to_string())
    }

    /// The DLQ that permanent failures are fast-tracked to (`DLQ_URL`).
    pub fn dlq_url(self, url: impl Into<String>) -> Self {
        self.set("DLQ_URL", url.into())
    }

    /// Completed keys a warm instance remembers, so that their duplicates cost no call to
    /// the table (`IDEMPOTENCY_CACHE_SIZE`; 0, the default, turns the cache off).
    pub fn cache_size(self, keys: usize) -> Self {
        self.set("IDEMPOTENCY_CACHE_SIZE", keys.to_string())
    }

    /// Fail the invocation when every record of a batch failed (`FAIL_WHEN_ALL_FAILED`).
    pub fn fail_when_all_failed(self, fail: bool) -> Self {
        self.set("FAIL_WHEN_ALL_FAILED", fail.to_string())
    }

    /// What a FIFO batch does after a failed record (`FIFO_ON_FAILURE`).
    pub fn fifo_on_failure(self, on_failure: FifoOnFailure) -> Self {
        self.set("FIFO_ON_FAILURE", on_failure.as_str().to_string())
    }

    /// The namespace of the metrics line each invocation prints (`METRIC_NAMESPACE`).
    pub fn metric_namespace(self, namespace: impl Into<String>) -> Self {
        self.set("METRIC_NAMESPACE", namespace.into())
    }

    /// Records of a standard queue processed at once (default 10).
    pub fn max_concurrency(mut self, records: usize) -> Self {
        self.settings = self.settings.with_max_concurrency(records);
        self
    }

    /// Every knob of [`Settings`] at once.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Build the DynamoDB and SQS clients from this SDK configuration instead of loading the
    /// default one. The timeouts it sets win (one it disabled stays disabled); those it
    /// leaves unset (the SDK's defaults bound no call and no attempt) take the crate's, so
    /// that a stalled call cannot outlive the Lambda's deadline.
    pub fn sdk_config(mut self, sdk: SdkConfig) -> Self {
        self.aws = Aws::Config(Box::new(with_timeouts(sdk)));
        self
    }

    /// Use these clients as they are: `dynamodb` for the idempotency table, `sqs` for the
    /// failure paths (visibility changes, the DLQ copy, the delete). Nothing is loaded.
    pub fn clients(mut self, dynamodb: aws_sdk_dynamodb::Client, sqs: aws_sdk_sqs::Client) -> Self {
        self.aws = Aws::Clients(dynamodb, sqs);
        self
    }

    /// The configuration as `run` reads it: the values set in code, else the environment.
    pub fn config(&self) -> Result<ConsumerConfig, ConfigError> {
        self.config_from(|variable| std::env::var(variable).ok())
    }

    fn config_from(
        &self,
        environment: impl Fn(&str) -> Option<String>,
    ) -> Result<ConsumerConfig, ConfigError> {
        let overrides = &self.overrides;
        ConsumerConfig::from_env(&Env(|variable: &str| {
            overrides
                .iter()
                .find(|(name, _)| *name == variable)
                .map(|(_, value)| value.clone())
                .or_else(|| environment(variable))
        }))
    }

    /// Initialises, then serves invocations until the runtime stops the process.
    pub async fn run(self) -> Result<(), Error> {
        crate::init_logging()?;
        let consumer = self.build().await?;
        let consumer = &consumer;
        lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
            let deadline = deadline_ms(event.context.deadline);
            let handled = consumer.handle_event(&event.payload, deadline).await;
            // With FAIL_WHEN_ALL_FAILED, a batch whose records all failed fails the invocation.
            Ok::<SqsBatchResponse, Error>(handled.into_response()?)
        }))
        .await
    }

    /// What [`Runner::run`] does at init, logging aside: the configuration (an invalid or
    /// missing variable is an error naming it), the clients, the DynamoDB store (its
    /// connection warmed up) and the SQS calls, as the [`Consumer`] that `run` then serves.
    /// For glue of your own around the consumer, and for tests.
    pub async fn build(self) -> Result<Consumer<DynamoDbStore, SqsOps, P, T>, Error> {
        let config = self.config().inspect_err(|e| {
            tracing::error!(error = %e, "invalid configuration");
        })?;
        let (dynamodb, sqs) = match self.aws {
            Aws::Clients(dynamodb, sqs) => (dynamodb, sqs),
            Aws::Config(sdk) => (
                aws_sdk_dynamodb::Client::new(&sdk),
                aws_sdk_sqs::Client::new(&sdk),
            ),
            Aws::Load => {
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .timeout_config(redrive_shared::sdk::timeout_config())
                    .load()
                    .await;
                (
                    aws_sdk_dynamodb::Client::new(&sdk),
                    aws_sdk_sqs::Client::new(&sdk),
                )
            }
        };
        let store = DynamoDbStore::new(dynamodb, config.idempotency_table.clone());
        // Connect at init (bounded, so that an unreachable endpoint cannot eat the init phase);
        // the happy path makes no SQS call, so DynamoDB is the connection the first record
        // needs.
        match tokio::time::timeout(Duration::from_secs(2), store.warm_up()).await {
            Ok(Ok(())) => tracing::debug!("warm-up: the idempotency table answered"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "warm-up: cannot read the idempotency table yet")
            }
            Err(_) => tracing::warn!("warm-up: the idempotency table did not answer within 2 s"),
        }
        let queue = SqsOps { client: sqs };
        Ok(Consumer::with_settings(
            store,
            queue,
            self.processor,
            config,
            self.settings,
        ))
    }
}

/// `sdk` with the crate's timeouts where it leaves one unset (one it disabled stays disabled).
fn with_timeouts(sdk: SdkConfig) -> SdkConfig {
    let ours = redrive_shared::sdk::timeout_config();
    let timeouts = match sdk.timeout_config() {
        Some(theirs) => {
            let mut timeouts = theirs.clone();
            timeouts.take_defaults_from(&ours);
            timeouts
        }
        None => ours,
    };
    sdk.into_builder().timeout_config(timeouts).build()
}

/// The invocation deadline as epoch milliseconds: `Context::deadline` is one, but a local
/// emulator may send a duration (`cargo lambda watch` sends 600000), which is read as that
/// long from now.
pub fn deadline_ms(raw: u64) -> u64 {
    let now = u64::try_from(redrive_shared::clock::now_ms()).unwrap_or(0);
    redrive_shared::timefmt::deadline_epoch_ms(raw, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{ProcessError, RawBody};
    use crate::record::Record;

    fn noop() -> impl Processor<RawBody, Output = ()> {
        |_body: RawBody, _record: Record| async { Ok::<(), ProcessError>(()) }
    }

    #[test]
    fn values_set_in_code_win_over_the_environment_and_are_validated_the_same_way() {
        // GIVEN an environment with a table, a key source and a TTL
        let environment = |variable: &str| match variable {
            "IDEMPOTENCY_TABLE" => Some("from-environment".to_string()),
            "IDEMPOTENCY_TTL_SECONDS" => Some("7200".to_string()),
            _ => None,
        };

        // WHEN the code sets the table and the key source
        let runner = Runner::new(noop()).table("from-code").key("/orderId");
        let config = runner.config_from(environment).unwrap();

        // THEN the code's values win, and the environment fills the rest
        assert_eq!(config.idempotency_table, "from-code");
        assert_eq!(config.ttl_seconds, 7200);
        assert!(format!("{:?}", config.key_source).contains("orderId"));

        // AND a value set in code is held to the variable's rule, named in the error
        let err = Runner::new(noop())
            .ttl(Duration::from_secs(5))
            .config_from(environment)
            .unwrap_err();
        assert!(err.to_string().contains("IDEMPOTENCY_TTL_SECONDS"), "{err}");
        // AND the batch options are set the same way
        let config = Runner::new(noop())
            .cache_size(500)
            .fail_when_all_failed(true)
            .fifo_on_failure(FifoOnFailure::StopBatch)
            .metric_namespace("Team/Orders")
            .config_from(environment)
            .unwrap();
        assert_eq!(config.cache_size, 500);
        assert!(config.fail_when_all_failed);
        assert_eq!(config.fifo_on_failure, FifoOnFailure::StopBatch);
        assert_eq!(config.metric_namespace, "Team/Orders");
        let err = Runner::new(noop()).config_from(|_| None).unwrap_err();
        assert!(err.to_string().contains("IDEMPOTENCY_TABLE"), "{err}");
    }

    #[test]
    fn a_users_sdk_config_keeps_its_timeouts_and_takes_the_crates_where_it_sets_none() {
        use aws_smithy_types::timeout::TimeoutConfig;
        let ours = redrive_shared::sdk::timeout_config();
        // GIVEN a configuration with its own call timeout, a disabled attempt timeout and no
        // connect timeout
        let theirs = TimeoutConfig::builder()
            .operation_timeout(Duration::from_secs(42))
            .disable_operation_attempt_timeout()
            .build();
        let sdk = SdkConfig::builder().timeout_config(theirs).build();

        // WHEN the runner is given it
        let runner = Runner::new(noop()).sdk_config(sdk);

        // THEN its own values are kept, and the unset one is the crate's
        let Aws::Config(sdk) = &runner.aws else {
            panic!("the runner keeps the user's configuration")
        };
        let merged = sdk.timeout_config().unwrap();
        assert_eq!(merged.operation_timeout(), Some(Duration::from_secs(42)));
        assert_eq!(merged.operation_attempt_timeout(), None);
        assert_eq!(merged.connect_timeout(), ours.connect_timeout());
        // AND a configuration without any timeout gets all of the crate's
        let bare = Runner::new(noop()).sdk_config(SdkConfig::builder().build());
        let Aws::Config(sdk) = &bare.aws else {
            panic!("the runner keeps the user's configuration")
        };
        assert_eq!(sdk.timeout_config(), Some(&ours));
    }

    #[test]
    fn a_duration_deadline_is_read_from_now() {
        let now = deadline_ms(0);
        let deadline = deadline_ms(600_000);
        assert!((now + 599_000..=now + 601_000).contains(&deadline));
        assert_eq!(deadline_ms(1_795_255_200_000), 1_795_255_200_000);
    }
}
