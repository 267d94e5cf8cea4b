//! The copy a moved message is sent as ([`redrive_engine::replay_copy`]).

#[cfg(test)]
pub use redrive_engine::replay_copy::DEDUP_KIND;
pub use redrive_engine::replay_copy::{copy_entry, fifo_group, replay_entry};
