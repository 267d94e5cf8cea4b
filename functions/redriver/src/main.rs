//! The re-driver Lambda: configuration and clients once at init, then one drain per event.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_engine::Engine;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::circuit::DynamoDbCircuitStore;
use redrive_shared::config::{Env, RedriverConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Logs, then the configuration (errors fail init before any queue is touched), then the
    // SDK with timeouts on every client.
    let (config, sdk) =
        redrive_engine::lambda_init(|| RedriverConfig::from_env(&Env::process())).await?;
    let circuit_table = config.circuit.as_ref().map(|c| c.table.clone());
    let cloudwatch = CloudWatch {
        client: aws_sdk_cloudwatch::Client::new(&sdk),
    };
    let engine = Engine::new(
        SqsQueue {
            client: aws_sdk_sqs::Client::new(&sdk),
        },
        cloudwatch.clone(),
        cloudwatch,
        config,
    )
    // The adaptive circuit: on when CIRCUIT_TABLE is set.
    .with_circuit(circuit_table.map(|table| DynamoDbCircuitStore {
        client: aws_sdk_dynamodb::Client::new(&sdk),
        table,
    }));
    // Connect at init, bounded so that an unreachable endpoint cannot eat the init phase.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), engine.warm_up()).await;
    let engine = &engine;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = redrive_engine::deadline_instant(event.context.deadline);
        // Every line of the invocation carries requestId and xrayTraceId (redrive_shared::logging).
        tracing::info!(
            deadline_epoch_ms = event.context.deadline,
            remaining_ms = deadline.saturating_duration_since(tokio::time::Instant::now()).as_millis() as u64,
            "invocation"
        );
        let summary = engine
            .handle(&event.payload, Some(deadline))
            .await
            .map_err(|e| {
                match &e {
                    redrive_engine::InvocationError::Event(_) => {
                        tracing::error!(error = %e, "rejected event; nothing was touched")
                    }
                    redrive_engine::InvocationError::DlqUnreadable { .. } => {
                        tracing::error!(error = %e, "the drain could not read the DLQ; failing the invocation")
                    }
                }
                Error::from(e.to_string())
            })?;
        Ok::<_, Error>(summary)
    }))
    .await
}
