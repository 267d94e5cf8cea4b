//! `make bench`: every figure against a baseline measured in the same run, printed as a
//! Markdown table and written to `target/bench/` (`latest.md`, `latest.json`, `bench-<time>.json`).
//!
//! ```text
//! bench [--only moto,localstack,fake,scale,sweep,cold,size,micro,cache] [--moto-messages 1000]
//!       [--localstack-messages 1000] [--localstack-poison 5] [--localstack-backoff-base 60]
//!       [--fake-messages 20000] [--latency-ms 20] [--pipelines 4] [--scale-drains 10]
//!       [--scale-cap 6000] [--cold-runs 10] [--lambda-dir target/lambda]
//!       [--arm64-dir target/lambda-arm64] [--criterion-dir target/criterion] [--out target/bench]
//! ```
//! The cold-start and package sections read the artefacts of `cargo lambda build --release`
//! (the Makefile builds them first); the micro section reads criterion's results of
//! `cargo bench -p redrive-shared --bench hot_paths`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use redrive_bench::bench::{
    DrainRun, ScaleOut, fake_baseline, fake_invocations, fake_ours, fake_scale_out, moto_baseline,
    moto_ours, on_modelled_clock, preload,
};
use redrive_bench::coldstart;
use redrive_bench::consumer_cache::{self, Workload};
use redrive_bench::downstream::{Flaky, FlakyServer};
use redrive_bench::move_task::{POLL_INTERVAL, side_by_side};
use redrive_bench::proxy::Proxy;
use redrive_bench::report::{Report, Row};
use redrive_tests::{QueueSet, create_idempotency_table};
use serde_json::{Value, json};

struct Options {
    only: Option<HashSet<String>>,
    moto_messages: u64,
    /// The side by side with StartMessageMoveTask on LocalStack: ordinary messages, poison
    /// messages, and the re-driver's BACKOFF_BASE_SECONDS.
    localstack_messages: u64,
    localstack_poison: u64,
    localstack_backoff_base: u64,
    fake_messages: u64,
    latency: Duration,
    pipelines: u32,
    /// K, the drains of the scale-out section (a Step Functions Map of K drain tasks).
    scale_drains: u32,
    /// The global MAX_MESSAGES_PER_SECOND the K drains split.
    scale_cap: u64,
    cold_runs: usize,
    lambda_dir: PathBuf,
    arm64_dir: PathBuf,
    criterion_dir: PathBuf,
    out: PathBuf,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let root = redrive_tests::workspace_root();
        let mut o = Options {
            only: None,
            moto_messages: 1000,
            localstack_messages: 1000,
            localstack_poison: 5,
            localstack_backoff_base: 60,
            fake_messages: 20_000,
            latency: Duration::from_millis(20),
            pipelines: 4,
            scale_drains: 10,
            scale_cap: 6_000,
            cold_runs: 10,
            lambda_dir: root.join("target/lambda"),
            arm64_dir: root.join("target/lambda-arm64"),
            criterion_dir: root.join("target/criterion"),
            out: root.join("target/bench"),
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .clone();
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{flag} takes a whole number, not {value:?}"))
            };
            match flag.as_str() {
                "--only" => o.only = Some(value.split(',').map(str::to_string).collect()),
                "--moto-messages" => o.moto_messages = number()?,
                "--localstack-messages" => o.localstack_messages = number()?,
                "--localstack-poison" => o.localstack_poison = number()?,
                "--localstack-backoff-base" => o.localstack_backoff_base = number()?,
                "--fake-messages" => o.fake_messages = number()?,
                "--latency-ms" => o.latency = Duration::from_millis(number()?),
                "--pipelines" => o.pipelines = number()? as u32,
                "--scale-drains" => o.scale_drains = number()?.max(1) as u32,
                "--scale-cap" => o.scale_cap = number()?,
                "--cold-runs" => o.cold_runs = number()? as usize,
                "--lambda-dir" => o.lambda_dir = PathBuf::from(value),
                "--arm64-dir" => o.arm64_dir = PathBuf::from(value),
                "--criterion-dir" => o.criterion_dir = PathBuf::from(value),
                "--out" => o.out = PathBuf::from(value),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(o)
    }

