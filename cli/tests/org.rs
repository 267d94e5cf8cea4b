//! The built `redrive` binary in a real organisation, against moto: queues by name, ARN or
//! URL; errors and exit codes worded as the AWS CLI's; `credential_process` profiles; and
//! `redrive status` over several protected DLQs.

use crate::common;

use std::collections::HashMap;

use aws_sdk_cloudwatch::types::StandardUnit;
use aws_sdk_sqs::types::QueueAttributeName;
use redrive_tests::{QueueSet, moto, put_queue_metric, send_raw, unique_name};
use serde_json::{Value, json};

use common::{Run, bodies, drained_bodies, run_redrive, run_redrive_granted};

/// What the operator's own identity holds beyond the stack's managed policy here. The stack's
/// `OperatorPolicy` grants these calls on the queues it protects (`FindQueues`, `ListQueues`,
/// `ReadMetrics`); these tests make queues of their own beside it, which only this names.
fn org_statement() -> Value {
    json!({
        "Sid": "OperatorOrganisation",
        "Effect": "Allow",
        "Action": [
            "sqs:GetQueueUrl", "sqs:ListQueues", "sqs:ListQueueTags",
            "sqs:ListDeadLetterSourceQueues", "sqs:GetQueueAttributes",
            "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage",
            "sqs:DeleteMessage", "cloudwatch:GetMetricStatistics"
        ],
        "Resource": "*",
    })
}

fn redrive(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_redrive_granted(args, env, &[org_statement()])
}

/// `stats` on `q`'s DLQ as `profile` of the config file `config`, with no keys in the
/// environment, and `env` besides.
fn stats_without_keys(q: &QueueSet, profile: &str, config: &str, env: &[(&str, &str)]) -> Run {
    let mut all = vec![
        ("AWS_CONFIG_FILE", config),
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
    ];
    all.extend_from_slice(env);
    redrive(
        &["--profile", profile, "stats", "--queue", &q.dlq_url],
        &all,
    )
}

/// A directory of its own under the system's temporary one.
fn temp_dir(prefix: &str) -> redrive_tests::ScratchDir {
    redrive_tests::ScratchDir::new(prefix)
}

/// Writes the AWS config file `name` in `dir` holding `text`; its path.
fn aws_config_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The queues a `status --json` run reports on, in its order.
fn queue_names(run: &Run) -> Vec<String> {
    run.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["queue"].as_str().unwrap().to_string())
        .collect()
}

/// The queue's ARN as the CLI takes it.
fn arn(q: &QueueSet, name: &str) -> String {
    format!("arn:aws:sqs:us-east-1:{}:{name}", q.account())
}

