//! The `x-redrive` attribute. Reading is total (every input yields usable metadata), what is
//! read can always be written and read back unchanged, and deciding on any message never
//! panics and never breaks the contract's invariants.
//!
//! Input: the first byte picks where the text goes (the `x-redrive` String attribute, a
//! binary one, the legacy `x-redrive-attempt` Number, or beside nine other attributes); the
//! rest is the text.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redrive_fuzz::checks::x_redrive(data));
