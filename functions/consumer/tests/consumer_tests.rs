//! The consumer's integration tests as one test binary: each binary links the SDK and starts a moto
//! of its own, so one per crate is built, linked and started once. Each module is a file
//! beside this one and names its tests (`cargo test --test consumer_tests -- <module>::`).
//! `logs.rs` is a binary of its own: it sets the process-wide log subscriber.

mod common;
mod custom_store;
mod docs;
mod envelopes;
mod features;
mod keys;
mod lambda_watch;
mod moto;
mod sdk_config;
mod typed;
