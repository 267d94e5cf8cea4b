//! The walk over the poison queue: each selected message routed to its destination, its copy
//! sent and the original deleted once the copy was acknowledged.

use std::collections::{HashMap, HashSet};

use redrive_engine::engine::{Moved, Transfer};
use redrive_engine::ports::{PortError, Queue, Received};
use redrive_shared::config::QueueUrl;
use redrive_shared::limits::MAX_MESSAGE_BYTES;
use redrive_shared::meta::{IsolationReason, RedriveMeta};

use super::ReplayArgs;
use super::entry::replay_entry;
use super::report::Report;
use crate::context::CliError;
use crate::queues::{QueueRef, Resolver};
use crate::scan::Scanner;
use crate::select::Filter;
use crate::view::MessageView;
use redrive_engine::now_ms;

/// Where copies go: a queue and its `MaximumMessageSize`.
#[derive(Debug, Clone)]
pub(super) struct Destination {
    pub(super) url: QueueUrl,
    pub(super) max_bytes: usize,
}

/// What one run works with.
pub(super) struct Plan<'a> {
    pub(super) args: &'a ReplayArgs,
    pub(super) from: QueueUrl,
    /// `--to`; None: each message to the source its `x-redrive` records, found by `sources`.
    pub(super) to: Option<Destination>,
    pub(super) sources: Option<&'a Resolver>,
}

/// The destination's own limit (as the re-driver reads it), never above SQS's.
pub(super) async fn destination<Q: Queue>(
    queue: &Q,
    url: QueueUrl,
) -> Result<Destination, PortError> {
    let max_bytes = queue
        .max_message_size(url.as_str())
        .await?
        .unwrap_or(MAX_MESSAGE_BYTES)
        .min(MAX_MESSAGE_BYTES);
    Ok(Destination { url, max_bytes })
}

pub(super) async fn walk<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    filter: &mut Filter,
    plan: &Plan<'_>,
    report: &mut Report,
) -> Result<(), PortError> {
    // FIFO: groups held behind a message that was not sent, for the whole run.
    let transfer = Transfer::new(queue);
    // Recorded source ARN -> where its messages go, or why they cannot.
    let mut routes: HashMap<String, Result<Destination, String>> = HashMap::new();
    while !filter.full() {
        let batch = scan.next(10).await?;
        if batch.is_empty() {
            break;
        }
        let chosen: Vec<Received> = batch.into_iter().filter(|m| filter.take(m)).collect();
        if chosen.is_empty() {
            continue;
        }
        let now = now_ms();
        // Positions in `chosen` by destination, in the order first seen.
        let mut groups: Vec<(Destination, Vec<usize>)> = Vec::new();
        for (i, m) in chosen.iter().enumerate() {
            let dest = match &plan.to {
                Some(to) => to.clone(),
                None => match route(queue, plan, &mut routes, m).await? {
                    Ok(dest) => dest,
                    Err(why) => {
                        report.no_source.push((MessageView::new(m, now, None), why));
                        continue;
                    }
                },
            };
            match groups.iter_mut().find(|(d, _)| d.url == dest.url) {
                Some((_, members)) => members.push(i),
                None => groups.push((dest, vec![i])),
            }
        }
        for (dest, members) in &groups {
            move_group(&transfer, scan, plan, dest, &chosen, members, now, report).await;
        }
    }
    Ok(())
}

