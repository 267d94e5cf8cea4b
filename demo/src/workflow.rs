//! The Step Functions path.

use std::time::{Duration, Instant};

use aws_sdk_sqs::types::Message;
use redrive_tests::sfn::{self, WorkflowMachine};
use redrive_tests::{QueueSet, moto_sfn};
use serde_json::{Value, json};

use crate::console::Console;
use crate::incident::string_attr;
use crate::name_of;
use crate::report::read_all;

/// The orchestrator's path, short: a few failed orders on a DLQ drained by the shipped state
/// machine (`infra/statemachine/redrive.asl.json`, executed by moto; its tasks are the
/// `redrive-workflow` binary under cargo lambda watch), a backoff longer than the (scaled) SQS
/// cap held on the DLQ, a poison pill isolated, and the execution history as an operator
/// reads it. False when a message is lost or duplicated or the execution did not succeed.
pub async fn workflow_path(console: &Console) -> bool {
    println!();
    console.event(
        "the Step Functions path: the same engine run by the state machine infra/statemachine/redrive.asl.json",
    );
    let moto = moto_sfn();
    let sqs = moto.sqs().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    // 2 s of backoff where SQS's cap stands at 1 s (scaled from 900 s): 1 s is waited with
    // the message held on the DLQ, 1 s is the copy's DelaySeconds.
    let env = [
        ("BACKOFF_BASE_SECONDS", "2"),
        ("BACKOFF_JITTER", "none"),
        ("WORKFLOW_MAX_DELAY_SECONDS", "1"),
        ("WORKFLOW_HOLD_SLACK_SECONDS", "2"),
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
    drop(workflow);
    ok
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
