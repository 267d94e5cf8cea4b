//! What the engine's tests on the port fakes share: the queues, a configuration over them and
//! the fast settings. Each test file uses its own share of them.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::{DrainRequest, Engine, Settings};
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

/// The engine on the port fakes, its SQS and its CloudWatch (alarms and metrics).
pub type TestEngine = Engine<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>>;

/// An engine over the queues of `config(pairs)`, with the fast settings and a fixed seed.
pub fn setup(pairs: &[(&str, &str)]) -> (Arc<FakeSqs>, Arc<FakeCloudWatch>, TestEngine) {
    let cfg = config(pairs);
    let sqs = queues(&cfg);
    let cw = FakeCloudWatch::new();
    let engine = Engine::new(sqs.clone(), cw.clone(), cw.clone(), cfg)
        .with_settings(settings())
        .with_seed(7);
    (sqs, cw, engine)
}

/// A dry run of up to `max` messages: what would happen, nothing sent or deleted.
pub fn dry_run(max: u32) -> DrainRequest {
    DrainRequest {
        dry_run: true,
        ..DrainRequest::new(max)
    }
}
