//! The release Lambdas: cold starts against the minimal Runtime API, and package sizes.

use std::path::{Path, PathBuf};

use redrive_bench::bench::preload;
use redrive_bench::coldstart;
use redrive_bench::downstream::{Flaky, FlakyServer};
use redrive_bench::proxy::Proxy;
use redrive_bench::report::{Report, Row};
use redrive_tests::{QueueSet, create_idempotency_table};
use serde_json::{Value, json};

use crate::merge_raw;
use crate::options::Options;

pub(crate) fn bootstrap(dir: &Path, bin: &str) -> PathBuf {
    dir.join(bin).join("bootstrap")
}

pub(crate) async fn cold_section(o: &Options, report: &mut Report) {
    let hello = bootstrap(&o.lambda_dir, "hello_lambda");
    let redriver = bootstrap(&o.lambda_dir, "redriver");
    let consumer = bootstrap(&o.lambda_dir, "consumer");
    if ![&hello, &redriver, &consumer].iter().all(|p| p.exists()) {
        report.notes.push(format!(
            "cold start: not measured, the bootstraps are not in {} (run `cargo lambda build --release --x86-64 --bin redriver --bin consumer --bin hello_lambda`)",
            o.lambda_dir.display()
        ));
        return;
    }
    let moto = redrive_tests::moto();
    let direct = moto.sqs().await;
    let ddb = moto.dynamodb().await;
    let proxy = Proxy::start(redrive_bench::endpoint_addr(&moto.endpoint()), o.latency)
        .await
        .expect("starting the proxy");
    // A new connection costs a TCP and a TLS handshake before its first call.
    proxy.set_connect_latency(o.latency * 2);
    let runs = o.cold_runs;
    let queues = QueueSet::create(&direct, false, 3).await;
    // moto authorizes every call as AWS would: each function runs with the access key of its
    // shipped role for the bench's queues and table, and reaches moto through the proxy.
    let aws = |binary: &str, extra: &[(&str, String)]| -> Vec<(String, String)> {
        let mut env = moto.env();
        env.push(("SOURCE_QUEUE_URL".into(), queues.source_url.clone()));
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let mut env = redrive_tests::iam::env_for_binary(&env, binary);
        env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
        env.push(("AWS_ENDPOINT_URL".into(), proxy.endpoint()));
        env
    };

    eprintln!("bench: cold start, hello_lambda...");
    let hello_cs = coldstart::measure("hello", &hello, &[], None, runs, |_| async {
        vec![json!({}), json!({})]
    })
    .await;

    eprintln!("bench: cold start, redriver...");
    let redriver_env = aws(
        "redriver",
        &[
            ("DLQ_URL", queues.dlq_url.clone()),
            ("SOURCE_QUEUE_URL", queues.source_url.clone()),
            ("POISON_QUEUE_URL", queues.poison_url.clone()),
            ("METRIC_NAMESPACE", "RedriveBench".into()),
            ("RUST_LOG", "info".into()),
        ],
    );
    let redriver_cs = coldstart::measure(
        "redriver",
        &redriver,
        &redriver_env,
        Some(&proxy),
        runs,
        |_| {
            let direct = direct.clone();
            let dlq = queues.dlq_url.clone();
            async move {
                preload(&direct, &dlq, 20).await;
                vec![json!({"maxMessages": 10}), json!({"maxMessages": 10})]
            }
        },
    )
    .await;

    eprintln!("bench: cold start, consumer...");
    let table = create_idempotency_table(&ddb).await;
    let downstream = FlakyServer::start(Flaky::new(0.0, 1))
        .await
        .expect("starting the downstream");
    let consumer_env = aws(
        "consumer",
        &[
            ("IDEMPOTENCY_TABLE", table.clone()),
            ("DOWNSTREAM_URL", downstream.url()),
            ("DLQ_URL", queues.dlq_url.clone()),
            ("RUST_LOG", "info".into()),
        ],
    );
    let source_arn = queues.source_arn.clone();
    let consumer_cs = coldstart::measure("consumer", &consumer, &consumer_env, Some(&proxy), runs, |run| {
        let arn = source_arn.clone();
        async move {
            (0..2)
                .map(|i| {
                    json!({"Records": [{
                        "messageId": format!("cold-{run}-{i}-{}", std::process::id()),
                        "receiptHandle": format!("rh-{run}-{i}"),
                        "body": format!(r#"{{"orderId":"cold-{run}-{i}"}}"#),
                        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795255200000"},
                        "messageAttributes": {},
                        "eventSource": "aws:sqs",
                        "eventSourceARN": arn,
                        "awsRegion": "us-east-1"
                    }]})
                })
                .collect()
        }
    })
    .await;

    let section = format!(
        "Cold start ({runs} runs each, medians; baseline: a hello-world Rust Lambda built the same way)"
    );
    for cs in [&redriver_cs, &consumer_cs] {
        let name = &cs.function;
        report.rows.push(
            Row::new(
                &section,
                &format!("{name}: init, exec to first `next`"),
                cs.init(),
                hello_cs.init(),
                "ms",
            )
            .fraction()
            .note(format!(
                "published hello world: 13-18 ms init on Lambda; {:.1} ms of it waiting on the init-time warm-up call",
                cs.init_network()
            )),
        );
        report.rows.push(
            Row::new(
                &section,
                &format!("{name}: init less its network wait"),
                cs.init_local(),
                hello_cs.init(),
                "ms",
            )
            .fraction()
            .note("what the binary itself costs: loading, configuration, SDK clients"),
        );
        report.rows.push(
            Row::new(
                &section,
                &format!("{name}: peak memory (VmHWM) after two invocations"),
                cs.peak_mb(),
                hello_cs.peak_mb(),
                "MB",
            )
            .fraction()
            .note("published hello world: 15 MB"),
        );
        report.rows.push(
            Row::new(
                &section,
                &format!("{name}: first invocation; baseline column: its second"),
                cs.first_invocation(),
                cs.second_invocation(),
                "ms",
            )
            .fraction()
            .note(format!(
                "through the proxy: {} ms per call, {} ms more on a new connection",
                o.latency.as_millis(),
                (o.latency * 2).as_millis()
            )),
        );
        for f in &cs.failures {
            report.notes.push(format!("cold start {name}: {f}"));
        }
    }
    for f in &hello_cs.failures {
        report.notes.push(format!("cold start hello: {f}"));
    }
    report.notes.push(
        "cold start: each bootstrap (cargo lambda build --release, x86_64) is exec'd with the \
         environment Lambda sets for provided.al2023 against a minimal local Runtime API; init is \
         the time from exec to its first GET .../invocation/next. Local CPU is faster than \
         Lambda's 128 MB share, so compare the ratio to the hello world, not the absolute ms."
            .into(),
    );
    let _ = ddb.delete_table().table_name(&table).send().await;
    merge_raw(
        report,
        "cold_start",
        json!({"hello": hello_cs, "redriver": redriver_cs, "consumer": consumer_cs}),
    );
}

pub(crate) fn size_section(o: &Options, report: &mut Report) {
    let size = |dir: &Path, bin: &str| {
        std::fs::metadata(dir.join(bin).join("bootstrap.zip"))
            .ok()
            .map(|m| m.len() as f64 / 1024.0 / 1024.0)
    };
    let mut raw = serde_json::Map::new();
    for (arch, dir) in [("x86_64", &o.lambda_dir), ("arm64", &o.arm64_dir)] {
        let section = format!("Package size, {arch} zip (cargo lambda build --release)");
        let hello = size(dir, "hello_lambda");
        for bin in ["redriver", "consumer"] {
            match (size(dir, bin), hello) {
                (Some(ours), Some(hello)) => {
                    raw.insert(format!("{arch}/{bin}"), json!(ours));
                    report.rows.push(
                        Row::new(&section, bin, ours, hello, "MB")
                            .fraction()
                            .note("baseline: the hello-world zip"),
                    )
                }
                _ => report
                    .rows
                    .push(
                        Row::new(&section, bin, f64::NAN, f64::NAN, "MB").note(format!(
                            "not measurable here: no {}/{bin}/bootstrap.zip{}",
                            dir.display(),
                            if arch == "arm64" {
                                " (the aarch64 standard library is not installable on this machine)"
                            } else {
                                ""
                            }
                        )),
                    ),
            }
        }
        if let Some(h) = hello {
            raw.insert(format!("{arch}/hello_lambda"), json!(h));
        }
    }
    merge_raw(report, "package_mb", Value::Object(raw));
}
