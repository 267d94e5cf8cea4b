//! A tiny Lambda for the harness's own tests of `LambdaWatch`.
//!
//! Event `{"env": ["NAME", ...]}` returns those variables as the function sees them,
//! `{"fail": "message"}` returns an error, `{"panic": "message"}` panics in the handler,
//! `{"sleepMs": n}` answers after n milliseconds; the response always echoes the event, with the
//! request id and X-Ray trace id the runtime handed the invocation. Logs as the project's
//! Lambdas do (`redrive_shared::logging`): one line per invocation.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::{Value, json};

async fn handle(event: LambdaEvent<Value>) -> Result<Value, Error> {
    tracing::info!("echo");
    let payload = event.payload;
    if let Some(message) = payload.get("fail").and_then(Value::as_str) {
        return Err(message.to_string().into());
    }
    if let Some(message) = payload.get("panic").and_then(Value::as_str) {
        panic!("{message}");
    }
    if let Some(ms) = payload.get("sleepMs").and_then(Value::as_u64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    let env: serde_json::Map<String, Value> = payload
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| {
            let value = std::env::var(name).map_or(Value::Null, Value::String);
            (name.to_string(), value)
        })
        .collect();
    Ok(json!({
        "echo": payload,
        "env": env,
        "requestId": event.context.request_id,
        "xrayTraceId": event.context.xray_trace_id,
        "deadlineMs": event.context.deadline,
        "pid": std::process::id(),
    }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    redrive_shared::logging::init_json_logging("info", false);
    if let Ok(message) = std::env::var("ECHO_FAIL_INIT") {
        return Err(message.into());
    }
    lambda_runtime::run(service_fn(handle)).await
}
