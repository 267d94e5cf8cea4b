//! The built `redrive` binary against moto: what each command did to the queues, what it
//! printed, and its exit code.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use aws_sdk_sqs::types::{Message, QueueAttributeName};
use redrive_shared::meta::{ATTRIBUTE_NAME, IsolationReason, RedriveMeta};
use redrive_tests::{
    QueueSet, attr_binary, attr_string, batch_sends_keep_trace_headers, drain_all, moto,
    producer_trace_header, queue_depth, send_fifo, send_raw, send_traced, trace_header_of,
    unique_name,
};
use serde_json::{Value, json};

use common::{
    Run, bodies, drained_bodies, meta_attr, meta_of, out_of_attempts, parked, permanent,
    rejected_on_the_way, run_redrive, send_with_meta, visible,
};

/// The binary against moto (see [`common::run_redrive`]) with `env` on top.
fn redrive(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_redrive(args, env, None)
}

/// `redrive COMMAND --queue POISON` on `q`'s poison queue, with `flags`.
fn on_poison(q: &QueueSet, command: &str, flags: &[&str]) -> Run {
    let mut args = vec![command, "--queue", &q.poison_url];
    args.extend_from_slice(flags);
    redrive(&args, &[])
}

/// `redrive replay` from `q`'s poison queue to its source queue, with `flags`.
fn replay_to_source(q: &QueueSet, flags: &[&str]) -> Run {
    let mut args = vec!["replay", "--from", &q.poison_url, "--to", &q.source_url];
    args.extend_from_slice(flags);
    redrive(&args, &[])
}

#[test]
fn help_documents_every_command_and_the_exit_codes() {
    let help = redrive(&["--help"], &[]);
    assert_eq!(help.code, 0);
    for command in ["stats", "peek", "drain", "replay", "discard"] {
        assert!(
            help.stdout.contains(command),
            "{command} missing:\n{}",
            help.stdout
        );
        let sub = redrive(&[command, "--help"], &[]);
        assert_eq!(sub.code, 0, "{command} --help");
        assert!(
            sub.stdout.contains("--json"),
            "{command} --help:\n{}",
            sub.stdout
        );
    }
    for text in ["NO_COLOR", "AWS_ENDPOINT_URL", "--profile", "--region"] {
        assert!(help.stdout.contains(text), "{text} missing");
    }
    // The exit codes, as the code defines them (docs/cli.md shows the same table).
    let exit_codes = redrive_cli::context::Exit::help();
    assert!(
        help.stdout.contains(&exit_codes),
        "--help lacks:\n{exit_codes}\nin:\n{}",
        help.stdout
    );
    // A usage error is exit code 2, on stderr.
    let bad = redrive(&["peek"], &[]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--queue"), "{}", bad.stderr);
}

#[test]
fn completions_cover_every_command_and_flag_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        // WHEN completions are asked for
        let run = redrive(&["completions", shell], &[]);
        // THEN the script names the commands and their flags, and needs no AWS at all
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        for word in ["replay", "discard", "allow-unstamped", "circuit-table"] {
            assert!(run.stdout.contains(word), "{shell}: {word} missing");
        }
    }
    // AND the reason values complete too
    let bash = redrive(&["completions", "bash"], &[]);
    assert!(bash.stdout.contains("permanent-failure"), "{}", bash.stdout);
    // AND an unknown shell is a usage error
    let run = redrive(&["completions", "tcsh"], &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
}

#[test]
fn the_man_page_documents_the_commands_and_the_exit_codes() {
    // WHEN the man page is asked for
    let run = redrive(&["man"], &[]);
    // THEN it is roff for section 1, with every command, the exit codes and the variables
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains(".TH redrive 1"), "{}", run.stdout);
    for word in [
        "replay",
        "discard",
        "export",
        "completions",
        "Exit codes",
        "NO_COLOR",
    ] {
        assert!(run.stdout.contains(word), "{word} missing");
    }
}

