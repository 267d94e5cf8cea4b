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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, StateValue, Statistic};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use redrive_tests::{
    Downstream, LambdaWatch, Mode, REGION, WatchOptions, fixture, moto, sqs_event, venv_bin,
    workspace_root,
};
use serde_json::{Value, json};

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

// Console
struct Console {
    tty: bool,
    start: Instant,
    status: Mutex<String>,
}

impl Console {
    fn elapsed(&self) -> String {
        format!("[{:>6.1}s]", self.start.elapsed().as_secs_f64())
    }

    /// One line of the story, above the live status line.
    fn event(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        if self.tty {
            let _ = write!(out, "\r\x1b[2K");
        }
        let _ = writeln!(out, "{} {text}", self.elapsed());
        if self.tty {
            let _ = write!(out, "{}", self.status.lock().unwrap());
        }
        let _ = out.flush();
    }

    /// The live status: redrawn in place on a terminal, printed now and then otherwise.
    fn status(&self, text: String, print_plain: bool) {
        let line = format!("{} {text}", self.elapsed());
        if self.tty {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K{line}");
            let _ = out.flush();
        } else if print_plain {
            println!("{line}");
        }
        *self.status.lock().unwrap() = line;
    }

    fn end_status(&self) {
        if self.tty {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }
}

// The world
struct Stack {
    source_url: String,
    source_arn: String,
    dlq_url: String,
    dlq_name: String,
    poison_url: String,
    table: String,
    trigger_alarm: String,
    trigger_topic: String,
    namespace: String,
    account: String,
    alarms: Vec<String>,
    api_created: Vec<String>,
}

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
    /// One ReceiveMessage or DeleteMessageBatch on the source queue at a time (see above).
    source_calls: tokio::sync::Mutex<()>,
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
        source_calls: tokio::sync::Mutex::new(()),
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
        tasks.push(tokio::spawn(event_source(demo.clone())));
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

fn deploy_stack(console: &Console) -> Result<Stack, String> {
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
fn lambda_env(stack: &Stack, downstream: &Downstream) -> Vec<(String, String)> {
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

/// Starts one instance of each function before the clock matters (a cold start runs
/// `cargo run`), with events that touch nothing.
async fn warm_up(demo: &Demo) {
    let empty = json!({"Records": []});
    if let Err(e) = demo.watch.invoke("consumer", &empty).await {
        demo.console.event(&format!("consumer warm-up: {e}"));
    }
    let other_queue = alarm_notification(demo, "OK", 0, "some-other-queue");
    match demo.watch.invoke("redriver", &other_queue).await {
        Ok(r) => demo.console.event(&format!(
            "both functions answer; an alarm about another queue is ignored by the re-driver (stoppedBecause {})",
            r["stoppedBecause"].as_str().unwrap_or("?")
        )),
        Err(e) => demo.console.event(&format!("re-driver warm-up: {e}")),
    }
}

// Producer
async fn produce(demo: &Demo) -> Vec<Order> {
    let mut orders = Vec::with_capacity(ORDERS);
    let pause = Duration::from_secs_f64(10.0 / PRODUCE_PER_SECOND as f64);
    for chunk_start in (0..ORDERS).step_by(10) {
        let mut entries = Vec::new();
        let mut batch = Vec::new();
        for i in chunk_start..(chunk_start + 10).min(ORDERS) {
            let order_id = format!("o-{:04}", i + 1);
            let malformed = (i + 1) % MALFORMED_EVERY == 0;
            let amount = if malformed {
                -1.0
            } else {
                10.0 + (i % 17) as f64 * 3.5
            };
            let body = json!({"orderId": order_id, "customer": format!("c-{}", i % 23), "amount": amount, "currency": "EUR"}).to_string();
            entries.push(
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_attributes("tenant", string_attr("String", "acme"))
                    .message_attributes("schemaVersion", string_attr("Number", "2"))
                    .message_attributes(
                        "traceparent",
                        MessageAttributeValue::builder()
                            .data_type("Binary")
                            .binary_value(aws_sdk_sqs::primitives::Blob::new(
                                (i as u64).to_be_bytes().to_vec(),
                            ))
                            .build()
                            .expect("data type is set"),
                    )
                    .build()
                    .expect("id and body are set"),
            );
            batch.push((i.to_string(), order_id, malformed));
        }
        let out = demo
            .sqs
            .send_message_batch()
            .queue_url(&demo.stack.source_url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("SendMessageBatch to the source queue");
        assert!(
            out.failed.is_empty(),
            "the producer's sends failed: {:?}",
            out.failed
        );
        let ids: HashMap<String, String> = out
            .successful
            .into_iter()
            .map(|s| (s.id, s.message_id))
            .collect();
        for (entry, order_id, malformed) in batch {
            orders.push(Order {
                order_id,
                message_id: ids[&entry].clone(),
                malformed,
            });
        }
        demo.produced.store(orders.len() as u64, Ordering::SeqCst);
        tokio::time::sleep(pause).await;
    }
    demo.console
        .event(&format!("producer: {} orders sent", orders.len()));
    orders
}

fn string_attr(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .expect("data type is set")
}

// The downstream's outage
async fn outage(demo: Arc<Demo>) {
    let started = Instant::now();
    while demo.downstream.total() < HEALTHY_DELIVERIES && started.elapsed() < HEALTHY_AT_MOST {
        if demo.stopped() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    demo.downstream.set_mode(Mode::Status(503));
    demo.set_phase("OUTAGE");
    demo.console.event(&format!(
        "downstream DOWN: 503 for every order for {}s (after {} deliveries)",
        OUTAGE.as_secs(),
        demo.downstream.total()
    ));
    tokio::time::sleep(OUTAGE).await;
    demo.downstream.set_mode(Mode::Healthy);
    demo.set_phase("recovery");
    demo.console.event("downstream RECOVERED: 200 again");
}

// The Lambda SQS event source
/// One poller of the event source mapping: receive up to 10, invoke the consumer with the
/// Lambda SQS event, delete what was not reported in batchItemFailures.
async fn event_source(demo: Arc<Demo>) {
    while !demo.stopped() {
        let turn = demo.source_calls.lock().await;
        let received = demo
            .sqs
            .receive_message()
            .queue_url(&demo.stack.source_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await;
        drop(turn);
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                demo.counters.errors.fetch_add(1, Ordering::SeqCst);
                demo.console
                    .event(&format!("event source: ReceiveMessage failed: {e:?}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let batch_no = demo.counters.batches.fetch_add(1, Ordering::SeqCst) + 1;
        let failed = match invoke_consumer(&demo, &messages).await {
            Some(failed) => failed,
            // A failed invocation: the batch comes back after its visibility timeout.
            None => continue,
        };
        let succeeded: Vec<&Message> = messages
            .iter()
            .filter(|m| !failed.contains(m.message_id().unwrap_or_default()))
            .collect();
        for m in &succeeded {
            if redrive_attempt(m) > 0 && !is_malformed(m) {
                demo.counters
                    .delivered_after_redrive
                    .fetch_add(1, Ordering::SeqCst);
            }
        }
        // Only records whose side effect happened: a duplicate of a permanent failure would
        // be fast-tracked to the DLQ a second time, harmless but confusing in a report.
        let delivered: Vec<&Message> = succeeded
            .iter()
            .copied()
            .filter(|m| demo.downstream.deliveries(&idempotency_key(m)) > 0)
            .collect();
        if !delivered.is_empty() && batch_no.is_multiple_of(DUPLICATE_EVERY) {
            deliver_again(&demo, &delivered).await;
        }
        delete_from_source(&demo, &succeeded).await;
    }
}

/// Invokes the consumer; returns the messageIds it reported failed, `None` if the invocation
/// itself failed.
async fn invoke_consumer(demo: &Demo, messages: &[Message]) -> Option<HashSet<String>> {
    let event = sqs_event(messages, &demo.stack.source_arn);
    demo.counters.invocations.fetch_add(1, Ordering::SeqCst);
    match demo.watch.invoke("consumer", &event).await {
        Ok(response) => Some(
            response["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                .collect(),
        ),
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console
                .event(&format!("event source: the consumer failed: {e}"));
            None
        }
    }
}

/// SQS is at-least-once: hand the consumer records it already processed, as a second
/// delivery would. Its idempotency record must answer them without a second side effect.
async fn deliver_again(demo: &Demo, succeeded: &[&Message]) {
    let copies: Vec<Message> = succeeded.iter().map(|m| (*m).clone()).collect();
    let before: Vec<usize> = copies
        .iter()
        .map(|m| demo.downstream.deliveries(&idempotency_key(m)))
        .collect();
    demo.counters
        .duplicate_deliveries
        .fetch_add(copies.len() as u64, Ordering::SeqCst);
    let Some(failed) = invoke_consumer(demo, &copies).await else {
        return;
    };
    for (m, before) in copies.iter().zip(before) {
        let after = demo.downstream.deliveries(&idempotency_key(m));
        let reported_ok = !failed.contains(m.message_id().unwrap_or_default());
        if reported_ok && after == before {
            demo.counters
                .duplicates_suppressed
                .fetch_add(1, Ordering::SeqCst);
        } else if after > before {
            demo.counters
                .duplicates_not_suppressed
                .fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn delete_from_source(demo: &Demo, messages: &[&Message]) {
    if messages.is_empty() {
        return;
    }
    let entries: Vec<DeleteMessageBatchRequestEntry> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .build()
                .expect("id and handle are set")
        })
        .collect();
    // Entries the consumer already deleted (fast-tracked to the DLQ) succeed here too, as
    // they do on SQS; anything else comes back after its visibility timeout.
    let _turn = demo.source_calls.lock().await;
    if let Err(e) = demo
        .sqs
        .delete_message_batch()
        .queue_url(&demo.stack.source_url)
        .set_entries(Some(entries))
        .send()
        .await
    {
        demo.counters.errors.fetch_add(1, Ordering::SeqCst);
        demo.console
            .event(&format!("event source: DeleteMessageBatch failed: {e:?}"));
    }
}

/// The `x-redrive` metadata of a message, if any.
fn redrive_meta(m: &Message) -> Option<Value> {
    let text = m.message_attributes()?.get("x-redrive")?.string_value()?;
    serde_json::from_str(text).ok()
}

fn redrive_attempt(m: &Message) -> u64 {
    redrive_meta(m)
        .and_then(|v| v["attempt"].as_u64())
        .unwrap_or(0)
}

/// What the consumer keys on by default: `originalMessageId`, else the MessageId.
fn idempotency_key(m: &Message) -> String {
    redrive_meta(m)
        .and_then(|v| v["originalMessageId"].as_str().map(str::to_string))
        .unwrap_or_else(|| m.message_id().unwrap_or_default().to_string())
}

fn is_malformed(m: &Message) -> bool {
    m.body().is_some_and(|b| b.contains("\"amount\":-"))
}

fn order_id_of(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get("orderId")?
        .as_str()
        .map(str::to_string)
}

// CloudWatch and the schedule
/// CloudWatch's evaluation of the trigger alarm (the DLQ's ApproximateNumberOfMessagesVisible
/// greater than 0): a transition to ALARM sets the alarm's real state and notifies the trigger
/// topic, whose subscriber is the re-driver. A notification happens only on a state change,
/// which is why the re-driver re-arms the alarm (sets it to OK) after every alarm-triggered
/// drain: inflow during or after the drain then fires it again.
async fn alarm_evaluator(demo: Arc<Demo>) {
    while !demo.stopped() {
        tokio::time::sleep(ALARM_PERIOD).await;
        let visible = match visible_depth(&demo.sqs, &demo.stack.dlq_url).await {
            Some(v) => v,
            None => continue,
        };
        let state = alarm_state(&demo).await;
        *demo.alarm.lock().unwrap() = if state == StateValue::Alarm {
            "ALARM"
        } else {
            "OK"
        };
        let alarm = &demo.stack.trigger_alarm;
        if visible > 0 && state != StateValue::Alarm {
            let reason = format!(
                "Threshold Crossed: 1 out of the last 1 datapoints [{visible}.0] was greater than the threshold (0.0)."
            );
            if set_alarm(&demo, StateValue::Alarm, &reason).await {
                *demo.alarm.lock().unwrap() = "ALARM";
                demo.counters
                    .alarm_notifications
                    .fetch_add(1, Ordering::SeqCst);
                demo.console.event(&format!(
                    "alarm {alarm}: {} -> ALARM ({visible} visible in the DLQ); SNS notifies the re-driver",
                    state.as_str()
                ));
                let event =
                    alarm_notification(&demo, state.as_str(), visible, &demo.stack.dlq_name);
                run_redriver(&demo, "alarm", &event).await;
            }
        } else if visible == 0 && state == StateValue::Alarm {
            let reason = "Threshold Crossed: 1 out of the last 1 datapoints [0.0] was not greater than the threshold (0.0).";
            if set_alarm(&demo, StateValue::Ok, reason).await {
                *demo.alarm.lock().unwrap() = "OK";
                demo.console
                    .event(&format!("alarm {alarm}: ALARM -> OK (the DLQ is empty)"));
            }
        }
    }
}

/// The safety net (wiring.yaml's schedule): a drain with the configured defaults, whatever the
/// alarm's state.
async fn schedule(demo: Arc<Demo>) {
    let mut next = tokio::time::Instant::now() + SCHEDULE;
    while !demo.stopped() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if tokio::time::Instant::now() < next {
            continue;
        }
        next += SCHEDULE;
        let visible = visible_depth(&demo.sqs, &demo.stack.dlq_url)
            .await
            .unwrap_or(0);
        if visible == 0 {
            continue;
        }
        demo.counters.scheduled_runs.fetch_add(1, Ordering::SeqCst);
        let mut event = fixture("eventbridge-scheduled.json");
        event["time"] = json!(rfc3339_now());
        let silent = if alarm_state(&demo).await == StateValue::Alarm {
            "; the alarm, still in ALARM, sends no new notification"
        } else {
            ""
        };
        demo.console.event(&format!(
            "schedule: the safety-net rule invokes the re-driver ({visible} visible in the DLQ{silent})"
        ));
        run_redriver(&demo, "schedule", &event).await;
    }
}

async fn run_redriver(demo: &Demo, trigger: &str, event: &Value) {
    let _one_at_a_time = demo.redriver_calls.lock().await;
    match demo.watch.invoke("redriver", event).await {
        Ok(summary) => {
            let stopped = summary["stoppedBecause"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            let mut line = format!(
                "re-driver ({trigger}): received {}, redriven {}, isolated {}, failed {}; stopped: {stopped}; {} left in the DLQ",
                summary["received"],
                summary["redriven"],
                summary["isolated"],
                summary["failed"],
                summary["dlqRemaining"]
            );
            // The evaluator set the alarm to ALARM before this invocation and waits for it:
            // an OK now is the re-driver's re-arm.
            if trigger == "alarm" && alarm_state(demo).await == StateValue::Ok {
                demo.counters.rearms.fetch_add(1, Ordering::SeqCst);
                *demo.alarm.lock().unwrap() = "OK";
                line.push_str("; it re-armed the alarm (OK) so that it fires again");
            }
            demo.console.event(&line);
            demo.redriver_runs
                .lock()
                .unwrap()
                .push((trigger.to_string(), summary));
        }
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console
                .event(&format!("re-driver ({trigger}) failed: {e}"));
        }
    }
}

async fn alarm_state(demo: &Demo) -> StateValue {
    demo.cloudwatch
        .describe_alarms()
        .alarm_names(&demo.stack.trigger_alarm)
        .send()
        .await
        .ok()
        .and_then(|out| out.metric_alarms?.into_iter().next()?.state_value)
        .unwrap_or(StateValue::InsufficientData)
}

async fn set_alarm(demo: &Demo, state: StateValue, reason: &str) -> bool {
    match demo
        .cloudwatch
        .set_alarm_state()
        .alarm_name(&demo.stack.trigger_alarm)
        .state_value(state)
        .state_reason(reason)
        .send()
        .await
    {
        Ok(_) => true,
        Err(e) => {
            demo.counters.errors.fetch_add(1, Ordering::SeqCst);
            demo.console.event(&format!("SetAlarmState failed: {e:?}"));
            false
        }
    }
}

/// The SNS event that delivers a CloudWatch alarm notification to a Lambda (the shape of
/// tests/fixtures/sns-cloudwatch-alarm.json), for this demo's alarm, topic and queue.
fn alarm_notification(demo: &Demo, old_state: &str, visible: u64, queue_name: &str) -> Value {
    let alarm = &demo.stack.trigger_alarm;
    let topic = &demo.stack.trigger_topic;
    let now = rfc3339_now();
    let mut event = fixture("sns-cloudwatch-alarm.json");
    let record = &mut event["Records"][0];
    let mut message: Value =
        serde_json::from_str(record["Sns"]["Message"].as_str().unwrap_or("{}"))
            .expect("the fixture's Message is JSON");
    message["AlarmName"] = json!(alarm);
    message["AlarmDescription"] = json!("redrive trigger: the DLQ holds messages.");
    message["AWSAccountId"] = json!(demo.stack.account);
    message["AlarmArn"] = json!(format!(
        "arn:aws:cloudwatch:{REGION}:{}:alarm:{alarm}",
        demo.stack.account
    ));
    message["NewStateValue"] = json!("ALARM");
    message["OldStateValue"] = json!(old_state);
    message["NewStateReason"] = json!(format!(
        "Threshold Crossed: 1 out of the last 1 datapoints [{visible}.0] was greater than the threshold (0.0)."
    ));
    message["StateChangeTime"] = json!(now);
    message["AlarmActions"] = json!([topic]);
    message["Trigger"]["Dimensions"] = json!([{"value": queue_name, "name": "QueueName"}]);
    let subscription = uuid::Uuid::new_v4();
    record["EventSubscriptionArn"] = json!(format!("{topic}:{subscription}"));
    record["Sns"]["TopicArn"] = json!(topic);
    record["Sns"]["MessageId"] = json!(uuid::Uuid::new_v4().to_string());
    record["Sns"]["Subject"] = json!(format!("ALARM: \"{alarm}\" in US East (N. Virginia)"));
    record["Sns"]["Message"] = json!(message.to_string());
    record["Sns"]["Timestamp"] = json!(now);
    event
}

// Settling and the report
async fn visible_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<u64> {
    Some(depths(sqs, url).await?.0)
}

/// (visible, in flight, delayed)
async fn depths(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<(u64, u64, u64)> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .ok()?;
    let attrs = out.attributes.unwrap_or_default();
    let get = |k: QueueAttributeName| attrs.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Some((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// Shows the live status until, after the outage and the last order, the source queue and the
/// DLQ have been empty (visible, in flight and delayed) for three checks in a row; false on
/// timeout.
async fn settle(demo: &Demo) -> bool {
    let started = Instant::now();
    let mut quiet = 0;
    let mut last_plain = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let source = depths(&demo.sqs, &demo.stack.source_url)
            .await
            .unwrap_or_default();
        let dlq = depths(&demo.sqs, &demo.stack.dlq_url)
            .await
            .unwrap_or_default();
        let poison = depths(&demo.sqs, &demo.stack.poison_url)
            .await
            .unwrap_or_default();
        let print_plain = last_plain.elapsed() >= Duration::from_secs(5);
        if print_plain {
            last_plain = Instant::now();
        }
        demo.console.status(
            format!(
                "{:<8} produced {:>3}  source {:>3} (in flight {:>2}, delayed {:>3})  DLQ {:>3} (alarm {:<5})  poison {:>2}  delivered {:>3}  requests {:>4}",
                *demo.phase.lock().unwrap(),
                demo.produced.load(Ordering::SeqCst),
                source.0 + source.1 + source.2,
                source.1,
                source.2,
                dlq.0 + dlq.1 + dlq.2,
                *demo.alarm.lock().unwrap(),
                poison.0 + poison.1 + poison.2,
                demo.downstream.keys().len(),
                demo.downstream.total_attempts(),
            ),
            print_plain,
        );
        let recovered = *demo.phase.lock().unwrap() == "recovery"
            && demo.produced.load(Ordering::SeqCst) == ORDERS as u64;
        let empty = source == (0, 0, 0) && dlq == (0, 0, 0);
        quiet = if recovered && empty { quiet + 1 } else { 0 };
        if quiet >= 3 {
            demo.console.end_status();
            demo.console
                .event("settled: the source queue and the DLQ are empty");
            return true;
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            demo.console.end_status();
            demo.console
                .event(&format!("NOT settled after {}s", SETTLE_TIMEOUT.as_secs()));
            return false;
        }
    }
}

/// Every message of a queue, received and not deleted (the demo ends right after).
async fn read_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<Message> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        let batch = out.messages.unwrap_or_default();
        if batch.is_empty() {
            return all;
        }
        for m in batch {
            if seen.insert(m.message_id().unwrap_or_default().to_string()) {
                all.push(m);
            }
        }
    }
}

async fn metric_sum(demo: &Demo, metric: &str, from_epoch: i64) -> Option<f64> {
    let out = demo
        .cloudwatch
        .get_metric_statistics()
        .namespace(&demo.stack.namespace)
        .metric_name(metric)
        .dimensions(
            Dimension::builder()
                .name("QueueName")
                .value(&demo.stack.dlq_name)
                .build(),
        )
        .start_time(DateTime::from_secs(from_epoch))
        .end_time(DateTime::from_secs(now_epoch_secs() + 120))
        .period(60)
        .statistics(Statistic::Sum)
        .send()
        .await
        .ok()?;
    Some(out.datapoints().iter().filter_map(|d| d.sum()).sum())
}

async fn report(demo: &Demo, orders: &[Order], settled: bool, metrics_from: i64) -> bool {
    let mut ok = settled;
    let mark = |good: bool| if good { "" } else { "   <--" };

    // What the downstream saw, by key and by the order id in the body.
    let requests = demo.downstream.requests();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut by_order: HashMap<String, usize> = HashMap::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for r in &requests {
        *statuses.entry(r.status).or_default() += 1;
        if r.is_success() {
            // The default key is `<originalMessageId>:<body digest>`: count by the chain id.
            if let Some(k) = &r.idempotency_key {
                let chain = k.split_once(':').map_or(k.as_str(), |(id, _)| id);
                *by_key.entry(chain.to_string()).or_default() += 1;
            }
            if let Some(o) = order_id_of(&r.body_text()) {
                *by_order.entry(o).or_default() += 1;
            }
        }
    }

    // What is parked in the poison queue, and why.
    let parked = read_all(&demo.sqs, &demo.stack.poison_url).await;
    let mut parked_orders: HashMap<String, (String, String)> = HashMap::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for m in &parked {
        let meta = redrive_meta(m).unwrap_or(Value::Null);
        let reason = meta["reason"].as_str().unwrap_or("(no reason)").to_string();
        let error = meta["lastError"]["code"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        *reasons.entry(format!("{reason} ({error})")).or_default() += 1;
        if let Some(o) = m.body().and_then(order_id_of) {
            parked_orders.insert(o, (reason, error));
        }
    }

    let mut once = 0;
    let mut twice = Vec::new();
    let mut lost = Vec::new();
    let mut wrongly_delivered = Vec::new();
    let mut parked_count = 0;
    for o in orders {
        let by_k = by_key.get(&o.message_id).copied().unwrap_or(0);
        let by_b = by_order.get(&o.order_id).copied().unwrap_or(0);
        let in_poison = parked_orders.contains_key(&o.order_id);
        if by_k > 1 || by_b > 1 {
            twice.push(o.order_id.clone());
        }
        if o.malformed && by_b > 0 {
            wrongly_delivered.push(o.order_id.clone());
        }
        let delivered = by_k.max(by_b);
        if delivered > 0 && in_poison {
            twice.push(format!("{} (delivered and parked)", o.order_id));
        }
        match (delivered, in_poison) {
            (0, false) => lost.push(o.order_id.clone()),
            (0, true) => parked_count += 1,
            _ if by_k == 1 && by_b == 1 && !in_poison => once += 1,
            _ => {}
        }
    }
    let malformed = orders.iter().filter(|o| o.malformed).count();
    let malformed_parked = orders
        .iter()
        .filter(|o| o.malformed)
        .filter(|o| {
            parked_orders
                .get(&o.order_id)
                .is_some_and(|(r, _)| r == "permanent-failure")
        })
        .count();

    let runs = demo.redriver_runs.lock().unwrap().clone();
    let sum = |k: &str| -> u64 { runs.iter().map(|(_, s)| s[k].as_u64().unwrap_or(0)).sum() };
    let (redriven, isolated, failed) = (sum("redriven"), sum("isolated"), sum("failed"));
    let mut stops: BTreeMap<String, usize> = BTreeMap::new();
    let mut triggers: BTreeMap<String, usize> = BTreeMap::new();
    for (trigger, s) in &runs {
        *stops
            .entry(s["stoppedBecause"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        *triggers.entry(trigger.clone()).or_default() += 1;
    }
    let c = &demo.counters;
    let load = |a: &AtomicU64| a.load(Ordering::SeqCst);

    println!();
    println!("==================== redrive demo report ====================");
    println!(
        "produced                      {} orders ({malformed} with a negative amount)",
        orders.len()
    );
    let all_accounted = once + parked_count == orders.len();
    println!(
        "delivered exactly once        {once}  (by Idempotency-Key and by orderId in the body; {} after a redrive){}",
        load(&c.delivered_after_redrive),
        mark(all_accounted)
    );
    ok &= all_accounted;
    println!(
        "delivered more than once      {}{}",
        twice.len(),
        mark(twice.is_empty())
    );
    if !twice.is_empty() {
        println!("                              {}", first(&twice));
    }
    ok &= twice.is_empty();
    let suppressed_ok = load(&c.duplicates_not_suppressed) == 0;
    println!(
        "duplicates suppressed         {} of {} duplicate deliveries, answered from the idempotency record without a side effect{}",
        load(&c.duplicates_suppressed),
        load(&c.duplicate_deliveries),
        mark(suppressed_ok)
    );
    ok &= suppressed_ok;
    let reason_text: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} x{n}")).collect();
    let poison_ok = malformed_parked == malformed && wrongly_delivered.is_empty();
    println!(
        "parked in poison              {}  {}{}",
        parked.len(),
        reason_text.join(", "),
        mark(poison_ok)
    );
    if !wrongly_delivered.is_empty() {
        println!(
            "                              delivered despite a negative amount: {}",
            first(&wrongly_delivered)
        );
    }
    ok &= poison_ok;
    println!(
        "lost                          {}{}",
        lost.len(),
        mark(lost.is_empty())
    );
    if !lost.is_empty() {
        println!("                              {}", first(&lost));
    }
    ok &= lost.is_empty();
    let status_text: Vec<String> = statuses.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    println!(
        "downstream requests           {}  ({})",
        requests.len(),
        status_text.join(", ")
    );
    println!(
        "consumer invocations          {} (event source batches {}, pollers {POLLERS})",
        load(&c.invocations),
        load(&c.batches)
    );
    let stop_text: Vec<String> = stops.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    let trigger_text: Vec<String> = triggers.iter().map(|(t, n)| format!("{t} x{n}")).collect();
    println!(
        "re-driver invocations         {}  ({}); redriven {redriven}, isolated {isolated}, failed {failed}; stopped: {}",
        runs.len(),
        trigger_text.join(", "),
        stop_text.join(", ")
    );
    // With the schedule at its production default, only the alarm drains the DLQ in the
    // demo's few minutes; it can notify again only because the re-driver re-arms it.
    let rearm_ok = load(&c.rearms) > 0;
    println!(
        "DLQ alarm                     notified the re-driver {} time(s); re-armed by the re-driver {} time(s){}",
        load(&c.alarm_notifications),
        load(&c.rearms),
        mark(rearm_ok)
    );
    ok &= rearm_ok;
    println!(
        "safety-net schedule           every {} s (production default): ran {} time(s)",
        SCHEDULE.as_secs(),
        load(&c.scheduled_runs)
    );

    // The re-driver's metrics, read back from CloudWatch.
    let mut metric_text = Vec::new();
    let mut metrics_ok = true;
    for (metric, expected) in [
        ("SuccessfulRedrives", redriven),
        ("PoisonPillsIsolated", isolated),
        ("RedriveFailures", failed),
    ] {
        let got = metric_sum(demo, metric, metrics_from).await;
        metrics_ok &= got == Some(expected as f64);
        metric_text.push(format!(
            "{metric} {}",
            got.map_or("unreadable".to_string(), |v| format!("{v}"))
        ));
    }
    let isolated_ok = isolated as usize == parked.len();
    println!(
        "CloudWatch metrics            {} (QueueName {}): {}{}",
        demo.stack.namespace,
        demo.stack.dlq_name,
        metric_text.join(", "),
        mark(metrics_ok && isolated_ok)
    );
    ok &= metrics_ok && isolated_ok;
    let errors = load(&c.errors);
    if errors > 0 {
        println!("errors along the way          {errors} (the event source and the alarm retried)");
    }
    if !settled {
        println!(
            "settled                       no: queues still held messages after {}s   <--",
            SETTLE_TIMEOUT.as_secs()
        );
    }
    ok
}

// Small helpers
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

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, now.
fn rfc3339_now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

// The Step Functions path
//

/// The orchestrator's path, short: a few failed orders on a DLQ drained by the shipped state
/// machine (`infra/statemachine/redrive.asl.json`, executed by moto; its tasks are the
/// `redrive-workflow` binary under cargo lambda watch), a backoff longer than the (scaled) SQS
/// cap held on the DLQ, a poison pill isolated, and the execution history as an operator
/// reads it. False when a message is lost or duplicated or the execution did not succeed.
async fn workflow_path(console: &Console) -> bool {
    use redrive_tests::{QueueSet, moto_sfn, sfn};
    println!();
    console.event(
        "the Step Functions path: the same engine run by the state machine infra/statemachine/redrive.asl.json",
    );
    let moto = moto_sfn();
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let mut env = moto.env();
    env.extend(queues.redriver_env());
    for (k, v) in [
        // 2 s of backoff where SQS's cap stands at 1 s (scaled from 900 s): 1 s is waited
        // with the message held on the DLQ, 1 s is the copy's DelaySeconds.
        ("BACKOFF_BASE_SECONDS", "2"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ("WORKFLOW_HOLD_SLACK_SECONDS", "2"),
        ("MAX_REDRIVE_ATTEMPTS", "5"),
        ("METRIC_NAMESPACE", "DLQRedriverWorkflowDemo"),
        ("REARM_ALARM", "false"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    let watch = LambdaWatch::start_with(WatchOptions {
        bins: vec!["redrive-workflow".into()],
        env,
        concurrency: 2,
        ..WatchOptions::default()
    })
    .await;
    let route = moto
        .route_lambda("redrive-workflow-tasks", &watch, "redrive-workflow")
        .await;
    let path = workspace_root().join("infra/statemachine/redrive.asl.json");
    let definition = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| sfn::substitute_definition(&text, &[("TaskFunctionArn", route.arn())]))
    {
        Ok(d) => d,
        Err(e) => {
            println!("{}: {e}  <--", path.display());
            return false;
        }
    };
    let client = moto.sfn().await;
    let machine = sfn::create_state_machine(&client, "redrive-demo", &definition).await;

    let orders = ["order o-901", "order o-902", "order o-903"];
    for body in orders {
        send_text(&sqs, &queues.dlq_url, body, None).await;
    }
    let last_attempt = json!({"v":1,"attempt":5,"originalMessageId":"o-904"}).to_string();
    send_text(&sqs, &queues.dlq_url, "order o-904", Some(&last_attempt)).await;
    console.event(&format!(
        "4 failed orders on {} (o-904 at its 5th and last attempt); StartExecution {{\"maxMessages\":10}}",
        name_of(&queues.dlq_url)
    ));
    let started = Instant::now();
    let execution = sfn::start_execution(&client, &machine, &json!({"maxMessages": 10})).await;
    let done = sfn::wait_for_execution(&client, &execution, Duration::from_secs(120)).await;
    let took = started.elapsed();
    let history = sfn::execution_history(&client, &execution).await;
    let status = done.status().as_str().to_string();
    console.event(&format!(
        "execution {}: {status} in {:.1}s, {} history events",
        name_of(&execution),
        took.as_secs_f64(),
        history.len()
    ));

    // The history an operator reads: the states in order (a Map's iterations side by side).
    println!("  the execution history (state entered, seconds after the start):");
    let t0 = history
        .first()
        .and_then(|e| e.timestamp().to_millis().ok())
        .unwrap_or(0);
    let mut line = String::new();
    let mut last: Option<(String, usize)> = None;
    let flush = |line: &mut String, last: &Option<(String, usize)>| {
        if let Some((name, n)) = last {
            let item = if *n > 1 {
                format!("{name} x{n}")
            } else {
                name.clone()
            };
            line.push_str(&item);
        }
    };
    for e in &history {
        let Some(d) = e.state_entered_event_details() else {
            continue;
        };
        let at = (e.timestamp().to_millis().unwrap_or(0) - t0) as f64 / 1000.0;
        match &mut last {
            Some((name, n)) if name == d.name() => *n += 1,
            _ => {
                flush(&mut line, &last);
                if !line.is_empty() {
                    println!("{line}");
                    line.clear();
                }
                line = format!("    +{at:>4.1}s  ");
                last = Some((d.name().to_string(), 1));
            }
        }
    }
    flush(&mut line, &last);
    if !line.is_empty() {
        println!("{line}");
    }

    // Each message's audit record (task output): what `redrive history ID` shows.
    println!("  each message's record in the history (`redrive history ID --state-machine ARN`):");
    let outcomes: Vec<Value> = sfn::task_outputs(&history)
        .into_iter()
        .filter(|o| o.get("outcome").is_some() && o.get("originalMessageId").is_some())
        .collect();
    for o in &outcomes {
        let n = |f: &str| o[f].as_u64().unwrap_or(0);
        let s = |f: &str| o[f].as_str().unwrap_or("?").to_string();
        let what = match s("outcome").as_str() {
            "redriven" => format!(
                "redriven as attempt {} -> {} (held on the DLQ {} s, then DelaySeconds {} s)",
                n("attempt"),
                name_of(&s("destination")),
                n("waitedSeconds"),
                n("delaySeconds")
            ),
            "isolated" => format!(
                "isolated at attempt {} ({}) -> {}",
                n("attempt"),
                s("reason"),
                name_of(&s("destination"))
            ),
            other => format!("{other}: {o}"),
        };
        println!("    {:<38} {what}", s("originalMessageId"));
    }

    // Reconcile: each order once on the source queue or the poison queue, none on the DLQ.
    tokio::time::sleep(Duration::from_secs(2)).await; // the copies' DelaySeconds
    let on_dlq = read_all(&sqs, &queues.dlq_url).await;
    let on_source = read_all(&sqs, &queues.source_url).await;
    let on_poison = read_all(&sqs, &queues.poison_url).await;
    let bodies = |ms: &[Message]| -> Vec<String> {
        let mut v: Vec<String> = ms
            .iter()
            .filter_map(|m| m.body().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    let ok = status == "SUCCEEDED"
        && on_dlq.is_empty()
        && bodies(&on_source) == ["order o-901", "order o-902", "order o-903"]
        && bodies(&on_poison) == ["order o-904"]
        && outcomes.len() == 4;
    println!(
        "  reconciled: source {} / poison {} / DLQ {}{}",
        on_source.len(),
        on_poison.len(),
        on_dlq.len(),
        if ok {
            ""
        } else {
            "  <-- expected 3 / 1 / 0, each order once"
        }
    );
    drop(route);
    drop(watch);
    ok
}

async fn send_text(sqs: &aws_sdk_sqs::Client, url: &str, body: &str, x_redrive: Option<&str>) {
    let mut request = sqs.send_message().queue_url(url).message_body(body);
    if let Some(meta) = x_redrive {
        request = request.message_attributes("x-redrive", string_attr("String", meta));
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage {url}: {e:?}"));
}
