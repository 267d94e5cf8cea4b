//! Test harness for redrive: real AWS APIs from a moto server, unique resources per test,
//! a scriptable downstream HTTP server, and a `cargo lambda watch` runner.
//!
//! Used as a dev-dependency by the other crates of the workspace:
//! ```no_run
//! # async fn demo() {
//! use redrive_tests::{moto, unique_name, QueueSet};
//! let sqs = moto().sqs().await;
//! let queues = QueueSet::create(&sqs, false, 2).await;
//! let _name = unique_name("orders");
//! # let _ = queues;
//! # }
//! ```
//!
//! Everything here panics with a message on failure: it is meant for tests, where a panic
//! is the failure report.

mod cloudwatch;
mod downstream;
mod dynamodb;
/// The Lambda SQS event source mapping's poll loop, played by the demo and the bench.
pub mod event_source;
/// Checks that several crates' tests make the same way.
pub mod fixture;
/// IAM enforced: functions and the CLI under their templates' policies (`iam::env_for_binary`,
/// `iam::cli_env`).
pub mod iam;
mod lambda_watch;
mod localstack;
pub mod loopback;
mod meta;
mod moto;
mod names;
mod process;
/// Step Functions on moto: `moto_sfn()`, routes to `cargo lambda watch`, helpers.
pub mod sfn;
mod sqs;
mod template;

use std::path::{Path, PathBuf};

pub use cloudwatch::{alarm_state, metric_points, put_queue_alarm, put_queue_metric};
pub use downstream::{Downstream, Mode, ReceivedRequest};
pub use dynamodb::{create_circuit_table, create_idempotency_table};
pub use lambda_watch::{LambdaWatch, WatchOptions, invocation_ids};
pub use localstack::{
    LOCALSTACK_SERVICES, LocalStack, LocalStackServer, SQS_EMULATOR_VARIABLE, localstack,
    sqs_emulator,
};
pub use meta::{FAILED_ORDERS, permanently_failed, transiently_failed, triage_group};
pub use moto::{Moto, MotoServer, REGION, moto, moto_fast_clock, moto_sfn};
pub use names::{ScratchDir, unique_name};
pub use process::Launched;
pub use sqs::{
    QueueSet, SYSTEM_ATTRIBUTES_ALL, attr_binary, attr_custom, attr_number, attr_string,
    batch_sends_keep_trace_headers, drain_all, producer_trace_header, queue_attributes,
    queue_counts, queue_depth, receive_raw, send_batch, send_entries, send_fifo, send_raw,
    send_traced, sqs_event, trace_header_of, wait_for_depth,
};
pub use template::standalone_function_env;

/// The workspace root (the directory holding the root `Cargo.toml`).
pub fn workspace_root() -> &'static Path {
    // CARGO_MANIFEST_DIR of this crate is `<root>/tests`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives one level below the workspace root")
}

/// The executable of the workspace binary `name`, built once per test process with
/// `lambda_watch::build::BUILD_ARGS` (the test build's feature set: no dependency is compiled again).
/// For a test that runs another package's binary, where `CARGO_BIN_EXE_<name>` is not set.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = redrive_shared::sync::lock(&BUILT);
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let build = lambda_watch::build_lambdas(&[name.to_string()])
        .unwrap_or_else(|e| panic!("building the binary {name}: {e}"));
    let path = build.executables[name].clone();
    built.push((name.to_string(), path.clone()));
    path
}

/// `<workspace>/.venv/bin`, where `make setup` installs moto and cargo-lambda.
pub fn venv_bin() -> PathBuf {
    workspace_root().join(".venv").join("bin")
}

/// The shipped event fixtures (`tests/fixtures/*.json`), parsed.
pub fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("fixture {} is not JSON: {e}", path.display()))
}
