//! The frozen plan an action moves, the operator's confirmation of its size, and the
//! operation marked begun in the book.

use std::io::IsTerminal;

use redrive_engine::triage_act::{ActError, Confirmation, GroupPlan};
use redrive_engine::triage_store::DynamoDbTriageStore;
use redrive_shared::config::QueueUrl;
use redrive_shared::triage::state::{Alert, Finish, GroupRecord};

use super::args::{ConfirmArgs, GroupArgs, TYPED_ABOVE};
use crate::context::{CliError, Ctx, Outcome};

/// Whether the operator confirmed acting on `n` messages of `group`.
fn confirmed(n: usize, group: &str, confirm: &ConfirmArgs) -> Result<bool, String> {
    match Confirmation::for_size(n) {
        Confirmation::TypedGroup => match confirm.confirm.as_deref() {
            Some(g) if g == group => Ok(true),
            Some(g) => Err(format!("--confirm {g} is not the group id {group}")),
            None => ask(
                &format!("type the group id ({group}) to act on {n} messages: "),
                group,
            ),
        },
        Confirmation::Yes if !confirm.yes && confirm.confirm.as_deref() != Some(group) => {
            ask(&format!("act on {n} messages? type yes: "), "yes")
        }
        _ => Ok(true),
    }
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

/// An operation about to act on a group's frozen plan ([`GroupPlan`]): the queue's book, the
/// plan the book names (or `--plan`), its message ids as the last pass stored them, and the
/// group's record.
pub(super) struct Operation {
    pub(super) plan: GroupPlan<DynamoDbTriageStore>,
    pub(super) url: QueueUrl,
}

impl From<ActError> for CliError {
    fn from(e: ActError) -> Self {
        match e {
            ActError::Port(p) => CliError::Aws(p),
            ActError::Refused(r) => CliError::Config(r),
        }
    }
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
        let plan = GroupPlan::load(
            store,
            url.as_str(),
            &group,
            confirm.plan.as_deref(),
            &target.book.who(),
        )
        .await?;
        Ok(Self { plan, url })
    }

    /// Asks for the confirmation its size needs, then marks the operation begun in the book
    /// (refused while another runs on the group). `Some(outcome)`: not confirmed, nothing done.
    pub(super) async fn confirm_and_begin(
        &self,
        operation: &str,
        confirm: &ConfirmArgs,
    ) -> Result<Option<Outcome>, CliError> {
        let size = self.plan.ids.len();
        let group = &self.plan.group;
        match confirmed(size, group, confirm) {
            Ok(true) => {}
            Ok(false) => {
                eprintln!("redrive: {}", refusal(size, group));
                return Ok(Some(Outcome::Refused));
            }
            Err(e) => return Err(CliError::Config(e)),
        }
        self.plan.begin(operation).await?;
        Ok(None)
    }

    /// Ends the operation in the book: the alert it raised, and the group's record as saved.
    pub(super) async fn finish(
        &self,
        outcome: Finish,
    ) -> Result<(Option<Alert>, GroupRecord), CliError> {
        Ok(self.plan.finish(outcome).await?)
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
