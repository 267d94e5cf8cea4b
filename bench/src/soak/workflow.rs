//! The workflow soak: the Step Functions orchestrator's shipped definition executed
//! by moto (`redrive_tests::moto_sfn`), its tasks the real `redrive-workflow` binary under
//! `cargo lambda watch`, with task failures injected by the Lambda router (before the function
//! ran, and after it ran with its answer lost; see `redrive_tests::sfn::TaskFault`) and
//! executions stopped by `StopExecution` at random points. Backoffs longer than a copy's
//! `DelaySeconds` (scaled down to 1 s) send messages back to the DLQ to wait, so an execution
//! may end with messages waiting there: executions follow one another until the DLQ is empty
//! (nothing visible, in flight or delayed); then every message must sit exactly once on the
//! source queue (redriven) or the poison queue (its last attempt spent): lost 0, duplicated 0.
//!
//! ```text
//! soak workflow [--messages 40] [--seed N] [--stops 3]
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use redrive_shared::backoff::{RandomSource, seeded_rng};
use redrive_shared::meta::{ATTRIBUTE_NAME, RedriveMeta};
use redrive_tests::sfn::{self, TaskFault, WorkflowMachine};
use redrive_tests::{
    QueueSet, attr_string, drain_all, moto_sfn, queue_counts, send_raw, unique_name,
};
use serde::Serialize;
use serde_json::json;

/// The workflow soak's knobs.
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowSoakSettings {
    pub messages: u64,
    /// Every this many messages one is at its last attempt: it must end on the poison queue.
    pub poison_every: u64,
    /// Executions stopped by StopExecution (the first ones), each at a random point.
    pub stops: u32,
    /// The injected task failures (per action, before or after the function ran).
    pub faults: Vec<(String, u32, bool)>,
    pub seed: u64,
    /// Gives up (and fails) after this long.
    pub timeout: Duration,
}

impl WorkflowSoakSettings {
    pub fn new(messages: u64, seed: u64) -> Self {
        WorkflowSoakSettings {
            messages,
            poison_every: 10,
            stops: 3,
            faults: vec![
                ("checkCircuit".into(), 1, true),
                ("redriveBatch".into(), 2, false),
                // The round ran (its messages moved, its waits sent back) and its answer was
                // lost: the retry drains again.
                ("redriveBatch".into(), 1, true),
                ("tally".into(), 1, false),
            ],
            seed,
            timeout: Duration::from_secs(600),
        }
    }
}

/// What the workflow soak found.
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowSoakReport {
    pub settings: WorkflowSoakSettings,
    /// Executions by final status (SUCCEEDED, ...; `stopped (STATUS)` for those the soak
    /// stopped).
    pub executions: BTreeMap<String, u64>,
    /// Task failures the router injected (the history's `Lambda.ServiceException`s).
    pub injected_failures: u64,
    /// `waiting` records in the histories: hops of a message sent back to the DLQ to wait.
    pub waits: u64,
    /// Executions that ended with messages still waiting on the DLQ (the next one took them).
    pub ended_with_waiting: u64,
    pub redriven: u64,
    pub isolated: u64,
    /// Messages on the DLQ once the executions stopped (the soak's timeout).
    pub on_dlq: u64,
    pub lost: Vec<String>,
    pub duplicated: Vec<String>,
    /// A poison pill on the source queue, or an ordinary message on the poison queue.
    pub misplaced: Vec<String>,
    pub timed_out: bool,
    pub wall_seconds: f64,
}

impl WorkflowSoakReport {
    pub fn passed(&self) -> bool {
        !self.timed_out
            && self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.misplaced.is_empty()
            && self.on_dlq == 0
            && self.redriven + self.isolated == self.settings.messages
    }
}

