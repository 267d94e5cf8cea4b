//! `redrive drain`: the Lambda's drain, run by hand, configured from the Lambda's variables
//! with the flags on top.

use std::collections::HashMap;
use std::sync::Arc;

use redrive_shared::config::{Env, RedriverConfig};

use crate::context::{CliError, Ctx, Outcome};
use crate::progress::{Bar, Counters, Counting};
use crate::queues::QueueRef;
use clap::Args;
use redrive_engine::aws::CloudWatch;
use redrive_engine::circuit::CircuitStore;
use redrive_engine::now_ms;
use redrive_engine::ports::Queue;
use redrive_engine::tap::Tapped;
use redrive_engine::{DrainError, DrainRequest, Engine, StopReason, Summary};
use redrive_shared::circuit::{CircuitSettings, State};
use std::time::Duration;

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Messages to take from the DLQ at most (default MAX_MESSAGES_PER_INVOCATION, else 100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// Messages per second at most (default MAX_MESSAGES_PER_SECOND; 0 = no cap).
    #[arg(long, value_name = "R", value_parser = crate::args::parse_rate)]
    pub rate: Option<f64>,
    /// Receive and plan only: nothing is sent or deleted, the messages are released at once.
    #[arg(long)]
    pub dry_run: bool,
    /// DLQ to drain: name, ARN or URL.
    #[arg(long, value_name = "QUEUE", env = "DLQ_URL", value_parser = crate::queues::queue_from("DLQ_URL"))]
    pub dlq: Option<QueueRef>,
    /// Where redriven messages go.
    #[arg(long, value_name = "QUEUE", env = "SOURCE_QUEUE_URL", value_parser = crate::queues::queue_from("SOURCE_QUEUE_URL"))]
    pub source: Option<QueueRef>,
    /// Where poison pills go.
    #[arg(long, value_name = "QUEUE", env = "POISON_QUEUE_URL", value_parser = crate::queues::queue_from("POISON_QUEUE_URL"))]
    pub poison: Option<QueueRef>,
    /// Replay N messages first, wait for the verdict (do their copies come back to the DLQ
    /// within the window?), and drain the rest only if they do not; exit code 3 if they do.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub canary: Option<u32>,
    /// How long the canary's copies have to come back (default CIRCUIT_WINDOW_SECONDS, 900).
    #[arg(long, value_name = "SECONDS", requires = "canary", value_parser = clap::value_parser!(u64).range(1..))]
    pub canary_window: Option<u64>,
}

/// The flag that sets each variable, for error messages.
const FLAGS: [(&str, &str); 5] = [
    ("DLQ_URL", "--dlq"),
    ("SOURCE_QUEUE_URL", "--source"),
    ("POISON_QUEUE_URL", "--poison"),
    ("MAX_MESSAGES_PER_SECOND", "--rate"),
    ("MAX_MESSAGES_PER_INVOCATION", "--max"),
];

/// The re-driver's configuration: the process environment, with the flags winning; each
/// queue (flag or variable) given by name, ARN or URL.
pub async fn config(ctx: &Ctx, args: &DrainArgs) -> Result<RedriverConfig, CliError> {
    let mut overrides: HashMap<&'static str, String> = HashMap::new();
    for (var, queue) in [
        ("DLQ_URL", &args.dlq),
        ("SOURCE_QUEUE_URL", &args.source),
        ("POISON_QUEUE_URL", &args.poison),
    ] {
        if let Some(q) = queue {
            overrides.insert(var, ctx.resolve(q).await?.to_string());
        }
    }
    if let Some(r) = args.rate {
        overrides.insert("MAX_MESSAGES_PER_SECOND", r.to_string());
    }
    if let Some(n) = args.max {
        overrides.insert("MAX_MESSAGES_PER_INVOCATION", n.to_string());
    }
    if args.dry_run {
        overrides.insert("DRY_RUN", "true".into());
    }
    // `--stack` wins over the process environment (it was given on the command line).
    let stack = ctx.stack_env.0.clone();
    let env = Env(move |k: &str| {
        overrides
            .get(k)
            .or_else(|| stack.get(k))
            .cloned()
            .or_else(|| std::env::var(k).ok())
    });
    RedriverConfig::from_env(&env).map_err(|e| {
        let hint = FLAGS
            .iter()
            .find(|(var, _)| *var == e.variable)
            .map_or(String::new(), |(_, flag)| format!(" (or pass {flag})"));
        CliError::Config(format!("{e}{hint}"))
    })
}

