//! The queues the fake-backed tests drain, and the re-driver's configuration over them.

use std::collections::HashMap;

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
