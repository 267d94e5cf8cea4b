//! The frozen plan an action moves, the operator's confirmation of its size, and the
//! operation marked begun in the book.

use std::io::IsTerminal;

use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageStore};
use redrive_shared::triage::state::GroupRecord;

use super::args::{CONFIRM_ABOVE, ConfirmArgs, TYPED_ABOVE};
use super::book::refused;
use crate::{CliError, Ctx, Outcome, now_ms};

/// The plan an action acts on, and whether the operator confirmed it. `Ok(None)`: refused
/// (the preview was printed).
pub(super) async fn frozen_plan(
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
pub(super) struct Operation<'a> {
    pub(super) store: &'a DynamoDbTriageStore,
    pub(super) url: &'a str,
    pub(super) group: &'a str,
    pub(super) plan_id: &'a str,
    pub(super) size: usize,
}

impl Operation<'_> {
    /// Asks for the confirmation its size needs, then marks the operation begun in the book
    /// (refused while another runs on the group). `Some(outcome)`: not confirmed, nothing done.
    pub(super) async fn confirm_and_begin(
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
