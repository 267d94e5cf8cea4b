//! `--stack NAME` against moto's CloudFormation: the stack `make deploy` creates, from the real
//! template (`infra/templates/resources.yaml`, compact and through S3 as deploy sends a
//! template above CloudFormation's TemplateBody limit), gives each command its queues and
//! tables; a flag given wins; a stack that does not exist, or lacks an output the command
//! needs, fails with code 2 before any queue is touched. Run under the operator's policy,
//! which grants DescribeStacks on the stack.

use std::collections::HashMap;

use aws_sdk_cloudformation::types::{Capability, Parameter};
use redrive_tests::{QueueSet, moto, queue_depth, unique_name, venv_bin, workspace_root};

use crate::common::{run_redrive, run_redrive_as, visible};

/// CloudFormation refuses a TemplateBody above this many bytes.
const TEMPLATE_BODY_LIMIT: usize = 51_200;

/// The outputs of the stack `name` created from `template` (JSON), through S3 when it is above
/// CloudFormation's TemplateBody limit.
async fn create_stack(
    name: &str,
    template: &str,
    parameters: &[(&str, &str)],
) -> HashMap<String, String> {
    let sdk = moto().sdk_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&sdk);
    let mut create = cfn
        .create_stack()
        .stack_name(name)
        .capabilities(Capability::CapabilityIam)
        .set_parameters(Some(
            parameters
                .iter()
                .map(|(k, v)| {
                    Parameter::builder()
                        .parameter_key(*k)
                        .parameter_value(*v)
                        .build()
                })
                .collect(),
        ));
    if template.len() > TEMPLATE_BODY_LIMIT {
        let s3 = aws_sdk_s3::Client::new(&sdk);
        let bucket = unique_name("templates");
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("CreateBucket");
        s3.put_object()
            .bucket(&bucket)
            .key("resources.json")
            .body(template.as_bytes().to_vec().into())
            .send()
            .await
            .expect("PutObject");
        create = create.template_url(format!("https://{bucket}.s3.amazonaws.com/resources.json"));
    } else {
        create = create.template_body(template);
    }
    create.send().await.expect("CreateStack");
    let out = cfn
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .expect("DescribeStacks");
    let stack = &out.stacks()[0];
    stack
        .outputs()
        .iter()
        .map(|o| {
            (
                o.output_key().unwrap_or_default().to_string(),
                o.output_value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// `infra/templates/resources.yaml` as deploy sends it: compact JSON.
fn resources_template() -> String {
    let scratch = redrive_tests::ScratchDir::new("resources");
    let out = scratch.file("resources.json");
    let status = std::process::Command::new(venv_bin().join("python"))
        .arg(workspace_root().join("infra/cfn_yaml.py"))
        .arg("compact")
        .arg(workspace_root().join("infra/templates/resources.yaml"))
        .arg(&out)
        .status()
        .expect("running infra/cfn_yaml.py");
    assert!(status.success(), "infra/cfn_yaml.py compact failed");
    let text = std::fs::read_to_string(&out).expect("the compact template");
    let _ = std::fs::remove_file(&out);
    text
}

/// The stack `make deploy` creates (managed mode), with its outputs.
async fn deployed_stack() -> (String, HashMap<String, String>) {
    let name = unique_name("rds");
    let outputs = create_stack(
        &name,
        &resources_template(),
        &[
            ("MaxReceiveCount", "3"),
            ("ConsumerTimeoutSeconds", "60"),
            ("MetricNamespace", &unique_name("ns")),
            ("LogRetentionDays", "14"),
        ],
    )
    .await;
    (name, outputs)
}

async fn send(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) {
    for i in 0..n {
        sqs.send_message()
            .queue_url(url)
            .message_body(format!("m-{i}"))
            .send()
            .await
            .expect("SendMessage");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_run_with_only_the_stack_acts_on_its_queues_and_a_flag_given_wins() {
    // GIVEN the stack deploy creates, two messages on its DLQ, and another DLQ named by the
    // variable DLQ_URL of the operator's shell, holding one
    let sqs = moto().sqs().await;
    let (stack, outputs) = deployed_stack().await;
    let dlq = outputs["DeadLetterQueueUrl"].clone();
    let source = outputs["SourceQueueUrl"].clone();
    send(&sqs, &dlq, 2).await;
    let other = QueueSet::create(&sqs, false, 3).await;
    send(&sqs, &other.dlq_url, 1).await;

    // WHEN stats runs with only --stack
    let run = run_redrive(&["--stack", &stack, "stats", "--json"], &[], None);

    // THEN it reads the stack's DLQ
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(out["queue"], dlq.as_str(), "{out:#}");
    assert_eq!(out["visible"], 2, "{out:#}");

    // WHEN a flag names another queue, THEN the flag wins
    let run = run_redrive(
        &[
            "--stack",
            &stack,
            "stats",
            "--json",
            "--queue",
            &other.dlq_url,
        ],
        &[],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["queue"], other.dlq_url.as_str());

    // WHEN a triage pass runs with --stack, THEN it records the DLQ's groups in the book in
    // the stack's circuit table, under the DLQ's ARN
    let run = run_redrive(&["--stack", &stack, "triage", &dlq, "--json"], &[], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ddb = moto().dynamodb().await;
    let key = format!(
        "triage#arn:aws:sqs:us-east-1:{}:{stack}-dlq",
        other.account()
    );
    let book = ddb
        .get_item()
        .table_name(&outputs["CircuitTableName"])
        .key(
            "queue",
            aws_sdk_dynamodb::types::AttributeValue::S(key.clone()),
        )
        .send()
        .await
        .expect("GetItem");
    assert!(book.item.is_some(), "no book {key} in the stack's table");

    // WHEN drain runs with only --stack, DLQ_URL naming the other DLQ in the environment
    let run = run_redrive(
        &["--stack", &stack, "drain", "--json"],
        &[("DLQ_URL", &other.dlq_url), ("BACKOFF_BASE_SECONDS", "0")],
        None,
    );

    // THEN it drains the stack's DLQ into the stack's source (the stack, given on the command
    // line, wins over the variable); the other DLQ is untouched
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(
        (out["received"].clone(), out["redriven"].clone()),
        (2.into(), 2.into()),
        "{out:#}"
    );
    assert_eq!(queue_depth(&sqs, &dlq).await, 0);
    assert_eq!(queue_depth(&sqs, &source).await, 2, "lost 0");
    assert_eq!(visible(&sqs, &other.dlq_url).await, 1);

    // WHEN an operator who holds the operator's policy but not the stack's runs with --stack,
    // THEN DescribeStacks is refused, as AWS would refuse it: exit 1, nothing touched
    let run = run_redrive_as(
        "OperatorPolicy",
        &["--stack", &stack, "stats", "--json"],
        &[],
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("DescribeStacks"), "{}", run.stderr);

    // WHEN status runs with only --stack, PROTECT_DLQS naming the other DLQ, THEN its one row
    // is the stack's DLQ, with the circuit of the stack's table
    let run = run_redrive(
        &["--stack", &stack, "status", "--json"],
        &[("PROTECT_DLQS", &other.dlq_url)],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = run.json();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows:#}");
    assert_eq!(rows[0]["url"], dlq.as_str(), "{rows:#}");
    assert!(rows[0]["circuit"].is_string(), "{rows:#}");

    // WHEN circuit status runs with only --stack, THEN it reads the stack's table for its DLQ
    let run = run_redrive(
        &["--stack", &stack, "circuit", "status", "--json"],
        &[],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(
        out["table"],
        outputs["CircuitTableName"].as_str(),
        "{out:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stack_or_output_fails_with_code_2_naming_it_and_touches_no_queue() {
    let sqs = moto().sqs().await;

    // A stack that does not exist.
    let missing = unique_name("nostack");
    let run = run_redrive(&["--stack", &missing, "stats"], &[], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&missing) && run.stderr.contains("does not exist"),
        "{}",
        run.stderr
    );

    // A stack with a DLQ but no poison queue among its outputs: drain needs both.
    let name = unique_name("rdmini");
    let template = serde_json::json!({
        "Resources": {"DeadLetterQueue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": format!("{name}-dlq")}}},
        "Outputs": {"DeadLetterQueueUrl": {"Value": {"Ref": "DeadLetterQueue"}}}
    });
    let outputs = create_stack(&name, &template.to_string(), &[]).await;
    let dlq = outputs["DeadLetterQueueUrl"].clone();
    send(&sqs, &dlq, 1).await;
    let run = run_redrive(&["--stack", &name, "drain"], &[], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&name) && run.stderr.contains("PoisonQueueUrl"),
        "{}",
        run.stderr
    );
    assert_eq!(
        visible(&sqs, &dlq).await,
        1,
        "nothing received: nothing held"
    );

    // The state machine is in the wiring stack, which this stack does not have.
    let run = run_redrive(&["--stack", &name, "history", "some-id"], &[], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("{name}-wiring")),
        "{}",
        run.stderr
    );
}