#[tokio::test]
async fn endpoint_url_points_every_call_where_the_aws_cli_flag_would() {
    // GIVEN a queue, and no endpoint in the environment
    let sqs = redrive_tests::moto().sqs().await;
    let q = redrive_tests::QueueSet::create(&sqs, false, 3).await;
    redrive_tests::send_raw(&sqs, &q.dlq_url, "{}", &[]).await;
    let endpoint = match redrive_tests::sqs_emulator() {
        Some(localstack) => localstack.endpoint(),
        None => redrive_tests::moto().endpoint(),
    };
    let run = |args: &[&str]| {
        let mut command = crate::common::redrive_command(args);
        for (k, _) in redrive_tests::moto().env() {
            if k.starts_with("AWS_ENDPOINT_URL") {
                command.env_remove(k);
            }
        }
        let out = command.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // WHEN stats runs with --endpoint-url
    let (code, stdout, stderr) = run(&[
        "stats",
        "--queue",
        &q.dlq_url,
        "--endpoint-url",
        &endpoint,
        "--json",
    ]);
    // THEN it reached the queue there
    assert_eq!(code, Some(0), "{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["visible"], 1, "{out:#}");
    // AND a value that is no URL is refused by name
    let (code, _, stderr) = run(&[
        "stats",
        "--queue",
        &q.dlq_url,
        "--endpoint-url",
        "localhost:1",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--endpoint-url localhost:1"), "{stderr}");
}

#[test]
fn man_dir_writes_a_page_per_command_each_with_its_own_flags() {
    let dir = redrive_tests::ScratchDir::new("redrive-man");
    let run = redrive(&["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = |name: &str| {
        std::fs::read_to_string(dir.join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}\n{}", run.stdout))
    };
    for name in [
        "redrive",
        "redrive-drain",
        "redrive-replay",
        "redrive-triage",
        "redrive-triage-replay",
        "redrive-triage-hold",
    ] {
        assert!(page(name).contains(&format!(".TH {name} 1")), "{name}");
    }
    assert!(page("redrive-triage-replay").contains("canary"));
    assert!(page("redrive-triage-hold").contains("\\-\\-until"));
    assert!(
        !page("redrive-drain").contains("canary window"),
        "each page has its own flags"
    );
}

#[test]
fn a_mistyped_command_or_value_gets_a_suggestion_and_exit_2() {
    // WHEN a command is misspelt
    let run = redrive(&["repaly"], &[]);
    // THEN the error suggests the command meant, and nothing runs
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("'replay'"), "{}", run.stderr);
    // WHEN a reason is misspelt
    let run = redrive(
        &[
            "peek",
            "--queue",
            "https://sqs.us-east-1.amazonaws.com/1/p",
            "--reason",
            "max-atempts",
        ],
        &[],
    );
    // THEN the error lists the reasons
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("max-attempts"), "{}", run.stderr);
    assert!(run.stderr.contains("send-rejected"), "{}", run.stderr);
    // AND help shows the possible values
    let help = redrive(&["peek", "--help"], &[]);
    assert!(help.stdout.contains("permanent-failure"), "{}", help.stdout);
}

#[test]
fn flags_default_from_the_environment_and_a_bad_value_names_the_variable() {
    // GIVEN help: the flags name the variables they default from
    let help = redrive(&["drain", "--help"], &[]);
    for var in [
        "env: DLQ_URL",
        "env: SOURCE_QUEUE_URL",
        "env: POISON_QUEUE_URL",
    ] {
        assert!(help.stdout.contains(var), "{var}:\n{}", help.stdout);
    }
    let help = redrive(&["circuit", "--help"], &[]);
    assert!(
        help.stdout.contains("env: CIRCUIT_TABLE"),
        "{}",
        help.stdout
    );
    let help = redrive(&["history", "--help"], &[]);
    assert!(
        help.stdout.contains("env: STATE_MACHINE_ARN"),
        "{}",
        help.stdout
    );
    // WHEN DLQ_URL holds something that is no queue (name, ARN or URL)
    let run = redrive(&["drain"], &[("DLQ_URL", "not a queue")]);
    // THEN it is a configuration error that names the variable
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(run.stderr.contains("DLQ_URL"), "{}", run.stderr);
}

#[test]
fn no_color_turns_off_the_colour_of_usage_errors_too() {
    // GIVEN colour forced
    let forced = redrive(&["repaly"], &[("CLICOLOR_FORCE", "1")]);
    assert_eq!(forced.code, 2);
    assert!(forced.stderr.contains('\x1b'), "{:?}", forced.stderr);
    // WHEN NO_COLOR is set as well
    let plain = redrive(&["repaly"], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    // THEN the error is plain text
    assert_eq!(plain.code, 2);
    assert!(!plain.stderr.contains('\x1b'), "{:?}", plain.stderr);
}

#[tokio::test]
async fn stats_reports_depth_policy_and_histograms_and_releases_its_sample() {
    // GIVEN a DLQ with three fresh messages, two at attempt 2, one stamped permanent, and one
    // delayed message
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    for i in 0..3 {
        send_raw(&sqs, &q.dlq_url, &format!("fresh-{i}"), &[]).await;
    }
    for i in 0..2 {
        let meta = RedriveMeta {
            attempt: 2,
            ..RedriveMeta::fresh(&format!("orig-{i}"))
        };
        send_with_meta(&sqs, &q.dlq_url, "again", &meta).await;
    }
    let stamped = rejected_on_the_way("orig-p");
    send_with_meta(&sqs, &q.dlq_url, "poison", &stamped).await;
    sqs.send_message()
        .queue_url(&q.dlq_url)
        .message_body("later")
        .delay_seconds(600)
        .send()
        .await
        .unwrap();

    // WHEN stats runs on it
    let run = redrive(&["stats", "--queue", &q.dlq_url, "--json"], &[]);

    // THEN it counts the queue, has no redrive policy (terminal), and histograms the sample
    assert_eq!(run.code, 0, "{}", run.stderr);
    let s = run.json();
    assert_eq!(s["visible"], 6);
    assert_eq!(s["delayed"], 1);
    assert_eq!(s["inFlight"], 0);
    assert_eq!(s["redrivePolicy"], Value::Null);
    assert_eq!(s["retentionSeconds"], 1_209_600);
    assert_eq!(s["sample"]["size"], 6);
    assert_eq!(s["sample"]["attempts"], json!({"0": 4, "2": 2}));
    assert_eq!(s["sample"]["reasons"], json!({"none": 6}));
    assert_eq!(s["sample"]["lastErrors"], json!({"permanent HTTP_400": 1}));
    // AND the sampled messages are visible again at once
    assert_eq!(visible(&sqs, &q.dlq_url).await, 6);

    // WHEN it runs on the source queue, as text
    send_raw(&sqs, &q.source_url, "x", &[]).await;
    let run = redrive(&["stats", "--queue", &q.source_url], &[]);
    // THEN it names the DLQ of the redrive policy and warns that its sample counts as a receive
    run.assert_stdout_has(0, &format!("to {} after 3 receives", q.dlq_name));
    assert!(run.stdout.contains("attempts"), "{}", run.stdout);
    assert!(run.stderr.contains("maxReceiveCount 3"), "{}", run.stderr);
    assert!(
        !run.stdout.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
}

#[tokio::test]
async fn peek_shows_history_without_consuming_and_bodies_only_on_request() {
    // GIVEN a poison queue with two parked messages
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let perm = permanent("orig-a", 2, "HTTP_400");
    let a = send_raw(
        &sqs,
        &q.poison_url,
        "{\"order\":\"a-secret-body\"}",
        &[
            (ATTRIBUTE_NAME, meta_attr(&perm)),
            ("tenant", attr_string("acme")),
            ("blob", attr_binary(&[1, 2, 3])),
        ],
    )
    .await;
    let maxed = out_of_attempts("orig-b");
    send_with_meta(&sqs, &q.poison_url, "b-body", &maxed).await;

    // WHEN peek shows them as JSON
    let run = on_poison(&q, "peek", &["-n", "5", "--json"]);

    // THEN each message's history is decoded, without its body
    assert_eq!(run.code, 0, "{}", run.stderr);
    let messages = run.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2);
    let by_id: HashMap<&str, &Value> = messages
        .iter()
        .map(|m| (m["originalMessageId"].as_str().unwrap(), m))
        .collect();
    let ma = by_id["orig-a"];
    assert_eq!(ma["messageId"], a.as_str());
    assert_eq!(ma["attempt"], 2);
    assert_eq!(ma["reason"], "permanent-failure");
    assert_eq!(ma["lastError"]["code"], "HTTP_400");
    assert_eq!(
        ma["attributes"]["tenant"],
        json!({"dataType":"String","value":"acme"})
    );
    assert_eq!(
        ma["attributes"]["blob"],
        json!({"dataType":"Binary","bytes":3})
    );
    assert!(ma["attributes"].get(ATTRIBUTE_NAME).is_none());
    assert!(ma["ageSeconds"].as_u64().is_some());
    assert!(ma["sizeBytes"].as_u64().unwrap() > 24);
    assert_eq!(by_id["orig-b"]["reason"], "max-attempts");
    assert!(!run.stdout.contains("secret"), "no body without --body");
    // AND nothing was consumed: both are visible again at once
    assert_eq!(visible(&sqs, &q.poison_url).await, 2);
    assert_eq!(queue_depth(&sqs, &q.poison_url).await, 2);

    // WHEN peek shows one with its body, cut, as text
    let run = on_poison(&q, "peek", &["-n", "2", "--body", "--body-chars", "12"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("2 shown"), "{}", run.stdout);
    assert!(
        run.stdout.contains("reason permanent-failure"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("permanent HTTP_400"), "{}", run.stdout);
    assert!(run.stdout.contains("{\"order\":\"a-…"), "{}", run.stdout);
    assert!(!run.stdout.contains("secret"), "cut at 12 characters");
    assert_eq!(visible(&sqs, &q.poison_url).await, 2);
}

#[tokio::test]
async fn output_is_one_setting_for_every_command_table_json_or_text() {
    // GIVEN a poison queue with two parked messages
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let a = send_with_meta(
        &sqs,
        &q.poison_url,
        "a-body",
        &permanent("orig-a", 2, "HTTP_400"),
    )
    .await;
    let b = send_with_meta(&sqs, &q.poison_url, "b-body", &out_of_attempts("orig-b")).await;
    let peek = ["peek", "--queue", q.poison_url.as_str(), "-n", "5"];
    let with = |flags: &[&str]| {
        let mut args: Vec<&str> = flags.to_vec();
        args.extend_from_slice(&peek);
        redrive(&args, &[])
    };

    // WHEN the same peek is printed as json, as text and as a table
    let json = with(&["--output", "json"]);
    let text = with(&["--output", "text"]);
    let table = with(&["--output", "table"]);

    // THEN --output json is --json's document
    assert_eq!(json.code, 0, "{}", json.stderr);
    let messages = json.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2);
    // AND --output text is that document as tab-separated lines: one MESSAGES line per
    // message, whose fields include its id, and the queue on the first line
    assert_eq!(text.code, 0, "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].split('\t').any(|f| f == q.poison_url),
        "{}",
        text.stdout
    );
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| l.starts_with("MESSAGES\t"))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{}", text.stdout);
    for id in [&a, &b] {
        assert_eq!(
            rows.iter().filter(|r| r.contains(&id.as_str())).count(),
            1,
            "{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.lines().any(|l| l.starts_with("LASTERROR\t")),
        "{}",
        text.stdout
    );
    assert!(
        !text.stdout.contains('{'),
        "no JSON in text: {}",
        text.stdout
    );
    // AND --output table is the default, for people
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("2 shown"), "{}", table.stdout);
    assert!(with(&[]).stdout.contains("2 shown"));

    // WHEN --json contradicts --output, or --output names no format
    let both = with(&["--json", "--output", "text"]);
    let bad = with(&["--output", "yaml"]);
    // THEN each is a usage error naming what was wrong, and nothing was received
    both.assert_stderr_has(2, "--json asks for --output json, not --output text");
    bad.assert_stderr_names(2, &["yaml", "table, json, text"]);
    assert_eq!(visible(&sqs, &q.poison_url).await, 2);
}

#[tokio::test]
async fn drain_redrives_and_isolates_like_the_lambda_with_flags_over_env() {
    // GIVEN a DLQ with two plain messages, one stamped permanent, one at the last attempt
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let other = QueueSet::create(&sqs, false, 3).await;
    let plain_a = send_raw(
        &sqs,
        &q.dlq_url,
        "plain-a",
        &[("tenant", attr_string("acme"))],
    )
    .await;
    send_raw(&sqs, &q.dlq_url, "plain-b", &[]).await;
    let perm = rejected_on_the_way("orig-p");
    send_with_meta(&sqs, &q.dlq_url, "perm", &perm).await;
    let last = RedriveMeta {
        attempt: 5,
        ..RedriveMeta::fresh("orig-l")
    };
    send_with_meta(&sqs, &q.dlq_url, "last", &last).await;
    // The environment names another queue set's DLQ, holding a message: the flags must win.
    send_raw(&sqs, &other.dlq_url, "not mine", &[]).await;
    let namespace = unique_name("ns");
    let env = [
        ("DLQ_URL", other.dlq_url.as_str()),
        ("SOURCE_QUEUE_URL", q.source_url.as_str()),
        ("POISON_QUEUE_URL", q.poison_url.as_str()),
        ("BACKOFF_BASE_SECONDS", "0"),
        ("METRIC_NAMESPACE", namespace.as_str()),
    ];

    // WHEN a dry run drains it
    let dry = redrive(&["drain", "--dlq", &q.dlq_url, "--dry-run", "--json"], &env);
    // THEN it plans without moving anything, and releases the messages
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert_eq!(
        dry.json(),
        json!({"received":4,"redriven":2,"isolated":2,"failed":0,"dryRun":true,"stoppedBecause":"queue-empty","dlqRemaining":4})
    );
    assert_eq!(visible(&sqs, &q.dlq_url).await, 4);
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 0);

    // WHEN it drains one message at most
    let one = redrive(
        &["drain", "--dlq", &q.dlq_url, "--max", "1", "--json"],
        &env,
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(one.json()["received"], 1);
    assert_eq!(one.json()["stoppedBecause"], "limit");

    // WHEN it drains the rest, as text
    let run = redrive(&["drain", "--dlq", &q.dlq_url, "--max", "50"], &env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("stopped because"), "{}", run.stdout);
    assert!(run.stdout.contains("queue-empty"), "{}", run.stdout);
    assert!(run.stdout.contains("left on the DLQ"), "{}", run.stdout);

    // THEN the plain ones went to the source with attempt 1, the others to poison with reasons
    assert_eq!(queue_depth(&sqs, &q.dlq_url).await, 0);
    let source = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&source), ["plain-a", "plain-b"]);
    for m in &source {
        assert_eq!(meta_of(m).attempt, 1);
    }
    let a = source.iter().find(|m| m.body() == Some("plain-a")).unwrap();
    assert_eq!(meta_of(a).original_message_id, plain_a);
    assert_eq!(
        a.message_attributes().unwrap()["tenant"].string_value(),
        Some("acme")
    );
    let poison = drain_all(&sqs, &q.poison_url).await;
    let reasons: BTreeMap<String, Option<IsolationReason>> = poison
        .iter()
        .map(|m| (m.body().unwrap().to_string(), meta_of(m).reason))
        .collect();
    assert_eq!(
        reasons,
        BTreeMap::from([
            ("last".to_string(), Some(IsolationReason::MaxAttempts)),
            ("perm".to_string(), Some(IsolationReason::PermanentFailure)),
        ])
    );
    // AND the other set's DLQ (named only by the environment) was not touched
    assert_eq!(visible(&sqs, &other.dlq_url).await, 1);
    assert_eq!(queue_depth(&sqs, &other.source_url).await, 0);

    // AND the metrics went to CloudWatch under the configured namespace
    let cw = moto().cloudwatch().await;
    let listed = cw
        .list_metrics()
        .namespace(&namespace)
        .send()
        .await
        .unwrap();
    let names: std::collections::BTreeSet<String> = listed
        .metrics()
        .iter()
        .filter_map(|m| m.metric_name().map(str::to_string))
        .collect();
    assert!(names.contains("SuccessfulRedrives"), "{names:?}");
}

#[tokio::test]
async fn drain_without_configuration_names_the_variable_and_touches_nothing() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    send_raw(&sqs, &q.dlq_url, "stays", &[]).await;
    // A DLQ and no poison queue (the source is optional: each message's own)
    let run = redrive(&["drain", "--dlq", &q.dlq_url], &[]);
    run.assert_stderr_names(2, &["POISON_QUEUE_URL", "--poison"]);
    assert_eq!(visible(&sqs, &q.dlq_url).await, 1);
}

#[tokio::test]
async fn replay_sends_back_with_manual_reason_and_deletes_only_what_was_sent() {
    // GIVEN three parked messages: a permanent failure, two that ran out of attempts
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let perm = permanent("orig-a", 2, "HTTP_400");
    send_raw(
        &sqs,
        &q.poison_url,
        "body-a",
        &[
            (ATTRIBUTE_NAME, meta_attr(&perm)),
            ("blob", attr_binary(&[0, 255, 7])),
        ],
    )
    .await;
    for name in ["b", "c"] {
        let maxed = out_of_attempts(&format!("orig-{name}"));
        send_with_meta(&sqs, &q.poison_url, &format!("body-{name}"), &maxed).await;
    }
    let replay = |extra: &[&str]| replay_to_source(&q, extra);

    // WHEN a dry run picks the permanent failure by its originalMessageId
    let dry = replay(&["--id", "orig-a", "--dry-run", "--json"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert_eq!(dry.json()["replayed"][0]["originalMessageId"], "orig-a");
    // THEN nothing moved and everything is visible again
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 0);
    assert_eq!(visible(&sqs, &q.poison_url).await, 3);

    // WHEN it is replayed for real
    let run = replay(&["--id", "orig-a", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["replayed"].as_array().unwrap().len(), 1);
    assert_eq!(report["failed"], json!([]));

    // THEN the copy on the source queue has the same body and attributes, attempt 0, no
    // lastError, reason manual, the same originalMessageId
    let source = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&source), ["body-a"]);
    let copy = &source[0];
    assert_eq!(
        copy.message_attributes().unwrap()["blob"]
            .binary_value()
            .map(|b| b.as_ref().to_vec()),
        Some(vec![0, 255, 7])
    );
    let meta = meta_of(copy);
    assert_eq!(meta.attempt, 0);
    assert_eq!(meta.last_error, None);
    assert_eq!(meta.reason, None);
    assert_eq!(meta.original_message_id, "orig-a");
    // AND only that one left the poison queue; the others are visible again
    assert_eq!(visible(&sqs, &q.poison_url).await, 2);
    assert_eq!(queue_depth(&sqs, &q.poison_url).await, 2);

    // WHEN the replayed copy fails again on its way and lands in the DLQ, the re-driver
    // redrives it instead of isolating it (its lastError is gone)
    send_with_meta(&sqs, &q.dlq_url, copy.body().unwrap(), &meta).await;
    let mut drain = q.drain_args();
    drain.push("--json");
    let drained = redrive(&drain, &[("BACKOFF_BASE_SECONDS", "0")]);
    assert_eq!(drained.json()["redriven"], 1, "{}", drained.stdout);
    assert_eq!(drained.json()["isolated"], 0);
    assert_eq!(meta_of(&drain_all(&sqs, &q.source_url).await[0]).attempt, 1);

    // WHEN one of the max-attempts messages is replayed in a batch of one
    let run = replay(&["--all", "--reason", "max-attempts", "--max", "1"]);
    run.assert_stdout_has(0, "replayed 1 message(s)");
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 1);
    assert_eq!(queue_depth(&sqs, &q.poison_url).await, 1);

    // WHEN an id that is not there is asked for
    let run = replay(&["--id", "no-such-id", "--json"]);
    // THEN it says so and exits 3, touching nothing
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert_eq!(run.json()["notFound"], json!(["no-such-id"]));
    assert_eq!(visible(&sqs, &q.poison_url).await, 1);
}

#[tokio::test]
async fn discard_refuses_without_yes_and_says_what_it_deleted() {
    // GIVEN three parked messages, one of them a permanent failure
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let perm = permanent("orig-p", 1, "HTTP_422");
    let p = send_with_meta(&sqs, &q.poison_url, "p", &perm).await;
    let mut others = Vec::new();
    for name in ["x", "y"] {
        let m = out_of_attempts(&format!("orig-{name}"));
        others.push(send_with_meta(&sqs, &q.poison_url, name, &m).await);
    }

    // WHEN discard runs without --yes
    let run = on_poison(&q, "discard", &["--all"]);
    // THEN it lists what it would delete, deletes nothing, and exits 2
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stdout.contains("would delete 3 message(s)"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    assert_eq!(visible(&sqs, &q.poison_url).await, 3);

    // WHEN the permanent failures are discarded
    let run = on_poison(
        &q,
        "discard",
        &["--all", "--reason", "permanent-failure", "--yes", "--json"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let deleted: Vec<&str> = report["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["messageId"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, [p.as_str()]);
    assert_eq!(report["deleted"][0]["lastError"]["code"], "HTTP_422");

    // WHEN one more is discarded by id, as text
    let run = on_poison(&q, "discard", &["--id", &others[0], "--yes"]);
    run.assert_stdout_has(0, "deleted 1 message(s)");
    assert!(run.stdout.contains(&others[0]), "{}", run.stdout);

    // THEN only the last one is left, visible
    assert_eq!(drained_bodies(&sqs, &q.poison_url).await, ["y"]);
}

#[tokio::test]
async fn aws_errors_exit_1_and_the_profile_supplies_the_region() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    send_raw(&sqs, &q.dlq_url, "m", &[]).await;
    let missing = q.dlq_url.replace(&q.dlq_name, "no-such-queue");
    let run = redrive(&["stats", "--queue", &missing], &[]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    // The AWS CLI's wording: the error code and the operation.
    assert!(
        run.stderr.contains("redrive: An error occurred (")
            && run
                .stderr
                .contains(") when calling the GetQueueAttributes operation: "),
        "{}",
        run.stderr
    );

    // A profile whose config names the region, and no region in the environment.
    let dir = redrive_tests::ScratchDir::new("aws-config");
    let config = dir.join("config");
    std::fs::write(&config, "[profile ops]\nregion = us-east-1\n").unwrap();
    let config = config.to_str().unwrap();
    let base = [
        ("AWS_CONFIG_FILE", config),
        ("AWS_REGION", ""),
        ("AWS_DEFAULT_REGION", ""),
    ];
    let run = redrive(
        &[
            "--profile",
            "ops",
            "stats",
            "--queue",
            &q.dlq_url,
            "--json",
            "--sample",
            "0",
        ],
        &base,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["visible"], 1);
    let run = redrive(
        &["--profile", "nobody", "stats", "--queue", &q.dlq_url],
        &base,
    );
    // A profile that does not exist is a configuration error that names it
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(
        run.stderr.trim_end(),
        "redrive: the config profile (nobody) could not be found"
    );
}

#[tokio::test]
async fn colour_is_forced_by_clicolor_force_and_no_color_wins() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let perm = permanent("orig-c", 1, "HTTP_400");
    send_with_meta(&sqs, &q.poison_url, "c", &perm).await;
    let args = ["peek", "--queue", q.poison_url.as_str()];

    let forced = redrive(&args, &[("CLICOLOR_FORCE", "1")]);
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert!(
        forced.stdout.contains("\x1b[33mpermanent-failure\x1b[0m"),
        "{:?}",
        forced.stdout
    );

    let plain = redrive(&args, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    plain.assert_stdout_has(0, "reason permanent-failure");
    assert!(!plain.stdout.contains('\x1b'), "{:?}", plain.stdout);
    // --json is never coloured
    let json = redrive(
        &["--json", "peek", "--queue", q.poison_url.as_str()],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(!json.stdout.contains('\x1b'));
    json.json();
}

fn dedup_of(m: &Message) -> String {
    m.attributes()
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageDeduplicationId)
        })
        .cloned()
        .unwrap_or_else(|| panic!("no MessageDeduplicationId on {m:?}"))
}

#[tokio::test]
async fn replay_to_fifo_derives_the_dedup_id_from_the_moved_message() {
    // GIVEN a FIFO set with a parked message of group customer-7
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, true, 3).await;
    let maxed = out_of_attempts("orig-f");
    let first_parked = send_fifo(
        &sqs,
        &q.poison_url,
        "fifo-body",
        "customer-7",
        "parked-1",
        &[(ATTRIBUTE_NAME, meta_attr(&maxed))],
    )
    .await;
    let replay = || replay_to_source(&q, &["--all", "--json"]);

    // WHEN it is replayed
    let run = replay();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let copies = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&copies), ["fifo-body"]);
    let first = dedup_of(&copies[0]);

    // AND the same chain comes back to the poison queue and is replayed again
    let back = send_fifo(
        &sqs,
        &q.poison_url,
        "fifo-body",
        "customer-7",
        "parked-2",
        &[(ATTRIBUTE_NAME, meta_attr(&maxed))],
    )
    .await;
    let run = replay();
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let copies = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&copies), ["fifo-body"]);
    let second = dedup_of(&copies[0]);

    // THEN each copy's dedup id is the shared rule's, from the parked message that was moved,
    // so the second replay of the chain is never deduplicated away
    assert_eq!(
        first,
        redrive_shared::decision::dedup_id(&first_parked, "manual")
    );
    assert_eq!(second, redrive_shared::decision::dedup_id(&back, "manual"));
    assert_ne!(first, second);
    assert_eq!(meta_of(&copies[0]).original_message_id, "orig-f");
    assert_eq!(
        copies[0]
            .attributes()
            .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
            .map(String::as_str),
        Some("customer-7")
    );
}

