//! The CLI's integration tests as one test binary: each binary links the SDK and starts a moto
//! of its own, so one per crate is built, linked and started once. Each module is a file
//! beside this one and names its tests (`cargo test --test cli_tests -- <module>::`).

mod cli;
mod common;
mod export;
mod interrupt;
mod org;
/// `--stack NAME`: a deployed stack's outputs.
mod stack;
/// `redrive triage`, run on both emulators.
mod triage;
