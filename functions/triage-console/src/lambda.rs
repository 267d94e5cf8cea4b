//! The start both console Lambdas share: the configuration read at init (an error fails init,
//! naming the variable), the book store and SQS client built once and borrowed into the
//! handler, then one answer per call from the dashboard.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::config::Env;
use serde_json::Value;

use crate::config::ConsoleConfig;
use crate::console::Console;

/// Which of the console's two functions a binary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `triage-widget`: renders the widget's queue (read only).
    Widget,
    /// `triage-action`: applies a button's action to the book, answers the widget re-rendered.
    Action,
}

/// Runs `function` as a Lambda until the runtime stops it.
pub async fn run(function: Function) -> Result<(), Error> {
    let (config, sdk) = redrive_engine::lambda_init(|| match function {
        Function::Widget => ConsoleConfig::widget_from_env(&Env::process()),
        Function::Action => ConsoleConfig::action_from_env(&Env::process()),
    })
    .await?;
    let console = Console {
        store: DynamoDbTriageStore::new(&sdk, &config.table),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        config,
    };
    let console = &console;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(match function {
            Function::Widget => console.widget(&event.payload).await,
            Function::Action => {
                console
                    .action(&event.payload, redrive_engine::now_ms())
                    .await
            }
        })
    }))
    .await
}
