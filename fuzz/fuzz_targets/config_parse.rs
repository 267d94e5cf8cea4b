//! The configuration parsers of both Lambdas: any environment yields a configuration or an
//! error naming the variable (and the value) at fault, never a panic; a configuration that
//! exists is within the contract's bounds.
//!
//! Input: lines of `NAME=VALUE`; a one-character NAME stands for one of the known variables
//! (so that the fuzzer reaches every variable without guessing their names).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redrive_fuzz::checks::config_parse(data));
