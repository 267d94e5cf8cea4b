//! The triage widget Lambda (read only): configuration at init, then one rendering of the
//! widget's queue per call from the dashboard.

use lambda_runtime::Error;
use redrive_triage_console::{Function, run};

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(Function::Widget).await
}
