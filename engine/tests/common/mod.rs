//! What the engine's tests on the port fakes share: the queues, a configuration over them and
//! the fast settings. Each test file uses its own share of them.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redrive_engine::Settings;
use redrive_engine::fake::FakeSqs;
use redrive_shared::Attributes;
use redrive_shared::config::{Env, RedriverConfig};

pub const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
pub const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
pub const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";

/// The re-driver's configuration over [`DLQ`], [`SRC`] and [`POISON`], then `pairs`.
pub fn config(pairs: &[(&str, &str)]) -> RedriverConfig {
    let map: HashMap<String, String> = [
        ("DLQ_URL", DLQ),
        ("SOURCE_QUEUE_URL", SRC),
        ("POISON_QUEUE_URL", POISON),
    ]
    .iter()
    .chain(pairs)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned())).expect("valid test config")
}

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