#[tokio::test]
async fn unstamped_replay_is_refused_without_allow_unstamped() {
    // GIVEN a poison queue with a message parked with 10 attributes and no x-redrive (an
    // attribute-limit isolation), and an ordinary parked message
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let full: Vec<(String, aws_sdk_sqs::types::MessageAttributeValue)> = (0..10)
        .map(|i| (format!("a{i}"), attr_string(&format!("v{i}"))))
        .collect();
    let full_refs: Vec<(&str, aws_sdk_sqs::types::MessageAttributeValue)> =
        full.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let unstamped = send_raw(&sqs, &q.poison_url, "no-room", &full_refs).await;
    let maxed = out_of_attempts("orig-s");
    send_with_meta(&sqs, &q.poison_url, "stamped", &maxed).await;
    let replay = |extra: &[&str]| replay_to_source(&q, &[&["--all"][..], extra].concat());

    // WHEN everything is replayed without --allow-unstamped
    let run = replay(&["--json"]);

    // THEN the stamped one went, the unstamped one is refused, left in place and listed, and
    // the exit code says not everything was done
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["replayed"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["refusedUnstamped"][0]["messageId"],
        unstamped.as_str()
    );
    assert_eq!(report["unstamped"], json!([]));
    assert_eq!(drained_bodies(&sqs, &q.source_url).await, ["stamped"]);
    assert_eq!(visible(&sqs, &q.poison_url).await, 1);

    // WHEN a text run says why
    let run = replay(&[]);
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert!(run.stdout.contains("--allow-unstamped"), "{}", run.stdout);

    // WHEN the operator allows it
    let run = replay(&["--allow-unstamped", "--json"]);

    // THEN it warns before sending, and the copy carries the attributes exactly as received
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("without x-redrive") && run.stderr.contains(&unstamped),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["unstamped"], json!([unstamped]));
    let copies = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&copies), ["no-room"]);
    let attrs = copies[0].message_attributes().unwrap();
    assert_eq!(attrs.len(), 10);
    assert!(!attrs.contains_key(ATTRIBUTE_NAME));
    assert_eq!(queue_depth(&sqs, &q.poison_url).await, 0);
}

