//! The triage action Lambda: configuration at init, then one checked action on a group of a
//! configured queue's triage book per button pressed, answered with the widget re-rendered.

use lambda_runtime::Error;
use redrive_triage_console::{Function, run};

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(Function::Action).await
}
