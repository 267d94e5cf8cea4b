//! The engine's integration tests as one test binary: each binary links the SDK and starts a moto
//! of its own, so one per crate is built, linked and started once. Each module is a file
//! beside this one and names its tests (`cargo test --test engine_tests -- <module>::`).

mod circuit;
mod common;
mod faults;
mod fleet_list;
mod moto;
mod onhold;
mod protected;
mod ungranted;