#[tokio::test]
async fn a_queue_is_taken_by_name_arn_or_url() {
    // GIVEN a DLQ with two messages
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    send_raw(&sqs, &q.dlq_url, "a", &[]).await;
    send_raw(&sqs, &q.dlq_url, "b", &[]).await;
    let by_arn = arn(&q, &q.dlq_name);

    // WHEN stats is given the DLQ by its name, its ARN and its URL
    for form in [q.dlq_name.as_str(), &by_arn, &q.dlq_url] {
        let run = redrive(&["stats", "--queue", form, "--json", "--sample", "0"], &[]);
        // THEN each names the same queue
        assert_eq!(run.code, 0, "{form}: {}", run.stderr);
        let stats = run.json();
        assert_eq!(stats["queue"], q.dlq_url.as_str(), "{form}");
        assert_eq!(stats["visible"], 2, "{form}");
    }

    // AND replay takes both of its queues by name and ARN: the parked message reaches the source
    send_raw(&sqs, &q.poison_url, "parked", &[]).await;
    let to = arn(&q, &q.source_name);
    let run = redrive(
        &[
            "replay",
            "--from",
            &q.poison_name,
            "--to",
            &to,
            "--all",
            "--json",
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json()["to"], q.source_url.as_str());
    assert_eq!(drained_bodies(&sqs, &q.source_url).await, ["parked"]);
}

#[tokio::test]
async fn a_queue_that_does_not_exist_or_is_in_another_region_is_named() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    // WHEN a queue name does not exist
    let missing = unique_name("no-such-queue");
    let run = redrive(&["peek", "--queue", &missing], &[]);
    // THEN the error names it and SQS's code, and it is an AWS answer: exit 1
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with(&format!(
            "redrive: queue '{missing}' does not exist (AWS.SimpleQueueService.NonExistentQueue"
        )) || run.stderr.starts_with(&format!(
            "redrive: queue '{missing}' does not exist (QueueDoesNotExist"
        )),
        "{}",
        run.stderr
    );
    // WHEN an ARN names another region than the client's
    let elsewhere = format!("arn:aws:sqs:eu-west-1:{}:{}", q.account(), q.dlq_name);
    let run = redrive(&["stats", "--queue", &elsewhere], &[]);
    // THEN it is a usage error, naming both regions
    run.assert_stderr_names(2, &["eu-west-1", "us-east-1"]);
    // WHEN a value is no queue at all: clap's usage error
    let run = redrive(&["stats", "--queue", "not a queue"], &[]);
    run.assert_stderr_has(2, "queue name");
}

#[tokio::test]
async fn errors_read_like_the_aws_clis_with_their_exit_codes() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let dir = temp_dir("aws-config");
    let config = aws_config_file(
        &dir,
        "config",
        "[profile ops]\nregion = us-east-1\n[profile bare]\noutput = json\n",
    );
    let config = config.as_str();

    // WHEN the profile has no credentials and the environment none either
    let run = stats_without_keys(&q, "ops", config, &[]);
    // THEN one line names the profile; a configuration error: exit 2
    run.assert_stderr_starts(2, "redrive: no credentials found (profile 'ops')");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);

    // WHEN the profile does not exist (by flag, or by AWS_PROFILE)
    for (args, env) in [
        (vec!["--profile", "nope"], vec![("AWS_CONFIG_FILE", config)]),
        (
            vec![],
            vec![("AWS_CONFIG_FILE", config), ("AWS_PROFILE", "nope")],
        ),
    ] {
        let mut args = args;
        args.extend(["stats", "--queue", &q.dlq_url]);
        let run = redrive(&args, &env);
        // THEN a configuration error: exit 2
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert_eq!(
            run.stderr.trim_end(),
            "redrive: the config profile (nope) could not be found"
        );
    }

    // WHEN neither the profile nor the environment names a region
    let run = redrive(
        &["--profile", "bare", "stats", "--queue", &q.dlq_url],
        &[
            ("AWS_CONFIG_FILE", config),
            ("AWS_REGION", ""),
            ("AWS_DEFAULT_REGION", ""),
        ],
    );
    // THEN a configuration error too
    run.assert_stderr_starts(2, "redrive: no AWS region");

    // WHEN the profile's credential_process fails
    let failing = aws_config_file(
        &dir,
        "failing-config",
        "[profile broken]\nregion = us-east-1\ncredential_process = /bin/false\n",
    );
    let run = stats_without_keys(&q, "broken", &failing, &[]);
    // THEN one line names the profile, and no SDK log line comes with it
    run.assert_stderr_starts(
        2,
        "redrive: could not load credentials (profile 'broken'): ",
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);

    // WHEN an IAM Identity Center (SSO) profile has no cached token (never logged in)
    let home = temp_dir("home");
    let sso = aws_config_file(
        &dir,
        "sso-config",
        "[profile sso]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = Ops\nregion = us-east-1\n\n[sso-session corp]\nsso_start_url = https://example.awsapps.com/start\nsso_region = us-east-1\n",
    );
    let run = stats_without_keys(&q, "sso", &sso, &[("HOME", home.to_str().unwrap())]);
    // THEN the SSO provider (built in) says so, with the way out; a configuration error
    assert_eq!(run.code, 2, "{}", run.stderr);
    let line = run.stderr.trim_end();
    assert!(
        line.starts_with("redrive: could not load credentials (profile 'sso'): ")
            && line.contains("SSO token")
            && line.ends_with("(run `aws sso login --profile sso`)"),
        "{line}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);

    // WHEN nothing listens at the endpoint
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let run = redrive(
        &["stats", "--queue", &q.dlq_url],
        &[
            ("AWS_ENDPOINT_URL", &endpoint),
            // Under REDRIVE_SQS_EMULATOR=localstack, SQS has an endpoint of its own.
            ("AWS_ENDPOINT_URL_SQS", ""),
        ],
    );
    // THEN the AWS CLI's line, exit 1
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        run.stderr.trim_end(),
        format!("redrive: could not connect to the endpoint URL: \"http://127.0.0.1:{port}/\"")
    );

    // WHEN AWS answers with an error
    let missing = q.dlq_url.replace(&q.dlq_name, "no-such-queue");
    let run = redrive(&["stats", "--queue", &missing], &[]);
    // THEN the AWS CLI's line, with the service's own message and no SDK dump; exit 1
    assert_eq!(run.code, 1, "{}", run.stderr);
    let line = run.stderr.trim_end();
    assert!(
        line.starts_with("redrive: An error occurred (")
            && line.contains(") when calling the GetQueueAttributes operation: ")
            && line.to_lowercase().contains("does not exist"),
        "{line}"
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    for dump in [
        "ServiceError",
        "Error {",
        "DispatchFailure",
        "raw: Response",
    ] {
        assert!(!line.contains(dump), "{line}");
    }

    // WHEN a walk fails (discard cannot receive from the queue)
    let run = redrive(
        &["discard", "--queue", &missing, "--all", "--yes", "--json"],
        &[],
    );
    // THEN its report says so, and stderr has the same one line, without the SDK's dump
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.json()["status"], "failed");
    let line = run.stderr.trim_end();
    assert!(
        line.starts_with("redrive: An error occurred (")
            && line.contains(") when calling the ReceiveMessage operation: "),
        "{line}"
    );
    assert!(!line.contains("Error {"), "{line}");
}

