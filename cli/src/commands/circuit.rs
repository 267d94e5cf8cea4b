//! `redrive circuit status|open|close|auto --dlq URL`: the adaptive circuit of a DLQ,
//! and the canary verdict of `redrive drain --canary N`.

use std::collections::HashSet;
use std::time::Duration;

use clap::{Args, ValueEnum};
use redrive_shared::circuit::{
    CircuitRecord, CircuitSettings, Override, Plan, State, Transition, bounce_of,
};
use redrive_shared::config::{CircuitConfig, Env, QueueUrl};
use redrive_shared::meta::RedriveMeta;
use redrive_shared::timefmt::rfc3339_from_millis;
use serde_json::json;

use crate::context::{CliError, Ctx, Outcome};
use crate::queues::QueueRef;
use crate::scan::Scanner;
use redrive_engine::circuit::{
    CircuitError, CircuitStore, DynamoDbCircuitStore, load_or_new, set_override,
};
use redrive_engine::now_ms;
use redrive_engine::ports::{PortError, Queue};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CircuitAction {
    /// The state, the operator's override, the counts over the window and the history.
    Status,
    /// Hold the circuit open: nothing is redriven until `close` or `auto`.
    Open,
    /// Force it closed: drain whatever the bounce-back rate says.
    Close,
    /// Hand it back to the measurements (from open: a canary after the cool-down).
    Auto,
}

#[derive(Debug, Args)]
pub struct CircuitArgs {
    #[arg(value_enum)]
    pub action: CircuitAction,
    /// The DLQ whose circuit this is: name, ARN or URL (one record whichever: its key is the ARN;
    /// with --stack: its DLQ).
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub dlq: Option<QueueRef>,
    /// The circuit table (the stack's output CircuitTableName).
    #[arg(long, value_name = "NAME", env = "CIRCUIT_TABLE")]
    pub circuit_table: Option<String>,
}

/// The circuit's configuration from the environment, `--circuit-table` winning.
fn config(table: Option<&str>) -> Result<CircuitConfig, CliError> {
    let table = table.map(str::to_string);
    let env = Env(move |k: &str| {
        if k == "CIRCUIT_TABLE" && table.is_some() {
            return table.clone();
        }
        std::env::var(k).ok()
    });
    match CircuitConfig::from_env(&env) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(CliError::Config(
            "the adaptive circuit is off: missing CIRCUIT_TABLE (the stack's output CircuitTableName); set it or pass --circuit-table".into(),
        )),
        Err(e) => Err(CliError::Config(e.to_string())),
    }
}

fn store_error(e: CircuitError) -> CliError {
    match e {
        CircuitError::Port(p) => CliError::Aws(p),
        other => CliError::Aws(PortError {
            operation: "PutItem",
            code: "Contended".into(),
            message: other.to_string(),
            retryable: false,
            source: None,
        }),
    }
}

pub async fn run(ctx: &Ctx, args: CircuitArgs) -> Result<Outcome, CliError> {
    let cfg = config(args.circuit_table.as_deref())?;
    let store = DynamoDbCircuitStore {
        client: ctx.clients.dynamodb.clone(),
        table: cfg.table.clone(),
    };
    let dlq_url = ctx
        .resolve(crate::context::required(&args.dlq, "--dlq")?)
        .await?;
    let dlq = dlq_url.as_str();
    let now = now_ms();
    let mode = match args.action {
        CircuitAction::Status => None,
        CircuitAction::Open => Some(Override::Open),
        CircuitAction::Close => Some(Override::Closed),
        CircuitAction::Auto => Some(Override::Auto),
    };
    let (version, record, made) = match mode {
        None => {
            let stored = store.load(dlq).await?;
            let version = stored.as_ref().map(|s| s.version);
            let record = stored
                .map(|s| s.record)
                .unwrap_or_else(|| CircuitRecord::new(&cfg.settings, now));
            (version, record, Vec::new())
        }
        Some(mode) => {
            let (record, made) = set_override(&store, dlq, &cfg.settings, mode, now)
                .await
                .map_err(store_error)?;
            let version = load_or_new(&store, dlq, &cfg.settings, now).await?.0;
            (version, record, made)
        }
    };
    // What the next run would do (the passing of time applied, not saved).
    let mut next = record.clone();
    next.tick(&cfg.settings, now);
    let plan = next.plan(&cfg.settings);
    if ctx.json {
        crate::output::print_json(&json!({
            "queue": dlq,
            "key": store.key(dlq),
            "table": cfg.table,
            "version": version,
            "record": record,
            "nextRun": {"state": next.state, "plan": plan.as_str(), "budget": plan.budget()},
            "transitions": made,
        }));
    } else {
        print_status(
            ctx,
            &dlq_url,
            &cfg,
            version,
            &record,
            (next.state, plan),
            &made,
            now,
        );
    }
    Ok(Outcome::Done)
}

