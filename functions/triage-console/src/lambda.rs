//! The start both console Lambdas share: the configuration read at init (an error fails init,
//! naming the variable; `DLQ_LIST_TABLE`'s list read then too), the book store and SQS client built once and borrowed into the
//! handler, then one answer per call from the dashboard.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_engine::triage_store::DynamoDbTriageStore;
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
    // Attach mode: the protected DLQs' list from DLQ_LIST_TABLE, as the re-driver reads it.
    let (config, sdk) = redrive_engine::lambda_init_fleet(|env| match function {
        Function::Widget => ConsoleConfig::widget_from_env(env),
        Function::Action => ConsoleConfig::action_from_env(env),
    })
    .await?;
    let console = Console {
        store: DynamoDbTriageStore::new(&sdk, &config.table),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        s3: redrive_engine::s3::client(&sdk),
        config,
    };
    let console = &console;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        Ok::<_, Error>(match function {
            Function::Widget => console.widget(&event.payload).await,
            Function::Action => {
                let deadline = redrive_engine::deadline_instant(event.context.deadline);
                console
                    .action_until(&event.payload, redrive_engine::now_ms(), Some(deadline))
                    .await
            }
        })
    }))
    .await
}
