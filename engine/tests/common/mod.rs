//! What the engine's tests on the port fakes share: the queues, a configuration over them and
//! the fast settings. Each test file uses its own share of them.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use redrive_engine::Settings;
use redrive_engine::fake::FakeSqs;
use redrive_shared::Attributes;
use redrive_shared::config::RedriverConfig;

pub use redrive_engine::fake::orders::{DLQ, POISON, SRC, config};

/// A fake SQS holding the queues of `config`.
pub fn queues(config: &RedriverConfig) -> Arc<FakeSqs> {
    let sqs = FakeSqs::new();
    for q in [
        Some(&config.dlq_url),
        config.source_queue_url.as_ref(),
        Some(&config.poison_queue_url),
    ]
    .into_iter()
    .flatten()
    {
        sqs.create_queue(q.as_str());
    }
    sqs
}

/// Retries after a millisecond, receives without a long poll.
pub fn settings() -> Settings {
    Settings {
        retry_base: Duration::from_millis(1),
        receive_wait_seconds: 0,
        ..Settings::default()
    }
}

pub use redrive_tests::permanently_failed;

/// The attributes of [`permanently_failed`] for the chain `orig-perm`.
pub fn permanent_failure() -> Attributes {
    let mut attributes = Attributes::new();
    permanently_failed("orig-perm").write_into(&mut attributes);
    attributes
}