#[tokio::test]
async fn a_replayed_copy_does_not_look_isolated_to_stats_and_reason_filters() {
    // GIVEN a permanent failure replayed to the source queue (whose maxReceiveCount leaves
    // room for the receives of the commands below)
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 10).await;
    let perm = permanent("orig-r", 2, "HTTP_400");
    send_with_meta(&sqs, &q.poison_url, "replay-me", &perm).await;
    let run = replay_to_source(&q, &["--all"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    // AND, beside it, a copy an older replay left with its old reason and isolatedAt, sent on
    // after it was isolated
    let older = RedriveMeta {
        attempt: 0,
        last_error: None,
        reason: Some(IsolationReason::Manual),
        last_redriven_at: Some("2026-11-22T09:00:00Z".into()),
        ..parked("orig-o", 5, IsolationReason::Manual, None)
    };
    send_with_meta(&sqs, &q.source_url, "older-copy", &older).await;

    // WHEN stats samples the source queue
    let run = redrive(&["stats", "--queue", &q.source_url, "--json"], &[]);

    // THEN neither copy counts as isolated
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["sample"]["reasons"], json!({"none": 2}));

    // AND no --reason filter picks them
    for reason in ["permanent-failure", "manual"] {
        let run = redrive(
            &[
                "discard",
                "--queue",
                &q.source_url,
                "--all",
                "--reason",
                reason,
                "--json",
            ],
            &[],
        );
        assert_eq!(run.json()["wouldDelete"], json!([]), "--reason {reason}");
    }
    // AND the replayed copy's stamp carries no isolation at all
    let copies = drain_all(&sqs, &q.source_url).await;
    let replayed = copies
        .iter()
        .find(|m| m.body() == Some("replay-me"))
        .unwrap();
    let meta = meta_of(replayed);
    assert_eq!((&meta.reason, &meta.isolated_at), (&None, &None));
}

