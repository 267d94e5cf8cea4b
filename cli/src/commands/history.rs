//! `redrive history ID --state-machine ARN`: what the Step Functions orchestrator did with one
//! message, across its executions.
//!
//! Each round of `messages` mode is one `redriveBatch` task, a bounded engine drain whose
//! answer (its task output in the execution history, `functions/workflow/src/messages.rs`)
//! records every message it received: `{"messageId", "originalMessageId", "attempt",
//! "outcome", "destination", "delaySeconds"?, "notBefore"?}`, the outcome as the engine logs
//! its action (`redriven`, `isolated:<reason>`, `waiting`, `plan:<decision>` in a dry run, or
//! a failure that left the message on the DLQ). A backoff longer than a copy's `DelaySeconds`
//! sends the message back to the DLQ until its `notBefore`, so one message's story may span
//! several executions: waiting in one, redriven by a later one. Scale-out drains keep no
//! records.
//!
//! This command lists the state machine's executions (ListExecutions, newest first, at most
//! `--executions`), reads each history (GetExecutionHistory) and keeps every record about the
//! message, matched by its `originalMessageId` (stable across redrives and waits: the
//! idempotency key) or by an SQS MessageId; a MessageId of one of its copies finds the whole
//! chain. Nothing is changed.

use std::collections::HashSet;

use aws_sdk_sfn::types::HistoryEvent;
use clap::Args;
use redrive_shared::timefmt::rfc3339_from_millis;
use serde_json::{Value, json};

use crate::context::{CliError, Ctx, Outcome};
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
    /// When the round's task succeeded, epoch milliseconds.
    pub at_ms: i64,
    /// `redriven`, `waiting`, `isolated`, `planned` (dry run), `failed` (left on the DLQ), or
    /// the outcome itself when it is none of these (a newer engine's).
    pub kind: String,
    /// The record as the round wrote it.
    pub detail: Value,
}

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// The kind of a record, from its `outcome` (the engine log's action).
pub fn kind_of(outcome: &str) -> String {
    let family = outcome.split(':').next().unwrap_or(outcome);
    match family {
        "redriven" | "waiting" | "isolated" => family.to_string(),
        "plan" => "planned".to_string(),
        "send-failed" | "delete-failed" | "held" | "send-rejected" => "failed".to_string(),
        _ => outcome.to_string(),
    }
}

/// The message records in one task output: a `redriveBatch` answer's `records`. An
/// `arn:aws:states:::lambda:invoke` task's output is the Invoke response, the answer in its
/// `Payload`.
fn records_in(output: &Value) -> impl Iterator<Item = &Value> {
    output
        .get("Payload")
        .unwrap_or(output)
        .get("records")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| text(r, "messageId").is_some() && text(r, "outcome").is_some())
}

/// The message records of task outputs (`(time, parsed output)`, oldest first), with the
/// time of the task that wrote them.
fn message_records(outputs: &[(i64, Value)]) -> impl Iterator<Item = (i64, &Value)> {
    outputs
        .iter()
        .flat_map(|(at_ms, output)| records_in(output).map(move |r| (*at_ms, r)))
}

/// The ids that name message `id` in `outputs`: `id` itself and, when it is the MessageId of
/// one of the message's copies, the chain's `originalMessageId`, so that every copy's record
/// is found.
pub fn chain_of<'a>(
    id: &str,
    outputs: impl IntoIterator<Item = &'a [(i64, Value)]>,
) -> HashSet<String> {
    let mut ids = HashSet::from([id.to_string()]);
    for execution in outputs {
        for (_, r) in message_records(execution) {
            if text(r, "messageId") == Some(id)
                && let Some(original) = text(r, "originalMessageId")
            {
                ids.insert(original.to_string());
            }
        }
    }
    ids
}

/// The records about the message named by `ids` (see [`chain_of`]) in one execution's task
/// outputs, oldest first.
pub fn records_of(ids: &HashSet<String>, outputs: &[(i64, Value)]) -> Vec<Record> {
    message_records(outputs)
        .filter(|(_, r)| {
            ["originalMessageId", "messageId"]
                .iter()
                .any(|f| text(r, f).is_some_and(|v| ids.contains(v)))
        })
        .map(|(at_ms, r)| Record {
            at_ms,
            kind: kind_of(text(r, "outcome").unwrap_or_default()),
            detail: r.clone(),
        })
        .collect()
}

