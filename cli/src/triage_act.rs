//! Acting on a triage group: `ack`, `hold`, `release`, `note`, `history`, `replay` (canary
//! first) and `discard` (archived first). The group's state, hold, notes and audit are the
//! queue's book in the triage table (`redrive_shared::triage::state`,
//! `redrive_engine::triage_store`); the message ids an action moves are the frozen plan the
//! last `redrive triage` pass stored. Moving messages is `replay`'s and `export`'s own work
//! (send, check, then delete; archive, check, then delete). docs/triage.md has the workflow.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};

use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageError, TriageStore};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::timefmt::rfc3339_from_millis;
use redrive_shared::triage::state::{Alert, Book, Finish, GroupRecord, PassFacts, stages};
use redrive_shared::triage::{Group, GroupId};

use super::export::{self, ExportArgs};
use super::filter::FilterArgs;
use super::inspect::facts;
use super::queues::QueueRef;
use super::replay::{self, ReplayArgs};
use super::scan::Scanner;
use super::select::Selection;
use super::{CliError, Ctx, Outcome, now_ms};

/// Above this many messages an action needs `--yes` (or a typed yes at a terminal).
pub const CONFIRM_ABOVE: usize = 10;
/// Above this many messages an action needs `--confirm GROUP` (or the group id typed).
pub const TYPED_ABOVE: usize = 1000;

/// Where triage's book lives and who acts.
#[derive(Debug, Clone, Args)]
pub struct BookArgs {
    /// The DynamoDB table of triage's book (group states, holds, notes, audit, plans); the
    /// deployed stack's circuit table serves. A `triage` pass with a table records what it saw.
    #[arg(long = "table", value_name = "TABLE", env = "TRIAGE_TABLE")]
    pub table: Option<String>,
    /// An SNS topic for triage's alerts: a new group, a regression, a failed canary (one
    /// message per transition, never one per message).
    #[arg(
        long = "alert-topic",
        value_name = "ARN",
        env = "TRIAGE_ALERT_TOPIC_ARN"
    )]
    pub alert_topic: Option<String>,
    /// Who acts, for the audit (default: REDRIVE_OPERATOR, else the login name).
    #[arg(long = "operator", value_name = "NAME", env = "REDRIVE_OPERATOR")]
    pub operator: Option<String>,
}

impl BookArgs {
    pub fn store(&self, ctx: &Ctx) -> Result<DynamoDbTriageStore, CliError> {
        match self.table.as_deref().filter(|t| !t.is_empty()) {
            Some(table) => Ok(DynamoDbTriageStore::new(&ctx.sdk, table)),
            None => Err(CliError::Config(
                "triage's book needs a table: pass --table TABLE or set TRIAGE_TABLE".into(),
            )),
        }
    }

    fn who(&self) -> String {
        self.operator
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// A group on a queue.
#[derive(Debug, Args)]
pub struct GroupArgs {
    /// The group id, as `redrive triage` printed it.
    #[arg(value_name = "GROUP", value_parser = GroupId::parse)]
    pub group: GroupId,
    /// The DLQ or poison queue: name, ARN or URL.
    #[arg(value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub queue: QueueRef,
    #[command(flatten)]
    pub book: BookArgs,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    /// The hold ends at this time (RFC 3339, e.g. 2026-12-01T09:00:00Z).
    #[arg(long, value_name = "TIME", conflicts_with = "for_")]
    pub until: Option<String>,
    /// The hold ends after this long (30m, 4h, 2d).
    #[arg(long = "for", id = "for_", value_name = "DURATION")]
    pub for_: Option<String>,
    /// The hold ends once the re-driver has left this many distinct messages of the group.
    #[arg(long, value_name = "N")]
    pub count: Option<u32>,
}

#[derive(Debug, Args)]
pub struct NoteArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    /// The note.
    #[arg(value_name = "TEXT")]
    pub text: String,
}

/// How much an action may move without asking.
#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// The plan to act on (default: the one the last `redrive triage` pass listed).
    #[arg(long, value_name = "PLAN")]
    pub plan: Option<String>,
    /// Show what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm an action on more than 10 messages.
    #[arg(long)]
    pub yes: bool,
    /// Confirm an action on more than 1,000 messages: the group id, typed.
    #[arg(long, value_name = "GROUP")]
    pub confirm: Option<String>,
}

