//! `redrive peek`: messages shown, not consumed (visible again as soon as the command ends).

use serde_json::json;

use super::args::PeekArgs;
use super::inspect::{facts, warn_if_receives_count};
use super::scan::Scanner;
use super::view::MessageView;
use super::{CliError, Ctx, Outcome, now_ms};

pub async fn run(ctx: &Ctx, args: PeekArgs) -> Result<Outcome, CliError> {
    let queue = ctx.queue();
    let url = args.queue.as_str();
    let before = facts(&queue, url).await?;
    warn_if_receives_count(&before, args.queue.name());

    let mut scan = Scanner::new(&queue, url);
    let collected = scan.collect(args.max as usize).await;
    scan.release().await;
    let messages = collected?;

    let now = now_ms();
    let body_chars = args.body.then_some(args.body_chars);
    let views: Vec<MessageView> = messages
        .iter()
        .map(|m| MessageView::new(m, now, body_chars))
        .collect();
    if ctx.json {
        super::output::print_json(&json!({"queue": url, "messages": views}));
        return Ok(Outcome::Done);
    }
    let s = &ctx.style;
    println!(
        "{}: {} shown; {} visible, {} in flight, {} delayed before the peek",
        s.bold(args.queue.name()),
        views.len(),
        before.visible,
        before.in_flight,
        before.delayed
    );
    for (i, v) in views.iter().enumerate() {
        print!("{}", v.render(i + 1, s));
    }
    Ok(Outcome::Done)
}