/// The JSON outputs of an execution's succeeded tasks that carry message records, with their
/// times, oldest first.
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
                })?;
            let value: Value = serde_json::from_str(text).ok()?;
            // Only what may be asked about is kept: a search spans many executions.
            records_in(&value).next()?;
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

    // Each execution's outputs that carry records (a few per execution, at most 40 records
    // each), then the chain's ids over all of them: a copy's MessageId, given, may name a
    // message whose earlier copies were recorded in other executions.
    let mut searched: Vec<Vec<(i64, Value)>> = Vec::with_capacity(executions.len());
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
        searched.push(outputs_of(&events));
    }
    let ids = chain_of(&args.id, searched.iter().map(Vec::as_slice));
    let mut found: Vec<Found> = Vec::new();
    for (x, outputs) in executions.iter().zip(&searched) {
        let records = records_of(&ids, outputs);
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
        crate::output::print_json(&json!({
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
    let outcome = s("outcome");
    // `isolated:<reason>`, `plan:isolate:<reason>`: the reason is the outcome's last part.
    let reason = outcome.rsplit(':').next().unwrap_or("?").to_string();
    let redrive = || {
        let delay = d
            .get("delaySeconds")
            .and_then(Value::as_u64)
            .map_or(String::new(), |s| format!(" (DelaySeconds {s} s)"));
        format!("as attempt {attempt} -> {}{delay}", s("destination"))
    };
    let waiting = || {
        format!(
            "on the DLQ until {} as attempt {attempt} (hop of {} s)",
            s("notBefore"),
            n("delaySeconds")
        )
    };
    match (r.kind.as_str(), outcome.as_str()) {
        ("redriven", _) => format!("redriven {}", redrive()),
        ("waiting", _) => format!("waiting {}", waiting()),
        ("isolated", _) => format!("isolated ({reason}) -> {}", s("destination")),
        ("planned", "plan:redrive") => format!("dry run: would redrive {}", redrive()),
        ("planned", "plan:wait") => format!("dry run: would wait {}", waiting()),
        ("planned", _) => format!("dry run: would isolate ({reason}) -> {}", s("destination")),
        ("failed", "send-failed:left-on-dlq") => format!(
            "not sent: the copy to {} was not acknowledged; left on the DLQ, nothing deleted (attempt {attempt})",
            s("destination")
        ),
        ("failed", "delete-failed:duplicate-possible") => format!(
            "sent to {} but not deleted from the DLQ: left there, a duplicate is possible (attempt {attempt})",
            s("destination")
        ),
        ("failed", "held:group-order") => format!(
            "held on the DLQ behind its group's earlier message, nothing sent (attempt {attempt})"
        ),
        ("failed", "send-rejected:requeued-on-dlq") => format!(
            "rejected by {}; requeued on the DLQ, to be isolated if it keeps being rejected (attempt {attempt})",
            s("destination")
        ),
        ("failed", other) => format!("{other}: left on the DLQ (attempt {attempt})"),
        (other, _) => format!("{other}: {d}"),
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
                "isolated" | "failed" => st.warn(&line),
                _ => line,
            };
            println!("  {}  {line}", st.dim(&rfc3339_from_millis(r.at_ms)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `redriveBatch` answer (the engine's summary) with these records.
    fn round(records: Value) -> Value {
        let n = records.as_array().map_or(0, Vec::len);
        json!({"received": n, "redriven": 0, "isolated": 0, "failed": 0, "waiting": 0, "dryRun": false,
               "stoppedBecause": "queue-empty", "dlqRemaining": 0, "records": records})
    }

    fn kinds(records: &[Record]) -> Vec<&str> {
        records.iter().map(|r| r.kind.as_str()).collect()
    }

    #[test]
    fn a_message_is_followed_through_a_long_wait_across_executions() {
        // GIVEN three executions: the first sends o-101 back to the DLQ to wait (its backoff
        // is longer than a copy's delay) and redrives o-102; the second receives o-101's copy
        // before its notBefore and hops it again; the third redrives it when due.
        let first = vec![
            (500, json!({"run": {"mode": "messages"}, "proceed": true})),
            (
                1_000,
                round(json!([
                    {"messageId": "m1", "originalMessageId": "o-101", "attempt": 2, "outcome": "waiting",
                     "destination": "orders-dlq", "delaySeconds": 900, "notBefore": "2026-11-21T11:00:00Z"},
                    {"messageId": "m2", "originalMessageId": "o-102", "attempt": 1, "outcome": "redriven",
                     "destination": "orders", "delaySeconds": 1}
                ])),
            ),
            // Tally's totals count the wait but name no message.
            (
                1_100,
                json!({"received": 2, "redriven": 1, "waiting": 1, "more": false}),
            ),
        ];
        let second = [(
            900_000,
            round(json!([
                {"messageId": "m1b", "originalMessageId": "o-101", "attempt": 2, "outcome": "waiting",
                 "destination": "orders-dlq", "delaySeconds": 900, "notBefore": "2026-11-21T11:00:00Z"}
            ])),
        )];
        // A scale-out round: drains keep no records.
        let scale_out = [(
            1_500_000,
            json!([{"received": 10, "redriven": 10, "stoppedBecause": "limit"}]),
        )];
        let third = [(
            3_600_000,
            round(json!([
                {"messageId": "m1c", "originalMessageId": "o-101", "attempt": 2, "outcome": "redriven",
                 "destination": "orders", "delaySeconds": 0}
            ])),
        )];
        let executions = [&first[..], &second[..], &scale_out[..], &third[..]];

        // WHEN the message is asked for by its originalMessageId
        let ids = chain_of("o-101", executions);
        let found: Vec<Vec<Record>> = executions.iter().map(|x| records_of(&ids, x)).collect();
        // THEN its wait, its hop and its redrive are found, each in its execution
        assert_eq!(kinds(&found[0]), ["waiting"]);
        assert_eq!(found[0][0].at_ms, 1_000);
        assert_eq!(kinds(&found[1]), ["waiting"]);
        assert!(found[2].is_empty());
        assert_eq!(kinds(&found[3]), ["redriven"]);
        assert_eq!(
            describe(&found[0][0]),
            "waiting on the DLQ until 2026-11-21T11:00:00Z as attempt 2 (hop of 900 s)"
        );
        assert_eq!(
            describe(&found[3][0]),
            "redriven as attempt 2 -> orders (DelaySeconds 0 s)"
        );
        assert_eq!(found[3][0].detail["messageId"], "m1c");

        // WHEN it is asked for by the MessageId of its last copy
        let ids = chain_of("m1c", executions);
        // THEN the whole chain is found, the earlier copies too
        let all: usize = executions.iter().map(|x| records_of(&ids, x).len()).sum();
        assert_eq!(all, 3);

        // AND another message is its own story
        let ids = chain_of("m2", executions);
        let other = records_of(&ids, &first);
        assert_eq!(kinds(&other), ["redriven"]);
        assert_eq!(
            describe(&other[0]),
            "redriven as attempt 1 -> orders (DelaySeconds 1 s)"
        );
        assert!(records_of(&ids, &second).is_empty());
        let ids = chain_of("o-999", executions);
        assert!(executions.iter().all(|x| records_of(&ids, x).is_empty()));
    }

    #[test]
    fn isolations_dry_runs_and_failures_are_named() {
        // GIVEN a round with one of each outcome, the answer wrapped as lambda:invoke wraps it
        let outputs = vec![(
            1,
            json!({"StatusCode": 200, "Payload": round(json!([
                {"messageId": "m1", "originalMessageId": "o-1", "attempt": 3, "outcome": "isolated:permanent-failure",
                 "destination": "orders-poison"},
                {"messageId": "m2", "originalMessageId": "o-1", "attempt": 6, "outcome": "plan:isolate:max-attempts",
                 "destination": "orders-poison"},
                {"messageId": "m3", "originalMessageId": "o-1", "attempt": 2, "outcome": "plan:wait",
                 "destination": "orders-dlq", "delaySeconds": 900, "notBefore": "2026-11-21T11:00:00Z"},
                {"messageId": "m4", "originalMessageId": "o-1", "attempt": 2, "outcome": "plan:redrive",
                 "destination": "orders", "delaySeconds": 30},
                {"messageId": "m5", "originalMessageId": "o-1", "attempt": 2, "outcome": "send-failed:left-on-dlq",
                 "destination": "orders", "delaySeconds": 30},
                {"messageId": "m6", "originalMessageId": "o-1", "attempt": 2, "outcome": "delete-failed:duplicate-possible",
                 "destination": "orders", "delaySeconds": 30},
                {"messageId": "m7", "originalMessageId": "o-1", "attempt": 2, "outcome": "rehomed:somewhere",
                 "destination": "orders"}
            ]))}),
        )];
        // WHEN the chain is asked for
        let records = records_of(&chain_of("o-1", [&outputs[..]]), &outputs);
        // THEN each record has its kind and a line that says what happened
        assert_eq!(
            kinds(&records),
            [
                "isolated",
                "planned",
                "planned",
                "planned",
                "failed",
                "failed",
                "rehomed:somewhere"
            ]
        );
        let lines: Vec<String> = records.iter().map(describe).collect();
        assert_eq!(lines[0], "isolated (permanent-failure) -> orders-poison");
        assert_eq!(
            lines[1],
            "dry run: would isolate (max-attempts) -> orders-poison"
        );
        assert_eq!(
            lines[2],
            "dry run: would wait on the DLQ until 2026-11-21T11:00:00Z as attempt 2 (hop of 900 s)"
        );
        assert_eq!(
            lines[3],
            "dry run: would redrive as attempt 2 -> orders (DelaySeconds 30 s)"
        );
        assert!(
            lines[4].contains("left on the DLQ, nothing deleted"),
            "{}",
            lines[4]
        );
        assert!(lines[5].contains("duplicate is possible"), "{}", lines[5]);
        assert!(lines[6].starts_with("rehomed:somewhere: "), "{}", lines[6]);
    }
}
