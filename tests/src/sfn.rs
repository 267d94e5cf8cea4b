//! Step Functions on moto: state machines that moto executes, their Lambda Task states run by
//! our binaries under `cargo lambda watch`.
//!
//! ```no_run
//! # async fn demo() {
//! use redrive_tests::{LambdaWatch, moto_sfn, sfn};
//! let moto = moto_sfn();
//! let watch = LambdaWatch::start(&["echo_lambda"], &moto.env()).await;
//! // Lambda Task states that name this function's ARN run `echo_lambda` under `watch`.
//! let route = moto.route_lambda("orders-tasks", &watch, "echo_lambda").await;
//! let definition = sfn::substitute_definition(
//!     r#"{"StartAt":"T","States":{"T":{"Type":"Task","Resource":"${TaskArn}","End":true}}}"#,
//!     &[("TaskArn", route.arn())],
//! )
//! .unwrap();
//! let client = moto.sfn().await;
//! let machine = sfn::create_state_machine(&client, "orders", &definition).await;
//! let execution = sfn::start_execution(&client, &machine, &serde_json::json!({})).await;
//! let done = sfn::wait_for_execution(&client, &execution, std::time::Duration::from_secs(30)).await;
//! # let _ = done;
//! # }
//! ```
//!
//! How it works (see `moto_launcher.py --sfn`): the launcher sets `MOTO_PORT`, so the
//! `aws-sdk:*` / `sqs:*` integrations call this moto, and routes the Lambda client of moto's
//! interpreter to the Invoke endpoint of the `cargo lambda watch` a route names. A route is a
//! file `<routes dir>/<function name>` holding `<endpoint> <binary>`; `route_lambda` writes it
//! and its guard removes it. Function names are unique per test (the route outlives nothing).
//!
//! Definitions are created from the shipped ASL file with `substitute_definition`, which
//! applies `DefinitionSubstitutions` the way CloudFormation does for
//! `AWS::StepFunctions::StateMachine`: every `${Key}` whose key is given becomes its value.
//! It is stricter than CloudFormation in one way: a `${...}` left without a value is an error
//! (in a deployment it would reach Step Functions as text and fail there).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_sfn::Client;
use aws_sdk_sfn::operation::describe_execution::DescribeExecutionOutput;
use aws_sdk_sfn::types::{ExecutionStatus, HistoryEvent};
use serde_json::Value;

use crate::moto::{Moto, REGION};
use crate::{LambdaWatch, unique_name};

/// The account moto answers with (the documentation account of AWS examples).
pub const ACCOUNT: &str = "123456789012";

/// The role every test state machine names (moto does not check it).
pub fn role_arn() -> String {
    format!("arn:aws:iam::{ACCOUNT}:role/redrive-tests-sfn")
}

/// `arn:aws:lambda:us-east-1:123456789012:function:NAME`
pub fn lambda_arn(function_name: &str) -> String {
    format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name}")
}

/// A fault the router injects into a routed function's invokes: the first `count` invokes
/// whose payload's `"action"` is `action` (`"*"`: any) fail with the function error
/// `Lambda.ServiceException` (what Step Functions reports when the Lambda service fails a call,
/// which the ASL's `Retry` covers). `after_invoke`: the function ran and its answer was lost
/// (its effects happened); otherwise it never ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFault {
    pub action: String,
    pub count: u32,
    pub after_invoke: bool,
}

/// A Lambda function name routed to a `cargo lambda watch` binary; the route is removed when
/// this is dropped.
#[derive(Debug)]
pub struct LambdaRoute {
    path: PathBuf,
    name: String,
    arn: String,
    endpoint: String,
    binary: String,
}

impl LambdaRoute {
    /// Replaces the route's injected faults (counting starts again).
    pub fn set_faults(&self, faults: &[TaskFault]) {
        write_route(&self.path, &self.endpoint, &self.binary, faults);
    }

    /// The function's ARN, for a Task state's `Resource` or a `lambda:invoke` `FunctionName`.
    pub fn arn(&self) -> &str {
        &self.arn
    }

    /// The function's name (the last part of the ARN).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for LambdaRoute {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Moto {
    /// A Step Functions client for this moto (see `sdk_config`).
    pub async fn sfn(&self) -> Client {
        Client::new(&self.sdk_config().await)
    }

