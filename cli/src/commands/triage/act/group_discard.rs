//! `triage discard`: a group's plan archived to S3, each message checked archived before its
//! delete.

use serde_json::json;

use redrive_shared::triage::state::Finish;

use super::args::GroupDiscardArgs;
use super::book::print_record;
use super::confirm::Operation;
use crate::commands::export::{self, ExportArgs};
use crate::context::{CliError, Ctx, Outcome};
use crate::filter::FilterArgs;
use crate::output::print_json;

pub async fn discard_group(ctx: &Ctx, a: GroupDiscardArgs) -> Result<Outcome, CliError> {
    let op = Operation::load(ctx, &a.target, &a.confirm).await?;
    let url = &op.url;
    let (group, plan_id, ids) = (&op.plan.group, &op.plan.plan_id, &op.plan.ids);
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
            print_json(&json!({"group": group, "plan": plan_id, "dryRun": true,
                "messages": ids.len(), "archive": a.archive}));
        }
        return Ok(Outcome::Done);
    }
    if let Some(refused) = op.confirm_and_begin("discard", &a.confirm).await? {
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
    let (_, r) = op.finish(Finish::Done { left }).await?;
    if ctx.json {
        print_json(
            &json!({"queue": url.as_str(), "group": group, "plan": plan_id,
            "archived": report.exported.len(), "deleted": deleted, "objects": report.objects,
            "record": &r}),
        );
    } else {
        println!(
            "discarded {deleted} of plan {plan_id}, each archived first ({} archived); restore with: redrive import --from {} --to QUEUE",
            report.exported.len(),
            a.archive
        );
        print_record(ctx, group, &r);
    }
    Ok(if left > 0 || reach.error.is_some() {
        Outcome::Incomplete
    } else {
        Outcome::Done
    })
}
