//! `redrive drain`: the Lambda's drain, run by hand, configured from the Lambda's variables
//! with the flags on top.

use std::collections::HashMap;
use std::sync::Arc;

use redrive_shared::config::{Env, RedriverConfig};

use super::args::DrainArgs;
use super::progress::{Bar, Counters, Counting};
use super::{CliError, Ctx, Outcome};
use crate::aws::CloudWatch;
use crate::{DrainRequest, Engine, StopReason, Summary};

/// The flag that sets each variable, for error messages.
const FLAGS: [(&str, &str); 5] = [
    ("DLQ_URL", "--dlq"),
    ("SOURCE_QUEUE_URL", "--source"),
    ("POISON_QUEUE_URL", "--poison"),
    ("MAX_MESSAGES_PER_SECOND", "--rate"),
    ("MAX_MESSAGES_PER_INVOCATION", "--max"),
];

/// The re-driver's configuration: the process environment, with the flags winning.
pub fn config(args: &DrainArgs) -> Result<RedriverConfig, CliError> {
    let mut overrides: HashMap<&'static str, String> = HashMap::new();
    if let Some(u) = &args.dlq {
        overrides.insert("DLQ_URL", u.to_string());
    }
    if let Some(u) = &args.source {
        overrides.insert("SOURCE_QUEUE_URL", u.to_string());
    }
    if let Some(u) = &args.poison {
        overrides.insert("POISON_QUEUE_URL", u.to_string());
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
    let env = Env(move |k: &str| overrides.get(k).cloned().or_else(|| std::env::var(k).ok()));
    RedriverConfig::from_env(&env).map_err(|e| {
        let hint = FLAGS
            .iter()
            .find(|(var, _)| *var == e.variable)
            .map_or(String::new(), |(_, flag)| format!(" (or pass {flag})"));
        CliError::Config(format!("{e}{hint}"))
    })
}

pub async fn run(ctx: &Ctx, args: DrainArgs) -> Result<Outcome, CliError> {
    let config = config(&args)?;
    let counters = Arc::new(Counters::default());
    let queue = Counting {
        inner: ctx.queue(),
        dlq: config.dlq_url.to_string(),
        poison: config.poison_queue_url.to_string(),
        counters: counters.clone(),
    };
    let cloudwatch = CloudWatch {
        client: aws_sdk_cloudwatch::Client::new(&ctx.sdk),
    };
    let request = DrainRequest {
        max_messages: config.max_messages_per_invocation,
        dry_run: config.dry_run,
        deadline: None,
        trigger_alarm: None,
    };
    let engine = Engine::new(queue, cloudwatch.clone(), cloudwatch, config);
    let bar = if ctx.json {
        None
    } else {
        Bar::start(counters, request.max_messages, request.dry_run)
    };
    let summary = engine.run(&request).await;
    if let Some(bar) = bar {
        bar.finish();
    }

    if ctx.json {
        // The Lambda's response shape.
        super::output::print_json(&serde_json::to_value(&summary).unwrap_or_default());
    } else {
        print_text(ctx, &engine.config, &summary);
    }
    Ok(match summary.stopped_because {
        StopReason::Other => Outcome::Failed,
        StopReason::CircuitOpen => Outcome::Incomplete,
        _ if summary.failed > 0 => Outcome::Incomplete,
        _ => Outcome::Done,
    })
}

fn print_text(ctx: &Ctx, config: &RedriverConfig, s: &Summary) {
    let st = &ctx.style;
    let title = format!(
        "drain {} -> {} (redrive) / {} (isolate)",
        config.dlq_url.name(),
        config.source_queue_url.name(),
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
        StopReason::CircuitOpen => st.bad("circuit-open (a guard alarm is in ALARM)"),
        StopReason::Other => st.bad("other (receiving from the DLQ failed)"),
        r => r.as_str().to_string(),
    };
    row("stopped because", stop);
    row(
        "left on the DLQ",
        s.dlq_remaining
            .map_or("unknown".to_string(), |n| n.to_string()),
    );
}
