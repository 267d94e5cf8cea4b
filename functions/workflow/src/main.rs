//! The Step Functions orchestrator's task Lambda: configuration and clients once at init, then
//! one task per invocation, chosen by the input's `"action"` (see `redrive_workflow`).

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::circuit::DynamoDbCircuitStore;
use redrive_shared::config::Env;
use redrive_workflow::{SfnExecutions, Workflow, WorkflowConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Logs, then the configuration (errors fail init before any queue is touched), then the
    // SDK with timeouts on every client.
    let (config, sdk) =
        redrive_engine::lambda_init(|| WorkflowConfig::from_env(&Env::process())).await?;
    let cloudwatch = CloudWatch {
        client: aws_sdk_cloudwatch::Client::new(&sdk),
    };
    let circuit_table = config.redriver.circuit.as_ref().map(|c| c.table.clone());
    let workflow = Workflow::new(
        SqsQueue {
            client: aws_sdk_sqs::Client::new(&sdk),
        },
        cloudwatch.clone(),
        cloudwatch,
        SfnExecutions {
            client: aws_sdk_sfn::Client::new(&sdk),
        },
        config,
    )
    // The operator's flag (`redrive circuit open`): read when CIRCUIT_TABLE is set.
    .with_circuit(circuit_table.map(|table| DynamoDbCircuitStore {
        client: aws_sdk_dynamodb::Client::new(&sdk),
        table,
    }));
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), workflow.warm_up()).await;
    let workflow = &workflow;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = redrive_engine::deadline_instant(event.context.deadline);
        let action = event
            .payload
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        tracing::info!(action = %action, "task");
        workflow
            .handle(event.payload, Some(deadline))
            .await
            .map_err(|e| {
                tracing::error!(action = %action, error_type = e.error_type(), error = %e, "task failed");
                Diagnostic {
                    error_type: e.error_type().to_string(),
                    error_message: e.to_string(),
                }
            })
    }))
    .await
}
