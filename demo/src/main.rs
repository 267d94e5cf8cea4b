//! `make demo`: the whole redrive story on this machine, end to end, as a system test.
//!
//! 1. A moto server; the production template `infra/templates/resources.yaml` deployed into its
//!    CloudFormation by `scripts/demo_stack.py` (which creates through the API what moto's
//!    CloudFormation skips: the alarms, the table's TTL).
//! 2. Both Lambdas under `cargo lambda watch`, configured by environment variables as on AWS
//!    (demo-sized backoffs). scripts/demo.sh builds them with this binary in one build, the
//!    one `make test` makes (see tests/src/lambda_watch.rs), so no dependency compiles twice.
//! 3. An incident: a producer sends orders; the downstream HTTP service goes down (503) for a
//!    while and rejects orders with a negative amount for good (400). The demo plays the Lambda
//!    SQS event source (ReportBatchItemFailures), CloudWatch's evaluation of the DLQ alarm (real
//!    alarm state via SetAlarmState, the SNS notification delivered to the re-driver) and the
//!    safety-net schedule, at its production default (every 5 minutes: it does not fire in the
//!    demo's few minutes, so every drain comes from an alarm notification that the re-driver's
//!    re-arm made possible). Like SQS, the event source sometimes delivers a batch twice.
//!    moto's SQS is not safe under concurrent calls on one queue (a ReceiveMessage racing
//!    another, or a delete, fails with a 500 and strands messages in flight), so the demo's
//!    pollers take turns to receive and delete, and the re-driver runs one invocation at a time
//!    with MAX_CONCURRENT_BATCHES=1; the consumer invocations themselves run concurrently.
//! 4. A report reconciled order by order: delivered exactly once (by Idempotency-Key and by the
//!    order id in the body), parked in the poison queue with a reason, or lost; the re-driver's
//!    CloudWatch metrics read back. Exit code 1 when an order was lost or delivered twice, or a
//!    number does not add up, or the re-driver never re-armed its alarm.
//!
//! `REDRIVE_DEMO_ENV="NAME=VALUE,..."` adds to (or overrides) the Lambdas' environment, e.g.
//! `IDEMPOTENCY_KEY=/customer` keys the consumer on the customer instead of the order: most
//! orders are then taken for duplicates, never delivered, and the demo fails with them lost.

mod alarm;
mod console;
mod event_source;
mod incident;
mod report;
mod stack;
mod workflow;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redrive_tests::event_source::SqsSource;
use redrive_tests::{Downstream, LambdaWatch, WatchOptions, moto};
use serde_json::Value;

use alarm::{alarm_evaluator, schedule};
use console::Console;
use incident::{outage, produce, warm_up};
use report::{report, settle};
use stack::{Stack, deploy_stack, lambda_env};
use workflow::workflow_path;

// The incident, demo-sized
const ORDERS: usize = 240;
/// Every this many orders one has a negative amount: the downstream rejects it for good.
const MALFORMED_EVERY: usize = 40;
/// Orders the producer sends per second.
const PRODUCE_PER_SECOND: usize = 40;
/// The downstream fails after this many deliveries (or this long after the first order)...
const HEALTHY_DELIVERIES: usize = 40;
const HEALTHY_AT_MOST: Duration = Duration::from_secs(4);
/// ...for this long.
const OUTAGE: Duration = Duration::from_secs(20);
/// The event source's concurrent pollers (ScalingConfig MaximumConcurrency).
const POLLERS: usize = 3;
/// Every this many batches with successes, the event source delivers the batch again.
const DUPLICATE_EVERY: u64 = 4;
/// CloudWatch evaluates the DLQ alarm every minute; the demo every 2 s.
const ALARM_PERIOD: Duration = Duration::from_secs(2);
/// The safety-net schedule at its production default, `rate(5 minutes)` (wiring.yaml): the
/// demo's drains must come from the alarm, re-armed by the re-driver.
const SCHEDULE: Duration = Duration::from_secs(300);
/// The whole incident must settle within this.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
const STACK: &str = "redrive-demo";

#[derive(Clone, Debug)]
struct Order {
    order_id: String,
    message_id: String,
    malformed: bool,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    invocations: AtomicU64,
    duplicate_deliveries: AtomicU64,
    duplicates_suppressed: AtomicU64,
    duplicates_not_suppressed: AtomicU64,
    delivered_after_redrive: AtomicU64,
    alarm_notifications: AtomicU64,
    rearms: AtomicU64,
    scheduled_runs: AtomicU64,
    errors: AtomicU64,
}

struct Demo {
    console: Console,
    sqs: aws_sdk_sqs::Client,
    cloudwatch: aws_sdk_cloudwatch::Client,
    stack: Stack,
    downstream: Downstream,
    watch: LambdaWatch,
    counters: Counters,
    redriver_runs: Mutex<Vec<(String, Value)>>,
    produced: AtomicU64,
    stop: AtomicBool,
    phase: Mutex<&'static str>,
    alarm: Mutex<&'static str>,
    /// The source queue, one ReceiveMessage or DeleteMessageBatch at a time (see above).
    source: SqsSource,
    /// One re-driver invocation at a time (see above).
    redriver_calls: tokio::sync::Mutex<()>,
}

