//! `redrive`: the operator CLI. See the README ("Operator CLI") and `redrive --help`.

use std::process::ExitCode;

use clap::Parser;
use redrive_cli::{Cli, init_logging, run};

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors exit with code 2 here, `--help` and `--version` with 0.
    let cli = Cli::parse();
    init_logging();
    run(cli).await
}
