//! The re-driver Lambda: configuration and clients once at init, then one drain per event:
//! of its DLQ, or, for an install that protects several (`DLQ_URLS`), of the DLQ an alarm
//! names or of every DLQ in a fair order ([`redrive_redriver::fleet`]).

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use redrive_engine::DrainError;
use redrive_engine::aws::Clients;
use redrive_redriver::{Fleet, InvocationError};
use redrive_shared::config::RedriverConfig;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Logs, then the configuration (errors fail init before any queue is touched), then the
    // SDK with timeouts and retries on every client.
    let (configs, sdk) = redrive_engine::lambda_init_fleet(RedriverConfig::fleet_from_env).await?;
    let clients = Clients::from_sdk(&sdk);
    let queue = clients.sqs.clone();
    let cloudwatch = clients.cloudwatch.clone();
    let namespace = configs
        .first()
        .map(|c| c.metric_namespace.clone())
        .unwrap_or_default();
    // Each protected DLQ's tags are read here; a DLQ whose tags are bad is left alone and
    // named in the logs, never the others.
    let engine = Fleet::new(
        configs,
        |k: &str| std::env::var(k).ok(),
        queue,
        move |config| clients.engine(config),
    )
    .await
    // A DLQ left alone (bad or unreadable tags) says so at every invocation, so that it pages.
    .with_left_alone_metrics(cloudwatch, namespace);
    // Connect at init, bounded so that an unreachable endpoint cannot eat the init phase.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), engine.warm_up()).await;
    let engine = &engine;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = redrive_engine::deadline_instant(event.context.deadline);
        tracing::info!(
            deadline_epoch_ms = event.context.deadline,
            remaining_ms = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64,
            "invocation"
        );
        engine
            .handle(&event.payload, Some(deadline))
            .await
            .map_err(Failure)
    }))
    .await
}

/// A failed invocation as Lambda reports it: `errorType` names the kind (`InvalidEvent`,
/// `DlqUnreadable`), `errorMessage` the cause.
#[derive(Debug)]
struct Failure(InvocationError);

impl From<Failure> for Diagnostic {
    fn from(Failure(e): Failure) -> Self {
        match &e {
            InvocationError::Event(_) => {
                tracing::error!(error = %e, "rejected event; nothing was touched")
            }
            InvocationError::Drain(DrainError::DlqUnreadable { .. }) => {
                tracing::error!(error = %e, "the drain could not read the DLQ; failing the invocation")
            }
        }
        Diagnostic {
            error_type: e.error_type().to_string(),
            error_message: e.to_string(),
        }
    }
}