#[tokio::test]
async fn a_replayed_copy_keeps_the_producers_aws_trace_header() {
    // GIVEN a parked message of a traced producer
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let header = producer_trace_header();
    let perm = permanent("orig-t", 2, "HTTP_400");
    send_traced(
        &sqs,
        &q.poison_url,
        "traced",
        &[(ATTRIBUTE_NAME, meta_attr(&perm))],
        &header,
    )
    .await;

    // WHEN it is replayed to the source queue
    let run = replay_to_source(&q, &["--all"]);

    // THEN the copy carries the producer's header, so its processing joins that trace
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let copies = drain_all(&sqs, &q.source_url).await;
    assert_eq!(bodies(&copies), ["traced"]);
    if batch_sends_keep_trace_headers() {
        assert_eq!(trace_header_of(&copies[0]), Some(header.as_str()));
    }
}

/// A FIFO poison queue whose group `g` starts with a message the filter does not select, then
/// `maxed` messages it does: the unselected head stays held while the walk runs, which locks
/// the rest of its group beyond the first receive.
async fn fifo_group_behind_an_unselected_head(sqs: &aws_sdk_sqs::Client, maxed: usize) -> QueueSet {
    let q = QueueSet::create(sqs, true, 3).await;
    let perm = permanent("orig-h", 1, "HTTP_400");
    send_fifo(
        sqs,
        &q.poison_url,
        "head",
        "g",
        "head",
        &[(ATTRIBUTE_NAME, meta_attr(&perm))],
    )
    .await;
    for i in 0..maxed {
        let m = out_of_attempts(&format!("orig-{i}"));
        send_fifo(
            sqs,
            &q.poison_url,
            &format!("m{i:02}"),
            "g",
            &format!("m{i}"),
            &[(ATTRIBUTE_NAME, meta_attr(&m))],
        )
        .await;
    }
    q
}