#[allow(clippy::too_many_arguments)]
fn print_status(
    ctx: &Ctx,
    dlq: &QueueUrl,
    cfg: &CircuitConfig,
    version: Option<u64>,
    r: &CircuitRecord,
    (next_state, plan): (State, Plan),
    made: &[Transition],
    now: i64,
) {
    let st = &ctx.style;
    let s = &cfg.settings;
    println!(
        "{}",
        st.bold(&format!("circuit {} (table {})", dlq.name(), cfg.table))
    );
    if version.is_none() {
        println!(
            "{}",
            st.dim("  no record yet: the circuit is closed until a run writes one")
        );
    }
    let row = |key: &str, value: String| println!("  {}{value}", st.dim(&format!("{key:<18}")));
    let state = match r.state {
        State::Closed => st.good("closed"),
        State::Open => st.bad("open"),
        State::HalfOpen => st.warn("half-open"),
    };
    let ago = crate::output::age(((now - r.since).max(0) / 1000) as u64);
    row(
        "state",
        format!("{state} since {} ({ago} ago)", rfc3339_from_millis(r.since)),
    );
    row("operator", r.operator.to_string());
    let next = match plan {
        Plan::Drain { budget: None } => "drain".to_string(),
        Plan::Drain { budget: Some(b) } => format!("drain at most {b} (ramping up)"),
        Plan::Canary { size } => format!("canary of {size}"),
        Plan::Watch => "watch for the canary (redrive nothing)".to_string(),
        Plan::Hold => "hold (receive nothing)".to_string(),
    };
    row("next run", format!("{next_state}: {next}"));
    if r.state == State::Open {
        row(
            "cool-down",
            format!(
                "{} s, half-open from {}",
                r.cooldown_ms / 1000,
                rfc3339_from_millis(r.since + r.cooldown_ms)
            ),
        );
    }
    if let Some(c) = &r.canary {
        row(
            "canary",
            format!(
                "{} sent at {}, {} back; verdict at {}",
                c.sent,
                rfc3339_from_millis(c.sent_at),
                c.bounced.len(),
                rfc3339_from_millis(c.sent_at + s.window_ms)
            ),
        );
    }
    let (redriven, bounced) = r.counts();
    row(
        &format!("window {} s", s.window_ms / 1000),
        format!(
            "{redriven} redriven, {bounced} bounced back (rate {:.2}; opens at {:.2} with {} or more)",
            r.bounce_rate(),
            s.threshold,
            s.min_bounces
        ),
    );
    for t in made {
        println!(
            "{}",
            st.warn(&format!("  now: {} -> {} ({})", t.from, t.to, t.reason))
        );
    }
    if !r.history.is_empty() {
        println!("{}", st.bold("history (oldest first)"));
        for t in &r.history {
            println!(
                "  {}  {:<9} -> {:<9}  {}",
                rfc3339_from_millis(t.at),
                t.from.as_str(),
                t.to.as_str(),
                t.reason
            );
        }
    }
}

/// The circuit's tunables for `drain --canary` (with or without a table).
pub fn canary_settings() -> Result<CircuitSettings, CliError> {
    CircuitConfig::settings_from_env(&Env::process()).map_err(|e| CliError::Config(e.to_string()))
}

/// How a canary went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Canary copies seen back on the DLQ (distinct originalMessageIds).
    pub bounced: Vec<String>,
    /// True when they reached the threshold: the downstream is still failing.
    pub failed: bool,
    pub waited: Duration,
}

/// Waits up to `window` for copies redriven since `since_ms` to come back to the DLQ, looking
/// every `every` (each look receives and releases the DLQ's messages, sending and deleting
/// nothing). Fails as soon as `threshold` of the `sent` copies are back.
pub async fn watch_canary<Q: Queue>(
    queue: &Q,
    dlq: &str,
    since_ms: i64,
    sent: u64,
    settings: &CircuitSettings,
    window: Duration,
    every: Duration,
) -> Result<Verdict, PortError> {
    let start = tokio::time::Instant::now();
    let needed = ((settings.threshold * sent as f64).ceil() as usize).max(1);
    let since = since_ms - since_ms.rem_euclid(1000);
    let mut back: HashSet<String> = HashSet::new();
    loop {
        let now = now_ms();
        let mut scan = Scanner::new(queue, dlq);
        let walked = async {
            loop {
                let batch = scan.next(10).await?;
                if batch.is_empty() {
                    return Ok::<(), PortError>(());
                }
                for m in batch {
                    let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                    let wide = CircuitSettings {
                        window_ms: i64::MAX / 4,
                        ..*settings
                    };
                    if let Some(b) = bounce_of(&meta, now, &wide)
                        && b.last_redriven_at >= since
                    {
                        back.insert(b.original_message_id);
                    }
                }
            }
        }
        .await;
        scan.release().await;
        walked?;
        let waited = start.elapsed();
        if back.len() >= needed || waited >= window {
            let mut bounced: Vec<String> = back.into_iter().collect();
            bounced.sort();
            return Ok(Verdict {
                failed: bounced.len() >= needed,
                bounced,
                waited,
            });
        }
        tokio::time::sleep(every.min(window.saturating_sub(waited))).await;
    }
}

/// The window a canary waits: `--canary-window`, else `CIRCUIT_WINDOW_SECONDS`, else 900 s.
pub fn canary_window(flag: Option<u64>, settings: &CircuitSettings) -> Duration {
    flag.map_or(
        Duration::from_millis(settings.window_ms.max(0) as u64),
        Duration::from_secs,
    )
}

/// For the drain's JSON report.
pub fn verdict_json(v: &Verdict, sent: u64) -> serde_json::Value {
    json!({
        "sent": sent,
        "bounced": v.bounced.len(),
        "failed": v.failed,
        "waitedSeconds": v.waited.as_secs(),
    })
}