impl fmt::Display for WorkflowSoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        writeln!(
            f,
            "workflow soak: {} messages through the Step Functions orchestrator on moto (shipped ASL, redrive-workflow tasks)",
            s.messages
        )?;
        writeln!(
            f,
            "  executions      {} (stopped: StopExecution at a random point)",
            self.executions
                .iter()
                .map(|(k, v)| format!("{k} x{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        writeln!(
            f,
            "  task failures   {} injected (Lambda.ServiceException, before or after the function ran), retried by the definition",
            self.injected_failures
        )?;
        writeln!(
            f,
            "  redriven        {} on the source queue, exactly once each",
            self.redriven
        )?;
        writeln!(
            f,
            "  isolated        {} on the poison queue (1 in {} at its last attempt)",
            self.isolated, s.poison_every
        )?;
        writeln!(
            f,
            "  waits           {} hops back to the DLQ; {} executions ended with messages waiting there",
            self.waits, self.ended_with_waiting
        )?;
        writeln!(f, "  on the DLQ      {}", self.on_dlq)?;
        writeln!(
            f,
            "  lost            {}{}",
            self.lost.len(),
            if self.lost.is_empty() { "" } else { "  <--" }
        )?;
        writeln!(
            f,
            "  duplicated      {}{}",
            self.duplicated.len(),
            if self.duplicated.is_empty() {
                ""
            } else {
                "  <--"
            }
        )?;
        if !self.misplaced.is_empty() {
            writeln!(f, "  misplaced       {:?}  <--", self.misplaced)?;
        }
        if self.timed_out {
            writeln!(
                f,
                "  timed out after {:?} with messages still on the DLQ  <--",
                s.timeout
            )?;
        }
        writeln!(f, "  wall time       {:.1} s", self.wall_seconds)?;
        writeln!(
            f,
            "  {}",
            if self.passed() {
                "passed: lost 0, duplicated 0"
            } else {
                "FAILED"
            }
        )
    }
}

/// (visible, in flight, delayed).
async fn counts(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64, u64) {
    queue_counts(sqs, url)
        .await
        .unwrap_or_else(|| panic!("GetQueueAttributes {url} failed"))
}

fn body_of(i: u64) -> String {
    format!("soak-workflow-{i:05}")
}

