//! The bench crate's tests as one test binary: each binary links the SDK and starts a moto
//! of its own, so one per crate is built, linked and started once. Each module is a file
//! beside this one and names its tests (`cargo test --test bench_tests -- <module>::`).

mod circuit_sim;
mod cold_start;
mod consumer_cache;
mod fuzz_corpus;
mod move_task;
mod proxy_moto;
mod soak_fake;