#[tokio::test]
async fn a_credential_process_profile_supplies_the_credentials() {
    // GIVEN a profile whose credential_process prints the operator's key and leaves a mark
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    send_raw(&sqs, &q.dlq_url, "m", &[]).await;
    let args = [
        "--profile",
        "proc",
        "stats",
        "--queue",
        &q.dlq_url,
        "--json",
    ];
    let operator: HashMap<String, String> =
        redrive_tests::iam::cli_env_with(&moto().env(), &args, &[org_statement()])
            .into_iter()
            .collect();
    let dir = temp_dir("credential-process");
    let marker = dir.join("ran");
    let script = dir.join("credentials.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch '{}'\nprintf '%s' '{}'\n",
            marker.display(),
            json!({
                "Version": 1,
                "AccessKeyId": operator["AWS_ACCESS_KEY_ID"],
                "SecretAccessKey": operator["AWS_SECRET_ACCESS_KEY"],
            })
        ),
    )
    .unwrap();
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            "[profile proc]\nregion = us-east-1\ncredential_process = /bin/sh {}\n",
            script.display()
        ),
    )
    .unwrap();

    // WHEN the CLI runs with that profile and no key in its environment
    let run = run_redrive(
        &args,
        &[
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_SECRET_ACCESS_KEY", ""),
        ],
        None,
    );

    // THEN the process ran and its credentials were used
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(marker.exists(), "the credential process did not run");
    assert_eq!(run.json()["visible"], 1);
}

