//! The Step Functions orchestrator, executed: moto
//! runs the shipped definition `infra/statemachine/redrive.asl.json`, its `DefinitionSubstitutions`
//! applied (`redrive_tests::sfn::substitute_definition`), and every Task state runs the real
//! task binary `redrive-workflow` under `cargo lambda watch` (see `redrive_tests::sfn`).
//!
//! Delays run in real time, so each test scales time down with the task function's own
//! settings (`BACKOFF_BASE_SECONDS`, `WORKFLOW_MAX_DELAY_SECONDS` standing in for SQS's 900 s),
//! never a test-only code path.
//! Every test checks conservation: each message it put on the DLQ ends exactly once on the DLQ,
//! the source queue or the poison queue.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::types::StateValue;
use aws_sdk_sfn::operation::describe_execution::DescribeExecutionOutput;
use aws_sdk_sfn::types::{ExecutionStatus, HistoryEvent, HistoryEventType};
use aws_sdk_sqs::types::{Message, QueueAttributeName};
use redrive_engine::circuit::DynamoDbCircuitStore;
use redrive_shared::circuit::{CircuitSettings, Override};
use redrive_shared::meta::{ATTRIBUTE_NAME, RedriveMeta};
use redrive_tests::sfn::{self, LambdaRoute, TaskFault};
use redrive_tests::{
    LambdaWatch, QueueSet, WatchOptions, alarm_state, attr_string, create_circuit_table, drain_all,
    moto_sfn, put_queue_alarm, queue_attributes, send_fifo, send_raw, unique_name, workspace_root,
};
use serde_json::{Value, json};

/// The task binary every Task state of the definition runs.
const TASK_BINARY: &str = "redrive-workflow";
/// How long an execution may take before the test fails with its history.
const EXECUTION_TIMEOUT: Duration = Duration::from_secs(120);