/// Where a message goes without `--to`: the source queue its `x-redrive` records.
async fn route<Q: Queue>(
    queue: &Q,
    plan: &Plan<'_>,
    routes: &mut HashMap<String, Result<Destination, String>>,
    m: &Received,
) -> Result<Result<Destination, String>, PortError> {
    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
    if meta.reason == Some(IsolationReason::UnknownSource) {
        // The re-driver refused to guess where it goes: neither does replay, whatever source
        // the message claims.
        let claimed = meta.claimed_source().or(meta.source());
        return Ok(Err(match claimed {
            Some(claimed) => format!(
                "isolated unknown-source: its source was never known (it claims {claimed}, which is not a source of its DLQ): pass --to QUEUE"
            ),
            None => {
                "isolated unknown-source: its source was never known: pass --to QUEUE".to_string()
            }
        }));
    }
    let Some(source) = meta.source().filter(|s| !s.is_empty()) else {
        return Ok(Err(
            "no source recorded in its x-redrive: pass --to QUEUE".to_string()
        ));
    };
    if let Some(known) = routes.get(source) {
        return Ok(known.clone());
    }
    let found = match (QueueRef::parse(source), plan.sources) {
        (Ok(q @ QueueRef::Arn { .. }), Some(sources)) => match sources.resolve(&q).await {
            Ok(url) if url == plan.from => Err(format!(
                "its recorded source {source} is the queue it is on: pass --to QUEUE"
            )),
            Ok(url) => Ok(destination(queue, url).await?),
            Err(CliError::Aws(e)) => return Err(e),
            Err(e) => Err(format!("its recorded source cannot be used: {e}")),
        },
        _ => Err(format!(
            "its recorded source {source:?} is not a queue ARN: pass --to QUEUE"
        )),
    };
    routes.insert(source.to_string(), found.clone());
    Ok(found)
}

/// Sends the copies of `chosen[members]` to `dest` and deletes each original whose copy was
/// acknowledged; the report says what became of each.
#[allow(clippy::too_many_arguments)]
async fn move_group<Q: Queue>(
    transfer: &Transfer<'_, Q>,
    scan: &mut Scanner<'_, Q>,
    plan: &Plan<'_>,
    dest: &Destination,
    chosen: &[Received],
    members: &[usize],
    now: i64,
    report: &mut Report,
) {
    let args = plan.args;
    let to = dest.url.as_str();
    let to_fifo = dest.url.is_fifo();
    // Entry ids are positions in `chosen`.
    let mut entries = Vec::with_capacity(members.len());
    let mut unstamped = Vec::new();
    let mut refused = HashSet::new();
    for &i in members {
        let m = &chosen[i];
        let (mut entry, stamped) = replay_entry(m, to_fifo, dest.max_bytes, now);
        if !stamped {
            if !args.allow_unstamped {
                // Left in place; on a FIFO destination nothing later of its group may pass.
                transfer.hold_group(entry.message.group_id.as_deref());
                refused.insert(i);
                report
                    .refused_unstamped
                    .push(MessageView::new(m, now, None));
                continue;
            }
            unstamped.push(m.message_id.clone());
        }
        entry.id = i.to_string();
        entries.push(entry);
    }
    if args.dry_run {
        report.replayed.extend(
            members
                .iter()
                .filter(|i| !refused.contains(*i))
                .map(|&i| MessageView::new(&chosen[i], now, None)),
        );
        report.unstamped.extend(unstamped);
        return;
    }
    if !unstamped.is_empty() {
        eprintln!(
            "warning: sending {} message(s) without x-redrive (--allow-unstamped): the consumer keys each copy on its new MessageId, so a copy replayed again or delivered twice is processed again: {}",
            unstamped.len(),
            unstamped.join(", ")
        );
        report.unstamped.extend(unstamped);
    }
    if entries.is_empty() {
        return;
    }
    let entries = entries
        .into_iter()
        .map(|e| {
            let handle =
                e.id.parse::<usize>()
                    .ok()
                    .and_then(|i| chosen.get(i))
                    .map(|m| m.receipt_handle.clone())
                    .unwrap_or_default();
            (e, handle)
        })
        .collect();
    let Moved { sent, deleted } = transfer
        .send_then_delete(plan.from.as_str(), to, to_fifo, entries)
        .await;
    for &i in members {
        if refused.contains(&i) {
            continue;
        }
        let m = &chosen[i];
        let id = i.to_string();
        let view = MessageView::new(m, now, None);
        if deleted.ok.contains(&id) {
            scan.settled(&m.message_id);
            report.replayed.push(view);
        } else if sent.ok.contains(&id) {
            let why = deleted.failed.get(&id).cloned().unwrap_or_default();
            report.duplicate_possible.push((view, why));
        } else if sent.held.contains(&id) {
            report.held.push(view);
        } else {
            let why = sent.failed.get(&id).cloned().unwrap_or_default();
            report.failed.push((view, why));
        }
    }
}
