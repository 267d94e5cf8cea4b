//! The re-driver's event recognizer: any JSON is recognized or rejected, never a panic, and a
//! manual drain is only recognized from its two allowed keys with valid values.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redrive_fuzz::checks::event_recognize(data));
