//! Acting on a triage group against the emulator, under the stack's operator policy: a canary
//! replay that stops by itself while the consumer still fails and completes once it is fixed
//! (each message's side effect once), a replay killed part-way and resumed, a discard that
//! archives what it deletes and an import that restores it, and the alerts of each transition,
//! once each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
use redrive_tests::{QueueSet, moto, receive_raw, unique_name};
use serde_json::Value;

use crate::common::{
    Run, meta_of, redrive_command, run_redrive_as, run_redrive_granted, send_with_meta, visible,
};

/// The consumer's side effects: original message id -> times applied.
type Effects = Arc<Mutex<HashMap<String, u32>>>;

/// A consumer of the source queue, as the contract describes one: when `failing`, every
/// message fails permanently and goes to the DLQ with its `x-redrive` (original id kept) and
/// the cause recorded; otherwise its side effect is applied once per original message id
/// (the idempotency key), then it is deleted.
fn consumer(
    sqs: aws_sdk_sqs::Client,
    q: &QueueSet,
    failing: Arc<Mutex<bool>>,
    effects: Effects,
    received: Arc<Mutex<u32>>,
) -> tokio::task::JoinHandle<()> {
    let (source, dlq) = (q.source_url.clone(), q.dlq_url.clone());
    tokio::spawn(async move {
        loop {
            for m in receive_raw(&sqs, &source, 30).await {
                *received.lock().unwrap() += 1;
                let meta = meta_of(&m);
                if *failing.lock().unwrap() {
                    let failed = RedriveMeta {
                        last_error: Some(LastError::new(
                            ErrorClass::Permanent,
                            "SCHEMA_INVALID",
                            "order 99: field 'amount' expected number",
                            "2026-11-28T10:00:00Z".into(),
                        )),
                        ..meta
                    };
                    send_with_meta(&sqs, &dlq, m.body().unwrap(), &failed).await;
                } else {
                    let mut fx = effects.lock().unwrap();
                    let key = meta.original_message_id.clone();
                    // Idempotent: a second delivery of the same key applies nothing.
                    fx.entry(key).and_modify(|_| ()).or_insert(1);
                }
                sqs.delete_message()
                    .queue_url(&source)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A message of the permanent group, with its source recorded.
fn permanent(n: u64, source_arn: &str) -> RedriveMeta {
    let mut meta = RedriveMeta {
        last_error: Some(LastError::new(
            ErrorClass::Permanent,
            "SCHEMA_INVALID",
            &format!("order {n}: field 'amount' expected number"),
            "2026-11-28T09:00:00Z".into(),
        )),
        ..RedriveMeta::fresh(&format!("00000000-0000-4000-8000-{n:012}"))
    };
    meta.set_source(source_arn);
    meta
}

struct World {
    sqs: aws_sdk_sqs::Client,
    /// Moto's own SQS, where the alerts land.
    own: aws_sdk_sqs::Client,
    q: QueueSet,
    table: String,
    topic: String,
    alerts: String,
}

impl World {
    async fn new() -> Self {
        let sqs = moto().sqs().await;
        let q = QueueSet::create(&sqs, false, 3).await;
        let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
        // The alerts land on a queue subscribed to the topic, to be counted.
        let sns = aws_sdk_sns::Client::new(&moto().sdk_config().await);
        let topic = sns
            .create_topic()
            .name(unique_name("triage-alerts"))
            .send()
            .await
            .unwrap()
            .topic_arn
            .unwrap();
        // The topic is moto's (SNS is never on LocalStack here), so its queue is too.
        let own = aws_sdk_sqs::Client::new(&moto().own_sdk_config().await);
        let alerts = own
            .create_queue()
            .queue_name(unique_name("alerts"))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        let alerts_arn = format!(
            "arn:aws:sqs:us-east-1:123456789012:{}",
            alerts.rsplit('/').next().unwrap()
        );
        sns.subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(alerts_arn)
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .unwrap();
        Self {
            sqs,
            own,
            q,
            table,
            topic,
            alerts,
        }
    }

    /// `redrive` with the book's table and the alert topic (the stack's alerts topic), under the
    /// triage policy of the command; `bucket`: the operator's own archive bucket.
    fn redrive(&self, args: &[&str], bucket: Option<&str>) -> Run {
        let mut full: Vec<&str> = args.to_vec();
        full.extend([
            "--table",
            &self.table,
            "--alert-topic",
            &self.topic,
            "--operator",
            "oncall",
        ]);
        // Each command under the template's triage policy for what it does (read, act,
        // discard); a discard's archive is the operator's own bucket, granted by their identity.
        let extra: Vec<Value> = bucket
            .map(redrive_tests::iam::own_bucket_statement)
            .into_iter()
            .collect();
        run_redrive_granted(&full, &[], &extra)
    }

    /// `triage replay GROUP` on the DLQ with a verdict `window`, then the flags `extra`.
    fn replay(&self, group: &str, window: &str, extra: &[&str]) -> Run {
        let mut args = vec![
            "triage",
            "replay",
            group,
            &self.q.dlq_url,
            "--window",
            window,
        ];
        args.extend_from_slice(extra);
        self.redrive(&args, None)
    }

    /// The alerts published so far, as (kind, group).
    async fn alerts(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for m in redrive_tests::drain_all(&self.own, &self.alerts).await {
            let a: Value = serde_json::from_str(m.body().unwrap()).unwrap();
            out.push((
                a["kind"].as_str().unwrap().into(),
                a["group"].as_str().unwrap().into(),
            ));
        }
        out.sort();
        out
    }

    /// One triage pass recorded in the book; the id of its only group.
    fn triage(&self) -> (String, Value) {
        let run = self.redrive(&["triage", &self.q.dlq_url, "--json"], None);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let out = run.json();
        let groups = out["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{out:#}");
        (groups[0]["id"].as_str().unwrap().to_string(), out)
    }
    /// Three messages of one transient cause on the DLQ (the re-driver would redrive them),
    /// triaged and their group held for an hour, by the queue's URL; the group's id.
    async fn held_transient_group(&self) -> String {
        for n in 0..3 {
            let mut meta = RedriveMeta {
                attempt: 1,
                last_error: Some(LastError::new(
                    ErrorClass::Transient,
                    "HTTP_503",
                    &format!("order {n}: downstream said 503"),
                    "2026-11-28T09:00:00Z".into(),
                )),
                ..RedriveMeta::fresh(&format!("00000000-0000-4000-8000-{n:012}"))
            };
            meta.set_source(&self.q.source_arn);
            send_with_meta(&self.sqs, &self.q.dlq_url, "{}", &meta).await;
        }
        let (group, _) = self.triage();
        let hold = self.redrive(
            &["triage", "hold", &group, &self.q.dlq_url, "--for", "1h"],
            None,
        );
        assert_eq!(hold.code, 0, "{}", hold.stderr);
        group
    }
}

/// Waits until `done`, checking every tenth of a second, `tries` times at most.
async fn wait_for(tries: u32, done: impl Fn() -> bool) {
    for _ in 0..tries {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// Multi-threaded: the consumer runs while the test waits on the CLI's process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_replay_stops_while_the_consumer_fails_and_completes_once_it_is_fixed() {
    // GIVEN a DLQ of five messages of one permanent cause, and a consumer that still fails
    let w = World::new().await;
    for n in 0..5 {
        send_with_meta(
            &w.sqs,
            &w.q.dlq_url,
            "{\"amount\":\"12,50\"}",
            &permanent(n, &w.q.source_arn),
        )
        .await;
    }
    let failing = Arc::new(Mutex::new(true));
    let effects: Effects = Arc::default();
    let received = Arc::new(Mutex::new(0));
    let task = consumer(
        w.sqs.clone(),
        &w.q,
        failing.clone(),
        effects.clone(),
        received.clone(),
    );

    // WHEN triage records the DLQ twice
    let (group, out) = w.triage();
    assert_eq!(out["book"]["states"][&group], "new", "{out:#}");
    assert_eq!(out["book"]["trends"][&group], "new", "{out:#}");
    let (again, out) = w.triage();
    assert_eq!(again, group);
    // ... the second pass found the same five: no change against the first
    assert_eq!(out["book"]["trends"][&group], "=", "{out:#}");
    // THEN the new group alerted once, whatever the passes and the messages
    assert_eq!(
        w.alerts().await,
        vec![("new-group".to_string(), group.clone())]
    );

    // WHEN the group is replayed canary first while the consumer still fails
    let run = w.replay(&group, "3s", &["--json"]);
    // THEN the replay stops by itself after one message, and the group is replay-failed
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let out = run.json();
    assert_eq!(out["record"]["state"], "replay-failed", "{out:#}");
    assert_eq!(out["record"]["replay"]["sent"], 1);
    assert_eq!(out["record"]["replay"]["back"], 1);
    assert_eq!(
        *received.lock().unwrap(),
        1,
        "the consumer saw the canary only"
    );
    assert_eq!(
        visible(&w.sqs, &w.q.dlq_url).await,
        5,
        "four waiting, the canary back"
    );
    assert_eq!(
        w.alerts().await,
        vec![("canary-failed".to_string(), group.clone())]
    );

    // WHEN the consumer is fixed, triage lists the group again (the canary's copy with it)
    // and the replay runs again, killed once in its first verdict window
    *failing.lock().unwrap() = false;
    let (same, out) = w.triage();
    assert_eq!(same, group);
    assert_eq!(out["groups"][0]["count"], 5);
    let mut args: Vec<String> = [
        "triage",
        "replay",
        &group,
        &w.q.dlq_url,
        "--window",
        "30s",
        "--yes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--table", &w.table, "--operator", "oncall"].map(str::to_string));
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = redrive_command(&arg_refs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // In the window: the canary's stage ended (what it held released) and it was processed.
    let in_window = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stderr = child.stderr.take().unwrap();
    let flag = in_window.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("verdict in") {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    wait_for(300, || {
        in_window.load(std::sync::atomic::Ordering::SeqCst) && effects.lock().unwrap().len() == 1
    })
    .await;
    assert!(
        in_window.load(std::sync::atomic::Ordering::SeqCst),
        "the replay reached its window"
    );
    assert_eq!(effects.lock().unwrap().len(), 1, "the canary was processed");
    child.kill().unwrap();
    child.wait().unwrap();
    let history = w
        .redrive(&["triage", "history", &group, &w.q.dlq_url, "--json"], None)
        .json();
    assert_eq!(history["record"]["state"], "replaying", "{history:#}");

    // AND is run again: it resumes the same plan
    let run = w.replay(&group, "2s", &["--json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out = run.json();

    // THEN the group is resolved, the DLQ empty, and each of the five messages reached its
    // side effect exactly once: lost 0, duplicated 0
    assert_eq!(out["record"]["state"], "resolved", "{out:#}");
    wait_for(50, || effects.lock().unwrap().len() == 5).await;
    task.abort();
    let fx = effects.lock().unwrap().clone();
    assert_eq!(fx.len(), 5, "{fx:?}");
    assert!(fx.values().all(|n| *n == 1), "{fx:?}");
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 0);
    let actions: Vec<&str> = out["record"]["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.ends_with(&[
            "replay",
            "replay-stopped",
            "replay",
            "replay-resumed",
            "replay-finished"
        ]),
        "{actions:?}"
    );
    // AND no alert beyond the ones above
    assert_eq!(w.alerts().await, vec![]);
}

#[tokio::test]
async fn a_discard_archives_what_it_deletes_and_an_import_restores_the_group() {
    // GIVEN a DLQ of three messages of one cause, triaged into the book, and a note
    let w = World::new().await;
    let s3 = redrive_engine::s3::client(&moto().sdk_config().await);
    let bucket = unique_name("triage-archive")
        .to_lowercase()
        .replace('_', "-");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let mut originals = Vec::new();
    for n in 0..3 {
        let meta = permanent(n, &w.q.source_arn);
        originals.push(meta.original_message_id.clone());
        send_with_meta(&w.sqs, &w.q.dlq_url, "{\"amount\":\"n/a\"}", &meta).await;
    }
    let (group, _) = w.triage();
    let note = w.redrive(
        &[
            "triage",
            "note",
            &group,
            &w.q.dlq_url,
            "cannot be fixed: the orders were cancelled",
        ],
        None,
    );
    assert_eq!(note.code, 0, "{}", note.stderr);
    let ack = w.redrive(&["triage", "ack", &group, &w.q.dlq_url, "--json"], None);
    assert_eq!(ack.json()["record"]["state"], "acknowledged");

    // WHEN the group is discarded, dry run first
    let archive = format!("s3://{bucket}/discarded");
    let dry = w.redrive(
        &[
            "triage",
            "discard",
            &group,
            &w.q.dlq_url,
            "--archive",
            &archive,
            "--dry-run",
        ],
        Some(&bucket),
    );
    dry.assert_stderr_has(0, "would discard 3 of plan");
    assert_eq!(
        visible(&w.sqs, &w.q.dlq_url).await,
        3,
        "a dry run changes nothing"
    );
    let run = w.redrive(
        &[
            "triage",
            "discard",
            &group,
            &w.q.dlq_url,
            "--archive",
            &archive,
            "--json",
        ],
        Some(&bucket),
    );

    // THEN what was archived is exactly what was deleted, and the group is resolved
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out = run.json();
    assert_eq!(
        (out["archived"].clone(), out["deleted"].clone()),
        (3.into(), 3.into()),
        "{out:#}"
    );
    assert_eq!(out["record"]["state"], "resolved");
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 0);

    // WHEN the archive is imported back
    let import = run_redrive_granted(
        &["import", "--from", &archive, "--to", &w.q.dlq_url],
        &[],
        &[redrive_tests::iam::own_bucket_statement(&bucket)],
    );
    assert_eq!(import.code, 0, "{}\n{}", import.stdout, import.stderr);

    // THEN the group is back with its history (the same original ids), and triage finds the
    // same group id, now regressed, alerting once
    let mut back: Vec<String> = redrive_tests::drain_all(&w.sqs, &w.q.dlq_url)
        .await
        .iter()
        .map(|m| meta_of(m).original_message_id)
        .collect();
    back.sort();
    assert_eq!(back, originals);
    for n in 0..3 {
        send_with_meta(
            &w.sqs,
            &w.q.dlq_url,
            "{\"amount\":\"n/a\"}",
            &permanent(n, &w.q.source_arn),
        )
        .await;
    }
    let (again, out) = w.triage();
    assert_eq!(again, group);
    assert_eq!(out["book"]["states"][&group], "regressed", "{out:#}");
    assert_eq!(out["book"]["trends"][&group], "back", "{out:#}");
    assert_eq!(
        w.alerts().await,
        vec![
            ("new-group".to_string(), group.clone()),
            ("regressed".to_string(), group.clone())
        ]
    );
    let history = w
        .redrive(&["triage", "history", &group, &w.q.dlq_url, "--json"], None)
        .json();
    let notes = history["record"]["notes"].as_array().unwrap();
    assert_eq!(
        notes[0]["text"],
        "cannot be fixed: the orders were cancelled"
    );
    assert_eq!(notes[0]["who"], "oncall");
    let discard = history["record"]["audit"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "discard")
        .cloned()
        .unwrap();
    assert_eq!(discard["count"], 3);
    assert!(discard["planId"].is_string());
}

#[tokio::test]
async fn a_hold_is_recorded_with_its_end_and_bad_actions_are_refused_by_name() {
    let w = World::new().await;
    for n in 0..12 {
        send_with_meta(&w.sqs, &w.q.dlq_url, "{}", &permanent(n, &w.q.source_arn)).await;
    }
    let (group, pass) = w.triage();
    // A hold needs an end.
    let run = w.redrive(&["triage", "hold", &group, &w.q.dlq_url], None);
    run.assert_stderr_has(2, "a hold needs an end");
    let run = w.redrive(
        &[
            "triage",
            "hold",
            &group,
            &w.q.dlq_url,
            "--for",
            "2h",
            "--count",
            "5",
            "--json",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = run.json();
    assert_eq!(r["record"]["state"], "held");
    assert_eq!(r["record"]["hold"]["count"], 5);
    // The book keeps what the pass knew of the group: what the CloudWatch widget shows.
    let facts = &r["record"]["pass"];
    assert_eq!(facts["action"], pass["groups"][0]["action"], "{facts:#}");
    assert_eq!(facts["firstFailure"], pass["groups"][0]["firstFailure"]);
    assert_eq!(facts["failureTimes"].as_array().map(Vec::len), Some(12));
    assert_eq!(facts["failureTimesEvery"], 1);
    // An unknown group is refused, naming what to do.
    let run = w.redrive(
        &["triage", "ack", "g2-00000000000000aa", &w.q.dlq_url],
        None,
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("run `redrive triage`"),
        "{}",
        run.stderr
    );
    // Twelve messages need --yes: without it nothing moves.
    let run = w.replay(&group, "1s", &[]);
    run.assert_stderr_has(2, "pass --yes to act on 12 messages");
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 12);
    let run = w.redrive(&["triage", "release", &group, &w.q.dlq_url, "--json"], None);
    assert_eq!(run.json()["record"]["state"], "acknowledged");
    // A reader (the triage read policy) sees the history but cannot act: AccessDenied, and
    // the book is unchanged.
    let args = [
        "triage",
        "hold",
        &group,
        &w.q.dlq_url,
        "--for",
        "1h",
        "--table",
        &w.table,
    ];
    let denied = run_redrive_as("TriageReadPolicy", &args, &[], &[]);
    assert_eq!(denied.code, 1, "{}", denied.stderr);
    assert!(
        denied.stderr.contains("AccessDenied") || denied.stderr.contains("not authorized"),
        "{}",
        denied.stderr
    );
    let args = [
        "triage",
        "history",
        &group,
        &w.q.dlq_url,
        "--table",
        &w.table,
        "--json",
    ];
    let read = run_redrive_as("TriageReadPolicy", &args, &[], &[]);
    assert_eq!(read.json()["record"]["state"], "acknowledged");
    // Nor replay as a reader: nothing moves.
    let args = [
        "triage",
        "replay",
        &group,
        &w.q.dlq_url,
        "--window",
        "1s",
        "--yes",
        "--table",
        &w.table,
    ];
    let denied = run_redrive_as("TriageReadPolicy", &args, &[], &[]);
    assert_ne!(denied.code, 0, "{}", denied.stderr);
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 12);
}

#[tokio::test]
async fn a_fifo_replay_never_lets_a_group_overtake_another_cause_in_its_message_group() {
    // GIVEN a FIFO DLQ whose one message group holds a 429 first, then two schema errors
    let sqs = moto().sqs().await;
    let mut w = World::new().await;
    w.q = QueueSet::create(&sqs, true, 3).await;
    let cause = |n: u64, code: &str| {
        let mut meta = RedriveMeta {
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                code,
                &format!("order {n}: {code}"),
                "2026-11-28T09:00:00Z".into(),
            )),
            ..RedriveMeta::fresh(&format!("00000000-0000-4000-8000-{n:012}"))
        };
        meta.set_source(&w.q.source_arn);
        meta
    };
    for (n, code) in [
        (1, "RATE_LIMITED"),
        (2, "SCHEMA_INVALID"),
        (3, "SCHEMA_INVALID"),
    ] {
        send_with_meta(&sqs, &w.q.dlq_url, "{}", &cause(n, code)).await;
    }
    let run = w.redrive(&["triage", &w.q.dlq_url, "--json"], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let groups = run.json()["groups"].as_array().unwrap().clone();
    let id = |code: &str| {
        groups.iter().find(|g| g["code"] == code).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (schema, rate) = (id("SCHEMA_INVALID"), id("RATE_LIMITED"));

    // WHEN the schema errors are replayed first
    let run = w.replay(&schema, "1s", &[]);
    // THEN it is refused, naming the message group: they would overtake the 429
    run.assert_stderr_has(2, "message group(s) default");
    assert_eq!(visible(&sqs, &w.q.dlq_url).await, 3, "nothing moved");

    // WHEN the 429 goes first, the schema errors may follow, in their order
    let run = w.replay(&rate, "1s", &[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let run = w.replay(&schema, "1s", &[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let order: Vec<String> = redrive_tests::drain_all(&sqs, &w.q.source_url)
        .await
        .iter()
        .map(|m| meta_of(m).original_message_id)
        .collect();
    assert_eq!(
        order,
        (1..=3)
            .map(|n| format!("00000000-0000-4000-8000-{n:012}"))
            .collect::<Vec<_>>(),
        "the source received them in the DLQ's order"
    );
}

#[tokio::test]
async fn redrive_drain_leaves_a_held_group_on_the_dlq_as_the_lambda_does() {
    // GIVEN a DLQ of one transient cause (the re-driver would redrive it), its group held
    let w = World::new().await;
    let group = w.held_transient_group().await;

    // WHEN an operator drains by hand, the book's table named as a deployed stack names it
    let env = [
        ("DLQ_URL", w.q.dlq_url.as_str()),
        ("SOURCE_QUEUE_URL", w.q.source_url.as_str()),
        ("POISON_QUEUE_URL", w.q.poison_url.as_str()),
        ("BACKOFF_BASE_SECONDS", "0"),
        ("CIRCUIT_TABLE", w.table.as_str()),
    ];
    let run = run_redrive_granted(&["drain", "--json"], &env, &[]);

    // THEN the held group stays where it is, counted on hold
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(
        (out["redriven"].clone(), out["onHold"].clone()),
        (0.into(), 3.into()),
        "{out:#}"
    );
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 3);
    assert_eq!(redrive_tests::queue_depth(&w.sqs, &w.q.source_url).await, 0);

    // AND once released, the same drain redrives it
    let release = w.redrive(&["triage", "release", &group, &w.q.dlq_url], None);
    assert_eq!(release.code, 0, "{}", release.stderr);
    let run = run_redrive_granted(&["drain", "--json"], &env, &[]);
    assert_eq!(run.json()["redriven"], 3, "{}", run.stdout);
}

#[tokio::test]
async fn a_hold_set_with_the_queues_url_holds_whatever_form_names_the_queue() {
    // GIVEN a DLQ of one transient cause, its group held by the queue's URL as moto answers it
    let w = World::new().await;
    let group = w.held_transient_group().await;

    // WHEN the operator reads the group by the queue's name and by its ARN
    // THEN both find the hold: one book per queue
    for form in [w.q.dlq_name.as_str(), w.q.dlq_arn.as_str()] {
        // The reader's policy for this stack's queues, whichever form names them.
        let run = run_redrive_granted(
            &[
                "triage", "history", &group, form, "--json", "--table", &w.table,
            ],
            &[("DLQ_URL", w.q.dlq_url.as_str())],
            &[],
        );
        assert_eq!(run.code, 0, "{form}: {}", run.stderr);
        let out = run.json();
        assert_eq!(out["record"]["state"], "held", "{form}: {out:#}");
    }

    // WHEN a drain names the DLQ by its URL in AWS's host form (as a Lambda's DLQ_URL may), by
    // its name and by its ARN
    let aws_form = format!(
        "https://sqs.us-east-1.amazonaws.com/{}/{}",
        w.q.account(),
        w.q.dlq_name
    );
    assert_ne!(aws_form, w.q.dlq_url, "two host forms of one queue");
    for form in [
        aws_form.as_str(),
        w.q.dlq_name.as_str(),
        w.q.dlq_arn.as_str(),
    ] {
        let env = [
            ("SOURCE_QUEUE_URL", w.q.source_url.as_str()),
            ("POISON_QUEUE_URL", w.q.poison_url.as_str()),
            ("BACKOFF_BASE_SECONDS", "0"),
            ("CIRCUIT_TABLE", w.table.as_str()),
        ];
        let run = run_redrive_granted(&["drain", "--json", "--dlq", form], &env, &[]);

        // THEN each leaves the held group where it is, counted on hold
        assert_eq!(run.code, 0, "{form}: {}", run.stderr);
        let out = run.json();
        assert_eq!(
            (out["redriven"].clone(), out["onHold"].clone()),
            (0.into(), 3.into()),
            "{form}: {out:#}"
        );
    }
    assert_eq!(visible(&w.sqs, &w.q.dlq_url).await, 3, "lost 0");
    assert_eq!(redrive_tests::queue_depth(&w.sqs, &w.q.source_url).await, 0);

    // AND the table holds one book for the queue, under its ARN
    let ddb = moto().dynamodb().await;
    let keys: Vec<String> = ddb
        .scan()
        .table_name(&w.table)
        .send()
        .await
        .unwrap()
        .items()
        .iter()
        .filter_map(|i| i.get("queue").and_then(|v| v.as_s().ok()).cloned())
        .filter(|k| k.starts_with("triage#"))
        .collect();
    assert_eq!(keys, [format!("triage#{}", w.q.dlq_arn)]);
}
