//! Queue attributes an operator needs: depth, redrive policy, retention.

pub use redrive_engine::queue_facts::{QueueFacts, facts};

/// Warns on stderr when reading a queue counts towards moving its messages to a DLQ.
pub fn warn_if_receives_count(facts: &QueueFacts, queue_name: &str) {
    if let Some(n) = facts.max_receive_count() {
        eprintln!(
            "note: {queue_name} has a RedrivePolicy (maxReceiveCount {n}): reading a message here counts as one of its receives"
        );
    }
}
