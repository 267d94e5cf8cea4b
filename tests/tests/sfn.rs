//! The Step Functions harness tests itself: moto executes a small state machine whose
//! `aws-sdk:sqs` tasks call moto itself (MOTO_PORT), whose Lambda tasks run `echo_lambda` under
//! a real `cargo lambda watch` (the launcher's route), and whose Wait state reads `SecondsPath`.

use std::time::{Duration, Instant};

use aws_sdk_sfn::operation::describe_execution::DescribeExecutionOutput;
use aws_sdk_sfn::types::{ExecutionStatus, HistoryEvent, HistoryEventType};
use redrive_tests::sfn::{self, LambdaRoute};
use redrive_tests::{LambdaWatch, Moto, QueueSet, WatchOptions, moto_sfn, unique_name};
use serde_json::{Value, json};

/// `echo_lambda` under `cargo lambda watch`, routed from a function named `<prefix>-<unique>`.
async fn echo_route(moto: &Moto, prefix: &str) -> (LambdaWatch, LambdaRoute) {
    let watch = LambdaWatch::start_with(WatchOptions {
        bins: vec!["echo_lambda".into()],
        env: moto.env(),
        ..WatchOptions::default()
    })
    .await;
    let route = moto
        .route_lambda(&unique_name(prefix), &watch, "echo_lambda")
        .await;
    (watch, route)
}

/// Runs one execution of `machine` with `input` to its end and asserts that it succeeded;
/// its description, its history and the history one line an event.
async fn run_to_success(
    client: &aws_sdk_sfn::Client,
    machine: &str,
    input: &Value,
) -> (DescribeExecutionOutput, Vec<HistoryEvent>, Vec<String>) {
    let execution = sfn::start_execution(client, machine, input).await;
    let done = sfn::wait_for_execution(client, &execution, Duration::from_secs(60)).await;
    let history = sfn::execution_history(client, &execution).await;
    let lines: Vec<String> = history.iter().map(sfn::describe_event).collect();
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        lines.join("\n")
    );
    (done, history, lines)
}

const DEFINITION: &str = r#"{
  "Comment": "harness check: sqs via aws-sdk, a routed Lambda, a Wait with SecondsPath",
  "StartAt": "Send",
  "States": {
    "Send": {
      "Type": "Task",
      "Resource": "arn:aws:states:::aws-sdk:sqs:sendMessage",
      "Parameters": {"QueueUrl": "${QueueUrl}", "MessageBody.$": "$.body"},
      "ResultPath": null,
      "Next": "Receive"
    },
    "Receive": {
      "Type": "Task",
      "Resource": "arn:aws:states:::aws-sdk:sqs:receiveMessage",
      "Parameters": {"QueueUrl": "${QueueUrl}", "MaxNumberOfMessages": 1, "WaitTimeSeconds": 1},
      "ResultSelector": {"messages.$": "$.Messages"},
      "ResultPath": "$.received",
      "Next": "Echo"
    },
    "Echo": {
      "Type": "Task",
      "Resource": "arn:aws:states:::lambda:invoke",
      "Parameters": {
        "FunctionName": "${TaskFunction}",
        "Payload": {"messages.$": "$.received.messages", "seconds.$": "$.seconds", "env": ["AWS_LAMBDA_FUNCTION_NAME"]}
      },
      "ResultSelector": {"echo.$": "$.Payload.echo", "function.$": "$.Payload.env.AWS_LAMBDA_FUNCTION_NAME"},
      "ResultPath": "$.lambda",
      "Next": "WaitForBackoff"
    },
    "WaitForBackoff": {"Type": "Wait", "SecondsPath": "$.lambda.echo.seconds", "Next": "Direct"},
    "Direct": {
      "Type": "Task",
      "Resource": "${TaskFunction}",
      "Parameters": {"fail.$": "$.fail"},
      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}],
      "ResultPath": "$.direct",
      "End": true
    },
    "Caught": {"Type": "Fail", "Error": "EchoFailed"}
  }
}"#;

