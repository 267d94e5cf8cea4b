//! The triage widget Lambda (read only): configuration at init, then one rendering of the
//! widget's queue per call from the dashboard.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::config::Env;
use redrive_triage_console::{Console, ConsoleConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) =
        redrive_engine::lambda_init(|| ConsoleConfig::widget_from_env(&Env::process())).await?;
    let console = Console {
        store: DynamoDbTriageStore::new(&sdk, &config.table),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        config,
    };
    let console = &console;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(console.widget(&event.payload).await)
    }))
    .await
}
