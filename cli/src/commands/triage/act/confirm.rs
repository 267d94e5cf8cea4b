//! The frozen plan an action moves, the operator's confirmation of its size, and the
//! operation marked begun in the book.

use std::io::IsTerminal;

use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageStore};
use redrive_shared::config::QueueUrl;
use redrive_shared::triage::state::{Alert, Book, Finish, GroupRecord, Refused};

use super::args::{CONFIRM_ABOVE, ConfirmArgs, GroupArgs, TYPED_ABOVE};
use super::book::refused;
use crate::context::{CliError, Ctx, Outcome};
use redrive_engine::now_ms;

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

/// An operation about to act on a group's frozen plan: the queue's book, the plan the book
/// names (or `--plan`), its message ids as the last pass stored them, and the group's record.
pub(super) struct Operation {
    store: DynamoDbTriageStore,
    pub(super) url: QueueUrl,
    pub(super) group: String,
    /// Who acts, for the audit.
    pub(super) who: String,
    pub(super) plan_id: String,
    pub(super) ids: Vec<String>,
    pub(super) record: GroupRecord,
}

impl Operation {
    /// The group's plan from its queue's book, refused when the group or its plan is unknown.
    pub(super) async fn load(
        ctx: &Ctx,
        target: &GroupArgs,
        confirm: &ConfirmArgs,
    ) -> Result<Self, CliError> {
        let group = target.group.to_string();
        let url = ctx.resolve(&target.queue).await?;
        let store = target.book.store(ctx)?;
        let book = triage_store::load_or_new(&store, url.as_str()).await?;
        let record = book
            .get(&group)
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
        Ok(Self {
            store,
            url,
            group,
            who: target.book.who(),
            plan_id,
            ids,
            record,
        })
    }

    /// Asks for the confirmation its size needs, then marks the operation begun in the book
    /// (refused while another runs on the group). `Some(outcome)`: not confirmed, nothing done.
    pub(super) async fn confirm_and_begin(
        &self,
        operation: &str,
        confirm: &ConfirmArgs,
    ) -> Result<Option<Outcome>, CliError> {
        let size = self.ids.len();
        match confirmed(size, &self.group, confirm) {
            Ok(true) => {}
            Ok(false) => {
                eprintln!("redrive: {}", refusal(size, &self.group));
                return Ok(Some(Outcome::Refused));
            }
            Err(e) => return Err(CliError::Config(e)),
        }
        self.update(|b| {
            b.begin(
                &self.group,
                operation,
                &self.who,
                &self.plan_id,
                size as u64,
                now_ms(),
            )
        })
        .await?;
        Ok(None)
    }

    /// Adds one replay stage's counts to the group's record.
    pub(super) async fn replay_stage(
        &self,
        sent: u64,
        deleted: u64,
        back: u64,
        isolated: u64,
    ) -> Result<(), CliError> {
        self.update(|b| {
            b.replay_stage(&self.group, sent, deleted, back, isolated);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Ends the operation in the book: the alert it raised (a failed canary), and the group's
    /// record as saved.
    pub(super) async fn finish(
        &self,
        outcome: Finish,
    ) -> Result<(Option<Alert>, GroupRecord), CliError> {
        let (alert, book) = self
            .update(|b| Ok(b.finish(&self.group, &self.who, outcome.clone(), now_ms())))
            .await?;
        let record = book
            .get(&self.group)
            .map_err(|e| CliError::Config(e.to_string()))?
            .clone();
        Ok((alert, record))
    }

    async fn update<T>(
        &self,
        apply: impl FnMut(&mut Book) -> Result<T, Refused>,
    ) -> Result<(T, Book), CliError> {
        triage_store::update(&self.store, self.url.as_str(), apply)
            .await
            .map_err(refused)
    }
}

fn refusal(n: usize, group: &str) -> String {
    if n > TYPED_ABOVE {
        format!("not confirmed: pass --confirm {group} to act on {n} messages")
    } else {
        format!("not confirmed: pass --yes to act on {n} messages")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(confirmed(1001, "g2-a", &c(false, None)), Ok(false));
        assert_eq!(confirmed(1001, "g2-a", &c(false, Some("g2-a"))), Ok(true));
        assert!(confirmed(1001, "g2-a", &c(false, Some("g2-b"))).is_err());
    }
}
