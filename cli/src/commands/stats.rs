//! `redrive stats`: depth, redrive policy, and histograms over a sample of messages.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use crate::context::{CliError, Ctx, Outcome};
use crate::inspect::{QueueFacts, facts, warn_if_receives_count};
use crate::output::{Style, age, bytes};
use crate::queues::QueueRef;
use crate::scan::Scanner;
use crate::view::MessageView;
use clap::Args;
use redrive_engine::now_ms;
use redrive_shared::config::QueueUrl;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The queue (DLQ, poison or source queue): name, ARN or URL (with --stack: its DLQ).
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub queue: Option<QueueRef>,
    /// Messages sampled for the histograms (received and released at once); 0 skips the sample.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub sample: u32,
}

/// Histograms over sampled messages.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    pub size: usize,
    /// attempt -> messages
    pub attempts: BTreeMap<u32, usize>,
    /// isolation reason (`none` when not isolated) -> messages
    pub reasons: BTreeMap<String, usize>,
    /// `<class> <code>` of `lastError` -> messages
    pub last_errors: BTreeMap<String, usize>,
    /// Messages whose `x-redrive` could not be read.
    pub garbled: usize,
    pub oldest_age_seconds: Option<u64>,
    pub bytes: usize,
}

impl Sample {
    pub fn of(views: &[MessageView]) -> Self {
        let mut s = Sample {
            size: views.len(),
            ..Sample::default()
        };
        for v in views {
            *s.attempts.entry(v.attempt).or_default() += 1;
            *s.reasons.entry(v.reason_label().to_string()).or_default() += 1;
            if let Some(e) = &v.last_error {
                let class = e.class.as_str();
                *s.last_errors
                    .entry(format!("{class} {}", e.code))
                    .or_default() += 1;
            }
            s.garbled += usize::from(v.garbled.is_some());
            s.oldest_age_seconds = s.oldest_age_seconds.max(v.age_seconds);
            s.bytes += v.size_bytes;
        }
        s
    }
}

pub async fn run(ctx: &Ctx, args: StatsArgs) -> Result<Outcome, CliError> {
    let target = ctx
        .resolve(crate::context::required(&args.queue, "--queue")?)
        .await?;
    let queue = ctx.queue();
    let url = target.as_str();
    let facts = facts(&queue, url).await?;
    let sample = if args.sample > 0 && facts.visible > 0 {
        warn_if_receives_count(&facts, target.name());
        let mut scan = Scanner::new(&queue, url);
        let collected = scan.collect(args.sample as usize).await;
        scan.release().await;
        let now = now_ms();
        let views: Vec<MessageView> = collected?
            .iter()
            .map(|m| MessageView::new(m, now, None))
            .collect();
        Sample::of(&views)
    } else {
        Sample::default()
    };

    if ctx.json {
        crate::output::print_json(&json!({
            "queue": url,
            "name": target.name(),
            "fifo": target.is_fifo(),
            "visible": facts.visible,
            "inFlight": facts.in_flight,
            "delayed": facts.delayed,
            "redrivePolicy": facts.redrive_policy,
            "retentionSeconds": facts.retention_seconds,
            "visibilityTimeoutSeconds": facts.visibility_timeout_seconds,
            "sample": sample,
        }));
    } else {
        print_text(&ctx.style, &args, &target, &facts, &sample);
    }
    Ok(Outcome::Done)
}

fn print_text(s: &Style, args: &StatsArgs, queue: &QueueUrl, facts: &QueueFacts, sample: &Sample) {
    let row = |key: &str, value: String| println!("{}{value}", s.dim(&format!("{key:<16}")));
    let kind = if queue.is_fifo() { "FIFO" } else { "standard" };
    row("queue", format!("{} ({kind})", s.bold(queue.name())));
    row(
        "messages",
        format!(
            "{} visible, {} in flight, {} delayed",
            facts.visible, facts.in_flight, facts.delayed
        ),
    );
    let policy = match (facts.dead_letter_target(), facts.max_receive_count()) {
        (Some(target), Some(n)) => {
            let dlq = target.rsplit(':').next().unwrap_or(target);
            format!("to {dlq} after {n} receives")
        }
        _ => "none (terminal queue)".to_string(),
    };
    row("redrive policy", policy);
    if let Some(r) = facts.retention_seconds {
        row("retention", age(r));
    }
    if sample.size == 0 {
        let why = if args.sample == 0 {
            "skipped (--sample 0)"
        } else {
            "no visible messages"
        };
        row("sample", why.into());
        return;
    }
    let oldest = sample
        .oldest_age_seconds
        .map_or(String::new(), |a| format!(", oldest {}", age(a)));
    row(
        "sample",
        format!(
            "{} message(s){oldest}, {}",
            sample.size,
            bytes(sample.bytes)
        ),
    );
    let widest = sample.attempts.values().copied().max().unwrap_or(1).max(1);
    for (i, (attempt, n)) in sample.attempts.iter().enumerate() {
        let bar = "#".repeat((n * 30).div_ceil(widest));
        let key = if i == 0 { "attempts" } else { "" };
        row(key, format!("{attempt:>3}  {bar} {n}"));
    }
    let list = |m: &BTreeMap<String, usize>| {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    row("reasons", list(&sample.reasons));
    if !sample.last_errors.is_empty() {
        row("last errors", list(&sample.last_errors));
    }
    if sample.garbled > 0 {
        row(
            "unreadable",
            s.bad(&format!("{} x-redrive attribute(s)", sample.garbled)),
        );
    }
}