/// A DLQ (terminal, no RedrivePolicy) named `name`; its URL and ARN.
async fn create_dlq(sqs: &aws_sdk_sqs::Client, name: &str) -> (String, String) {
    let url = sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    let arn =
        redrive_tests::queue_attributes(sqs, &url).await[&QueueAttributeName::QueueArn].clone();
    (url, arn)
}

/// A source queue named `name` whose RedrivePolicy sends to the DLQ `dlq_arn`.
async fn create_source(sqs: &aws_sdk_sqs::Client, name: &str, dlq_arn: &str) {
    let policy = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}).to_string();
    sqs.create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::RedrivePolicy, policy)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn status_shows_every_protected_dlq_in_a_table_and_in_json() {
    // GIVEN three DLQs of the user's: one fed by two sources, one with settings in its tags,
    // one with a bad setting
    let sqs = moto().sqs().await;
    let cw = moto().cloudwatch().await;
    let base = unique_name("org");
    let (shared_url, shared_arn) = create_dlq(&sqs, &format!("{base}-shared-dlq")).await;
    create_source(&sqs, &format!("{base}-orders"), &shared_arn).await;
    create_source(&sqs, &format!("{base}-payments"), &shared_arn).await;
    let (tuned_url, tuned_arn) = create_dlq(&sqs, &format!("{base}-tuned-dlq")).await;
    let protect = format!("protect-{base}");
    sqs.tag_queue()
        .queue_url(&tuned_url)
        .tags("redrive:max-attempts", "3")
        .tags("redrive:backoff-base-seconds", "10")
        .tags("team", "billing")
        .tags(&protect, "true")
        .send()
        .await
        .unwrap();
    let (lone_url, _) = create_dlq(&sqs, &format!("{base}-lone-dlq")).await;
    sqs.tag_queue()
        .queue_url(&lone_url)
        .tags(&protect, "true")
        .tags("redrive:max-attempts", "lots")
        .send()
        .await
        .unwrap();
    for body in ["1", "2", "3"] {
        send_raw(&sqs, &shared_url, body, &[]).await;
    }
    send_raw(&sqs, &tuned_url, "t", &[]).await;
    // AND the re-driver drained the tuned DLQ once (its Received metric), in a namespace of
    // this test's
    let namespace = unique_name("ns");
    let queue = format!("{base}-tuned-dlq");
    put_queue_metric(
        &cw,
        &namespace,
        "Received",
        &queue,
        (StandardUnit::Count, 4.0),
    )
    .await;

    // AND the lone one was drained too (the contract's SuccessfulRedrives, zeros included)
    let queue = format!("{base}-lone-dlq");
    put_queue_metric(
        &cw,
        &namespace,
        "SuccessfulRedrives",
        &queue,
        (StandardUnit::Count, 0.0),
    )
    .await;
    // AND the operator holds the tuned one's circuit open
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let tuned_name = format!("{base}-tuned-dlq");
    let run = redrive(
        &[
            "circuit",
            "open",
            "--dlq",
            &tuned_name,
            "--circuit-table",
            &table,
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);

    // AND SQS's own metric says how old the shared DLQ's oldest message is
    let queue = format!("{base}-shared-dlq");
    put_queue_metric(
        &cw,
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        &queue,
        (StandardUnit::Seconds, 120.0),
    )
    .await;

    // WHEN status is asked for the three, by name, ARN and URL
    let name = format!("{base}-shared-dlq");
    let args = [
        "status",
        "--dlq",
        &name,
        "--dlq",
        &tuned_arn,
        "--dlq",
        &lone_url,
        "--metric-namespace",
        &namespace,
        "--circuit-table",
        &table,
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let run = redrive(&json_args, &[]);

    // THEN one object per DLQ, with its depth, sources and settings
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = run.json();
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let row = |suffix: &str| {
        rows.iter()
            .find(|r| r["queue"] == format!("{base}-{suffix}").as_str())
            .unwrap_or_else(|| panic!("{suffix} missing: {rows:?}"))
    };
    let shared = row("shared-dlq");
    assert_eq!(shared["url"], shared_url.as_str());
    assert_eq!(shared["depth"], 3);
    assert_eq!(shared["inFlight"], 0);
    assert_eq!(
        shared["sources"],
        json!([format!("{base}-orders"), format!("{base}-payments")])
    );
    assert_eq!(shared["settings"], json!({}));
    assert_eq!(shared["lastDrain"], Value::Null);
    assert_eq!(shared["oldestAgeSeconds"], 120);
    assert_eq!(shared["circuit"], "closed");
    let tuned = row("tuned-dlq");
    assert_eq!(tuned["depth"], 1);
    assert_eq!(tuned["sources"], json!([]));
    assert_eq!(
        tuned["settings"],
        json!({"redrive:max-attempts": "3", "redrive:backoff-base-seconds": "10"})
    );
    assert!(tuned["lastDrain"].is_string(), "{tuned}");
    assert_eq!(tuned["oldestAgeSeconds"], Value::Null);
    assert_eq!(tuned["invalid"], Value::Null);
    assert_eq!(tuned["circuit"], "open");
    let lone = row("lone-dlq");
    assert_eq!(lone["depth"], 0);
    assert!(lone["lastDrain"].is_string(), "{lone}");
    assert_eq!(lone["settings"], json!({"redrive:max-attempts": "lots"}));
    let invalid = lone["invalid"].as_str().unwrap_or_else(|| panic!("{lone}"));
    assert!(invalid.contains("redrive:max-attempts"), "{invalid}");

    // AND the table holds the same, one line per DLQ under a header
    let run = redrive(&args, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("QUEUE") && lines[0].contains("SOURCES"),
        "{}",
        run.stdout
    );
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    let line = |suffix: &str| {
        let name = format!("{base}-{suffix}");
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{suffix} missing:\n{}", run.stdout))
    };
    let shared = line("shared-dlq");
    assert_eq!(shared[1..3], ["3", "0"], "{shared:?}");
    assert!(
        shared.contains(&format!("{base}-orders,{base}-payments").as_str()),
        "{shared:?}"
    );
    let tuned = line("tuned-dlq");
    assert_eq!(tuned[1], "1");
    assert!(tuned.contains(&"redrive:max-attempts=3"), "{tuned:?}");
    assert_eq!(tuned[4], "open", "{tuned:?}");
    let lone = line("lone-dlq");
    assert_eq!(lone[1], "0");
    assert_eq!(lone[lone.len() - 2..], ["invalid:", "redrive:max-attempts"]);

    // WHEN the DLQs are chosen by a tag, from the flag or from PROTECT_TAG
    let tag = format!("{protect}=true");
    for (flags, env) in [
        (vec!["--tag", tag.as_str()], vec![]),
        (vec![], vec![("PROTECT_TAG", tag.as_str())]),
    ] {
        let mut args = vec!["status", "--json"];
        args.extend(flags);
        let run = redrive(&args, &env);
        // THEN exactly the tagged ones
        assert_eq!(run.code, 0, "{}", run.stderr);
        let mut names = queue_names(&run);
        names.sort();
        assert_eq!(
            names,
            [format!("{base}-lone-dlq"), format!("{base}-tuned-dlq")]
        );
    }

    // AND PROTECT_DLQS names them too
    let list = format!("{name}, {tuned_arn}");
    let run = redrive(&["status", "--json"], &[("PROTECT_DLQS", &list)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json().as_array().unwrap().len(), 2);

    // WHEN nothing says which DLQs: a usage error
    let run = redrive(&["status"], &[]);
    run.assert_stderr_has(2, "PROTECT_DLQS");
}

#[tokio::test]
async fn replay_without_to_sends_each_message_to_its_recorded_source() {
    // GIVEN a poison queue holding a message whose x-redrive records its source, and one
    // that records none
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let mut known = common::out_of_attempts("orig-known");
    known.set_source(&q.source_arn);
    common::send_with_meta(&sqs, &q.poison_url, "known", &known).await;
    common::send_with_meta(
        &sqs,
        &q.poison_url,
        "stray",
        &common::out_of_attempts("orig-stray"),
    )
    .await;

    // WHEN everything is replayed with no --to
    let run = redrive(&["replay", "--from", &q.poison_url, "--all", "--json"], &[]);

    // THEN the one with a source went back to it, the other stayed, listed; exit 3
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["replayed"].as_array().unwrap().len(), 1, "{report}");
    let stray = report["noSource"].as_array().unwrap();
    assert_eq!(stray.len(), 1, "{report}");
    assert_eq!(stray[0]["message"]["originalMessageId"], "orig-stray");
    assert_eq!(drained_bodies(&sqs, &q.source_url).await, ["known"]);
    assert_eq!(drained_bodies(&sqs, &q.poison_url).await, ["stray"]);
}

#[tokio::test]
async fn drain_without_source_sends_each_message_back_to_its_own() {
    // GIVEN a DLQ with a message whose x-redrive records its source (a queue whose
    // RedrivePolicy names the DLQ) and one with no known source
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let mut known = redrive_shared::meta::RedriveMeta::fresh("orig-known");
    known.set_source(&q.source_arn);
    common::send_with_meta(&sqs, &q.dlq_url, "known", &known).await;
    send_raw(&sqs, &q.dlq_url, "stray", &[]).await;

    // WHEN the DLQ (by URL) is drained into the poison queue (by name), with no --source
    let run = redrive(
        &[
            "drain",
            "--dlq",
            &q.dlq_url,
            "--poison",
            &q.poison_name,
            "--json",
        ],
        &[("BACKOFF_BASE_SECONDS", "0")],
    );

    // THEN the known one is back on its source, the stray one isolated as unknown-source
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let summary = run.json();
    assert_eq!(summary["redriven"], 1, "{summary}");
    assert_eq!(summary["isolated"], 1, "{summary}");
    assert_eq!(drained_bodies(&sqs, &q.source_url).await, ["known"]);
    let parked = redrive_tests::drain_all(&sqs, &q.poison_url).await;
    assert_eq!(bodies(&parked), ["stray"]);
    assert_eq!(
        common::meta_of(&parked[0])
            .reason
            .map(|r| r.as_str().to_string()),
        Some("unknown-source".to_string())
    );
}

#[tokio::test]
async fn status_by_tag_under_the_operator_policy_alone_skips_the_queues_it_may_not_read() {
    // GIVEN the stack's DLQ and another queue of the account, both carrying the tag, and an
    // operator holding only the stack's OperatorPolicy (ListQueueTags on the stack's queues)
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let key = unique_name("redrive-protect");
    let foreign = sqs
        .create_queue()
        .queue_name(unique_name("foreign-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for url in [&q.dlq_url, &foreign] {
        sqs.tag_queue()
            .queue_url(url)
            .tags(&key, "true")
            .send()
            .await
            .unwrap();
    }
    let tag = format!("{key}=true");

    // WHEN status selects DLQs by that tag
    let args = ["status", "--json", "--tag", tag.as_str()];
    let env = [
        ("DLQ_URL", q.dlq_url.as_str()),
        ("SOURCE_QUEUE_URL", q.source_url.as_str()),
        ("POISON_QUEUE_URL", q.poison_url.as_str()),
    ];
    let run = run_redrive_granted(&args, &env, &[]);

    // THEN it answers with the stack's DLQ; the queue it may not read is no DLQ of this install
    assert_eq!(run.code, 0, "{}", run.stderr);
    let names = queue_names(&run);
    assert_eq!(names, [q.dlq_url.rsplit('/').next().unwrap().to_string()]);
}
