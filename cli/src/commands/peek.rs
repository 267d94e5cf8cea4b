//! `redrive peek`: messages shown, not consumed (visible again as soon as the command ends).
//! With filters it shows the first `--max` messages they select: what `replay`, `discard` or
//! `export` with the same filters would act on.

use serde_json::json;

use crate::context::{CliError, Ctx, Outcome};
use crate::filter::MessageFilter;
use crate::inspect::{facts, warn_if_receives_count};
use crate::queues::QueueRef;
use crate::scan::Scanner;
use crate::view::MessageView;
use clap::Args;
use redrive_engine::now_ms;

#[derive(Debug, Args)]
pub struct PeekArgs {
    /// The queue: name, ARN or URL (with --stack: its DLQ).
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub queue: Option<QueueRef>,
    /// How many messages to show.
    #[arg(short = 'n', long = "max", value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max: u32,
    /// Also show each body, truncated to --body-chars characters.
    #[arg(long)]
    pub body: bool,
    /// Characters of a body shown with --body.
    #[arg(long, value_name = "N", default_value_t = 200, requires = "body")]
    pub body_chars: usize,
    /// The messages shown are those the filters select.
    #[command(flatten)]
    pub filters: crate::filter::FilterArgs,
}

pub async fn run(ctx: &Ctx, args: PeekArgs) -> Result<Outcome, CliError> {
    let target = ctx
        .resolve(crate::context::required(&args.queue, "--queue")?)
        .await?;
    let queue = ctx.queue();
    let url = target.as_str();
    let before = facts(&queue, url).await?;
    warn_if_receives_count(&before, target.name());

    let now = now_ms();
    let filter = MessageFilter::new(&args.filters, now);
    let mut scan = Scanner::new(&queue, url);
    let collected = if filter.is_empty() {
        scan.collect(args.max as usize).await
    } else {
        collect_selected(&mut scan, &filter, args.max as usize).await
    };
    let seen = scan.seen();
    scan.release().await;
    let messages = collected?;

    let body_chars = args.body.then_some(args.body_chars);
    let views: Vec<MessageView> = messages
        .iter()
        .map(|m| MessageView::new(m, now, body_chars))
        .collect();
    if ctx.json {
        crate::output::print_json(&json!({"queue": url, "messages": views, "seen": seen}));
        return Ok(Outcome::Done);
    }
    let s = &ctx.style;
    println!(
        "{}: {} shown; {} visible, {} in flight, {} delayed before the peek",
        s.bold(target.name()),
        views.len(),
        before.visible,
        before.in_flight,
        before.delayed
    );
    if !filter.is_empty() {
        println!(
            "{}",
            s.dim(&format!(
                "{} selected by the filters among {seen} looked at",
                views.len()
            ))
        );
    }
    for (i, v) in views.iter().enumerate() {
        print!("{}", v.render(i + 1, s));
    }
    Ok(Outcome::Done)
}

/// Walks the queue until `max` messages matched the filter or nothing more is visible.
async fn collect_selected<Q: redrive_engine::ports::Queue>(
    scan: &mut Scanner<'_, Q>,
    filter: &MessageFilter,
    max: usize,
) -> Result<Vec<redrive_engine::ports::Received>, redrive_engine::ports::PortError> {
    let mut out = Vec::new();
    while out.len() < max {
        let batch = scan.next(10).await?;
        if batch.is_empty() {
            break;
        }
        out.extend(batch.into_iter().filter(|m| filter.matches(m)));
    }
    out.truncate(max);
    Ok(out)
}
