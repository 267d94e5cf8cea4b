//! The Step Functions orchestrator, executed: moto
//! runs the shipped definition `infra/statemachine/redrive.asl.json`, its `DefinitionSubstitutions`
//! applied (`redrive_tests::sfn::substitute_definition`), and every Task state runs the real
//! task binary `redrive-workflow` under `cargo lambda watch` (see `redrive_tests::sfn`).
//!
//! Wait states sleep in real time, so each test scales time down with the task function's own
//! settings (`BACKOFF_BASE_SECONDS`, `WORKFLOW_MAX_DELAY_SECONDS` standing in for SQS's 900 s,
//! `WORKFLOW_HOLD_SLACK_SECONDS`, `WORKFLOW_SEARCH_RECEIVES`), never a test-only code path.
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

    fn lines(&self) -> String {
        self.history
            .iter()
            .map(sfn::describe_event)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The per-message audit records: the outputs of the redrive / isolate tasks.
    fn outcomes(&self) -> Vec<Value> {
        sfn::task_outputs(&self.history)
            .into_iter()
            .filter(|o| o.get("outcome").is_some() && o.get("originalMessageId").is_some())
            .collect()
    }

    /// The items ReceiveBatch decided (ids, handles and decisions).
    fn decided_items(&self) -> Vec<Value> {
        sfn::task_outputs(&self.history)
            .into_iter()
            .filter_map(|o| o.get("items").and_then(Value::as_array).cloned())
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
            ("WORKFLOW_HOLD_SLACK_SECONDS", "2"),
            ("WORKFLOW_SEARCH_RECEIVES", "3"),
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

    /// Returns once the execution has entered a Wait state (a message held on the DLQ).
    async fn until_a_wait_state(&self, execution: &str) {
        let started = Instant::now();
        loop {
            let history = sfn::execution_history(&self.sfn, execution).await;
            if history
                .iter()
                .any(|e| e.r#type() == &HistoryEventType::WaitStateEntered)
            {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no Wait state was entered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
async fn redrives_with_backoff_and_records_each_decision_in_the_history() {
    // GIVEN backoff 1 s, doubling, all of it waited on the DLQ (no copy delay), and three
    // messages: two fresh, one at attempt 1 already
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MULTIPLIER", "2"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "0"),
        ],
    )
    .await;
    let a = wf.to_dlq("order o-101").await;
    let b = wf.to_dlq("order o-102").await;
    wf.to_dlq_at_attempt("order o-103", "orig-103", 1).await;

    // WHEN an execution runs
    let done = wf.run(json!({})).await;

    // THEN it succeeded and took the longest backoff (attempt 2: 2 s) at least
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
    assert!(done.took >= Duration::from_secs(2), "{:?}", done.took);
    assert!(
        done.count(HistoryEventType::WaitStateExited) >= 3,
        "{}",
        done.lines()
    );
    // each message's decision is a task output: originalMessageId, attempt, delay, destination
    let mut outcomes = done.outcomes();
    outcomes.sort_by_key(|o| {
        o["originalMessageId"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    assert_eq!(outcomes.len(), 3, "{outcomes:#?}");
    let by_original: HashMap<&str, &Value> = outcomes
        .iter()
        .map(|o| (o["originalMessageId"].as_str().unwrap(), o))
        .collect();
    for (original, attempt, waited) in [(a.as_str(), 1, 1), (b.as_str(), 1, 1), ("orig-103", 2, 2)]
    {
        let o = by_original
            .get(original)
            .unwrap_or_else(|| panic!("no outcome for {original}: {outcomes:#?}"));
        assert_eq!(o["attempt"], json!(attempt), "{o}");
        assert_eq!(o["waitedSeconds"], json!(waited), "{o}");
        assert_eq!(o["delaySeconds"], json!(0), "{o}");
        assert_eq!(o["destination"], json!(wf.queues.source_name), "{o}");
        assert_eq!(o["outcome"], json!("redriven"), "{o}");
        assert_eq!(o["action"], json!("redrive"), "{o}");
    }
    // the summary is the Lambda's
    let output = done.output();
    assert_eq!(output["redriven"], json!(3), "{output:#}");
    assert_eq!(output["stoppedBecause"], json!("queue-empty"), "{output:#}");

    // and the copies carry their new attempt; nothing is left on the DLQ
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(30)).await;
    assert_each_once(&["order o-101", "order o-102", "order o-103"], &[&source]);
    assert!(dlq.is_empty() && poison.is_empty());
    for m in &source {
        let meta = meta(m);
        let expected = if body(m) == "order o-103" { 2 } else { 1 };
        assert_eq!(meta.attempt, expected, "{}", body(m));
    }

    // WHEN o-103 fails again (its copy, x-redrive and all, back on the DLQ) and a second
    // execution redrives it
    let again = source.iter().find(|m| body(m) == "order o-103").unwrap();
    send_raw(
        &wf.sqs,
        &wf.queues.dlq_url,
        body(again),
        &[(ATTRIBUTE_NAME, attr_string(&meta(again).to_json()))],
    )
    .await;
    let second = wf.run(json!({})).await;
    assert_eq!(
        second.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        second.lines()
    );

    // THEN `redrive history` tells its story across both executions
    let run = wf.history_cli(&["history", "orig-103"]).await;
    assert_eq!(run.0, Some(0), "{run:?}");
    let text = &run.1;
    assert!(
        text.contains("history of orig-103: 6 records in 2 of the 2 newest executions"),
        "{text}"
    );
    assert!(text.contains("redriven as attempt 2"), "{text}");
    assert!(text.contains("redriven as attempt 3"), "{text}");
    assert!(text.contains("held on the DLQ"), "{text}");
    assert!(
        !text.contains("order o-10"),
        "no body in the history: {text}"
    );
    let run = wf.history_cli(&["history", "orig-103", "--json"]).await;
    assert_eq!(run.0, Some(0), "{run:?}");
    let doc: Value = serde_json::from_str(&run.1).unwrap();
    let executions = doc["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 2, "{doc:#}");
    let kinds: Vec<Vec<&str>> = executions
        .iter()
        .map(|x| {
            x["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["kind"].as_str().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ["decided", "held", "redriven"],
            ["decided", "held", "redriven"]
        ]
    );
    assert_eq!(executions[1]["records"][2]["detail"]["attempt"], json!(3));
    assert_eq!(
        executions[1]["records"][0]["detail"]["waitSeconds"],
        json!(4)
    );
    // an unknown message: exit 3, said plainly
    let run = wf.history_cli(&["history", "o-404"]).await;
    assert_eq!(run.0, Some(3), "{run:?}");
    assert!(run.1.contains("no record of o-404"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_above_the_sqs_cap_keeps_the_message_hidden_on_the_dlq_until_it_is_sent() {
    // GIVEN a backoff of 5 s where SQS's cap stands at 1 s (scaled from 900 s): 4 s are waited
    // with the message held on the DLQ, 1 s is the copy's DelaySeconds
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "5"),
            ("BACKOFF_MAX_SECONDS", "5"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ],
    )
    .await;
    wf.to_dlq("order o-201").await;

    // WHEN an execution runs
    let started = Instant::now();
    let execution = wf.start(json!({})).await;

    // THEN during the wait the message is on the DLQ, hidden, and not yet on the source queue
    let mut checked = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if started.elapsed() < Duration::from_millis(1500) {
            continue;
        }
        let dlq = wf.counts(&wf.queues.dlq_url).await;
        let source = wf.counts(&wf.queues.source_url).await;
        assert_eq!(
            dlq,
            (0, 1, 0),
            "the message is held on the DLQ (visible, hidden, delayed)"
        );
        assert_eq!(source, (0, 0, 0), "nothing sent yet");
        checked += 1;
    }
    assert!(checked >= 3);
    let done = wf.finish(&execution, started).await;
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
    assert!(done.took >= Duration::from_secs(4), "{:?}", done.took);
    // the decision: 5 s of backoff, 4 waited, 1 as DelaySeconds
    let items = done.decided_items();
    assert_eq!(items.len(), 1, "{items:#?}");
    assert_eq!(
        (
            &items[0]["backoffSeconds"],
            &items[0]["waitSeconds"],
            &items[0]["delaySeconds"]
        ),
        (&json!(5), &json!(4), &json!(1))
    );
    let outcome = &done.outcomes()[0];
    assert_eq!(outcome["outcome"], json!("redriven"), "{outcome}");
    assert_eq!(outcome["delaySeconds"], json!(1), "{outcome}");
    // then it was sent (with its remaining delay) and deleted from the DLQ
    assert_eq!(wf.counts(&wf.queues.dlq_url).await, (0, 0, 0));
    let (_, source, _) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert_each_once(&["order o-201"], &[&source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_pills_are_isolated_with_their_reason() {
    // GIVEN one message past its last attempt and one that is not
    let wf = Workflow::new(false, &[("MAX_REDRIVE_ATTEMPTS", "3")]).await;
    wf.to_dlq_at_attempt("order o-301", "orig-301", 3).await;
    wf.to_dlq("order o-302").await;

    let done = wf.run(json!({})).await;

    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
    let outcomes = done.outcomes();
    let isolated: Vec<&Value> = outcomes
        .iter()
        .filter(|o| o["outcome"] == json!("isolated"))
        .collect();
    assert_eq!(isolated.len(), 1, "{outcomes:#?}");
    assert_eq!(isolated[0]["originalMessageId"], json!("orig-301"));
    assert_eq!(isolated[0]["reason"], json!("max-attempts"));
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
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
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
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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

    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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
    // GIVEN an execution holding a message on the DLQ for its 12 s wait, and the trigger alarm
    // in ALARM
    let cw = moto_sfn().cloudwatch().await;
    let trigger = alarm(&cw, "dlq-not-empty", StateValue::Alarm).await;
    let wf = Workflow::new(
        false,
        &[
            ("REARM_ALARM", "true"),
            ("BACKOFF_BASE_SECONDS", "12"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "0"),
        ],
    )
    .await;
    wf.to_dlq("order o-451").await;
    let started = Instant::now();
    let first = wf.start(json!({})).await;
    wf.until_a_wait_state(&first).await;

    // WHEN the trigger alarm starts a second execution
    let second = wf.run(json!({"triggerAlarm": trigger})).await;

    // THEN the second succeeds through its summary (already-running), having received
    // nothing, and re-arms the trigger alarm
    assert_eq!(
        second.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        second.lines()
    );
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
    // and the first redrives the message once its wait is over
    let first = wf.finish(&first, started).await;
    assert_eq!(
        first.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        first.lines()
    );
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(10)).await;
    assert!(dlq.is_empty() && poison.is_empty());
    assert_each_once(&["order o-451"], &[&source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_dlq_succeeds_having_done_nothing() {
    let wf = Workflow::new(false, &[]).await;
    let done = wf.run(json!({})).await;
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
    let output = done.output();
    assert_eq!(output["received"], json!(0), "{output:#}");
    assert_eq!(output["redriven"], json!(0), "{output:#}");
    assert_eq!(output["stoppedBecause"], json!("queue-empty"), "{output:#}");
    assert!(done.outcomes().is_empty(), "{}", done.lines());
    assert_eq!(
        done.count(HistoryEventType::WaitStateEntered),
        0,
        "{}",
        done.lines()
    );
    assert_eq!(wf.counts(&wf.queues.source_url).await, (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_fails_mid_map_is_retried_and_nothing_is_lost() {
    // GIVEN the first redrive task fails before the function ran, the second after it ran
    // (its copy was sent and the DLQ message deleted, the answer lost)
    let wf = Workflow::new(false, &[("WORKFLOW_SEARCH_RECEIVES", "2")]).await;
    wf.route.set_faults(&[
        TaskFault {
            action: "redrive".into(),
            count: 1,
            after_invoke: false,
        },
        TaskFault {
            action: "redrive".into(),
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
    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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
    // GIVEN six messages whose backoff (3 s) is waited with the message held on the DLQ
    let wf = Workflow::new(
        false,
        &[
            ("BACKOFF_BASE_SECONDS", "3"),
            ("WORKFLOW_MAX_DELAY_SECONDS", "0"),
            ("WORKFLOW_HOLD_SLACK_SECONDS", "1"),
        ],
    )
    .await;
    let bodies: Vec<String> = (1..=6).map(|i| format!("order o-70{i}")).collect();
    for b in &bodies {
        wf.to_dlq(b).await;
    }
    let started = Instant::now();
    let execution = wf.start(json!({})).await;

    // WHEN an operator stops it while messages wait
    wf.until_a_wait_state(&execution).await;
    wf.sfn
        .stop_execution()
        .execution_arn(&execution)
        .error("Operator")
        .cause("stopped by the test")
        .send()
        .await
        .expect("StopExecution");
    let done = wf.finish(&execution, started).await;

    // THEN it is aborted, and once the holds lapse every message is on the DLQ or on the
    // source queue, exactly once: nothing was deleted that was not acknowledged
    // (moto 5.2.5 ends an execution stopped inside a Map as FAILED, States.Runtime, from an
    // AttributeError in its Map iteration; AWS says ABORTED. Either way it ended there.)
    let stopped = done.status() == &ExecutionStatus::Aborted
        || (done.status() == &ExecutionStatus::Failed
            && done.described.error() == Some("States.Runtime"));
    assert!(stopped, "{:?}\n{}", done.status(), done.lines());
    assert_eq!(
        done.count(HistoryEventType::MapStateSucceeded),
        0,
        "the stop came mid-Map:\n{}",
        done.lines()
    );
    let (dlq, source, poison) = wf.settle_and_take_all(Duration::from_secs(30)).await;
    assert!(poison.is_empty());
    let expected: Vec<&str> = bodies.iter().map(String::as_str).collect();
    assert_each_once(&expected, &[&dlq, &source]);
    assert!(!dlq.is_empty(), "the stop came before any message was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_near_1_mib_is_redriven_while_the_state_stays_small() {
    let wf = Workflow::new(false, &[]).await;
    let big = "b".repeat(1_048_576 - 2_000);
    wf.to_dlq(&big).await;

    let done = wf.run(json!({})).await;

    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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

    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
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

    assert_eq!(
        done.status(),
        &ExecutionStatus::Succeeded,
        "{}",
        done.lines()
    );
    // the plan is in the history: one redrive after 30 s, one poison pill
    let items = done.decided_items();
    assert_eq!(items.len(), 2, "{items:#?}");
    let actions: Vec<&str> = items.iter().filter_map(|i| i["action"].as_str()).collect();
    assert!(
        actions.contains(&"redrive") && actions.contains(&"isolate"),
        "{items:#?}"
    );
    assert!(
        done.outcomes().is_empty(),
        "nothing was redriven or isolated"
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

    // WHEN the tasks run one after the other, as the state machine runs them: a receive,
    // then a redrive of each message it decided
    let mut invocations = Vec::new();
    let (batch, lines) = watch
        .invoke_logged(
            TASK_BINARY,
            &json!({"action": "receiveBatch", "maxMessages": 10}),
        )
        .await;
    let batch = batch.unwrap();
    invocations.push(lines);
    let items = batch["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 2, "{batch}");
    for item in items {
        let (outcome, lines) = watch
            .invoke_logged(TASK_BINARY, &json!({"action": "redrive", "item": item}))
            .await;
        assert_eq!(outcome.unwrap()["outcome"], json!("redriven"));
        invocations.push(lines);
    }

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
