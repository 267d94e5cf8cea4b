//! Benchmarks of redrive against the naive redrive script, the fault-injection soak that
//! proves no loss, and the tools they need.
//!
//! - [`loopback`]: the harness's hyper server (`redrive_tests::loopback`) that the proxy, the downstream
//!   and the Runtime API share.
//! - [`proxy`]: a loopback HTTP proxy in front of moto that counts calls, adds per-call
//!   latency, injects faults and kills callers between send and delete.
//! - [`baseline`]: the redrive script people write (receive 10, then send and delete each
//!   message one by one), over the SDK and over the in-memory port fake.
//! - [`bench`]: the figures of `make bench`, each against the baseline of the same run.
//! - [`runtime_api`]: a minimal Lambda Runtime API, and [`coldstart`]: cold starts against it.
//! - [`soak`]: the full loop (consumer and re-driver, flaky downstream, faults, kills) and its
//!   reconciliation by `originalMessageId`, on moto and on the port fakes.
//! - [`world`]: the in-memory SQS of the port-fake soak (with RedrivePolicy, faults, SDK-like
//!   retries), [`downstream`]: the flaky downstream.

pub mod baseline;
pub mod bench;
// The adaptive circuit's simulation: `soak circuit`, bench/tests/circuit_sim.rs.
pub mod circuit_sim;
pub mod coldstart;
// The consumer's in-memory cache of completed keys: DynamoDB calls per record.
pub mod consumer_cache;
pub mod downstream;
// The event source mapping in front of the consumer engine in process.
pub mod event_source;
pub mod faults;
pub use redrive_tests::loopback;
// Side by side with SQS's StartMessageMoveTask, on LocalStack.
pub mod move_task;
pub mod proxy;
pub mod report;
pub mod runtime_api;
pub mod soak;
// `redrive triage QUEUE`'s pass over a deep DLQ, concurrent against one by one.
pub mod triage_scan;
pub mod world;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;

/// An SDK config for an endpoint on loopback (moto, or the proxy in front of it): region
/// us-east-1, dummy static credentials, and the given per-attempt timeout (`None`: the SDK's
/// defaults, as the Lambdas use them).
pub async fn sdk_config(endpoint: &str, attempt_timeout: Option<Duration>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(redrive_tests::REGION))
        .credentials_provider(Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "redrive-bench",
        ));
    if let Some(timeout) = attempt_timeout {
        loader = loader
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(2))
                    .operation_attempt_timeout(timeout)
                    .build(),
            )
            .retry_config(RetryConfig::standard().with_max_attempts(3));
    }
    loader.load().await
}

/// The consumer's settings in the simulations, which run thousands of batches in one process:
/// no Embedded Metric Format line per batch on stdout.
pub fn quiet_consumer() -> redrive_consumer::Settings {
    redrive_consumer::Settings::default().with_emit_metrics(false)
}

/// The socket address of an `http://host:port` endpoint.
pub fn endpoint_addr(endpoint: &str) -> std::net::SocketAddr {
    let rest = endpoint
        .strip_prefix("http://")
        .unwrap_or(endpoint)
        .trim_end_matches('/');
    rest.parse()
        .unwrap_or_else(|e| panic!("{endpoint} is not http://IP:PORT: {e}"))
}
