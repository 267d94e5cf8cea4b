//! The triage action Lambda: configuration at init, then one checked action on a group of a
//! configured queue's triage book per button pressed, answered with the widget re-rendered.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::config::Env;
use redrive_triage_console::{Console, ConsoleConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) =
        redrive_engine::lambda_init(|| ConsoleConfig::action_from_env(&Env::process())).await?;
    let console = Console {
        store: DynamoDbTriageStore::new(&sdk, &config.table),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        config,
    };
    let console = &console;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(
            console
                .action(&event.payload, redrive_engine::now_ms())
                .await,
        )
    }))
    .await
}