    /// Routes the Lambda function `function_name` of this moto's state machines to `binary`
    /// under `watch`: a Task state naming `lambda_arn(function_name)` (as `Resource` or as the
    /// `FunctionName` of `arn:aws:states:::lambda:invoke`) invokes that binary, whose instances
    /// this starts. Only on
    /// `moto_sfn()`; panics on another server. Use a name unique to the test (`unique_name`).
    pub async fn route_lambda(
        &self,
        function_name: &str,
        watch: &LambdaWatch,
        binary: &str,
    ) -> LambdaRoute {
        watch
            .start_function(binary)
            .await
            .unwrap_or_else(|e| panic!("route_lambda: {e}"));
        let dir = self.kind.lambda_routes.as_ref().unwrap_or_else(|| {
            panic!("route_lambda: this moto does not run state machines; use moto_sfn()")
        });
        assert!(
            !function_name.is_empty()
                && function_name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "route_lambda: {function_name:?} is not a Lambda function name"
        );
        let path = dir.join(function_name);
        write_route(&path, &watch.endpoint(), binary, &[]);
        LambdaRoute {
            path,
            name: function_name.to_string(),
            arn: lambda_arn(function_name),
            endpoint: watch.endpoint(),
            binary: binary.to_string(),
        }
    }
}

/// The shipped state machine (`infra/statemachine/redrive.asl.json`) on this `moto_sfn()`, its
/// tasks run by the `redrive-workflow` binary under `cargo lambda watch` with the re-driver's
/// environment for `queues` and `env` on top. Dropping it removes the route, then stops the
/// functions.
pub struct WorkflowMachine {
    pub route: LambdaRoute,
    pub watch: LambdaWatch,
    pub client: Client,
    /// The state machine's ARN.
    pub arn: String,
}

impl WorkflowMachine {
    /// `name` prefixes the route's function and the state machine; `concurrency` is how many
    /// task invocations run at once. `Err` when the shipped definition cannot be read or
    /// substituted.
    pub async fn start(
        moto: &Moto,
        queues: &crate::QueueSet,
        env: &[(&str, &str)],
        concurrency: usize,
        name: &str,
    ) -> Result<Self, String> {
        let mut vars = moto.env();
        vars.extend(queues.redriver_env());
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let watch = LambdaWatch::start_with(crate::WatchOptions {
            bins: vec!["redrive-workflow".into()],
            env: vars,
            concurrency,
            ..crate::WatchOptions::default()
        })
        .await;
        let route = moto
            .route_lambda(
                &unique_name(&format!("{name}-tasks")),
                &watch,
                "redrive-workflow",
            )
            .await;
        let path = crate::workspace_root().join("infra/statemachine/redrive.asl.json");
        let definition = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| substitute_definition(&text, &[("TaskFunctionArn", route.arn())]))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let client = moto.sfn().await;
        let arn = create_state_machine(&client, name, &definition).await;
        Ok(Self {
            route,
            watch,
            client,
            arn,
        })
    }
}

/// Writes a route file whole, then renames it into place: the launcher never reads half a
/// route, and a new version (its mtime) restarts the fault counts.
fn write_route(path: &Path, endpoint: &str, binary: &str, faults: &[TaskFault]) {
    let mut text = format!("{endpoint} {binary}\n");
    for fault in faults {
        assert!(
            !fault.action.is_empty() && !fault.action.contains(char::is_whitespace),
            "a fault's action is one word: {:?}",
            fault.action
        );
        let timing = if fault.after_invoke {
            "after"
        } else {
            "before"
        };
        text.push_str(&format!("fail {} {} {timing}\n", fault.action, fault.count));
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).unwrap_or_else(|e| panic!("writing {}: {e}", partial.display()));
    std::fs::rename(&partial, path)
        .unwrap_or_else(|e| panic!("renaming to {}: {e}", path.display()));
}

/// Applies CloudFormation's `DefinitionSubstitutions` to an ASL text: each `${Key}` of a given
/// key becomes its value, verbatim. `Err` names every placeholder left without a value, and
/// any given key the definition never uses (a renamed placeholder would otherwise go unseen).
/// The result must be JSON.
pub fn substitute_definition(
    definition: &str,
    substitutions: &[(&str, &str)],
) -> Result<String, String> {
    let mut out = definition.to_string();
    let mut unused = Vec::new();
    for (key, value) in substitutions {
        let placeholder = format!("${{{key}}}");
        if !out.contains(&placeholder) {
            unused.push(key.to_string());
        }
        out = out.replace(&placeholder, value);
    }
    let left = placeholders(&out);
    if !left.is_empty() || !unused.is_empty() {
        return Err(format!(
            "DefinitionSubstitutions do not match the definition: no value for {left:?}; not in the definition: {unused:?}"
        ));
    }
    serde_json::from_str::<Value>(&out)
        .map_err(|e| format!("the substituted definition is not JSON: {e}"))?;
    Ok(out)
}

/// The `${Name}` placeholders of an ASL text, in order of first appearance, once each.
pub fn placeholders(definition: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut rest = definition;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
            && !found.iter().any(|f| f == name)
        {
            found.push(name.to_string());
        }
        rest = &after[end + 1..];
    }
    found
}

/// Creates a Standard state machine named `<prefix>-<unique>` with `definition`; its ARN.
pub async fn create_state_machine(sfn: &Client, prefix: &str, definition: &str) -> String {
    let name = unique_name(prefix);
    let created = sfn
        .create_state_machine()
        .name(&name)
        .definition(definition)
        .role_arn(role_arn())
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateStateMachine {name}: {e:?}"));
    created.state_machine_arn().to_string()
}

