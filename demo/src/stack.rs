//! The production template deployed into moto's CloudFormation, and the functions' environment.

use redrive_tests::{Downstream, moto, venv_bin, workspace_root};
use serde_json::Value;

use crate::console::Console;
use crate::{STACK, name_of};

pub struct Stack {
    pub source_url: String,
    pub source_arn: String,
    pub dlq_url: String,
    pub dlq_name: String,
    pub poison_url: String,
    pub table: String,
    pub trigger_alarm: String,
    pub trigger_topic: String,
    pub namespace: String,
    pub account: String,
    pub alarms: Vec<String>,
    pub api_created: Vec<String>,
}

pub fn deploy_stack(console: &Console) -> Result<Stack, String> {
    let script = workspace_root().join("scripts").join("demo_stack.py");
    let python = venv_bin().join("python");
    let mut command = std::process::Command::new(&python);
    // Only the emulator: nothing of the caller's AWS configuration.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AWS_") {
            command.env_remove(name);
        }
    }
    let output = command
        .arg(&script)
        .args(["--stack", STACK])
        .args(["--param", "MaxReceiveCount=3"])
        .args(["--param", "ConsumerTimeoutSeconds=10"])
        .args(["--param", "MetricNamespace=RedriveDemo"])
        .envs(moto().env())
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .map_err(|e| format!("running {} {}: {e}", python.display(), script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} exited with {}: {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let doc: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{} printed no JSON: {e}", script.display()))?;
    let out = |key: &str| -> Result<String, String> {
        doc["outputs"][key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("stack output {key} missing: {doc}"))
    };
    let stack = Stack {
        source_url: out("SourceQueueUrl")?,
        source_arn: out("SourceQueueArn")?,
        dlq_url: out("DeadLetterQueueUrl")?,
        dlq_name: out("DeadLetterQueueName")?,
        poison_url: out("PoisonQueueUrl")?,
        table: out("IdempotencyTableName")?,
        trigger_alarm: format!("{STACK}-dlq-not-empty"),
        trigger_topic: out("TriggerTopicArn")?,
        namespace: out("MetricNamespace")?,
        account: doc["accountId"]
            .as_str()
            .unwrap_or("123456789012")
            .to_string(),
        alarms: doc["alarms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["name"].as_str().map(str::to_string))
            .collect(),
        api_created: doc["apiCreated"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
    };
    if !stack.alarms.contains(&stack.trigger_alarm) {
        return Err(format!(
            "the template's trigger alarm {} was not created",
            stack.trigger_alarm
        ));
    }
    console.event(&format!(
        "stack {STACK} from infra/templates/resources.yaml: queues {}, {}, {}; table {}; topic {}",
        name_of(&stack.source_url),
        stack.dlq_name,
        name_of(&stack.poison_url),
        stack.table,
        name_of(&stack.trigger_topic)
    ));
    console.event(&format!(
        "created through the API with the template's values (moto's CloudFormation skips them): {}",
        stack.api_created.join(", ")
    ));
    Ok(stack)
}

/// The functions' environment: one set for both, as `cargo lambda watch` passes it; the
/// names are the ones infra/deploy.sh sets on AWS.
pub fn lambda_env(stack: &Stack, downstream: &Downstream) -> Vec<(String, String)> {
    let mut env = moto().env();
    let vars = [
        // consumer
        ("IDEMPOTENCY_TABLE", stack.table.clone()),
        ("DOWNSTREAM_URL", downstream.url()),
        ("DOWNSTREAM_TIMEOUT_SECONDS", "5".into()),
        ("RETRY_BASE_SECONDS", "1".into()),
        ("RETRY_MULTIPLIER", "2".into()),
        ("RETRY_MAX_SECONDS", "2".into()),
        ("RETRY_JITTER", "none".into()),
        // both: the consumer fast-tracks permanent failures here, the re-driver drains it
        ("DLQ_URL", stack.dlq_url.clone()),
        // re-driver
        ("SOURCE_QUEUE_URL", stack.source_url.clone()),
        ("POISON_QUEUE_URL", stack.poison_url.clone()),
        ("MAX_REDRIVE_ATTEMPTS", "5".into()),
        ("BACKOFF_BASE_SECONDS", "3".into()),
        ("BACKOFF_MULTIPLIER", "2".into()),
        ("BACKOFF_MAX_SECONDS", "30".into()),
        ("BACKOFF_JITTER", "equal".into()),
        ("MAX_MESSAGES_PER_INVOCATION", "100".into()),
        ("MAX_CONCURRENT_BATCHES", "1".into()),
        ("METRIC_NAMESPACE", stack.namespace.clone()),
        ("REARM_ALARM", "true".into()),
        ("RUST_LOG", "info".into()),
    ];
    env.extend(vars.into_iter().map(|(k, v)| (k.to_string(), v)));
    if let Ok(extra) = std::env::var("REDRIVE_DEMO_ENV") {
        for pair in extra.split(',').filter(|p| !p.trim().is_empty()) {
            if let Some((k, v)) = pair.split_once('=') {
                env.retain(|(name, _)| name != k.trim());
                env.push((k.trim().to_string(), v.to_string()));
            }
        }
    }
    env
}
