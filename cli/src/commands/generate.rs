//! `redrive completions <shell>` and `redrive man`: generated from the command definition, so
//! they list every command, flag and value the binary accepts.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::Cli;
use crate::args::Command;
use crate::context::Exit;

/// Runs `completions` or `man` (`None` for any other command): they need no AWS.
pub fn run(command: &Command) -> Option<Exit> {
    match command {
        Command::Completions(a) => {
            print(&completions(a.shell));
            Some(Exit::Ok)
        }
        Command::Man(ManArgs { dir: Some(dir) }) => Some(match man_pages(dir) {
            Ok(pages) => {
                for page in pages {
                    println!("{}", page.display());
                }
                Exit::Ok
            }
            Err(e) => {
                eprintln!("error: writing the man pages to {}: {e}", dir.display());
                Exit::Error
            }
        }),
        Command::Man(_) => Some(match man() {
            Ok(page) => {
                print(&page);
                Exit::Ok
            }
            Err(e) => {
                eprintln!("error: writing the man page: {e}");
                Exit::Error
            }
        }),
        _ => None,
    }
}

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

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command into this directory (redrive.1, redrive-triage.1,
    /// redrive-triage-replay.1, ...) instead of printing the top page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

/// Writes a page per command and subcommand into `dir` (created if missing); returns the
/// files written, sorted.
pub fn man_pages(dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(Cli::command(), dir)?;
    let mut pages: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .collect();
    pages.sort();
    Ok(pages)
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
