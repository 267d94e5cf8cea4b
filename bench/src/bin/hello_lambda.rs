//! The hello-world Rust Lambda (as in the runtime's own `basic-lambda` example): the
//! reference the cold-start and package-size figures of `make bench` are compared with.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

async fn hello(event: LambdaEvent<Value>) -> Result<Value, Error> {
    Ok(json!({ "message": "hello", "requestId": event.context.request_id }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(hello)).await
}