pub async fn run(ctx: &Ctx, args: DrainArgs) -> Result<Outcome, CliError> {
    let config = config(ctx, &args).await?;
    // The canary's tunables are checked before any queue is touched; the drain honours the
    // adaptive circuit's record when CIRCUIT_TABLE is set.
    let canary = match args.canary {
        Some(n) => Some((n, crate::commands::circuit::canary_settings()?)),
        None => None,
    };
    let circuit_store = ctx.clients.circuit_store(&config);
    let triage = ctx.clients.triage_books(&config);
    let counters = Arc::new(Counters::default());
    let queue = Tapped {
        inner: ctx.queue(),
        tap: Counting {
            dlq: config.dlq_url.to_string(),
            poison: config.poison_queue_url.to_string(),
            counters: counters.clone(),
        },
    };
    let cloudwatch = ctx.clients.cloudwatch.clone();
    let request = DrainRequest {
        dry_run: config.dry_run,
        ..DrainRequest::new(config.max_messages_per_invocation)
    };
    // The holds operators set (`redrive triage hold`) bind this drain as they bind the Lambda's.
    let engine = Engine::new(queue, cloudwatch.clone(), cloudwatch, config)
        .with_circuit(circuit_store)
        .with_triage(triage);
    if let Some((n, settings)) = canary {
        return run_canary(ctx, &engine, &request, n, &settings, args.canary_window).await;
    }
    let bar = if ctx.json {
        None
    } else {
        Bar::start(counters, request.max_messages, request.dry_run)
    };
    let summary = drained(engine.run(&request).await);
    if let Some(bar) = bar {
        bar.finish();
    }

    if ctx.json {
        // The Lambda's response shape.
        crate::output::print_json(&serde_json::to_value(&summary).unwrap_or_default());
    } else {
        print_text(ctx, &engine.config, &summary);
    }
    Ok(outcome(&summary))
}

/// A drain's summary; a DLQ that could not be read is said on stderr, and what was moved
/// before it is reported (its `stoppedBecause` is `other`: the exit says it failed).
fn drained(outcome: Result<Summary, DrainError>) -> Summary {
    match outcome {
        Ok(summary) => summary,
        Err(e @ DrainError::DlqUnreadable { .. }) => {
            eprintln!("redrive: {e}");
            e.into_summary()
        }
    }
}

fn outcome(summary: &Summary) -> Outcome {
    match summary.stopped_because {
        StopReason::Other => Outcome::Failed,
        StopReason::CircuitOpen => Outcome::Incomplete,
        _ if summary.failed > 0 => Outcome::Incomplete,
        _ => Outcome::Done,
    }
}

