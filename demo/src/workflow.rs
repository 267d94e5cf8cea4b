//! The Step Functions path.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::Message;
use redrive_tests::sfn::{self, WorkflowMachine};
use redrive_tests::{QueueSet, moto_sfn, queue_counts};
use serde_json::{Value, json};

use crate::console::Console;
use crate::incident::string_attr;
use crate::name_of;
use crate::report::read_all;

/// The orchestrator's path, short: a few failed orders on a DLQ drained by the shipped state
/// machine (`infra/statemachine/redrive.asl.json`, executed by moto; its tasks are the
/// `redrive-workflow` binary under cargo lambda watch), a backoff longer than the (scaled) SQS
/// cap waited on the DLQ in hops (`notBefore` in the message's `x-redrive`), a poison pill
/// isolated, and each message's record in the execution history as an operator reads it.
/// Executions follow one another while a message still waits on the DLQ. False when a message
/// is lost or duplicated or an execution did not succeed.
pub async fn workflow_path(console: &Console) -> bool {
    println!();
    console.event(
        "the Step Functions path: the same engine run by the state machine infra/statemachine/redrive.asl.json",
    );
    let moto = moto_sfn();
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    // 2 s of backoff where a copy's DelaySeconds stops at 1 s (scaled from 900 s): the message
    // goes back to the DLQ for 1 s with notBefore in its x-redrive, and the drain that
    // receives it once it is due redrives it.
    let env = [
        ("BACKOFF_BASE_SECONDS", "2"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ("MAX_REDRIVE_ATTEMPTS", "5"),
        ("METRIC_NAMESPACE", "DLQRedriverWorkflowDemo"),
        ("REARM_ALARM", "false"),
    ];
    let workflow = match WorkflowMachine::start(moto, &queues, &env, 2, "redrive-demo").await {
        Ok(workflow) => workflow,
        Err(e) => {
            println!("{e}  <--");
            return false;
        }
    };
    let (client, machine) = (&workflow.client, &workflow.arn);

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

    // An execution ends when its rounds find the DLQ empty; a message still waiting (delayed
    // on the DLQ) is the next execution's, as the next alarm or schedule would start it.
    let mut statuses = Vec::new();
    let mut records: Vec<Value> = Vec::new();
    for _ in 0..MAX_EXECUTIONS {
        let started = Instant::now();
        let execution = sfn::start_execution(client, machine, &json!({"maxMessages": 10})).await;
        let done = sfn::wait_for_execution(client, &execution, Duration::from_secs(120)).await;
        let took = started.elapsed();
        let history = sfn::execution_history(client, &execution).await;
        let status = done.status().as_str().to_string();
        console.event(&format!(
            "execution {}: {status} in {:.1}s, {} history events",
            name_of(&execution),
            took.as_secs_f64(),
            history.len()
        ));
        let t0 = history
            .first()
            .and_then(|e| e.timestamp().to_millis().ok())
            .unwrap_or(0);
        let states: Vec<(f64, &str)> = history
            .iter()
            .filter_map(|e| {
                let d = e.state_entered_event_details()?;
                let at = (e.timestamp().to_millis().unwrap_or(0) - t0) as f64 / 1000.0;
                Some((at, d.name()))
            })
            .collect();
        print_states(&states);
        records.extend(
            sfn::task_outputs(&history)
                .iter()
                .filter_map(|o| o.get("records").and_then(Value::as_array))
                .flatten()
                .cloned(),
        );
        statuses.push(status);
        if dlq_empty(&sqs, &queues.dlq_url).await {
            break;
        }
        // The waiting copies' DelaySeconds.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Each message's audit record (redriveBatch's output): what `redrive history ID` shows.
    println!("  each message's record in the history (`redrive history ID --state-machine ARN`):");
    for r in &records {
        let n = |f: &str| r[f].as_u64().unwrap_or(0);
        let s = |f: &str| r[f].as_str().unwrap_or("?").to_string();
        let outcome = s("outcome");
        let what = match outcome.split(':').next().unwrap_or_default() {
            "redriven" => format!(
                "redriven as attempt {} -> {} (DelaySeconds {} s)",
                n("attempt"),
                s("destination"),
                n("delaySeconds")
            ),
            "waiting" => format!(
                "waiting on the DLQ until {} as attempt {} (hop of {} s)",
                s("notBefore"),
                n("attempt"),
                n("delaySeconds")
            ),
            "isolated" => format!(
                "isolated at attempt {} ({}) -> {}",
                n("attempt"),
                outcome.rsplit(':').next().unwrap_or("?"),
                s("destination")
            ),
            _ => format!("{outcome}: {r}"),
        };
        println!("    {:<38} {what}", s("originalMessageId"));
    }
    // Each order ends once, redriven or isolated; the three ordinary ones waited first.
    let ends = |outcome: &str| {
        records
            .iter()
            .filter(|r| {
                r["outcome"]
                    .as_str()
                    .is_some_and(|o| o.starts_with(outcome))
            })
            .count()
    };
    let waited: HashSet<&str> = records
        .iter()
        .filter(|r| r["outcome"] == "waiting")
        .filter_map(|r| r["originalMessageId"].as_str())
        .collect();

    // Reconcile: each order once on the source queue or the poison queue, none on the DLQ.
    tokio::time::sleep(Duration::from_secs(2)).await; // the last copies' DelaySeconds
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
    let ok = statuses.iter().all(|s| s == "SUCCEEDED")
        && on_dlq.is_empty()
        && bodies(&on_source) == ["order o-901", "order o-902", "order o-903"]
        && bodies(&on_poison) == ["order o-904"]
        && ends("redriven") == 3
        && ends("isolated") == 1
        && waited.len() == 3;
    println!(
        "  reconciled over {} execution(s): source {} / poison {} / DLQ {}{}",
        statuses.len(),
        on_source.len(),
        on_poison.len(),
        on_dlq.len(),
        if ok {
            ""
        } else {
            "  <-- expected 3 / 1 / 0, each order once, the 3 ordinary ones waiting first"
        }
    );
    drop(workflow);
    ok
}

/// Executions the demo starts at most: a wait of 2 s spans one or two.
const MAX_EXECUTIONS: usize = 5;

/// Nothing on the queue: visible, in flight or delayed.
async fn dlq_empty(sqs: &aws_sdk_sqs::Client, url: &str) -> bool {
    queue_counts(sqs, url)
        .await
        .is_some_and(|(visible, in_flight, delayed)| visible + in_flight + delayed == 0)
}

/// The history an operator reads: the states entered in order, seconds after the start.
fn print_states(states: &[(f64, &str)]) {
    println!("  the execution history (state entered, seconds after the start):");
    let mut line = String::from("   ");
    for (at, name) in states {
        let item = format!(" +{at:.1}s {name}");
        if line.len() + item.len() > 100 {
            println!("{line}");
            line = String::from("   ");
        }
        line.push_str(&item);
    }
    if !line.trim().is_empty() {
        println!("{line}");
    }
}

pub async fn send_text(sqs: &aws_sdk_sqs::Client, url: &str, body: &str, x_redrive: Option<&str>) {
    let mut request = sqs.send_message().queue_url(url).message_body(body);
    if let Some(meta) = x_redrive {
        request = request.message_attributes("x-redrive", string_attr("String", meta));
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage {url}: {e:?}"));
}