#[derive(Debug, Args)]
pub struct GroupReplayArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Messages in the first stage (the canary); then 10, 100 and the rest.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub canary: u64,
    /// The verdict window after each stage (e.g. 90s, 5m). Default: the source queue's
    /// visibility timeout times its maxReceiveCount (1 without a redrive policy), plus 10 s.
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// The queue to send to (default: the group's source queue).
    #[arg(long, value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub to: Option<QueueRef>,
    /// A poison queue to look in for isolated canaries too.
    #[arg(long, value_name = "QUEUE", value_parser = super::queues::parse_queue)]
    pub poison: Option<QueueRef>,
    /// Messages sent per second at most.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: u64,
    /// FIFO: replay even where a message group holds messages of other causes before this
    /// group's (they would then be processed after them, out of their order).
    #[arg(long)]
    pub allow_interleaved: bool,
}

#[derive(Debug, Args)]
pub struct GroupDiscardArgs {
    #[command(flatten)]
    pub target: GroupArgs,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Where each message is archived before its delete: s3://BUCKET/PREFIX (body,
    /// attributes and x-redrive, in the archive format `redrive import` restores).
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub archive: String,
}

/// Parses `90s`, `30m`, `4h`, `2d` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, CliError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        CliError::Config(format!(
            "{text:?} is not a duration (e.g. 90s, 30m, 4h, 2d)"
        ))
    })?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(CliError::Config(format!(
                "{text:?} is not a duration: the unit must be s, m, h or d"
            )));
        }
    };
    Ok(Duration::from_secs(secs))
}

fn refused(e: TriageError) -> CliError {
    match e {
        TriageError::Port(p) => CliError::Aws(p),
        other => CliError::Config(other.to_string()),
    }
}

