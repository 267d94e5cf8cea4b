//! `redrive`: the operator CLI. See docs/cli.md and `redrive --help`.

use std::process::ExitCode;

use redrive_cli::{init_logging, parse, run};

#[tokio::main]
async fn main() -> ExitCode {
    // Usage errors exit with code 2 here, `--help` and `--version` with 0.
    let cli = parse();
    init_logging();
    run(cli).await
}