    fn wants(&self, section: &str) -> bool {
        self.only.as_ref().is_none_or(|s| s.contains(section))
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(redrive_tests::workspace_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn host() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

/// CPU seconds a process has used (user + system), from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), 1-based: utime is 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // USER_HZ is 100 on Linux.
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

fn calls_note(run: &DrainRun) -> String {
    calls_text(&run.calls)
}

async fn moto_section(o: &Options, report: &mut Report) {
    let ms = o.latency.as_millis();
    let n = o.moto_messages;
    let mut raw = Vec::new();
    // The target is judged on moto with its clock read through time.time() (the same SQS
    // behaviour without the emulator CPU that grows with every message in the queue, see
    // tests/moto_launcher.py); stock moto is measured right after and shown beside it.
    for (fast_clock, label) in [(true, "moto (fast clock)"), (false, "stock moto")] {
        let moto = if fast_clock {
            redrive_tests::moto_fast_clock()
        } else {
            redrive_tests::moto()
        };
        let direct = moto.sqs().await;
        let proxy = Proxy::start(redrive_bench::endpoint_addr(&moto.endpoint()), o.latency)
            .await
            .expect("starting the proxy");
        eprintln!("bench: {label}, {n} messages: ours...");
        let cpu0 = cpu_seconds(moto.pid());
        let ours = moto_ours(&direct, &proxy, n, o.pipelines).await;
        let cpu1 = cpu_seconds(moto.pid());
        eprintln!("bench: {label}, {n} messages: baseline...");
        let base = moto_baseline(&direct, &proxy, n).await;
        let cpu2 = cpu_seconds(moto.pid());
        let moto_cpu = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        };
        let (ours_cpu, base_cpu) = (moto_cpu(cpu0, cpu1), moto_cpu(cpu1, cpu2));
        let section = format!("Drain on {label} behind a {ms} ms/call proxy, {n} messages");
        let mut calls = Row::new(
            &section,
            "API calls per redriven message",
            ours.calls_per_message(),
            base.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "counted at the proxy: ours {}; baseline {}",
            calls_note(&ours),
            calls_note(&base)
        ));
        let mut speed = Row::new(
            &section,
            "Drain throughput",
            ours.per_second(),
            base.per_second(),
            "msg/s",
        )
        .speedup()
        .note(format!(
            "wall {:.1} s vs {:.1} s; moto's own CPU {:.1} s vs {:.1} s",
            ours.seconds, base.seconds, ours_cpu, base_cpu
        ));
        if fast_clock {
            calls = calls.target("ours ≤ 0.35", ours.calls_per_message() <= 0.35);
            let ratio = ours.per_second() / base.per_second();
            speed = speed.target("≥ 3× faster", ratio >= 3.0);
        }
        report.rows.push(calls);
        report.rows.push(speed);
        raw.push(
            json!({"moto": label, "messages": n, "ours": ours, "baseline": base,
            "moto_cpu_seconds": {"ours": ours_cpu, "baseline": base_cpu}}),
        );
    }
    report.notes.push(format!(
        "moto: both drains go through the same loopback proxy, which adds {ms} ms to every call \
         (the per-call latency AWS documents for SQS) and counts calls by X-Amz-Target. Both \
         drain until an empty receive (1 s long poll). Stock moto computes all of a queue's \
         attributes for every message it receives or sends, reading its clock (a 6 us datetime \
         subtraction) once per message in the queue each time: CPU in proportion to the \
         queue's depth, per message, the same for both drains, which bounds ours. 'Fast clock' \
         is moto with that clock read through time.time() (tests/moto_launcher.py \
         --fast-clock); SQS behaves the same (tests/tests/harness.rs checks delays, visibility \
         and the redrive policy on it)."
    ));
    merge_raw(report, "moto", Value::Array(raw));
}

/// Side by side with AWS's own redrive: StartMessageMoveTask and the re-driver move the same
/// DLQ on LocalStack, in one run (see `redrive_bench::move_task`).
async fn localstack_section(o: &Options, report: &mut Report) {
    let (n, poison, base) = (
        o.localstack_messages,
        o.localstack_poison,
        o.localstack_backoff_base,
    );
    let ms = o.latency.as_millis();
    let started = std::time::Instant::now();
    let ls = redrive_tests::localstack();
    let startup = started.elapsed().as_secs_f64();
    let direct = ls.sqs().await;
    let proxy = Proxy::start(redrive_bench::endpoint_addr(&ls.endpoint()), o.latency)
        .await
        .expect("starting the proxy");
    eprintln!(
        "bench: LocalStack ready in {startup:.1} s; StartMessageMoveTask and redrive, {n} + {poison} poison messages..."
    );
    let out = side_by_side(&direct, &proxy, n, poison, o.pipelines, base).await;
    let (ours, aws) = (&out.redrive, &out.move_task);
    let section = format!(
        "Side by side with AWS's own redrive (baseline: StartMessageMoveTask) on LocalStack behind a {ms} ms/call proxy, {n} messages + {poison} poison"
    );
    // Counts side by side: no ratio.
    let count = |figure: &str, ours: u64, aws: u64, note: String| {
        let mut row = Row::new(&section, figure, ours as f64, aws as f64, "").note(note);
        row.ratio = f64::NAN;
        row
    };
    report.rows.push(
        Row::new(&section, "Time to an empty DLQ", ours.seconds, aws.seconds, "s")
            .fraction()
            .note(format!(
                "the move task polled with ListMessageMoveTasks every {} ms; LocalStack moves it in memory, one message at a time, with no API call or network: a floor, not AWS's rate",
                POLL_INTERVAL.as_millis()
            )),
    );
    report.rows.push(
        count(
            "API calls by the caller",
            ours.total_calls(),
            aws.total_calls(),
            format!(
                "counted at the proxy: ours {}; move task {} (its own moves are not API calls the caller sees)",
                calls_text(&ours.calls),
                calls_text(&aws.calls)
            ),
        )
        .fraction(),
    );
    report.rows.push(count(
        "Copies carrying their redrive history (x-redrive: attempt 1, the chain's originalMessageId)",
        ours.with_history,
        aws.with_history,
        format!("of {} and {} copies on the source", ours.on_source, aws.on_source),
    ));
    report.rows.push(count(
        "Copies delayed on arrival (backoff)",
        ours.delayed,
        aws.delayed,
        format!(
            "ApproximateNumberOfMessagesDelayed as the DLQ emptied, {:.1} s in: a copy whose delay had already passed counts as visible; all visible after {:.0} s vs {:.0} s (BACKOFF_BASE_SECONDS {base}, full jitter)",
            ours.seconds, ours.visible_after_seconds, aws.visible_after_seconds
        ),
    ));
    report.rows.push(count(
        "Copies with both attributes byte for byte",
        ours.attributes_kept,
        aws.attributes_kept,
        String::new(),
    ));
    report.rows.push(count(
        "Poison messages isolated on the poison queue",
        ours.poison_isolated,
        aws.poison_isolated,
        format!(
            "sent back to the source, to fail again: {} vs {}",
            ours.poison_on_source, aws.poison_on_source
        ),
    ));
    report.rows.push(count(
        "Messages lost / repeated",
        ours.lost + ours.repeated,
        aws.lost + aws.repeated,
        format!(
            "ours lost {} repeated {}; move task lost {} repeated {}",
            ours.lost, ours.repeated, aws.lost, aws.repeated
        ),
    ));
    report.notes.push(format!(
        "side by side: LocalStack 2026.3.0 (localstack-core, tests/localstack_launcher.py, ready in {startup:.1} s), both legs on fresh queues seeded with the same {n} messages of about 300 bytes and two attributes plus {poison} poison messages (x-redrive at the last attempt, or a permanent lastError); StartMessageMoveTask from the DLQ to the source, the re-driver's engine with its defaults but BACKOFF_BASE_SECONDS {base}. Read back off the clock and uncounted."
    ));
    merge_raw(
        report,
        "localstack",
        serde_json::to_value(&out).unwrap_or_default(),
    );
}

fn calls_text(calls: &std::collections::BTreeMap<String, u64>) -> String {
    calls
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn merge_raw(report: &mut Report, key: &str, value: Value) {
    if !report.raw.is_object() {
        report.raw = json!({});
    }
    report.raw[key] = value;
}

fn fake_section(o: &Options, rt: &tokio::runtime::Runtime, report: &mut Report) {
    let n = o.fake_messages;
    let ms = o.latency.as_millis();
    eprintln!("bench: port fake, {n} messages, modelled clock...");
    let ours_model = on_modelled_clock(fake_ours(n, o.latency, o.pipelines));
    let base_model = on_modelled_clock(fake_baseline(n, o.latency));
    eprintln!("bench: port fake, {n} messages, ours on the wall clock...");
    let ours_wall = rt.block_on(fake_ours(n, o.latency, o.pipelines));
    let section = format!("Drain on the in-memory port fake, {ms} ms/call, {n} messages");
    let ratio = ours_wall.per_second() / base_model.per_second();
    report.rows.push(
        Row::new(
            &section,
            "Drain throughput",
            ours_wall.per_second(),
            base_model.per_second(),
            "msg/s",
        )
        .speedup()
        .target("≥ 20× faster", ratio >= 20.0)
        .note(format!(
            "ours on the wall clock ({:.1} s; {:.0} msg/s on the modelled clock); the baseline's {} sequential calls on the modelled clock ({:.0} s, which it would take to wait out)",
            ours_wall.seconds,
            ours_model.per_second(),
            base_model.total_calls(),
            base_model.seconds
        )),
    );
    report.rows.push(
        Row::new(
            &section,
            "API calls per redriven message",
            ours_wall.calls_per_message(),
            base_model.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "ours {}; baseline {}",
            calls_note(&ours_wall),
            calls_note(&base_model)
        )),
    );
    let per_invocation = on_modelled_clock(fake_invocations(1000, 100, o.pipelines));
    report.rows.push(
        Row::new(
            &section,
            "API calls per redriven message, as the Lambda runs (100 per invocation)",
            per_invocation.calls_per_message(),
            base_model.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "1,000 messages in invocations of MAX_MESSAGES_PER_INVOCATION=100: {}",
            calls_note(&per_invocation)
        )),
    );
    report.notes.push(format!(
        "port fake: redrive_engine::fake::FakeSqs::with_latency({ms} ms) adds the latency to every call \
         and costs nothing else, as SQS would; the baseline script runs over the same port (a \
         single send or delete is a batch call of one entry, one call of latency). The \
         modelled clock is tokio's paused clock: sleeps (the latency) advance it, CPU does not."
    ));
    merge_raw(
        report,
        "fake",
        json!({"ours_wall": ours_wall, "ours_modelled": ours_model, "baseline_modelled": base_model, "per_invocation": per_invocation}),
    );
}

