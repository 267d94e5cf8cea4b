//! `redrive triage QUEUE --index`: the groups the queue's book holds, as the last pass recorded
//! them (the archiver's hourly sweep, or a `redrive triage --table` pass), read with one GetItem:
//! no message is received, and the time it takes grows with the groups, not the messages.

use serde_json::json;

use redrive_shared::timefmt::{millis_from_rfc3339, rfc3339_from_millis};

use super::PassArgs;
use crate::context::{CliError, Ctx, Outcome};
use redrive_engine::now_ms;

pub async fn run(ctx: &Ctx, pass: &PassArgs, resolved: bool) -> Result<Outcome, CliError> {
    let Some(queue_ref) = &pass.queue else {
        return Err(CliError::Config(
            "--index reads a queue's triage book: name the queue".into(),
        ));
    };
    let store = pass.book.store(ctx)?;
    let target = ctx.resolve(queue_ref).await?;
    let book = store.read(target.as_str()).await.map_err(CliError::Aws)?;
    let Some(book) = book.filter(|b| b.passed_at.is_some()) else {
        eprintln!(
            "redrive: no index of {} yet: the archiver's sweep records it within the hour once \
             deployed with TRIAGE_TABLE, or run `redrive triage {} --table TABLE`",
            target.name(),
            target.name()
        );
        return Ok(Outcome::Incomplete);
    };
    let passed_at = book.passed_at.clone().unwrap_or_default();
    let age_seconds = millis_from_rfc3339(&passed_at).map(|at| (now_ms() - at).max(0) / 1000);
    let groups = book.largest_first(resolved);
    if ctx.json {
        let rows: Vec<_> = groups
            .iter()
            .map(|(id, g)| {
                let mut row = serde_json::to_value(g).unwrap_or_default();
                if let Some(map) = row.as_object_mut() {
                    map.insert("id".into(), json!(id));
                    // The index is read for its groups: notes and audit are in `triage history`.
                    map.remove("notes");
                    map.remove("audit");
                }
                row
            })
            .collect();
        crate::output::print_json(&json!({
            "input": target.as_str(),
            "indexedAt": passed_at,
            "ageSeconds": age_seconds,
            "groups": rows,
        }));
        return Ok(Outcome::Done);
    }
    let s = &ctx.style;
    println!(
        "{}: {} group(s){}, indexed at {passed_at}{}",
        s.bold(target.name()),
        groups.len(),
        if resolved { "" } else { " not resolved" },
        age_seconds.map_or(String::new(), |a| format!(" ({a} s ago)"))
    );
    for (id, g) in &groups {
        let facts = g.pass.as_ref();
        println!(
            "{}  {:>6}  {:<14} {}",
            s.bold(id),
            g.last_count,
            g.state.as_str(),
            g.title
        );
        let action = facts.map_or("", |f| f.action.as_str());
        let last = facts
            .and_then(|f| f.last_failure.clone())
            .unwrap_or_else(|| g.last_seen.clone());
        let source = g.source.as_deref().unwrap_or("-");
        let held = g
            .hold
            .as_ref()
            .and_then(|h| h.until_ms)
            .map_or(String::new(), |u| {
                format!(", held until {}", rfc3339_from_millis(u))
            });
        println!(
            "   {}",
            s.dim(&format!(
                "source {source}, last failure {last}, action {action}{held}"
            ))
        );
    }
    Ok(Outcome::Done)
}