/// Starts an execution of `state_machine_arn` with `input`; the execution's ARN.
pub async fn start_execution(sfn: &Client, state_machine_arn: &str, input: &Value) -> String {
    let started = sfn
        .start_execution()
        .state_machine_arn(state_machine_arn)
        .name(unique_name("x"))
        .input(input.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartExecution of {state_machine_arn}: {e:?}"));
    started.execution_arn().to_string()
}

/// Polls DescribeExecution until the execution is no longer RUNNING (or PENDING_REDRIVE);
/// panics with the history's last events after `timeout`.
pub async fn wait_for_execution(
    sfn: &Client,
    execution_arn: &str,
    timeout: Duration,
) -> DescribeExecutionOutput {
    let started = Instant::now();
    loop {
        let described = sfn
            .describe_execution()
            .execution_arn(execution_arn)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DescribeExecution {execution_arn}: {e:?}"));
        if !matches!(
            described.status(),
            ExecutionStatus::Running | ExecutionStatus::PendingRedrive
        ) {
            return described;
        }
        if started.elapsed() > timeout {
            let history = execution_history(sfn, execution_arn).await;
            let tail: Vec<String> = history
                .iter()
                .rev()
                .take(10)
                .rev()
                .map(describe_event)
                .collect();
            panic!(
                "execution {execution_arn} still {:?} after {timeout:?}; its last events:\n{}",
                described.status(),
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every event of an execution's history, oldest first (all pages).
pub async fn execution_history(sfn: &Client, execution_arn: &str) -> Vec<HistoryEvent> {
    let mut events = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = sfn
            .get_execution_history()
            .execution_arn(execution_arn)
            .set_next_token(token.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GetExecutionHistory {execution_arn}: {e:?}"));
        events.extend(page.events().iter().cloned());
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return events;
        }
    }
}

/// One line per event: id, type, and the state name, error or output it carries.
pub fn describe_event(event: &HistoryEvent) -> String {
    let mut line = format!("#{} {}", event.id(), event.r#type().as_str());
    if let Some(d) = event.state_entered_event_details() {
        line.push_str(&format!(" {}", d.name()));
    }
    if let Some(d) = event.state_exited_event_details() {
        line.push_str(&format!(" {}", d.name()));
    }
    let failures = [
        event
            .task_failed_event_details()
            .map(|d| (d.error(), d.cause())),
        event
            .lambda_function_failed_event_details()
            .map(|d| (d.error(), d.cause())),
        event
            .execution_failed_event_details()
            .map(|d| (d.error(), d.cause())),
    ];
    for (error, cause) in failures.into_iter().flatten() {
        line.push_str(&format!(
            " error={} cause={}",
            error.unwrap_or_default(),
            cause.unwrap_or_default()
        ));
    }
    line
}

/// The parsed outputs of the execution's succeeded Lambda / task steps, in order: what each
/// task returned (`TaskSucceeded.output`, or `LambdaFunctionSucceeded.output`), as JSON. For
/// `arn:aws:states:::lambda:invoke` the task output is the Invoke response, whose `Payload` is
/// the function's answer; it is returned as it appears.
pub fn task_outputs(history: &[HistoryEvent]) -> Vec<Value> {
    history
        .iter()
        .filter_map(|event| {
            event
                .task_succeeded_event_details()
                .and_then(|d| d.output())
                .or_else(|| {
                    event
                        .lambda_function_succeeded_event_details()
                        .and_then(|d| d.output())
                })
        })
        .map(|text| serde_json::from_str(text).unwrap_or(Value::String(text.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutions_are_applied_and_checked() {
        let asl = r#"{"A":"${Fn}","B":"${Fn}","C":"${Queue}"}"#;
        let done = substitute_definition(asl, &[("Fn", "arn:f"), ("Queue", "q")]).unwrap();
        assert_eq!(done, r#"{"A":"arn:f","B":"arn:f","C":"q"}"#);
        let missing = substitute_definition(asl, &[("Fn", "arn:f")]).unwrap_err();
        assert!(missing.contains("\"Queue\""), "{missing}");
        let unused =
            substitute_definition(asl, &[("Fn", "f"), ("Queue", "q"), ("Old", "x")]).unwrap_err();
        assert!(unused.contains("\"Old\""), "{unused}");
        let broken = substitute_definition(r#"{"A":${N}}"#, &[("N", "not json")]).unwrap_err();
        assert!(broken.contains("not JSON"), "{broken}");
        // JSONPath and intrinsic text with '$' but no braces is untouched.
        assert!(placeholders(r#"{"X.$":"$.a","Y.$":"States.Format('{}', $.b)"}"#).is_empty());
    }
}