/// Scale-out: K bounded drains of the same engine at once over one DLQ (what the
/// Step Functions Map of K drain tasks runs), each at the global velocity cap divided by K,
/// against one invocation at the whole cap, in the same run.
fn scale_section(o: &Options, rt: &tokio::runtime::Runtime, report: &mut Report) {
    let (n, k, cap) = (o.fake_messages, o.scale_drains, o.scale_cap as f64);
    let ms = o.latency.as_millis();
    eprintln!("bench: scale-out, {k} drains and 1, {n} messages, wall clock...");
    let many = rt.block_on(fake_scale_out(n, o.latency, o.pipelines, k, cap));
    let one = rt.block_on(fake_scale_out(n, o.latency, o.pipelines, 1, cap));
    let many_model = on_modelled_clock(fake_scale_out(n, o.latency, o.pipelines, k, cap));
    let one_model = on_modelled_clock(fake_scale_out(n, o.latency, o.pipelines, 1, cap));
    let lost: u64 = [&many, &one, &many_model, &one_model]
        .iter()
        .map(|r| r.lost)
        .sum();
    let section = format!(
        "Scale-out on the in-memory port fake, {ms} ms/call, {n} messages, MAX_MESSAGES_PER_SECOND {cap:.0} split over K = {k} drains"
    );
    let calls = many.run.calls_per_message();
    let met = many.run.per_second() >= 5_000.0 && calls <= 0.32 && lost == 0;
    report.rows.push(
        Row::new(
            &section,
            &format!("Aggregate drain throughput, {k} drains vs one invocation"),
            many.run.per_second(),
            one.run.per_second(),
            "msg/s",
        )
        .speedup()
        .target("≥ 5,000 msg/s at ≈ 0.30 calls/msg, lost 0", met)
        .note(format!(
            "wall clock: {k} drains of {p} pipelines at {:.0} msg/s each took {:.1} s ({}), one invocation {:.1} s; modelled clock {:.0} vs {:.0} msg/s; lost {lost}, repeated {}",
            many.per_drain_cap,
            many.run.seconds,
            scale_note(&many),
            one.run.seconds,
            many_model.run.per_second(),
            one_model.run.per_second(),
            many.repeated + one.repeated,
            p = o.pipelines,
        )),
    );
    report.rows.push(
        Row::new(
            &section,
            &format!("API calls per redriven message, {k} drains vs one invocation"),
            calls,
            one.run.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "{k} drains {}; one {}",
            calls_note(&many.run),
            calls_note(&one.run)
        )),
    );
    merge_raw(
        report,
        "scale",
        json!({"drains": many, "one": one, "drains_modelled": many_model, "one_modelled": one_model}),
    );
}

