//! The consumer Lambda: configuration and clients once at init, then one batch per event.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::{Consumer, HttpProcessor};
use redrive_shared::config::{ConsumerConfig, DownstreamConfig, Env};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    redrive_consumer::init_logging();
    // Config errors fail init, naming the variable, before any record is touched.
    let env = Env::process();
    let config = ConsumerConfig::from_env(&env).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let downstream = DownstreamConfig::from_env(&env).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let processor = HttpProcessor::new(&downstream).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(redrive_shared::sdk::timeout_config())
        .load()
        .await;
    let store = DynamoDbStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        config.idempotency_table.clone(),
    );
    // Connect at init (bounded, so that an unreachable endpoint cannot eat the init phase);
    // the happy path makes no SQS call, so DynamoDB is the connection the first record needs.
    match tokio::time::timeout(std::time::Duration::from_secs(2), store.warm_up()).await {
        Ok(Ok(())) => tracing::debug!("warm-up: the idempotency table answered"),
        Ok(Err(e)) => tracing::warn!(error = %e, "warm-up: cannot read the idempotency table yet"),
        Err(_) => tracing::warn!("warm-up: the idempotency table did not answer within 2 s"),
    }
    let queue = SqsOps {
        client: aws_sdk_sqs::Client::new(&sdk),
    };
    let consumer = Consumer::new(store, queue, processor, config);
    let consumer = &consumer;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let handled = consumer
            .handle(&event.payload, deadline_ms(event.context.deadline))
            .await
            .inspect_err(|e| tracing::error!(error = %e, "rejected event; nothing was touched"))?;
        Ok::<_, Error>(handled.response)
    }))
    .await
}

/// The invocation deadline as epoch milliseconds (a local emulator may send a duration).
fn deadline_ms(raw: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    redrive_shared::timefmt::deadline_epoch_ms(raw, now)
}