impl Demo {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn set_phase(&self, phase: &'static str) {
        *self.phase.lock().unwrap() = phase;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let console = Console {
        tty: std::io::stdout().is_terminal(),
        start: Instant::now(),
        status: Mutex::new(String::new()),
    };
    console.event("redrive demo: an SQS dead-letter queue incident, end to end, on this machine");

    // Infrastructure
    let moto = moto();
    console.event(&format!(
        "moto server on {} (AWS_ENDPOINT_URL)",
        moto.endpoint()
    ));
    let stack = match deploy_stack(&console) {
        Ok(stack) => stack,
        Err(e) => {
            eprintln!("deploying the stack failed: {e}");
            return ExitCode::from(1);
        }
    };
    let sqs = moto.sqs().await;
    let cloudwatch = moto.cloudwatch().await;

    let downstream = Downstream::start().await;
    downstream.reject_bodies_containing("\"amount\":-", 400);
    console.event(&format!(
        "downstream order service on {} (healthy; rejects negative amounts with 400)",
        downstream.url()
    ));

    console.event("starting both Lambdas under cargo lambda watch");
    let watch = LambdaWatch::start_with(WatchOptions {
        bins: vec!["consumer".into(), "redriver".into()],
        env: lambda_env(&stack, &downstream),
        concurrency: POLLERS,
        invoke_timeout: Duration::from_secs(120),
        ..WatchOptions::default()
    })
    .await;
    let compiled = watch.compiled_dependencies().len();
    console.event(&format!(
        "cargo lambda watch on {}: functions consumer and redriver ({})",
        watch.endpoint(),
        if compiled == 0 {
            "built with the demo: no dependency compiled again".to_string()
        } else {
            format!("their build compiled {compiled} dependencies")
        }
    ));

    let source = SqsSource {
        one_call_at_a_time: Some(tokio::sync::Mutex::new(())),
        ..SqsSource::new(sqs.clone(), &stack.source_url)
    };
    let demo = Arc::new(Demo {
        console,
        sqs,
        cloudwatch,
        stack,
        downstream,
        watch,
        counters: Counters::default(),
        redriver_runs: Mutex::new(Vec::new()),
        produced: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        phase: Mutex::new("healthy"),
        alarm: Mutex::new("OK"),
        source,
        redriver_calls: tokio::sync::Mutex::new(()),
    });
    warm_up(&demo).await;
    demo.console.event(&format!(
        "demo-sized settings: maxReceiveCount 3; consumer retry 1 s, 2 s; re-driver backoff 3 s x2^n (equal jitter, at most 30 s), 5 attempts, 100 per invocation; DLQ alarm evaluated every {} s; safety-net schedule every {} s (the production default)",
        ALARM_PERIOD.as_secs(),
        SCHEDULE.as_secs()
    ));

    // The incident
    demo.console.event(&format!(
        "producer: sending {ORDERS} orders to {} ({} with a negative amount)",
        name_of(&demo.stack.source_url),
        ORDERS / MALFORMED_EVERY
    ));
    let incident_start = Instant::now();
    let metrics_from = now_epoch_secs() - 120;
    let mut tasks = Vec::new();
    for _ in 0..POLLERS {
        tasks.push(tokio::spawn(event_source::poller(demo.clone())));
    }
    tasks.push(tokio::spawn(alarm_evaluator(demo.clone())));
    tasks.push(tokio::spawn(schedule(demo.clone())));
    tasks.push(tokio::spawn(outage(demo.clone())));
    let (orders, settled) = tokio::join!(produce(&demo), settle(&demo));
    demo.stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = task.await;
    }
    demo.console.end_status();
    let incident = incident_start.elapsed();

    // The report
    let ok = report(&demo, &orders, settled, metrics_from).await;
    // The Step Functions path
    let ok = workflow_path(&demo.console).await && ok;
    let wall = demo.console.start.elapsed();
    println!(
        "wall time                     {:.1}s (incident {:.1}s)",
        wall.as_secs_f64(),
        incident.as_secs_f64()
    );
    println!();
    if ok {
        println!(
            "demo passed: every order delivered exactly once or parked with a reason; none lost"
        );
    } else {
        println!("demo FAILED: see the lines marked <-- above");
    }
    // Dropping the demo stops cargo lambda watch and its functions; moto ends with this process.
    drop(demo);
    ExitCode::from(if ok { 0 } else { 1 })
}

/// The first ten, and how many more.
fn first(ids: &[String]) -> String {
    let mut text = ids.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > 10 {
        text.push_str(&format!(" and {} more", ids.len() - 10));
    }
    text
}

fn name_of(url_or_arn: &str) -> &str {
    url_or_arn.rsplit(['/', ':']).next().unwrap_or(url_or_arn)
}

fn now_epoch_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Now, as RFC 3339 with milliseconds (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
fn rfc3339_now() -> String {
    aws_sdk_cloudwatch::primitives::DateTime::from(SystemTime::now())
        .fmt(aws_sdk_cloudwatch::primitives::DateTimeFormat::DateTime)
        .unwrap_or_default()
}