fn scale_note(run: &ScaleOut) -> String {
    let min = run.redriven.iter().min().copied().unwrap_or(0);
    let max = run.redriven.iter().max().copied().unwrap_or(0);
    format!(
        "{min}-{max} messages per drain, limit {}",
        run.per_drain_limit
    )
}

fn sweep_section(o: &Options, report: &mut Report) {
    let n = o.fake_messages;
    let base = on_modelled_clock(fake_baseline(n, o.latency));
    let mut table = format!(
        "MAX_CONCURRENT_BATCHES on the port fake ({} ms/call, {n} messages, modelled clock; baseline {:.1} msg/s):\n\n\
         | pipelines | msg/s | × baseline | API calls per message |\n|---:|---:|---:|---:|\n",
        o.latency.as_millis(),
        base.per_second()
    );
    let mut raw = Vec::new();
    for p in [1u32, 2, 4, 8, 16, 32] {
        eprintln!("bench: sweep, {p} pipelines...");
        let run = on_modelled_clock(fake_ours(n, o.latency, p));
        table.push_str(&format!(
            "| {p} | {:.0} | {:.1} | {:.3} |\n",
            run.per_second(),
            run.per_second() / base.per_second(),
            run.calls_per_message()
        ));
        raw.push(run);
    }
    report.extra.push(table);
    merge_raw(
        report,
        "sweep",
        serde_json::to_value(raw).unwrap_or_default(),
    );
}

