//! `redrive history ID --state-machine ARN`: what the Step Functions orchestrator did with one
//! message, across its executions.
//!
//! The workflow's tasks write each message's decision and outcome as task output, in the
//! execution history (`functions/workflow/src/lib.rs`): `ReceiveBatch`'s items (attempt,
//! action, reason, backoff split into wait and delay, destination), `HoldOnDlq`'s hold,
//! `RedriveMessage` / `IsolatePoisonPill`'s outcome, `LeftOnDlq` when a task failed for good.
//! This command lists the state machine's executions (ListExecutions, newest first, at most
//! `--executions`), reads each history (GetExecutionHistory) and keeps every record about the
//! message, matched by its `originalMessageId` (stable across redrives: the idempotency key) or
//! by an SQS MessageId. Nothing is changed.

use std::collections::HashSet;

use aws_sdk_sfn::types::HistoryEvent;
use clap::Args;
use redrive_shared::timefmt::rfc3339_from_millis;
use serde_json::{Value, json};

use super::{CliError, Ctx, Outcome};
use redrive_engine::ports::PortError;

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The message: its originalMessageId (the same across redrives) or an SQS MessageId.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The orchestrator's state machine (the stack's output StateMachineArn).
    #[arg(long, value_name = "ARN", env = "STATE_MACHINE_ARN")]
    pub state_machine: Option<String>,
    /// How many of the newest executions to search.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub executions: u32,
}

/// One thing the workflow recorded about the message.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When the event was written, epoch milliseconds.
    pub at_ms: i64,
    /// `decided`, `held`, `redriven`, `isolated`, `failed`, `left-on-dlq`, `planned` (dry run).
    pub kind: String,
    /// The task output (or item) as written.
    pub detail: Value,
}

