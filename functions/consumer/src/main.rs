//! The consumer Lambda: the shipped HTTP processing step under [`redrive_consumer::run`], which
//! reads the rest of the configuration and builds the clients once at init, then handles one
//! typed SQS event per invocation.

use redrive_consumer::{Error, HttpProcessor};
use redrive_shared::config::{DownstreamConfig, Env};

#[tokio::main]
async fn main() -> Result<(), Error> {
    redrive_consumer::init_logging()?;
    // Config errors fail init, naming the variable, before any record is touched.
    let processor = DownstreamConfig::from_env(&Env::process())
        .map_err(Error::from)
        .and_then(|downstream| HttpProcessor::new(&downstream).map_err(Error::from))
        .inspect_err(|e| tracing::error!(error = %e, "invalid configuration"))?;
    redrive_consumer::run(processor).await
}