/// `drain --canary N`: replays `n` messages, waits for the verdict, and drains the rest of the budget only if the
/// canary's copies did not come back.
async fn run_canary<Q: Queue, C: CircuitStore>(
    ctx: &Ctx,
    engine: &Engine<Q, CloudWatch, CloudWatch, C>,
    request: &DrainRequest,
    n: u32,
    settings: &CircuitSettings,
    window_flag: Option<u64>,
) -> Result<Outcome, CliError> {
    let started = now_ms();
    // Its copies go out without their backoff delay: judged by the window, not by the delay.
    let canary = drained(engine.run(&request.canary(n)).await);
    let window = crate::commands::circuit::canary_window(window_flag, settings);
    let judged = !canary.dry_run && canary.redriven > 0;
    if !ctx.json {
        print_text(ctx, &engine.config, &canary);
    }
    if !judged || matches!(canary.stopped_because, StopReason::Other) {
        if ctx.json {
            let verdict = serde_json::json!({"sent": canary.redriven, "judged": false});
            print_json_with_canary(&canary, verdict);
        } else {
            println!("canary: nothing redriven, so there is nothing to judge; stopping");
        }
        return Ok(outcome(&canary));
    }
    if !ctx.json {
        println!(
            "canary: {} redriven; waiting up to {} s for copies to come back to the DLQ",
            canary.redriven,
            window.as_secs()
        );
    }
    let every = (window / 10).clamp(Duration::from_secs(1), Duration::from_secs(10));
    let verdict = crate::commands::circuit::watch_canary(
        &ctx.queue(),
        engine.config.dlq_url.as_str(),
        started,
        canary.redriven,
        settings,
        window,
        every,
    )
    .await?;
    let verdict_json = crate::commands::circuit::verdict_json(&verdict, canary.redriven);
    let came_back = |within: Duration| {
        let (back, sent) = (verdict.bounced.len(), canary.redriven);
        format!(
            "{back} of {sent} copies came back within {} s",
            within.as_secs()
        )
    };
    if verdict.failed {
        if ctx.json {
            print_json_with_canary(&canary, verdict_json);
        } else {
            let text = came_back(verdict.waited);
            let line = format!("canary bounced: {text}; the rest stays on the DLQ");
            println!("{}", ctx.style.bad(&line));
        }
        return Ok(Outcome::Incomplete);
    }
    if !ctx.json {
        let line = format!("canary held: {}; draining the rest", came_back(window));
        println!("{}", ctx.style.good(&line));
    }
    let rest = request.max_messages.saturating_sub(canary.received as u32);
    let summary = if rest == 0 {
        canary
    } else {
        let more = drained(
            engine
                .run(&DrainRequest {
                    max_messages: rest,
                    ..request.clone()
                })
                .await,
        );
        Summary {
            received: canary.received + more.received,
            redriven: canary.redriven + more.redriven,
            isolated: canary.isolated + more.isolated,
            failed: canary.failed + more.failed,
            ..more
        }
    };
    if ctx.json {
        print_json_with_canary(&summary, verdict_json);
    } else {
        print_text(ctx, &engine.config, &summary);
    }
    Ok(outcome(&summary))
}

/// The Lambda's response shape with the canary's verdict beside it.
fn print_json_with_canary(summary: &Summary, verdict: serde_json::Value) {
    let mut out = serde_json::to_value(summary).unwrap_or_default();
    out["canary"] = verdict;
    crate::output::print_json(&out);
}

fn print_text(ctx: &Ctx, config: &RedriverConfig, s: &Summary) {
    let st = &ctx.style;
    let title = format!(
        "drain {} -> {} (redrive) / {} (isolate)",
        config.dlq_url.name(),
        config
            .source_queue_url
            .as_ref()
            .map_or("each message's own source", |s| s.name()),
        config.poison_queue_url.name()
    );
    println!("{}", st.bold(&title));
    if s.dry_run {
        println!(
            "{}",
            st.warn("dry run: nothing was sent or deleted; redriven and isolated are the plan")
        );
    }
    let row = |key: &str, value: String| println!("  {}{value}", st.dim(&format!("{key:<18}")));
    row("received", s.received.to_string());
    row("redriven", st.good(&s.redriven.to_string()));
    row(
        "isolated",
        if s.isolated > 0 {
            st.warn(&s.isolated.to_string())
        } else {
            s.isolated.to_string()
        },
    );
    row(
        "failed",
        if s.failed > 0 {
            st.bad(&s.failed.to_string())
        } else {
            s.failed.to_string()
        },
    );
    let stop = match s.stopped_because {
        StopReason::CircuitOpen if s.circuit.as_ref().is_some_and(|c| c.state != State::Closed) => {
            st.bad("circuit-open (the adaptive circuit: see `redrive circuit status`)")
        }
        StopReason::CircuitOpen => st.bad("circuit-open (a guard alarm is in ALARM)"),
        StopReason::Other => st.bad("other (receiving from the DLQ failed)"),
        r => r.as_str().to_string(),
    };
    row("stopped because", stop);
    if let Some(c) = &s.circuit {
        row(
            "circuit",
            format!(
                "{} (operator {}, plan {}, {} bounced back, {} transitions)",
                c.state, c.operator, c.plan, c.bounced, c.transitions
            ),
        );
    }
    row(
        "left on the DLQ",
        s.dlq_remaining
            .map_or("unknown".to_string(), |n| n.to_string()),
    );
}
