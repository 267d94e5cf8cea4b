//! The re-driver's integration tests as one test binary (the fleet's on the port fake, the
//! built Lambda's on moto and LocalStack): each binary links the SDK and starts
//! a moto of its own, so one per crate is built, linked and started once. Each module is a file
//! beside this one and names its tests (`cargo test --test redriver_tests -- <module>::`).

// The fleet's drains nest deep futures (fleet, engine, circuit, pipelines, port calls).
#![recursion_limit = "256"]

// The engine's fixtures on the port fake (queues, configuration, quick retries).
#[path = "../../../engine/tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;
mod events;
mod fleet;
mod invoke;
mod lambda;
mod protected_fleet;