#[tokio::test]
async fn replay_all_reports_what_it_did_not_reach() {
    // GIVEN 22 max-attempts messages behind a permanent failure in one FIFO group
    let sqs = moto().sqs().await;
    let q = fifo_group_behind_an_unselected_head(&sqs, 22).await;
    let replay = |extra: &[&str]| {
        replay_to_source(
            &q,
            &[&["--all", "--reason", "max-attempts"][..], extra].concat(),
        )
    };

    // WHEN the max-attempts messages are replayed
    let run = replay(&["--json"]);

    // THEN it does not report success: the walk could not reach the messages behind the
    // held head, and it says how many it did not reach
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let replayed = report["replayed"].as_array().unwrap().len();
    assert_eq!(report["status"], "incomplete", "{report}");
    assert_eq!(report["notSelected"], 1);
    assert_eq!(report["notReached"], json!(22 - replayed));
    assert!(replayed < 22, "{report}");
    // AND what it did not replay is still parked
    assert_eq!(
        queue_depth(&sqs, &q.poison_url).await,
        (23 - replayed) as u64
    );

    // WHEN it runs again, as text, and still cannot reach the end
    let run = replay(&[]);
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert!(run.stdout.contains("incomplete"), "{}", run.stdout);
    assert!(run.stdout.contains("not reached"), "{}", run.stdout);
}

