//! The Step Functions orchestrator's task Lambda: configuration and clients once at init, then
//! one task per invocation, chosen by the input's `"action"` (see `redrive_workflow`).

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use redrive_engine::aws::Clients;
use redrive_shared::config::Env;
use redrive_workflow::{Workflow, WorkflowConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Logs, then the configuration (errors fail init before any queue is touched), then the
    // SDK with timeouts and retries on every client.
    let (config, sdk) =
        redrive_engine::lambda_init(|| WorkflowConfig::from_env(&Env::process())).await?;
    let clients = Clients::from_sdk(&sdk);
    // The operator's flag (`redrive circuit open`) and the one execution's lease on the DLQ:
    // read and written when CIRCUIT_TABLE is set.
    let circuit = clients.circuit_store(&config.redriver);
    // The holds operators set (`redrive triage hold`): every drain of the workflow keeps them.
    let triage = clients.triage_books(&config.redriver);
    let Clients {
        sqs, cloudwatch, ..
    } = clients;
    let workflow = Workflow::new(sqs, cloudwatch.clone(), cloudwatch, config)
        .with_circuit(circuit)
        .with_triage(triage);
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