#[tokio::test]
async fn moto_runs_sqs_tasks_a_routed_lambda_and_a_wait_with_seconds_path() {
    // GIVEN the Step Functions moto, echo_lambda under cargo lambda watch routed as a
    // uniquely named function, and a queue
    let moto = moto_sfn();
    assert_ne!(
        moto.port(),
        redrive_tests::moto().port(),
        "a server of its own"
    );
    let (watch, route) = echo_route(moto, "echo").await;
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let definition = sfn::substitute_definition(
        DEFINITION,
        &[
            ("QueueUrl", &queues.source_url),
            ("TaskFunction", route.arn()),
        ],
    )
    .unwrap();
    let client = moto.sfn().await;
    let machine = sfn::create_state_machine(&client, "harness", &definition).await;

    // WHEN an execution runs whose direct Lambda task succeeds
    let started = Instant::now();
    let input = json!({"body": "order o-1", "seconds": 2, "fail": null});
    let (done, history, lines) = run_to_success(&client, &machine, &input).await;

    // THEN it succeeded: the message went through moto's SQS, the Lambda ran as echo_lambda,
    // and the Wait slept the seconds the Lambda returned
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the Wait did not wait"
    );
    let output: Value = serde_json::from_str(done.output().unwrap()).unwrap();
    assert_eq!(
        output["received"]["messages"][0]["Body"],
        json!("order o-1")
    );
    assert_eq!(
        output["lambda"]["echo"]["messages"][0]["Body"],
        json!("order o-1")
    );
    assert_eq!(output["lambda"]["function"], json!("echo_lambda"));
    assert_eq!(output["direct"]["echo"], json!({"fail": null}));
    assert!(
        history
            .iter()
            .any(|e| e.r#type() == &HistoryEventType::WaitStateExited),
        "{}",
        lines.join("\n")
    );
    // the received message is moto's own: it is in flight on the queue
    let depth = redrive_tests::queue_attributes(&sqs, &queues.source_url).await;
    let in_flight =
        &depth[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible];
    assert_eq!(in_flight, "1");

    // WHEN the direct Lambda task fails
    let execution = sfn::start_execution(
        &client,
        &machine,
        &json!({"body": "order o-2", "seconds": 0, "fail": "downstream said no"}),
    )
    .await;
    let done = sfn::wait_for_execution(&client, &execution, Duration::from_secs(60)).await;
    // THEN the function's error reaches the state machine: the task failed with its message,
    // the Catch led to the Fail state
    assert_eq!(done.status(), &ExecutionStatus::Failed);
    assert_eq!(done.error(), Some("EchoFailed"));
    // (the function error is answered as AWS Lambda does: its errorType names the error)
    let history = sfn::execution_history(&client, &execution).await;
    let lines: Vec<String> = history.iter().map(sfn::describe_event).collect();
    assert!(
        lines.iter().any(|l| l.contains("LambdaFunctionFailed")
            && !l.contains("error=Exception ")
            && l.contains("downstream said no")),
        "{}",
        lines.join("\n")
    );
    drop(watch);
}

#[tokio::test]
async fn a_lambda_task_without_a_route_fails_naming_the_function() {
    let moto = moto_sfn();
    let client = moto.sfn().await;
    let name = unique_name("unrouted");
    let definition = sfn::substitute_definition(
        r#"{"StartAt":"T","States":{"T":{"Type":"Task","Resource":"${Fn}","End":true}}}"#,
        &[("Fn", &sfn::lambda_arn(&name))],
    )
    .unwrap();
    let machine = sfn::create_state_machine(&client, "unrouted", &definition).await;
    let execution = sfn::start_execution(&client, &machine, &json!({})).await;
    let done = sfn::wait_for_execution(&client, &execution, Duration::from_secs(30)).await;
    assert_eq!(done.status(), &ExecutionStatus::Failed);
    let history = sfn::execution_history(&client, &execution).await;
    let text: String = history
        .iter()
        .map(sfn::describe_event)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains(&name),
        "the failure names the function:\n{text}"
    );
}

#[tokio::test]
async fn injected_task_faults_fail_the_first_invokes_of_an_action_then_retry_succeeds() {
    let moto = moto_sfn();
    let (_watch, route) = echo_route(moto, "faulty").await;
    route.set_faults(&[
        sfn::TaskFault {
            action: "first".into(),
            count: 1,
            after_invoke: false,
        },
        sfn::TaskFault {
            action: "second".into(),
            count: 2,
            after_invoke: true,
        },
    ]);
    let task = |action: &str, next: &str| {
        let end = if next.is_empty() {
            r#""End": true"#.to_string()
        } else {
            format!(r#""Next": "{next}""#)
        };
        format!(
            r#""{action}": {{"Type": "Task", "Resource": "${{Fn}}", "Parameters": {{"action": "{action}"}},
              "Retry": [{{"ErrorEquals": ["Lambda.ServiceException"], "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 1}}],
              "ResultPath": "$.{action}", {end}}}"#
        )
    };
    let definition = format!(
        r#"{{"StartAt": "first", "States": {{ {}, {}, {} }} }}"#,
        task("first", "second"),
        task("second", "third"),
        task("third", "")
    );
    let definition = sfn::substitute_definition(&definition, &[("Fn", route.arn())]).unwrap();
    let client = moto.sfn().await;
    let machine = sfn::create_state_machine(&client, "faults", &definition).await;
    let (done, _, lines) = run_to_success(&client, &machine, &json!({})).await;
    let failures: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("LambdaFunctionFailed"))
        .collect();
    assert_eq!(failures.len(), 3, "{}", lines.join("\n"));
    assert!(
        failures
            .iter()
            .all(|l| l.contains("error=Lambda.ServiceException")),
        "{failures:?}"
    );
    assert_eq!(
        failures
            .iter()
            .filter(|l| l.contains("after the function ran"))
            .count(),
        2
    );
    let output: Value = serde_json::from_str(done.output().unwrap()).unwrap();
    for action in ["first", "second", "third"] {
        assert_eq!(output[action]["echo"]["action"], json!(action));
    }
}
