//! The archiver Lambda: configuration, clients and the retention check once at init, then one
//! sweep of the poison queue (and the DLQ) per event (the EventBridge schedule, or `{}` by hand).

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_archiver::{Archiver, ArchiverConfig, S3Store};
use redrive_engine::aws::Clients;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Logs, then the configuration (errors fail init before any queue is touched), then the
    // SDK with timeouts on every client.
    let (config, sdk) = redrive_engine::lambda_init_fleet(ArchiverConfig::from_env).await?;
    let clients = Clients::from_sdk(&sdk);
    let digest = config.digest.clone();
    let index = config.triage_table.as_deref().map(|table| {
        let topic = digest.as_ref().map(|d| d.topic_arn.as_str());
        redrive_archiver::index::Index::new(&sdk, table, topic, config.causes.as_ref())
    });
    // Path-style, as the CLI's export and import use it (see redrive_engine::s3), with the
    // longer timeouts of an upload.
    let s3 = redrive_archiver::for_uploads(redrive_engine::s3::client(&sdk));
    // Every queue's real retention, read now: a threshold not below it fails init.
    let archiver = Archiver::init(
        clients.sqs,
        S3Store { client: s3 },
        clients.cloudwatch,
        config,
    )
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "the archiver cannot start");
        e
    })?
    .with_digest(
        digest
            .clone()
            .map(|d| redrive_archiver::digest::Digest::new(&sdk, d)),
    )
    .with_index(index);
    let archiver = &archiver;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = redrive_engine::deadline_instant(event.context.deadline);
        tracing::info!("invocation");
        let summary = archiver.run(Some(deadline)).await;
        tracing::info!(summary = %serde_json::to_string(&summary).unwrap_or_default(), "archive run");
        Ok::<_, Error>(summary)
    }))
    .await
}
