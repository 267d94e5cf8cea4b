//! `redrive triage show GROUP QUEUE`: one group's messages, read in a pass of their own.

use std::collections::HashSet;

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use redrive_shared::meta::ATTRIBUTE_NAME;
use redrive_shared::triage::grouper::belongs;
use redrive_shared::triage::{GroupId, Grouper};

use super::causes::Origins;
use super::render::print_group;
use super::{PassArgs, config, outcome, pass};
use crate::context::{CliError, Ctx, Outcome};
use crate::view::MessageView;
use redrive_engine::now_ms;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The group id, as `redrive triage` printed it (g<version>-<hex>, or r-<rule name>).
    #[arg(value_name = "GROUP", value_parser = GroupId::parse)]
    pub group: GroupId,
    #[command(flatten)]
    pub pass: PassArgs,
    /// Sample messages shown.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// Also show each sample's body, cut to --body-chars characters.
    #[arg(long)]
    pub bodies: bool,
    /// Characters of a body shown with --bodies.
    #[arg(long, value_name = "N", default_value_t = 200, requires = "bodies")]
    pub body_chars: usize,
}

/// A sample of `triage show`: the message as `peek` shows it, and its `x-redrive` as written.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Sample {
    #[serde(flatten)]
    view: MessageView,
    x_redrive: Option<Value>,
}

pub async fn run(ctx: &Ctx, args: ShowArgs) -> Result<Outcome, CliError> {
    let cfg = config(&args.pass)?;
    let mut members = Grouper::new(config(&args.pass)?);
    let mut origins = Origins::default();
    let mut samples = Vec::new();
    let now = now_ms();
    let body_chars = args.bodies.then_some(args.body_chars);
    let want = args.samples as usize;
    let mut seen = HashSet::new();
    let (input, coverage) = pass(ctx, &args.pass, |r| {
        if !seen.insert(r.message.message_id.clone()) {
            return false;
        }
        let m = r.observation();
        let facts = r.facts(&members);
        if belongs(&args.group, &m, &facts, &cfg) {
            let origin = facts.cause.as_ref().map(|c| c.origin);
            if let Some(id) = members.add_facts(&m, facts) {
                origins.add(&id, origin);
            }
            if samples.len() < want {
                let x_redrive = r.message.attributes.get(ATTRIBUTE_NAME).and_then(|a| {
                    let text = a.as_str()?;
                    Some(serde_json::from_str(text).unwrap_or(Value::String(text.to_string())))
                });
                samples.push(Sample {
                    view: MessageView::new(&r.message, now, body_chars),
                    x_redrive,
                });
            }
        }
        true
    })
    .await?;
    let groups = members.finish();
    let found = groups.iter().map(|g| g.count).sum::<usize>();
    if ctx.json {
        crate::output::print_json(&json!({
            "input": input,
            "group": args.group.to_string(),
            "found": found,
            "coverage": coverage,
            "groups": origins.annotate(&groups),
            "samples": samples,
        }));
    } else {
        let s = &ctx.style;
        println!(
            "{}: {found} message(s) of {} among {} grouped ({})",
            s.bold(&input),
            s.bold(&args.group.to_string()),
            coverage.grouped,
            coverage.status
        );
        for g in &groups {
            if g.id != args.group.to_string() {
                println!(
                    "{}",
                    s.dim(&format!("{} is now {} in this build", args.group, g.id))
                );
            }
            print_group(s, 0, g, origins.of(&g.id));
        }
        for (i, sample) in samples.iter().enumerate() {
            print!("{}", sample.view.render(i + 1, s));
            if let Some(x) = &sample.x_redrive {
                println!("   {}{x}", s.dim(&format!("{:<11}", "x-redrive")));
            }
        }
    }
    if found == 0 {
        return Ok(Outcome::Incomplete);
    }
    Ok(outcome(&coverage))
}
