//! The group's book: recording a pass, the state changes (`ack`, `hold`, `release`, `note`)
//! and `history`, and the alerts a change raises.

use serde_json::{Value, json};

use redrive_engine::triage_store::{self, TriageError};
use redrive_shared::timefmt::{millis_from_rfc3339, rfc3339_from_millis};
use redrive_shared::triage::Group;
use redrive_shared::triage::state::{Alert, Book, GroupRecord, Refused};

use super::args::{BookArgs, GroupArgs, HoldArgs, NoteArgs, parse_duration};
use crate::context::{CliError, Ctx, Outcome};
use crate::output::print_json;
use redrive_engine::now_ms;

pub(super) fn refused(e: TriageError) -> CliError {
    match e {
        TriageError::Port(p) => CliError::Aws(p),
        other => CliError::Config(other.to_string()),
    }
}

/// Publishes each alert on the topic (when one is configured), one SNS message each.
pub(super) async fn publish(ctx: &Ctx, book: &BookArgs, alerts: &[Alert]) {
    for a in alerts {
        eprintln!(
            "alert: {} {} on {} ({} message(s))",
            a.kind, a.group, a.queue, a.count
        );
        let Some(topic) = &book.alert_topic else {
            continue;
        };
        let client = aws_sdk_sns::Client::new(&ctx.sdk);
        let message = serde_json::to_string(a).unwrap_or_default();
        if let Err(e) = client
            .publish()
            .topic_arn(topic)
            .subject(a.subject())
            .message(message)
            .send()
            .await
        {
            eprintln!(
                "redrive: the alert {} {} was not published: {}",
                a.kind,
                a.group,
                aws_sdk_sns::error::DisplayErrorContext(&e)
            );
        }
    }
}

/// A pass's groups recorded in the queue's book ([`triage_store::record_pass`]), then its alerts
/// published; answers each group's state as the book now has it, its trend against the pass
/// before (`new`, `back`, `+n`, `-n`, `=`) and the groups a complete pass no longer found.
pub async fn record_pass(
    ctx: &Ctx,
    book: &BookArgs,
    queue_url: &str,
    groups: &[Group],
    complete: bool,
) -> Result<Value, CliError> {
    let store = book.store(ctx)?;
    let recorded = triage_store::record_pass(&store, queue_url, groups, complete, now_ms())
        .await
        .map_err(refused)?;
    publish(ctx, book, &recorded.alerts).await;
    let states: serde_json::Map<String, Value> = groups
        .iter()
        .filter_map(|g| {
            let r = recorded.book.groups.get(&g.id)?;
            Some((g.id.clone(), json!(r.state.as_str())))
        })
        .collect();
    Ok(json!({
        "table": book.table,
        "states": states,
        "trends": recorded.trends,
        "gone": recorded.gone,
        "alerts": recorded.alerts,
    }))
}

pub(super) fn print_record(ctx: &Ctx, group: &str, r: &GroupRecord) {
    let s = &ctx.style;
    let row = |key: &str, value: String| println!("   {}{value}", s.dim(&format!("{key:<11}")));
    println!("{}  {}", s.bold(group), s.warn(r.state.as_str()));
    row("title", r.title.clone());
    row(
        "seen",
        format!(
            "{} to {} ({} message(s) last)",
            r.first_seen, r.last_seen, r.last_count
        ),
    );
    if let (Some(p), Some(n)) = (&r.plan_id, r.plan_size) {
        row("plan", format!("{p} ({n} message(s))"));
    }
    if let Some(h) = &r.hold {
        let until = h.until_ms.map(rfc3339_from_millis);
        row(
            "hold",
            format!(
                "until {} / {} of {} message(s) left",
                until.as_deref().unwrap_or("-"),
                h.left.len(),
                h.count.map_or("-".to_string(), |c| c.to_string())
            ),
        );
    }
    if let Some(t) = &r.replay {
        row(
            "replay",
            format!(
                "plan {}: sent {}, deleted {}, back within the window {}, isolated {}; stages {:?}{}",
                t.plan_id,
                t.sent,
                t.deleted,
                t.back,
                t.isolated,
                t.stages,
                if t.finished { ", finished" } else { "" }
            ),
        );
    }
    for n in &r.notes {
        row("note", format!("{} {}: {}", n.at, n.who, n.text));
    }
    for a in &r.audit {
        let mut line = format!("{} {} {}", a.at, a.who, a.action);
        if let Some(p) = &a.plan_id {
            line.push_str(&format!(" plan {p}"));
        }
        if let Some(c) = a.count {
            line.push_str(&format!(" ({c})"));
        }
        if let Some(d) = &a.detail {
            line.push_str(&format!(": {d}"));
        }
        row("audit", line);
    }
}

/// Applies a change to the group's book and prints the group as saved.
async fn change(
    ctx: &Ctx,
    target: &GroupArgs,
    apply: impl FnMut(&mut Book) -> Result<(), Refused>,
) -> Result<Outcome, CliError> {
    let url = ctx.resolve(&target.queue).await?;
    let store = target.book.store(ctx)?;
    let ((), book) = triage_store::update(&store, url.as_str(), apply)
        .await
        .map_err(refused)?;
    show(ctx, url.as_str(), &target.group.to_string(), &book)
}

fn show(ctx: &Ctx, url: &str, group: &str, book: &Book) -> Result<Outcome, CliError> {
    let r = book
        .get(group)
        .map_err(|e| CliError::Config(e.to_string()))?;
    if ctx.json {
        print_json(&json!({"queue": url, "group": group, "record": r}));
    } else {
        print_record(ctx, group, r);
    }
    Ok(Outcome::Done)
}

pub async fn ack(ctx: &Ctx, a: GroupArgs) -> Result<Outcome, CliError> {
    let (g, who) = (a.group.to_string(), a.book.who());
    change(ctx, &a, |b| b.acknowledge(&g, &who, now_ms())).await
}

pub async fn release(ctx: &Ctx, a: GroupArgs) -> Result<Outcome, CliError> {
    let (g, who) = (a.group.to_string(), a.book.who());
    change(ctx, &a, |b| b.release(&g, &who, now_ms())).await
}

pub async fn note(ctx: &Ctx, a: NoteArgs) -> Result<Outcome, CliError> {
    let (g, who) = (a.target.group.to_string(), a.target.book.who());
    change(ctx, &a.target, |b| b.note(&g, &who, &a.text, now_ms())).await
}

pub async fn hold(ctx: &Ctx, a: HoldArgs) -> Result<Outcome, CliError> {
    let now = now_ms();
    let until =
        match (&a.until, &a.for_) {
            (Some(t), _) => Some(millis_from_rfc3339(t).ok_or_else(|| {
                CliError::Config(format!("--until {t:?} is not an RFC 3339 time"))
            })?),
            (None, Some(d)) => Some(now + parse_duration(d)?.as_millis() as i64),
            (None, None) => None,
        };
    let (g, who) = (a.target.group.to_string(), a.target.book.who());
    change(ctx, &a.target, |b| b.hold(&g, &who, until, a.count, now)).await
}

pub async fn history(ctx: &Ctx, a: GroupArgs) -> Result<Outcome, CliError> {
    let url = ctx.resolve(&a.queue).await?;
    let store = a.book.store(ctx)?;
    let book = triage_store::load_or_new(&store, url.as_str()).await?;
    show(ctx, url.as_str(), &a.group.to_string(), &book)
}
