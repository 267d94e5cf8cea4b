//! One module per command: its arguments (`#[derive(Args)]`) beside its `run`.

pub mod circuit;
pub(crate) mod discard;
pub(crate) mod drain;
pub(crate) mod export;
pub(crate) mod generate;
pub mod history;
pub(crate) mod import;
pub(crate) mod peek;
pub(crate) mod replay;
pub(crate) mod stats;
pub(crate) mod status;
pub mod triage;

use crate::args::Command;
use crate::context::{CliError, Ctx, Outcome};

/// Runs one command.
pub async fn run(ctx: &Ctx, command: Command) -> Result<Outcome, CliError> {
    match command {
        Command::Stats(a) => stats::run(ctx, a).await,
        Command::Peek(a) => peek::run(ctx, a).await,
        Command::Drain(a) => drain::run(ctx, a).await,
        Command::Replay(a) => replay::run(ctx, a).await,
        Command::Discard(a) => discard::run(ctx, a).await,
        Command::Export(a) => export::run(ctx, a).await,
        Command::Import(a) => import::run(ctx, a).await,
        Command::Circuit(a) => circuit::run(ctx, a).await,
        Command::History(a) => history::run(ctx, a).await,
        Command::Status(a) => status::run(ctx, a).await,
        Command::Triage(a) => triage::run(ctx, *a).await,
        Command::Completions(_) | Command::Man(_) => Ok(Outcome::Done),
    }
}