#[tokio::test]
async fn discard_all_reports_what_it_did_not_reach() {
    let sqs = moto().sqs().await;
    let q = fifo_group_behind_an_unselected_head(&sqs, 12).await;
    let run = on_poison(
        &q,
        "discard",
        &["--all", "--reason", "max-attempts", "--yes", "--json"],
    );
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let deleted = report["deleted"].as_array().unwrap().len();
    assert_eq!(report["status"], "incomplete", "{report}");
    assert_eq!(report["notReached"], json!(12 - deleted));
    assert_eq!(
        queue_depth(&sqs, &q.poison_url).await,
        (13 - deleted) as u64
    );

    // A walk that covers the whole queue is complete, and --max is a limit, not a failure.
    let q = QueueSet::create(&sqs, false, 3).await;
    for i in 0..3 {
        let m = out_of_attempts(&format!("orig-{i}"));
        send_with_meta(&sqs, &q.poison_url, "x", &m).await;
    }
    let run = on_poison(&q, "discard", &["--all", "--max", "1", "--yes", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["status"], "limit");
    assert_eq!(run.json()["notReached"], 0);
    let run = on_poison(&q, "discard", &["--all", "--yes", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["status"], "complete");
    assert_eq!(run.json()["deleted"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_stamp_too_large_for_the_destination_is_refused_too() {
    // GIVEN a source queue that accepts 1 KiB, and a parked message that fits it only without
    // x-redrive
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    sqs.set_queue_attributes()
        .queue_url(&q.source_url)
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap();
    let body = "x".repeat(1000);
    let big = send_raw(&sqs, &q.poison_url, &body, &[]).await;

    // WHEN it is replayed without --allow-unstamped
    let run = replay_to_source(&q, &["--all", "--json"]);

    // THEN it is refused, not sent to be keyed on a new MessageId
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json()["refusedUnstamped"][0]["messageId"], big.as_str());
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 0);
    assert_eq!(visible(&sqs, &q.poison_url).await, 1);
}

#[tokio::test]
async fn replay_without_to_never_sends_an_unknown_source_message_to_the_queue_it_claimed() {
    // GIVEN two messages parked unknown-source: one whose x-redrive still names the queue it
    // claimed as its `source`, one that carries the claim as `claimedSource`
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let mut claimed = parked("orig-claimed", 0, IsolationReason::UnknownSource, None);
    claimed.set_source(&q.source_arn);
    send_with_meta(&sqs, &q.poison_url, "claimed", &claimed).await;
    let mut clue = parked("orig-clue", 0, IsolationReason::UnknownSource, None);
    clue.extra
        .insert("claimedSource".into(), json!(q.source_arn));
    send_with_meta(&sqs, &q.poison_url, "clue", &clue).await;

    // WHEN everything is replayed with no --to
    let run = redrive(&["replay", "--from", &q.poison_url, "--all", "--json"], &[]);

    // THEN neither went to the queue it claimed: both stayed, listed with no source; exit 3
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["replayed"].as_array().unwrap().len(), 0, "{report}");
    let stray = report["noSource"].as_array().unwrap();
    assert_eq!(stray.len(), 2, "{report}");
    for s in stray {
        assert!(
            s["error"].as_str().unwrap().contains("unknown-source"),
            "{report}"
        );
    }
    assert!(drain_all(&sqs, &q.source_url).await.is_empty());
    assert_eq!(
        drained_bodies(&sqs, &q.poison_url).await,
        ["claimed", "clue"]
    );
}
