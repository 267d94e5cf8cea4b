//! `redrive completions <shell>` and `redrive man`: generated from the command definition, so
//! they list every command, flag and value the binary accepts.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::Cli;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "redrive", &mut script);
    script
}

/// The man page (roff), subcommands included.
pub fn man() -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    Ok(page)
}

/// Writes generated text on stdout; a reader that stops early (`| head`) is not an error.
pub fn print(text: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text).and_then(|()| out.flush());
}