fn bootstrap(dir: &Path, bin: &str) -> PathBuf {
    dir.join(bin).join("bootstrap")
}

async fn cold_section(o: &Options, report: &mut Report) {
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
    let aws = |extra: &[(&str, String)]| -> Vec<(String, String)> {
        let mut env = vec![("AWS_ENDPOINT_URL".to_string(), proxy.endpoint())];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        env
    };
    let runs = o.cold_runs;

    eprintln!("bench: cold start, hello_lambda...");
    let hello_cs = coldstart::measure("hello", &hello, &[], None, runs, |_| async {
        vec![json!({}), json!({})]
    })
    .await;

    eprintln!("bench: cold start, redriver...");
    let queues = QueueSet::create(&direct, false, 3).await;
    let redriver_env = aws(&[
        ("DLQ_URL", queues.dlq_url.clone()),
        ("SOURCE_QUEUE_URL", queues.source_url.clone()),
        ("POISON_QUEUE_URL", queues.poison_url.clone()),
        ("METRIC_NAMESPACE", "RedriveBench".into()),
        ("RUST_LOG", "info".into()),
    ]);
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
    let consumer_env = aws(&[
        ("IDEMPOTENCY_TABLE", table.clone()),
        ("DOWNSTREAM_URL", downstream.url()),
        ("DLQ_URL", queues.dlq_url.clone()),
        ("RUST_LOG", "info".into()),
    ]);
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

fn size_section(o: &Options, report: &mut Report) {
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

fn micro_section(o: &Options, report: &mut Report) {
    let estimate = |group: &str, bench: &str| -> Option<f64> {
        let path = o
            .criterion_dir
            .join(group)
            .join(bench)
            .join("new")
            .join("estimates.json");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        v.pointer("/mean/point_estimate")?.as_f64()
    };
    let section = "Micro-benchmarks of the shared crate (criterion, mean per call)";
    let mut raw = serde_json::Map::new();
    for (group, figure, baseline) in [
        (
            "decide",
            "decide one DLQ message",
            "copying its body and attributes",
        ),
        (
            "meta_parse",
            "read x-redrive (typed, validated)",
            "serde_json::Value parse",
        ),
        ("meta_write", "write x-redrive", "serde_json::Value write"),
        (
            "split_batches",
            "split 100 entries by count and bytes",
            "chunks(10)",
        ),
    ] {
        match (estimate(group, "redrive"), estimate(group, "baseline")) {
            (Some(ours), Some(base)) => {
                raw.insert(group.into(), json!({"ours_ns": ours, "baseline_ns": base}));
                report.rows.push(
                    Row::new(section, figure, ours, base, "ns")
                        .fraction()
                        .note(format!("baseline: {baseline}")),
                );
            }
            _ => report.notes.push(format!(
                "micro: no criterion results for {group} in {} (run `cargo bench -p redrive-shared --bench hot_paths`)",
                o.criterion_dir.display()
            )),
        }
    }
    merge_raw(report, "micro", Value::Object(raw));
}

/// The consumer's in-memory cache of completed keys: DynamoDB calls per record on a warm
/// instance whose batches carry duplicates, with the cache (ours) and without (baseline).
fn cache_section(rt: &tokio::runtime::Runtime, report: &mut Report) {
    let w = Workload::default();
    eprintln!(
        "bench: consumer cache, {} batches of {} with {:.0}% duplicates...",
        w.batches,
        w.batch_size,
        w.duplicate_share * 100.0
    );
    let seed = 0xcac4e;
    let without = rt.block_on(consumer_cache::run(w, 0, seed));
    let with = rt.block_on(consumer_cache::run(w, 1000, seed));
    let section = format!(
        "Consumer on a warm instance: {} batches of {}, {:.0}% duplicates of completed keys (in-memory fake store counting calls)",
        w.batches,
        w.batch_size,
        w.duplicate_share * 100.0
    );
    let calls = |r: &consumer_cache::CacheRun| {
        format!(
            "{} claims + {} COMPLETED writes + {} releases + {} reads for {} records, {} duplicates, {} side effects",
            r.claims, r.completes, r.releases, r.reads, r.records, r.duplicates, r.side_effects
        )
    };
    report.rows.push(
        Row::new(
            &section,
            "DynamoDB calls per record, IDEMPOTENCY_CACHE_SIZE=1000 vs 0",
            with.calls_per_record(),
            without.calls_per_record(),
            "",
        )
        .fraction()
        .note(format!(
            "with the cache: {}; without: {}",
            calls(&with),
            calls(&without)
        )),
    );
    let per_duplicate = |r: &consumer_cache::CacheRun| {
        r.claims.saturating_sub(r.completes) as f64 / r.duplicates as f64
    };
    report.rows.push(
        Row::new(
            &section,
            "DynamoDB calls per duplicate record, IDEMPOTENCY_CACHE_SIZE=1000 vs 0",
            per_duplicate(&with),
            per_duplicate(&without),
            "",
        )
        .fraction()
        .note(format!(
            "the duplicates repeat keys completed before them; {} keys another instance completed before the run are among them, and the first sighting of each costs a claim with the cache too",
            w.preloaded
        )),
    );
    merge_raw(
        report,
        "cache",
        json!({"workload": w, "with_cache": with, "without_cache": without}),
    );
}

fn main() -> ExitCode {
    let o = match Options::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    let mut report = Report {
        started_at: redrive_shared::timefmt::rfc3339_from_millis(now_ms),
        host: host(),
        commit: format!(
            "{}{}",
            git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into()),
            if dirty { "+changes" } else { "" }
        ),
        ..Report::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if o.wants("moto") {
        rt.block_on(moto_section(&o, &mut report));
    }
    if o.wants("localstack") {
        rt.block_on(localstack_section(&o, &mut report));
    }
    if o.wants("fake") {
        fake_section(&o, &rt, &mut report);
    }
    if o.wants("scale") {
        scale_section(&o, &rt, &mut report);
    }
    if o.wants("sweep") {
        sweep_section(&o, &mut report);
    }
    if o.wants("cold") {
        rt.block_on(cold_section(&o, &mut report));
    }
    if o.wants("size") {
        size_section(&o, &mut report);
    }
    if o.wants("micro") {
        micro_section(&o, &mut report);
    }
    if o.wants("cache") {
        cache_section(&rt, &mut report);
    }
    println!("{}", report.markdown());
    let stamp = report.started_at.replace([':', '-'], "");
    match report.write(&o.out, &stamp) {
        Ok(path) => eprintln!(
            "bench: written to {} (and latest.md / latest.json)",
            path.display()
        ),
        Err(e) => eprintln!(
            "bench: could not write the results to {}: {e}",
            o.out.display()
        ),
    }
    if !report.all_met() {
        eprintln!("bench: some targets were not met (see the Met column)");
    }
    ExitCode::SUCCESS
}