/// Publishes each alert on the topic (when one is configured), one SNS message each.
async fn publish(ctx: &Ctx, book: &BookArgs, alerts: &[Alert]) {
    for a in alerts {
        eprintln!(
            "alert: {} {} on {} ({} message(s))",
            a.kind, a.group, a.queue, a.count
        );
        let Some(topic) = &book.alert_topic else {
            continue;
        };
        let client = aws_sdk_sns::Client::new(&ctx.sdk);
        let subject = format!("redrive triage: {} {}", a.kind, a.group);
        let message = serde_json::to_string(a).unwrap_or_default();
        if let Err(e) = client
            .publish()
            .topic_arn(topic)
            .subject(subject)
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

/// A pass's groups recorded in the queue's book: each group observed (new groups and
/// regressions alert), its plan stored; a complete pass marks the groups it did not find
/// resolved; holds whose time ran out end.
pub async fn record_pass(
    ctx: &Ctx,
    book: &BookArgs,
    queue_url: &str,
    groups: &[Group],
    complete: bool,
) -> Result<Value, CliError> {
    let store = book.store(ctx)?;
    for g in groups {
        store.save_plan(&g.plan_id, &g.message_ids).await?;
    }
    let now = now_ms();
    let (alerts, saved) = triage_store::update(&store, queue_url, |b| {
        let mut alerts = Vec::new();
        for g in groups {
            let plan = Some((g.plan_id.as_str(), g.message_ids.len() as u64));
            alerts.extend(b.observe(
                &g.id,
                &g.title,
                g.source.as_deref(),
                g.count as u64,
                plan,
                now,
            ));
            b.keep_pass_facts(&g.id, PassFacts::of(g), now)?;
        }
        b.passed(now);
        if complete {
            b.absent(groups.iter().map(|g| g.id.as_str()), now);
        }
        b.expire(now);
        Ok(alerts)
    })
    .await
    .map_err(refused)?;
    publish(ctx, book, &alerts).await;
    let states: serde_json::Map<String, Value> = groups
        .iter()
        .filter_map(|g| {
            let r = saved.groups.get(&g.id)?;
            Some((g.id.clone(), json!(r.state.as_str())))
        })
        .collect();
    Ok(json!({"table": book.table, "states": states, "alerts": alerts}))
}

fn print_record(ctx: &Ctx, group: &str, r: &GroupRecord) {
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
    apply: impl FnMut(&mut Book) -> Result<(), redrive_shared::triage::state::Refused>,
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
        super::output::print_json(&json!({"queue": url, "group": group, "record": r}));
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
            (Some(t), _) => Some(redrive_shared::timefmt::millis_from_rfc3339(t).ok_or_else(
                || CliError::Config(format!("--until {t:?} is not an RFC 3339 time")),
            )?),
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

/// The plan an action acts on, and whether the operator confirmed it. `Ok(None)`: refused
/// (the preview was printed).
async fn frozen_plan(
    ctx: &Ctx,
    store: &DynamoDbTriageStore,
    url: &str,
    group: &str,
    confirm: &ConfirmArgs,
    verb: &str,
) -> Result<(String, Vec<String>, GroupRecord), CliError> {
    let book = triage_store::load_or_new(store, url).await?;
    let record = book
        .get(group)
        .map_err(|e| CliError::Config(e.to_string()))?
        .clone();
    let plan_id = confirm
        .plan
        .clone()
        .or_else(|| record.plan_id.clone())
        .ok_or_else(|| {
            CliError::Config(format!(
                "group {group} has no plan: run `redrive triage` on the queue with the table first"
            ))
        })?;
    let ids = store.load_plan(&plan_id).await?.ok_or_else(|| {
        CliError::Config(format!(
            "no plan {plan_id} is stored: run `redrive triage` again"
        ))
    })?;
    let _ = (ctx, verb);
    Ok((plan_id, ids, record))
}

/// Whether the operator confirmed acting on `n` messages of `group`.
fn confirmed(n: usize, group: &str, confirm: &ConfirmArgs) -> Result<bool, String> {
    if n > TYPED_ABOVE {
        return match confirm.confirm.as_deref() {
            Some(g) if g == group => Ok(true),
            Some(g) => Err(format!("--confirm {g} is not the group id {group}")),
            None => ask(
                &format!("type the group id ({group}) to act on {n} messages: "),
                group,
            ),
        };
    }
    if n > CONFIRM_ABOVE && !confirm.yes && confirm.confirm.as_deref() != Some(group) {
        return ask(&format!("act on {n} messages? type yes: "), "yes");
    }
    Ok(true)
}

fn ask(prompt: &str, expected: &str) -> Result<bool, String> {
    if !std::io::stdin().is_terminal() {
        return Ok(false);
    }
    eprint!("{prompt}");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    Ok(answer.trim() == expected)
}

/// An operation about to act on a group's plan.
struct Operation<'a> {
    store: &'a DynamoDbTriageStore,
    url: &'a str,
    group: &'a str,
    plan_id: &'a str,
    size: usize,
}

impl Operation<'_> {
    /// Asks for the confirmation its size needs, then marks the operation begun in the book
    /// (refused while another runs on the group). `Some(outcome)`: not confirmed, nothing done.
    async fn confirm_and_begin(
        &self,
        operation: &str,
        who: &str,
        confirm: &ConfirmArgs,
    ) -> Result<Option<Outcome>, CliError> {
        match confirmed(self.size, self.group, confirm) {
            Ok(true) => {}
            Ok(false) => {
                eprintln!("redrive: {}", refusal(self.size, self.group));
                return Ok(Some(Outcome::Refused));
            }
            Err(e) => return Err(CliError::Config(e)),
        }
        triage_store::update(self.store, self.url, |b| {
            b.begin(
                self.group,
                operation,
                who,
                self.plan_id,
                self.size as u64,
                now_ms(),
            )
        })
        .await
        .map_err(refused)?;
        Ok(None)
    }
}

fn refusal(n: usize, group: &str) -> String {
    if n > TYPED_ABOVE {
        format!("not confirmed: pass --confirm {group} to act on {n} messages")
    } else {
        format!("not confirmed: pass --yes to act on {n} messages")
    }
}

/// The source queue's verdict window: visibility timeout × maxReceiveCount + 10 s.
async fn default_window(ctx: &Ctx, to: &str) -> Result<Duration, CliError> {
    let f = facts(&ctx.queue(), to).await?;
    let visibility = f.visibility_timeout_seconds.unwrap_or(30);
    let receives = f.max_receive_count().unwrap_or(1);
    Ok(Duration::from_secs(visibility * receives + 10))
}

/// FIFO: the message groups in which a message outside the plan comes before one of the plan,
/// as far as a pass can read them (SQS hands out a message group's head only).
async fn interleaved(
    ctx: &Ctx,
    url: &str,
    plan: &BTreeSet<String>,
) -> Result<Vec<String>, CliError> {
    let mut other_first: BTreeSet<String> = BTreeSet::new();
    let mut mixed: BTreeSet<String> = BTreeSet::new();
    each_message(ctx, url, |m| {
        let group = m.group_id.clone().unwrap_or_default();
        if !plan.contains(&m.message_id) {
            other_first.insert(group);
        } else if other_first.contains(&group) {
            mixed.insert(group);
        }
    })
    .await?;
    Ok(mixed.into_iter().collect())
}

/// Copies of `originals` found on `url` that are not the plan's own messages.
async fn came_back(
    ctx: &Ctx,
    url: &str,
    originals: &BTreeSet<String>,
    plan: &BTreeSet<String>,
) -> Result<u64, CliError> {
    let mut back = 0;
    each_message(ctx, url, |m| {
        let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
        if !plan.contains(&m.message_id) && originals.contains(&meta.original_message_id) {
            back += 1;
        }
    })
    .await?;
    Ok(back)
}

/// Hands every message visible on `url` to `each`, in the order received, holding them until
/// the walk ends and then releasing them all.
async fn each_message(
    ctx: &Ctx,
    url: &str,
    mut each: impl FnMut(&redrive_engine::ports::Received),
) -> Result<(), CliError> {
    let queue = ctx.queue();
    let mut scan = Scanner::new(&queue, url);
    let walked: Result<(), redrive_engine::ports::PortError> = async {
        loop {
            let batch = scan.next(10).await?;
            if batch.is_empty() {
                return Ok(());
            }
            batch.iter().for_each(&mut each);
        }
    }
    .await;
    scan.release().await;
    Ok(walked?)
}

pub async fn replay_group(ctx: &Ctx, a: GroupReplayArgs) -> Result<Outcome, CliError> {
    let group = a.target.group.to_string();
    let url = ctx.resolve(&a.target.queue).await?;
    let store = a.target.book.store(ctx)?;
    let (plan_id, ids, record) =
        frozen_plan(ctx, &store, url.as_str(), &group, &a.confirm, "replay").await?;
    let to = match (&a.to, &record.source) {
        (Some(q), _) => q.clone(),
        (None, Some(name)) => QueueRef::parse(name).map_err(CliError::Config)?,
        (None, None) => {
            return Err(CliError::Config(format!(
                "group {group} has no known source queue: pass --to QUEUE"
            )));
        }
    };
    let to_url = ctx.resolve(&to).await?;
    let window = match &a.window {
        Some(w) => parse_duration(w)?,
        None => default_window(ctx, to_url.as_str()).await?,
    };
    let plan: BTreeSet<String> = ids.iter().cloned().collect();
    // FIFO: triage never reorders. A message group whose head holds another cause before this
    // group's messages would see them overtake it.
    if url.is_fifo() && !a.allow_interleaved {
        let mixed = interleaved(ctx, url.as_str(), &plan).await?;
        if !mixed.is_empty() {
            return Err(CliError::Config(format!(
                "message group(s) {} hold messages of other causes before this group's: replaying it would reorder them; replay or discard those first, or pass --allow-interleaved",
                mixed.join(", ")
            )));
        }
    }
    let sizes = stages(ids.len() as u64, a.canary);
    let preview = format!(
        "would replay {} of plan {plan_id} (group {group}) from {} to {} in stages {sizes:?}, a verdict window of {} s after each",
        ids.len(),
        url.name(),
        to_url.name(),
        window.as_secs()
    );
    eprintln!("{preview}");
    if a.confirm.dry_run {
        if ctx.json {
            super::output::print_json(&json!({"group": group, "plan": plan_id, "dryRun": true,
                "messages": ids.len(), "stages": sizes, "windowSeconds": window.as_secs(), "to": to_url.as_str()}));
        }
        return Ok(Outcome::Done);
    }
    let poison = match &a.poison {
        Some(p) => Some(ctx.resolve(p).await?),
        None => None,
    };
    let who = a.target.book.who();
    let begun = Operation {
        store: &store,
        url: url.as_str(),
        group: &group,
        plan_id: &plan_id,
        size: ids.len(),
    };
    if let Some(refused) = begun.confirm_and_begin("replay", &who, &a.confirm).await? {
        return Ok(refused);
    }

    let mut remaining = plan.clone();
    let mut left = 0u64;
    let mut stopped = None;
    for n in sizes {
        if remaining.is_empty() {
            break;
        }
        let started = std::time::Instant::now();
        let args = ReplayArgs {
            from: a.target.queue.clone(),
            to: Some(to.clone()),
            selection: Selection {
                id: Vec::new(),
                all: true,
                filters: FilterArgs::default(),
                max: Some(n as u32),
                plan: Some(remaining.clone()),
            },
            dry_run: false,
            allow_unstamped: false,
        };
        let done = replay::execute(ctx, &args).await?;
        if !ctx.json {
            replay::print(ctx, &args, &done);
        }
        let sent = done.sent();
        let originals: BTreeSet<String> =
            sent.iter().map(|m| m.original_message_id.clone()).collect();
        for m in &sent {
            remaining.remove(&m.message_id);
        }
        let (sent_n, deleted) = (sent.len() as u64, done.deleted() as u64);
        left = done.shortfall() as u64;
        if sent_n == 0 {
            triage_store::update(&store, url.as_str(), |b| {
                b.replay_stage(&group, 0, 0, 0, 0);
                Ok(())
            })
            .await
            .map_err(refused)?;
            break;
        }
        let pace = Duration::from_millis(sent_n * 1000 / a.rate);
        let verdict = window.max(pace.saturating_sub(started.elapsed()));
        eprintln!(
            "sent {sent_n} of plan {plan_id}; verdict in {} s",
            verdict.as_secs()
        );
        tokio::time::sleep(verdict).await;
        let back = came_back(ctx, url.as_str(), &originals, &plan).await?;
        let isolated = match &poison {
            Some(p) => came_back(ctx, p.as_str(), &originals, &plan).await?,
            None => 0,
        };
        triage_store::update(&store, url.as_str(), |b| {
            b.replay_stage(&group, sent_n, deleted, back, isolated);
            Ok(())
        })
        .await
        .map_err(refused)?;
        if back + isolated > 0 {
            stopped = Some(format!(
                "{back} of {sent_n} came back to the DLQ and {isolated} were isolated within {} s",
                verdict.as_secs()
            ));
            break;
        }
        if left > 0 {
            break;
        }
    }
    let outcome = match stopped.clone() {
        Some(why) => Finish::CanaryFailed(why),
        None => Finish::Done { left },
    };
    let (alert, book) = triage_store::update(&store, url.as_str(), |b| {
        Ok(b.finish(&group, &who, outcome.clone(), now_ms()))
    })
    .await
    .map_err(refused)?;
    publish(ctx, &a.target.book, &alert.into_iter().collect::<Vec<_>>()).await;
    let r = book
        .get(&group)
        .map_err(|e| CliError::Config(e.to_string()))?;
    if ctx.json {
        super::output::print_json(
            &json!({"queue": url.as_str(), "group": group, "plan": plan_id,
            "stopped": stopped, "record": r}),
        );
    } else {
        if let Some(why) = &stopped {
            println!(
                "{} the replay stopped: {why}",
                ctx.style.bad("canary failed:")
            );
        }
        print_record(ctx, &group, r);
    }
    Ok(if stopped.is_some() || left > 0 {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}

pub async fn discard_group(ctx: &Ctx, a: GroupDiscardArgs) -> Result<Outcome, CliError> {
    let group = a.target.group.to_string();
    let url = ctx.resolve(&a.target.queue).await?;
    let store = a.target.book.store(ctx)?;
    let (plan_id, ids, _) =
        frozen_plan(ctx, &store, url.as_str(), &group, &a.confirm, "discard").await?;
    if !a.archive.starts_with("s3://") {
        return Err(CliError::Config(format!(
            "--archive {} is not an s3://BUCKET/PREFIX location: discard archives every message before its delete",
            a.archive
        )));
    }
    eprintln!(
        "would discard {} of plan {plan_id} (group {group}) from {}, each archived to {} before its delete",
        ids.len(),
        url.name(),
        a.archive
    );
    if a.confirm.dry_run {
        if ctx.json {
            super::output::print_json(&json!({"group": group, "plan": plan_id, "dryRun": true,
                "messages": ids.len(), "archive": a.archive}));
        }
        return Ok(Outcome::Done);
    }
    let who = a.target.book.who();
    let begun = Operation {
        store: &store,
        url: url.as_str(),
        group: &group,
        plan_id: &plan_id,
        size: ids.len(),
    };
    if let Some(refused) = begun.confirm_and_begin("discard", &who, &a.confirm).await? {
        return Ok(refused);
    }
    let args = ExportArgs {
        queue: a.target.queue.clone(),
        to: a.archive.clone(),
        delete: true,
        max: None,
        filters: FilterArgs::default(),
        plan: Some(ids.iter().cloned().collect()),
    };
    let (target, report, reach) = export::execute(ctx, &args).await?;
    if !ctx.json {
        export::print(ctx, &args, &target, &report, &reach);
    }
    let left = report.delete_failed.len() as u64;
    let deleted = report.deleted as u64;
    let (_, book) = triage_store::update(&store, url.as_str(), |b| {
        Ok(b.finish(&group, &who, Finish::Done { left }, now_ms()))
    })
    .await
    .map_err(refused)?;
    let r = book
        .get(&group)
        .map_err(|e| CliError::Config(e.to_string()))?;
    if ctx.json {
        super::output::print_json(
            &json!({"queue": url.as_str(), "group": group, "plan": plan_id,
            "archived": report.exported.len(), "deleted": deleted, "objects": report.objects,
            "record": r}),
        );
    } else {
        println!(
            "discarded {deleted} of plan {plan_id}, each archived first ({} archived); restore with: redrive import --from {} --to QUEUE",
            report.exported.len(),
            a.archive
        );
        print_record(ctx, &group, r);
    }
    Ok(if left > 0 || reach.error.is_some() {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_and_name_what_was_wrong() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        let e = parse_duration("5w").unwrap_err().to_string();
        assert!(e.contains("s, m, h or d"), "{e}");
        let e = parse_duration("soon").unwrap_err().to_string();
        assert!(e.contains("not a duration"), "{e}");
    }

    #[test]
    fn more_than_ten_needs_yes_and_more_than_a_thousand_the_typed_group() {
        let c = |yes, confirm: Option<&str>| ConfirmArgs {
            plan: None,
            dry_run: false,
            yes,
            confirm: confirm.map(str::to_string),
        };
        // Not a terminal in tests: an unconfirmed action is refused, never assumed.
        assert_eq!(confirmed(10, "g2-a", &c(false, None)), Ok(true));
        assert_eq!(confirmed(11, "g2-a", &c(false, None)), Ok(false));
        assert_eq!(confirmed(11, "g2-a", &c(true, None)), Ok(true));
        assert_eq!(confirmed(1001, "g2-a", &c(true, None)), Ok(false));
        assert_eq!(confirmed(1001, "g2-a", &c(false, Some("g2-a"))), Ok(true));
        assert!(confirmed(1001, "g2-a", &c(false, Some("g2-b"))).is_err());
    }
}