/// Every object in `value` (itself included, arrays and objects walked) that has `field`.
fn objects_with<'a>(value: &'a Value, field: &str, out: &mut Vec<&'a Value>) {
    match value {
        Value::Object(map) => {
            if map.contains_key(field) {
                out.push(value);
            }
            for v in map.values() {
                objects_with(v, field, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| objects_with(v, field, out)),
        _ => {}
    }
}

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// The records about message `id` in one execution's outputs (`(time, parsed output)` of each
/// task and state output, oldest first). A record that several outputs carry is kept once, at
/// its first appearance.
pub fn records_of(id: &str, outputs: &[(i64, Value)]) -> Vec<Record> {
    // The MessageIds this message had in this execution (a hold names only the MessageId).
    let mut ids: HashSet<String> = HashSet::from([id.to_string()]);
    for (_, output) in outputs {
        let mut found = Vec::new();
        objects_with(output, "messageId", &mut found);
        for o in found {
            if text(o, "originalMessageId") == Some(id)
                && let Some(m) = text(o, "messageId")
            {
                ids.insert(m.to_string());
            }
        }
    }
    let mut records: Vec<Record> = Vec::new();
    for (at_ms, output) in outputs {
        let mut found = Vec::new();
        objects_with(output, "messageId", &mut found);
        for o in found {
            let mine = text(o, "originalMessageId") == Some(id)
                || text(o, "messageId").is_some_and(|m| ids.contains(m));
            if !mine {
                continue;
            }
            let kind = if let Some(outcome) = text(o, "outcome") {
                outcome.to_string()
            } else if o.get("held").is_some() {
                "held".to_string()
            } else if o.get("backoffSeconds").is_some() {
                if output.get("dryRun") == Some(&Value::Bool(true)) {
                    "planned".to_string()
                } else {
                    "decided".to_string()
                }
            } else {
                continue;
            };
            // Strip what is of no use to a person (and long): receipt handles; and what later
            // states added to an item (`hold`, `error`: records of their own).
            let mut detail = o.clone();
            if let Some(map) = detail.as_object_mut() {
                map.remove("receiptHandle");
                if kind == "decided" || kind == "planned" {
                    map.remove("hold");
                    map.remove("error");
                }
            }
            // Later states' outputs repeat earlier results (ResultPath merges them into the
            // state): the first time a record appears is when it happened.
            let duplicate = records.iter().any(|r| r.kind == kind && r.detail == detail);
            if !duplicate {
                records.push(Record {
                    at_ms: *at_ms,
                    kind,
                    detail,
                });
            }
        }
    }
    records
}

/// The JSON outputs of an execution's events, with their times, oldest first.
fn outputs_of(events: &[HistoryEvent]) -> Vec<(i64, Value)> {
    events
        .iter()
        .filter_map(|e| {
            let text = e
                .task_succeeded_event_details()
                .and_then(|d| d.output())
                .or_else(|| {
                    e.lambda_function_succeeded_event_details()
                        .and_then(|d| d.output())
                })
                .or_else(|| e.state_exited_event_details().and_then(|d| d.output()))?;
            let value: Value = serde_json::from_str(text).ok()?;
            Some((e.timestamp().to_millis().unwrap_or(0), value))
        })
        .collect()
}

fn sfn_error<E>(operation: &'static str, e: aws_sdk_sfn::error::SdkError<E>) -> PortError
where
    E: aws_sdk_sfn::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let retryable = !matches!(e, aws_sdk_sfn::error::SdkError::ServiceError(_));
    PortError {
        operation,
        code: aws_sdk_sfn::error::ProvideErrorMetadata::code(&e)
            .unwrap_or("Unknown")
            .to_string(),
        message: aws_sdk_sfn::error::DisplayErrorContext(&e).to_string(),
        retryable,
        source: None,
    }
}

/// One execution's records.
struct Found {
    execution: String,
    name: String,
    status: String,
    started_ms: i64,
    records: Vec<Record>,
}

pub async fn run(ctx: &Ctx, args: HistoryArgs) -> Result<Outcome, CliError> {
    let state_machine = match args.state_machine.clone() {
        Some(arn) => arn,
        None => match std::env::var("STATE_MACHINE_ARN") {
            Ok(arn) if !arn.trim().is_empty() => arn,
            _ => {
                return Err(CliError::Config(
                    "missing the state machine: pass --state-machine ARN or set STATE_MACHINE_ARN (the stack's output StateMachineArn)".into(),
                ));
            }
        },
    };
    if args.id.trim().is_empty() {
        return Err(CliError::Config("the message id is empty".into()));
    }
    let client = aws_sdk_sfn::Client::new(&ctx.sdk);

    // Newest first (ListExecutions' order), at most --executions.
    let mut executions = Vec::new();
    let mut pages = client
        .list_executions()
        .state_machine_arn(&state_machine)
        .into_paginator()
        .send();
    'pages: while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sfn_error("ListExecutions", e))?;
        for x in page.executions {
            if executions.len() as u32 >= args.executions {
                break 'pages;
            }
            executions.push(x);
        }
    }

    let mut found: Vec<Found> = Vec::new();
    for x in &executions {
        let mut events = Vec::new();
        let mut history = client
            .get_execution_history()
            .execution_arn(&x.execution_arn)
            .into_paginator()
            .send();
        while let Some(page) = history.next().await {
            let page = page.map_err(|e| sfn_error("GetExecutionHistory", e))?;
            events.extend(page.events);
        }
        let records = records_of(&args.id, &outputs_of(&events));
        if !records.is_empty() {
            found.push(Found {
                execution: x.execution_arn.clone(),
                name: x.name.clone(),
                status: x.status.as_str().to_string(),
                started_ms: x.start_date.to_millis().unwrap_or(0),
                records,
            });
        }
    }
    // Oldest execution first: the message's story in order.
    found.sort_by_key(|f| f.started_ms);

    if ctx.json {
        super::output::print_json(&json!({
            "id": args.id,
            "stateMachineArn": state_machine,
            "executionsSearched": executions.len(),
            "executions": found.iter().map(|f| json!({
                "executionArn": f.execution,
                "name": f.name,
                "status": f.status,
                "startedAt": rfc3339_from_millis(f.started_ms),
                "records": f.records.iter().map(|r| json!({
                    "at": rfc3339_from_millis(r.at_ms),
                    "kind": r.kind,
                    "detail": r.detail,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }));
    } else {
        print_human(ctx, &args.id, executions.len(), &found);
    }
    Ok(if found.is_empty() {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}

/// One line about a record, for people.
pub fn describe(r: &Record) -> String {
    let d = &r.detail;
    let n = |f: &str| d.get(f).and_then(Value::as_u64).unwrap_or(0);
    let s = |f: &str| text(d, f).unwrap_or("?").to_string();
    let attempt = n("attempt");
    match r.kind.as_str() {
        "decided" | "planned" => {
            let verb = if r.kind == "planned" {
                "dry run: would"
            } else {
                "decided:"
            };
            if s("action") == "isolate" {
                format!(
                    "{verb} isolate (attempt {attempt}, reason {}) -> {}",
                    s("reason"),
                    s("destination")
                )
            } else {
                format!(
                    "{verb} redrive as attempt {attempt} -> {} after {} s (held on the DLQ {} s, DelaySeconds {} s)",
                    s("destination"),
                    n("backoffSeconds"),
                    n("waitSeconds"),
                    n("delaySeconds")
                )
            }
        }
        "held" => format!("held on the DLQ (hidden {} s)", n("heldSeconds")),
        "redriven" => format!(
            "redriven as attempt {attempt} -> {} (waited {} s, DelaySeconds {} s)",
            s("destination"),
            n("waitedSeconds"),
            n("delaySeconds")
        ),
        "isolated" => format!(
            "isolated (attempt {attempt}, reason {}) -> {}",
            s("reason"),
            s("destination")
        ),
        "failed" => {
            format!("not sent: the copy was not acknowledged; left on the DLQ (attempt {attempt})")
        }
        "left-on-dlq" => format!(
            "left on the DLQ after a task failed ({}); nothing deleted",
            text(d, "error").unwrap_or("unknown error")
        ),
        other => format!("{other}: {d}"),
    }
}

fn print_human(ctx: &Ctx, id: &str, searched: usize, found: &[Found]) {
    let st = &ctx.style;
    if found.is_empty() {
        println!(
            "{} no record of {id} in the {searched} newest executions",
            st.warn("!")
        );
        return;
    }
    let records: usize = found.iter().map(|f| f.records.len()).sum();
    println!(
        "{} {records} records in {} of the {searched} newest executions",
        st.bold(&format!("history of {id}:")),
        found.len()
    );
    for f in found {
        println!(
            "\n{} {} ({}, started {})",
            st.bold("execution"),
            f.name,
            f.status,
            rfc3339_from_millis(f.started_ms)
        );
        for r in &f.records {
            let line = describe(r);
            let line = match r.kind.as_str() {
                "redriven" => st.good(&line),
                "isolated" | "failed" | "left-on-dlq" => st.warn(&line),
                _ => line,
            };
            println!("  {}  {line}", st.dim(&rfc3339_from_millis(r.at_ms)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_follow_the_message_by_original_id_and_by_message_id() {
        let outputs = vec![
            (
                1_000,
                json!({"items": [
                    {"messageId": "m1", "receiptHandle": "h1", "originalMessageId": "o-101", "attempt": 2,
                     "action": "redrive", "backoffSeconds": 5, "waitSeconds": 4, "delaySeconds": 1, "destination": "orders"},
                    {"messageId": "m2", "receiptHandle": "h2", "originalMessageId": "o-102", "attempt": 1,
                     "action": "redrive", "backoffSeconds": 1, "waitSeconds": 0, "delaySeconds": 1, "destination": "orders"}
                ], "received": 2, "queueEmpty": false, "dryRun": false}),
            ),
            // a hold names only the MessageId
            (
                2_000,
                json!({"messageId": "m1", "held": true, "heldSeconds": 6}),
            ),
            (
                2_000,
                json!({"messageId": "m2", "held": true, "heldSeconds": 2}),
            ),
            (
                6_000,
                json!({"messageId": "m1", "originalMessageId": "o-101", "attempt": 2, "action": "redrive",
                       "delaySeconds": 1, "waitedSeconds": 4, "destination": "orders", "outcome": "redriven"}),
            ),
            // HoldOnDlq's exit: the item with the hold merged in (ResultPath $.hold)
            (
                2_001,
                json!({"messageId": "m1", "receiptHandle": "h1", "originalMessageId": "o-101", "attempt": 2,
                     "action": "redrive", "backoffSeconds": 5, "waitSeconds": 4, "delaySeconds": 1, "destination": "orders",
                     "hold": {"messageId": "m1", "held": true, "heldSeconds": 6}}),
            ),
            // the state's exit repeats the task's output: kept once
            (
                6_001,
                json!({"messageId": "m1", "originalMessageId": "o-101", "attempt": 2, "action": "redrive",
                       "delaySeconds": 1, "waitedSeconds": 4, "destination": "orders", "outcome": "redriven"}),
            ),
        ];
        let records = records_of("o-101", &outputs);
        let kinds: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["decided", "held", "redriven"]);
        assert!(records[0].detail.get("receiptHandle").is_none());
        assert!(describe(&records[0]).contains("held on the DLQ 4 s, DelaySeconds 1 s"));
        assert_eq!(describe(&records[1]), "held on the DLQ (hidden 6 s)");
        assert!(describe(&records[2]).starts_with("redriven as attempt 2 -> orders"));
        // by MessageId too
        assert_eq!(records_of("m2", &outputs).len(), 2);
        // nothing about another message
        assert!(records_of("o-999", &outputs).is_empty());
    }

    #[test]
    fn dry_runs_and_left_on_dlq_are_named() {
        let outputs = vec![
            (
                1,
                json!({"items": [{"messageId": "m1", "originalMessageId": "o-1", "attempt": 6, "action": "isolate",
                    "reason": "max-attempts", "backoffSeconds": 0, "waitSeconds": 0, "delaySeconds": 0, "destination": "poison"}],
                    "dryRun": true}),
            ),
            (
                2,
                json!({"messageId": "m1", "originalMessageId": "o-1", "attempt": 6, "outcome": "left-on-dlq", "error": "MessageNotFound"}),
            ),
        ];
        let records = records_of("o-1", &outputs);
        assert_eq!(records[0].kind, "planned");
        assert!(describe(&records[0]).contains("would isolate"));
        assert!(describe(&records[1]).contains("MessageNotFound"));
    }
}