pub async fn run(settings: &WorkflowSoakSettings) -> WorkflowSoakReport {
    let wall = Instant::now();
    let moto = moto_sfn();
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;

    let namespace = unique_name("soak");
    let env = [
        ("METRIC_NAMESPACE", namespace.as_str()),
        ("REARM_ALARM", "false"),
        ("MAX_REDRIVE_ATTEMPTS", "5"),
        // Backoffs of 0 to 2 s where a copy's delay stops at 1 s: about half of the messages
        // go back to the DLQ to wait (notBefore in x-redrive), and stops land mid-wait.
        ("BACKOFF_BASE_SECONDS", "2"),
        ("BACKOFF_JITTER", "full"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ("WORKFLOW_BATCH_SIZE", "10"),
    ];
    let workflow = WorkflowMachine::start(moto, &queues, &env, 4, "soak")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (client, machine) = (&workflow.client, &workflow.arn);
    workflow.route.set_faults(
        &settings
            .faults
            .iter()
            .map(|(action, count, after)| TaskFault {
                action: action.clone(),
                count: *count,
                after_invoke: *after,
            })
            .collect::<Vec<_>>(),
    );

    for i in 0..settings.messages {
        let body = body_of(i);
        if settings.poison_every > 0 && i % settings.poison_every == 0 {
            let meta = RedriveMeta {
                attempt: 5,
                ..RedriveMeta::fresh(&format!("orig-{i}"))
            };
            send_raw(
                &sqs,
                &queues.dlq_url,
                &body,
                &[(ATTRIBUTE_NAME, attr_string(&meta.to_json()))],
            )
            .await;
        } else {
            send_raw(&sqs, &queues.dlq_url, &body, &[]).await;
        }
    }

    let mut rng = seeded_rng(settings.seed);
    let mut executions: BTreeMap<String, u64> = BTreeMap::new();
    let mut injected = 0u64;
    let mut waits = 0u64;
    let mut ended_with_waiting = 0u64;
    let mut stops_left = settings.stops;
    let mut timed_out = false;
    loop {
        let (visible, in_flight, delayed) = counts(&sqs, &queues.dlq_url).await;
        if visible + in_flight + delayed == 0 {
            break;
        }
        if wall.elapsed() > settings.timeout {
            timed_out = true;
            break;
        }
        if visible == 0 {
            // Waiting copies appear when their delay ends; messages of a stopped round when
            // their visibility lapses.
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        let execution = sfn::start_execution(client, machine, &json!({"maxMessages": 1000})).await;
        let stopping = stops_left > 0;
        if stopping {
            stops_left -= 1;
            // A random point: inside a round (receiving, sending, deleting) or between two.
            let after = Duration::from_millis(1000 + (rng.next_unit() * 3000.0) as u64);
            tokio::time::sleep(after).await;
            let _ = client
                .stop_execution()
                .execution_arn(&execution)
                .error("Soak")
                .cause("stopped at a random point by the workflow soak")
                .send()
                .await;
        }
        let left = settings
            .timeout
            .saturating_sub(wall.elapsed())
            .max(Duration::from_secs(1));
        let done = sfn::wait_for_execution(client, &execution, left).await;
        if done.status().as_str() == "SUCCEEDED" {
            // Its rounds found the DLQ empty of visible messages: what is left waits there.
            let (visible, _, delayed) = counts(&sqs, &queues.dlq_url).await;
            ended_with_waiting += u64::from(visible + delayed > 0);
        }
        // AWS says ABORTED; moto may end a stopped execution otherwise (FAILED,
        // States.Runtime). Either way it was stopped.
        let status = done.status().as_str();
        let key = if stopping {
            format!("stopped ({status})")
        } else {
            status.to_string()
        };
        *executions.entry(key).or_default() += 1;
        let history = sfn::execution_history(client, &execution).await;
        injected += history
            .iter()
            .map(sfn::describe_event)
            .filter(|l| l.contains("error=Lambda.ServiceException"))
            .count() as u64;
        waits += sfn::task_outputs(&history)
            .iter()
            .filter_map(|o| o.get("records").and_then(serde_json::Value::as_array))
            .flatten()
            .filter(|r| r["outcome"] == "waiting")
            .count() as u64;
    }

    // Reconcile once nothing is in flight or delayed anywhere.
    let settle = Instant::now();
    for url in [&queues.source_url, &queues.poison_url, &queues.dlq_url] {
        while settle.elapsed() < Duration::from_secs(30) {
            let (_, in_flight, delayed) = counts(&sqs, url).await;
            if in_flight + delayed == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let source = drain_all(&sqs, &queues.source_url).await;
    let poison = drain_all(&sqs, &queues.poison_url).await;
    let dlq = drain_all(&sqs, &queues.dlq_url).await;
    let mut seen: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for (place, messages) in [("source", &source), ("poison", &poison), ("dlq", &dlq)] {
        for m in messages.iter() {
            seen.entry(m.body().unwrap_or_default().to_string())
                .or_default()
                .push(place);
        }
    }
    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    let mut misplaced = Vec::new();
    for i in 0..settings.messages {
        let body = body_of(i);
        let poison_pill = settings.poison_every > 0 && i % settings.poison_every == 0;
        match seen.get(&body).map(Vec::as_slice) {
            None | Some([]) => lost.push(body),
            Some([place]) => {
                let expected = if poison_pill { "poison" } else { "source" };
                if *place != expected && *place != "dlq" {
                    misplaced.push(format!("{body} on {place}"));
                }
            }
            Some(_) => duplicated.push(body),
        }
    }
    drop(workflow);
    WorkflowSoakReport {
        settings: settings.clone(),
        executions,
        injected_failures: injected,
        waits,
        ended_with_waiting,
        redriven: source.len() as u64,
        isolated: poison.len() as u64,
        on_dlq: dlq.len() as u64,
        lost,
        duplicated,
        misplaced,
        timed_out,
        wall_seconds: wall.elapsed().as_secs_f64(),
    }
}