/// The shipped definition, its substitutions applied as the deployment applies them.
fn definition(task_function_arn: &str) -> String {
    let path = workspace_root().join("infra/statemachine/redrive.asl.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    sfn::substitute_definition(&text, &[("TaskFunctionArn", task_function_arn)])
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Workflow {
    sqs: aws_sdk_sqs::Client,
    sfn: aws_sdk_sfn::Client,
    queues: QueueSet,
    machine: String,
    route: LambdaRoute,
    // Dropped last: stops the task function.
    _watch: LambdaWatch,
}

struct Finished {
    described: DescribeExecutionOutput,
    history: Vec<HistoryEvent>,
    took: Duration,
}

impl Finished {
    fn status(&self) -> &ExecutionStatus {
        self.described.status()
    }

    fn output(&self) -> Value {
        self.described
            .output()
            .map(|o| serde_json::from_str(o).expect("the output is JSON"))
            .unwrap_or(Value::Null)
    }

    /// Fails the test, with the history, unless the execution succeeded.
    fn assert_succeeded(&self) {
        assert_eq!(
            self.status(),
            &ExecutionStatus::Succeeded,
            "{}",
            self.lines()
        );
    }

    fn lines(&self) -> String {
        self.history
            .iter()
            .map(sfn::describe_event)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The per-message audit records: each `RedriveBatch` output's `records`.
    fn records(&self) -> Vec<Value> {
        sfn::task_outputs(&self.history)
            .into_iter()
            .filter_map(|o| o.get("records").and_then(Value::as_array).cloned())
            .flatten()
            .collect()
    }

    fn count(&self, kind: HistoryEventType) -> usize {
        self.history.iter().filter(|e| e.r#type() == &kind).count()
    }
}

impl Workflow {
    /// Queues, the task function under cargo lambda watch with `extra` settings on top of the
    /// test defaults, and a state machine of the shipped definition.
    async fn new(fifo: bool, extra: &[(&str, &str)]) -> Workflow {
        let moto = moto_sfn();
        let sqs = moto.sqs().await;
        let queues = QueueSet::create(&sqs, fifo, 3).await;
        let mut settings: BTreeMap<String, String> = queues.redriver_env().into_iter().collect();
        for (k, v) in [
            ("METRIC_NAMESPACE", unique_name("ns").as_str()),
            ("REARM_ALARM", "false"),
            ("BACKOFF_JITTER", "none"),
            ("BACKOFF_BASE_SECONDS", "0"),
        ] {
            settings.insert(k.to_string(), v.to_string());
        }
        for (k, v) in extra {
            settings.insert(k.to_string(), v.to_string());
        }
        let mut env = moto.env();
        env.extend(settings);
        let watch = LambdaWatch::start_with(WatchOptions {
            bins: vec![TASK_BINARY.to_string()],
            env,
            // Map items run side by side, as Lambda would run them.
            concurrency: 4,
            ..WatchOptions::default()
        })
        .await;
        let route = moto
            .route_lambda(&unique_name("redrive-tasks"), &watch, TASK_BINARY)
            .await;
        let sfn = moto.sfn().await;
        let machine = sfn::create_state_machine(&sfn, "redrive", &definition(route.arn())).await;
        Workflow {
            sqs,
            sfn,
            queues,
            machine,
            route,
            _watch: watch,
        }
    }

    async fn to_dlq(&self, body: &str) -> String {
        send_raw(&self.sqs, &self.queues.dlq_url, body, &[]).await
    }

    async fn to_dlq_at_attempt(&self, body: &str, original: &str, attempt: u32) -> String {
        let meta = RedriveMeta {
            attempt,
            ..RedriveMeta::fresh(original)
        };
        send_raw(
            &self.sqs,
            &self.queues.dlq_url,
            body,
            &[(ATTRIBUTE_NAME, attr_string(&meta.to_json()))],
        )
        .await
    }

    /// Runs the operator CLI against this moto with `--state-machine` of this test:
    /// (exit code, stdout, stderr).
    async fn history_cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let mut command = std::process::Command::new(redrive_tests::binary("redrive"));
        let mut all_args = args.to_vec();
        all_args.extend(["--state-machine", &self.machine]);
        command
            .args(&all_args)
            .env("NO_COLOR", "1")
            .envs(redrive_tests::iam::cli_env(&moto_sfn().env(), &all_args));
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .expect("running redrive");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn start(&self, input: Value) -> String {
        sfn::start_execution(&self.sfn, &self.machine, &input).await
    }

    async fn finish(&self, execution: &str, started: Instant) -> Finished {
        let described = sfn::wait_for_execution(&self.sfn, execution, EXECUTION_TIMEOUT).await;
        let took = started.elapsed();
        let history = sfn::execution_history(&self.sfn, execution).await;
        Finished {
            described,
            history,
            took,
        }
    }

    /// Returns once the execution has entered the state `name` `times` times.
    async fn until_entered(&self, execution: &str, name: &str, times: usize) {
        let started = Instant::now();
        loop {
            let history = sfn::execution_history(&self.sfn, execution).await;
            let entered = history
                .iter()
                .filter_map(|e| e.state_entered_event_details())
                .filter(|d| d.name() == name)
                .count();
            if entered >= times {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{name} was not entered {times} times"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The records of one message (by its `originalMessageId`) in an execution.
    fn records_of(done: &Finished, original: &str) -> Vec<Value> {
        done.records()
            .into_iter()
            .filter(|r| r["originalMessageId"] == json!(original))
            .collect()
    }

    async fn run(&self, input: Value) -> Finished {
        let started = Instant::now();
        let execution = self.start(input).await;
        self.finish(&execution, started).await
    }

    /// (visible, in flight, delayed) of a queue.
    async fn counts(&self, url: &str) -> (u64, u64, u64) {
        let a = queue_attributes(&self.sqs, url).await;
        let n = |name: QueueAttributeName| a.get(&name).map_or(0, |v| v.parse().unwrap());
        (
            n(QueueAttributeName::ApproximateNumberOfMessages),
            n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            n(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        )
    }

    /// Waits until nothing is in flight or delayed on the three queues, then takes every
    /// message off them: (DLQ, source, poison).
    async fn settle_and_take_all(
        &self,
        timeout: Duration,
    ) -> (Vec<Message>, Vec<Message>, Vec<Message>) {
        let started = Instant::now();
        for url in [
            &self.queues.dlq_url,
            &self.queues.source_url,
            &self.queues.poison_url,
        ] {
            loop {
                let (_, in_flight, delayed) = self.counts(url).await;
                if in_flight == 0 && delayed == 0 {
                    break;
                }
                assert!(
                    started.elapsed() < timeout,
                    "{url}: {in_flight} in flight, {delayed} delayed after {timeout:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        // The source queue's RedrivePolicy counts receives: drain_all receives each once.
        (
            drain_all(&self.sqs, &self.queues.dlq_url).await,
            drain_all(&self.sqs, &self.queues.source_url).await,
            drain_all(&self.sqs, &self.queues.poison_url).await,
        )
    }
}

fn body(m: &Message) -> &str {
    m.body().unwrap_or_default()
}

fn meta(m: &Message) -> RedriveMeta {
    let text = m
        .message_attributes()
        .and_then(|a| a.get(ATTRIBUTE_NAME))
        .and_then(|v| v.string_value())
        .unwrap_or_else(|| panic!("message {:?} has no {ATTRIBUTE_NAME}", m.message_id()));
    RedriveMeta::parse(text).unwrap()
}

/// Every body exactly once across the queues (lost 0, duplicated 0).
fn assert_each_once(expected: &[&str], places: &[&[Message]]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for place in places {
        for m in place.iter() {
            *seen.entry(body(m).to_string()).or_default() += 1;
        }
    }
    let mut want: HashMap<String, usize> = HashMap::new();
    for b in expected {
        *want.entry(b.to_string()).or_default() += 1;
    }
    let short = |m: &HashMap<String, usize>| -> BTreeMap<String, usize> {
        m.iter()
            .map(|(k, v)| (k.chars().take(40).collect(), *v))
            .collect()
    };
    assert_eq!(short(&seen), short(&want), "lost or duplicated messages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrives_with_backoff_and_records_each_message_in_the_history_through_a_long_wait() {
    // GIVEN backoff 1 s, doubling, where SQS's DelaySeconds cap stands at 1 s (scaled from
    // 900 s), and three messages: two fresh (1 s: a delayed copy), one at attempt 1 already
    // (2 s: longer than a copy's delay, so it waits on the DLQ)
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MULTIPLIER", "2"),
            ("BACKOFF_MAX_SECONDS", "43200"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ],
    )
    .await;
    let a = wf.to_dlq("order o-101").await;
    let b = wf.to_dlq("order o-102").await;
    wf.to_dlq_at_attempt("order o-103", "orig-103", 1).await;

    // WHEN an execution runs
    let done = wf.run(json!({})).await;

    // THEN it succeeded at once (no state waited), each message's record in its history
    done.assert_succeeded();
    assert_eq!(done.count(HistoryEventType::WaitStateEntered), 0);
    for original in [a.as_str(), b.as_str()] {
        let r = Workflow::records_of(&done, original);
        assert_eq!(r.len(), 1, "{r:#?}");
        assert_eq!(r[0]["outcome"], json!("redriven"), "{r:#?}");
        assert_eq!(r[0]["attempt"], json!(1));
        assert_eq!(r[0]["delaySeconds"], json!(1));
        assert_eq!(r[0]["destination"], json!(wf.queues.source_name));
    }
    let r = Workflow::records_of(&done, "orig-103");
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0]["outcome"], json!("waiting"), "{r:#?}");
    assert_eq!(r[0]["attempt"], json!(2));
    assert!(r[0]["notBefore"].is_string(), "{r:#?}");
    let output = done.output();
    assert_eq!(output["redriven"], json!(2), "{output:#}");

    // WHEN later executions run (as the alarm or the schedule would start them)
    let began = Instant::now();
    let mut later = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let next = wf.run(json!({})).await;
        next.assert_succeeded();
        let redriven = Workflow::records_of(&next, "orig-103")
            .iter()
            .any(|r| r["outcome"] == json!("redriven"));
        later.push(next);
        if redriven {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "never redriven");
    }

    // THEN o-103 went to its source once its wait was over, as attempt 2
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(30)).await;
    assert_each_once(&["order o-101", "order o-102", "order o-103"], &[&source]);
    assert!(dlq.is_empty() && poison.is_empty());
    for m in &source {
        let meta = meta(m);
        let expected = if body(m) == "order o-103" { 2 } else { 1 };
        assert_eq!(meta.attempt, expected, "{}", body(m));
        assert!(!meta.extra.contains_key("notBefore"));
    }

    // AND `redrive history` tells its story across the executions, through the wait
    let run = wf.history_cli(&["history", "orig-103"]).await;
    assert_eq!(run.0, Some(0), "{run:?}");
    let text = &run.1;
    assert!(text.contains("redriven as attempt 2"), "{text}");
    assert!(text.contains("waiting"), "{text}");
    assert!(
        !text.contains("order o-10"),
        "no body in the history: {text}"
    );
    let run = wf.history_cli(&["history", "orig-103", "--json"]).await;
    assert_eq!(run.0, Some(0), "{run:?}");
    let doc: Value = serde_json::from_str(&run.1).unwrap();
    let kinds: Vec<String> = doc["executions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|x| x["records"].as_array().unwrap().clone())
        .map(|r| r["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("waiting"),
        "{doc:#}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("redriven"),
        "{doc:#}"
    );
    // an unknown message: exit 3, said plainly
    let run = wf.history_cli(&["history", "o-404"]).await;
    assert_eq!(run.0, Some(3), "{run:?}");
    assert!(run.1.contains("no record of o-404"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_blocks_nothing_a_message_arriving_two_seconds_later_is_redriven_first() {
    // GIVEN a message whose next backoff is 20 s (attempt 2: 1 s x 20) where SQS's DelaySeconds
    // cap stands at 5 s, and a new message arriving 2 s after the first execution started
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MULTIPLIER", "20"),
            ("BACKOFF_MAX_SECONDS", "43200"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "5"),
        ],
    )
    .await;
    wf.to_dlq_at_attempt("order o-201", "orig-201", 1).await;
    let started = Instant::now();
    let first = wf.run(json!({})).await;
    first.assert_succeeded();
    assert_eq!(
        Workflow::records_of(&first, "orig-201")[0]["outcome"],
        json!("waiting")
    );
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    wf.to_dlq("order o-202").await;

    // WHEN executions run as triggers start them, until both are on the source queue
    let mut new_redriven_at = None;
    let mut slow_redriven_at = None;
    while slow_redriven_at.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never redriven"
        );
        let done = wf.run(json!({})).await;
        done.assert_succeeded();
        for r in done.records() {
            if r["outcome"] == json!("redriven") {
                let at = Some(started.elapsed());
                if r["originalMessageId"] == json!("orig-201") {
                    slow_redriven_at = at;
                } else {
                    new_redriven_at = new_redriven_at.or(at);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // THEN the new one was redriven long before the wait ended, the waiting one not before
    let new_at = new_redriven_at.expect("the new message was redriven");
    let slow_at = slow_redriven_at.unwrap();
    assert!(new_at < Duration::from_secs(8), "{new_at:?}");
    assert!(slow_at >= Duration::from_secs(20), "{slow_at:?}");
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(30)).await;
    assert!(dlq.is_empty() && poison.is_empty());
    assert_each_once(&["order o-201", "order o-202"], &[&source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_never_outlasts_the_dlqs_retention() {
    // GIVEN a DLQ that keeps messages 60 s (SQS's least) and a 1,200 s backoff, longer than a
    // copy's delay of up to 900 s
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "1200"),
            ("BACKOFF_MAX_SECONDS", "43200"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "900"),
        ],
    )
    .await;
    wf.sqs
        .set_queue_attributes()
        .queue_url(&wf.queues.dlq_url)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "60")
        .send()
        .await
        .expect("SetQueueAttributes");
    wf.to_dlq_at_attempt("order o-251", "orig-251", 0).await;

    // WHEN an execution runs
    let done = wf.run(json!({})).await;

    // THEN the message waits on the DLQ in a hop of 30 s (half the retention period), a new
    // message whose retention starts again, so it is received before it could expire
    done.assert_succeeded();
    let r = Workflow::records_of(&done, "orig-251");
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0]["outcome"], json!("waiting"), "{r:#?}");
    assert_eq!(r[0]["delaySeconds"], json!(30), "{r:#?}");
    assert_eq!(
        wf.counts(&wf.queues.dlq_url).await,
        (0, 0, 1),
        "delayed on the DLQ"
    );
    assert_eq!(wf.counts(&wf.queues.source_url).await, (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_pills_are_isolated_with_their_reason() {
    // GIVEN one message past its last attempt and one that is not
    let wf = Workflow::new(false, &[("MAX_REDRIVE_ATTEMPTS", "3")]).await;
    wf.to_dlq_at_attempt("order o-301", "orig-301", 3).await;
    wf.to_dlq("order o-302").await;

    let done = wf.run(json!({})).await;

    done.assert_succeeded();
    let records = done.records();
    let isolated: Vec<&Value> = records
        .iter()
        .filter(|o| o["outcome"] == json!("isolated:max-attempts"))
        .collect();
    assert_eq!(isolated.len(), 1, "{records:#?}");
    assert_eq!(isolated[0]["originalMessageId"], json!("orig-301"));
    assert_eq!(isolated[0]["destination"], json!(wf.queues.poison_name));
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert!(dlq.is_empty());
    assert_each_once(&["order o-301"], &[&poison]);
    assert_each_once(&["order o-302"], &[&source]);
    let parked = meta(&poison[0]);
    assert_eq!(
        parked.reason.map(|r| r.to_string()),
        Some("max-attempts".into())
    );
}

/// A metric alarm of this test in `state` (a guard or trigger alarm: what it watches does not
/// matter, its state does).
async fn alarm(cw: &aws_sdk_cloudwatch::Client, prefix: &str, state: StateValue) -> String {
    let name = unique_name(prefix);
    put_queue_alarm(cw, &name, "orders", state).await;
    name
}

/// The execution succeeded through its summary (no failed execution for the failures alarm)
/// having received, sent and deleted nothing.
async fn assert_circuit_open_ended_in_summary(wf: &Workflow, done: &Finished, messages: u64) {
    done.assert_succeeded();
    let output = done.output();
    assert_eq!(
        output["stoppedBecause"],
        json!("circuit-open"),
        "{output:#}"
    );
    assert_eq!(output["received"], json!(0), "{output:#}");
    assert_eq!(
        done.count(HistoryEventType::TaskStateEntered),
        3,
        "only Start, CheckCircuitBreaker and Summary ran:\n{}",
        done.lines()
    );
    // nothing received (all visible), sent or deleted
    assert_eq!(wf.counts(&wf.queues.dlq_url).await, (messages, 0, 0));
    assert_eq!(wf.counts(&wf.queues.source_url).await, (0, 0, 0));
    assert_eq!(wf.counts(&wf.queues.poison_url).await, (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_alarm_ends_a_scheduled_execution_in_its_summary_which_re_arms_the_trigger() {
    // GIVEN a guard alarm in ALARM, and the DLQ's trigger alarm (TRIGGER_ALARM_NAME) in ALARM
    let cw = moto_sfn().cloudwatch().await;
    let guard = alarm(&cw, "guard", StateValue::Alarm).await;
    let trigger = alarm(&cw, "dlq-not-empty", StateValue::Alarm).await;
    let wf = Workflow::new(
        false,
        &[
            ("GUARD_ALARM_NAMES", guard.as_str()),
            ("REARM_ALARM", "true"),
            ("TRIGGER_ALARM_NAME", trigger.as_str()),
        ],
    )
    .await;
    wf.to_dlq("order o-401").await;
    wf.to_dlq("order o-402").await;

    // WHEN the schedule starts an execution (its input is {})
    let done = wf.run(json!({})).await;

    // THEN it succeeds with circuit-open, touching nothing, and the trigger alarm is set back
    // to OK so that its next evaluation starts another execution
    assert_circuit_open_ended_in_summary(&wf, &done, 2).await;
    assert_eq!(alarm_state(&cw, &trigger).await, StateValue::Ok);
    let circuit = sfn::task_outputs(&done.history)
        .into_iter()
        .find(|o| o.get("guards").is_some())
        .expect("CheckCircuitBreaker's output");
    assert_eq!(circuit["guards"], json!([guard]), "{circuit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_flag_opens_the_circuit_and_nothing_is_touched() {
    let moto = moto_sfn();
    let ddb = moto.dynamodb().await;
    let table = create_circuit_table(&ddb).await;
    let wf = Workflow::new(false, &[("CIRCUIT_TABLE", table.as_str())]).await;
    wf.to_dlq("order o-501").await;
    // the operator opens the circuit of this DLQ (what `redrive circuit open` writes)
    let store = DynamoDbCircuitStore {
        client: ddb.clone(),
        table: table.clone(),
    };
    let now = redrive_shared::clock::now_ms();
    redrive_engine::circuit::set_override(
        &store,
        &wf.queues.dlq_url,
        &CircuitSettings::default(),
        Override::Open,
        now,
    )
    .await
    .unwrap();

    let done = wf.run(json!({})).await;

    assert_circuit_open_ended_in_summary(&wf, &done, 1).await;
    let circuit = sfn::task_outputs(&done.history)
        .into_iter()
        .find(|o| o.get("operator").is_some())
        .expect("CheckCircuitBreaker's output");
    assert_eq!(circuit["operator"], json!("open"), "{circuit}");

    // and "close" closes it: the next execution redrives
    redrive_engine::circuit::set_override(
        &store,
        &wf.queues.dlq_url,
        &CircuitSettings::default(),
        Override::Closed,
        now + 1,
    )
    .await
    .unwrap();
    let done = wf.run(json!({})).await;
    done.assert_succeeded();
    let (_, source, _) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert_each_once(&["order o-501"], &[&source]);
}

/// The task function writes the circuit record (each round's redriven copies, each batch's
/// bounced ones) under the task role of the templates: without that grant every write is
/// refused, the bounce-back rate never has a denominator and the circuit never opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_role_may_write_the_circuit_record() {
    use redrive_engine::circuit::CircuitStore;
    let ddb = moto_sfn().dynamodb().await;
    let table = create_circuit_table(&ddb).await;
    let wf = Workflow::new(false, &[("CIRCUIT_TABLE", table.as_str())]).await;
    wf.to_dlq("order o-601").await;

    let done = wf.run(json!({})).await;

    done.assert_succeeded();
    let store = DynamoDbCircuitStore { client: ddb, table };
    let stored = store
        .load(&wf.queues.dlq_url)
        .await
        .unwrap()
        .expect("the round wrote the circuit record");
    let redriven: u64 = stored.record.redriven.iter().map(|s| u64::from(s.n)).sum();
    assert_eq!(redriven, 1, "{:?}", stored.record);
    let log = wf._watch.log();
    assert!(!log.contains("AccessDenied"), "a call was refused:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_that_finds_another_running_touches_nothing_and_its_summary_re_arms() {
    // GIVEN an execution holding the DLQ's lease in its round, slowed by two failed attempts
    // of its task (retried 2 s and 4 s later), and the trigger alarm in ALARM
    let cw = moto_sfn().cloudwatch().await;
    let trigger = alarm(&cw, "dlq-not-empty", StateValue::Alarm).await;
    // The lease that keeps one execution per DLQ lives in the circuit table.
    let table = create_circuit_table(&moto_sfn().dynamodb().await).await;
    let wf = Workflow::new(
        false,
        &[("REARM_ALARM", "true"), ("CIRCUIT_TABLE", table.as_str())],
    )
    .await;
    wf.route.set_faults(&[TaskFault {
        action: "redriveBatch".into(),
        count: 2,
        after_invoke: false,
    }]);
    wf.to_dlq("order o-451").await;
    let started = Instant::now();
    let first = wf.start(json!({})).await;
    wf.until_entered(&first, "RedriveBatch", 1).await;

    // WHEN the trigger alarm starts a second execution
    let second = wf.run(json!({"triggerAlarm": trigger})).await;

    // THEN the second succeeds through its summary (already-running), having received
    // nothing, and re-arms the trigger alarm
    second.assert_succeeded();
    let output = second.output();
    assert_eq!(
        output["stoppedBecause"],
        json!("already-running"),
        "{output:#}"
    );
    assert_eq!(output["received"], json!(0), "{output:#}");
    assert_eq!(
        second.count(HistoryEventType::TaskStateEntered),
        2,
        "only Start and Summary ran:\n{}",
        second.lines()
    );
    assert_eq!(alarm_state(&cw, &trigger).await, StateValue::Ok);
    // and the first redrives the message once its task succeeds
    let first = wf.finish(&first, started).await;
    first.assert_succeeded();
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert!(dlq.is_empty() && poison.is_empty());
    assert_each_once(&["order o-451"], &[&source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_dlq_succeeds_having_done_nothing() {
    let wf = Workflow::new(false, &[]).await;
    let done = wf.run(json!({})).await;
    done.assert_succeeded();
    let output = done.output();
    assert_eq!(output["received"], json!(0), "{output:#}");
    assert_eq!(output["redriven"], json!(0), "{output:#}");
    assert_eq!(output["stoppedBecause"], json!("queue-empty"), "{output:#}");
    assert!(done.records().is_empty(), "{}", done.lines());
    assert_eq!(
        done.count(HistoryEventType::WaitStateEntered),
        0,
        "{}",
        done.lines()
    );
    assert_eq!(wf.counts(&wf.queues.source_url).await, (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_fails_is_retried_and_nothing_is_lost() {
    // GIVEN the first round's task fails before the function ran, its retry after it ran (its
    // copies sent and the DLQ messages deleted, the answer lost)
    let wf = Workflow::new(false, &[]).await;
    wf.route.set_faults(&[
        TaskFault {
            action: "redriveBatch".into(),
            count: 1,
            after_invoke: false,
        },
        TaskFault {
            action: "redriveBatch".into(),
            count: 1,
            after_invoke: true,
        },
    ]);
    let bodies = ["order o-601", "order o-602", "order o-603", "order o-604"];
    for b in bodies {
        wf.to_dlq(b).await;
    }

    let done = wf.run(json!({})).await;

    // THEN the failures were retried by the definition's Retry, the execution succeeded
    done.assert_succeeded();
    let lines = done.lines();
    let injected = lines
        .lines()
        .filter(|l| l.contains("error=Lambda.ServiceException"))
        .count();
    assert_eq!(injected, 2, "{lines}");
    // and every message is on the source queue exactly once: lost 0, duplicated 0
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(20)).await;
    assert!(dlq.is_empty() && poison.is_empty());
    assert_each_once(&bodies, &[&source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_execution_mid_run_leaves_every_message_on_the_dlq_or_acknowledged_in_the_source() {
    // GIVEN 90 messages (three rounds of 40 at most), some waiting on the DLQ (3 s backoff
    // against a 1 s DelaySeconds cap)
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "3"),
            ("BACKOFF_MAX_SECONDS", "43200"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
            // One pipeline: moto's ReceiveMessage takes no lock, so two at once can both be
            // handed one message (SQS's at-least-once, which the consumer's key absorbs); this
            // test counts exact copies.
            ("MAX_CONCURRENT_BATCHES", "1"),
        ],
    )
    .await;
    let bodies: Vec<String> = (1..=90).map(|i| format!("order o-7{i:02}")).collect();
    for b in &bodies {
        wf.to_dlq(b).await;
    }
    let started = Instant::now();
    let execution = wf.start(json!({"maxMessages": 90})).await;

    // WHEN an operator stops it during its second round
    wf.until_entered(&execution, "RedriveBatch", 2).await;
    wf.sfn
        .stop_execution()
        .execution_arn(&execution)
        .error("Operator")
        .cause("stopped by the test")
        .send()
        .await
        .expect("StopExecution");
    let done = wf.finish(&execution, started).await;
    assert_eq!(done.status(), &ExecutionStatus::Aborted, "{}", done.lines());

    // THEN every message is on the DLQ (waiting or untouched) or on the source queue, exactly
    // once: nothing was deleted that was not acknowledged
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(30)).await;
    assert!(poison.is_empty());
    let expected: Vec<&str> = bodies.iter().map(String::as_str).collect();
    assert_each_once(&expected, &[&dlq, &source]);
    assert!(
        !dlq.is_empty(),
        "the stop came before every message was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_near_1_mib_is_redriven_while_the_state_stays_small() {
    let wf = Workflow::new(false, &[]).await;
    let big = "b".repeat(1_048_576 - 2_000);
    wf.to_dlq(&big).await;

    let done = wf.run(json!({})).await;

    done.assert_succeeded();
    // no state input or output carries the body: each is a few KiB at most
    let largest = done
        .history
        .iter()
        .flat_map(|e| {
            let texts = [
                e.state_entered_event_details().and_then(|d| d.input()),
                e.state_exited_event_details().and_then(|d| d.output()),
                e.task_succeeded_event_details().and_then(|d| d.output()),
                e.lambda_function_succeeded_event_details()
                    .and_then(|d| d.output()),
                e.execution_started_event_details().and_then(|d| d.input()),
                e.execution_succeeded_event_details()
                    .and_then(|d| d.output()),
            ];
            texts.into_iter().flatten().map(str::len)
        })
        .max()
        .unwrap_or(0);
    assert!(largest < 16 * 1024, "a state of {largest} bytes");
    assert!(!done.lines().contains("bbbbbbbb"));
    let (_, source, _) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert_eq!(source.len(), 1);
    assert_eq!(body(&source[0]), big, "the body arrives byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_with_two_groups_keeps_the_order_within_each_group() {
    let wf = Workflow::new(true, &[]).await;
    let sent = [
        ("a", "order a-1"),
        ("b", "order b-1"),
        ("a", "order a-2"),
        ("b", "order b-2"),
        ("a", "order a-3"),
    ];
    for (i, (group, b)) in sent.iter().enumerate() {
        send_fifo(
            &wf.sqs,
            &wf.queues.dlq_url,
            b,
            group,
            &format!("dedup-{i}"),
            &[],
        )
        .await;
    }

    let done = wf.run(json!({})).await;

    done.assert_succeeded();
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert!(dlq.is_empty() && poison.is_empty());
    let bodies: Vec<&str> = sent.iter().map(|(_, b)| *b).collect();
    assert_each_once(&bodies, &[&source]);
    for group in ["a", "b"] {
        let in_group: Vec<&str> = source
            .iter()
            .filter(|m| {
                m.attributes()
                    .and_then(|a| {
                        a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                    })
                    .map(String::as_str)
                    == Some(group)
            })
            .map(body)
            .collect();
        let expected: Vec<&str> = sent
            .iter()
            .filter(|(g, _)| *g == group)
            .map(|(_, b)| *b)
            .collect();
        assert_eq!(in_group, expected, "group {group} in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_decides_and_moves_nothing() {
    let wf = Workflow::new(false, &[("BACKOFF_BASE_SECONDS", "30")]).await;
    wf.to_dlq("order o-901").await;
    wf.to_dlq_at_attempt("order o-902", "orig-902", 5).await;

    let done = wf.run(json!({"dryRun": true})).await;

    done.assert_succeeded();
    // the plan is in the history: one redrive after 30 s, one poison pill
    let records = done.records();
    let mut outcomes: Vec<&str> = records
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        ["plan:isolate:max-attempts", "plan:redrive"],
        "{records:#?}"
    );
    assert!(
        done.took < Duration::from_secs(30),
        "a dry run waits for nothing"
    );
    // the messages were released at once: visible again on the DLQ, nothing elsewhere
    assert_eq!(wf.counts(&wf.queues.dlq_url).await, (2, 0, 0));
    assert_eq!(wf.counts(&wf.queues.source_url).await, (0, 0, 0));
    assert_eq!(wf.counts(&wf.queues.poison_url).await, (0, 0, 0));
}

#[tokio::test]
async fn every_log_line_of_a_task_invocation_carries_its_request_and_trace_ids() {
    // GIVEN the task function under cargo lambda watch, one instance, invoked directly (no
    // state machine: SQS may be on LocalStack), and two messages on the DLQ (a traced
    // producer's among them)
    let moto = redrive_tests::moto();
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    let mut env = moto.env();
    env.extend(queues.redriver_env());
    for (k, v) in [
        ("METRIC_NAMESPACE", unique_name("ns").as_str()),
        ("REARM_ALARM", "false"),
        ("BACKOFF_JITTER", "none"),
        ("BACKOFF_BASE_SECONDS", "0"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    let watch = LambdaWatch::start(&[TASK_BINARY], &env).await;
    send_raw(&sqs, &queues.dlq_url, "order o-1", &[]).await;
    let header = redrive_tests::producer_trace_header();
    redrive_tests::send_traced(&sqs, &queues.dlq_url, "order o-2", &[], &header).await;

    // WHEN the tasks run one after the other, as the state machine runs them: a check of the
    // circuit, a round (one message at a time), the summary
    let mut invocations = Vec::new();
    let mut redriven = 0;
    for task in [
        json!({"action": "checkCircuit"}),
        json!({"action": "redriveBatch", "maxMessages": 1}),
        json!({"action": "redriveBatch", "maxMessages": 1}),
    ] {
        let (out, lines) = watch.invoke_logged(TASK_BINARY, &task).await;
        let out = out.unwrap();
        redriven += out["redriven"].as_u64().unwrap_or(0);
        invocations.push(lines);
    }
    assert_eq!(redriven, 2);

    // THEN every line each task logged carries its invocation's requestId and xrayTraceId,
    // and no two invocations share them
    let mut seen = Vec::new();
    for lines in &invocations {
        let ids = redrive_tests::invocation_ids(lines).unwrap_or_else(|e| panic!("{e}"));
        assert!(!seen.contains(&ids), "{ids:?} twice");
        seen.push(ids);
    }
    // AND the traced message's copy carries its producer's header (where SQS keeps it)
    let copies = drain_all(&sqs, &queues.source_url).await;
    assert_eq!(copies.len(), 2);
    if redrive_tests::batch_sends_keep_trace_headers() {
        let traced = copies
            .iter()
            .find(|m| m.body() == Some("order o-2"))
            .unwrap();
        assert_eq!(
            redrive_tests::trace_header_of(traced),
            Some(header.as_str())
        );
    }
}
