//! `x-redrive` values the tests of several crates start from.

use redrive_shared::meta::RedriveMeta;
use redrive_shared::{ErrorClass, LastError};

/// The `x-redrive` of a message its consumer gave up on as a permanent failure (`HTTP_400`,
/// "rejected"), of the chain `original`.
pub fn permanently_failed(original: &str) -> RedriveMeta {
    RedriveMeta {
        last_error: Some(LastError::new(
            ErrorClass::Permanent,
            "HTTP_400",
            "rejected",
            "2026-11-21T10:00:00Z".into(),
        )),
        ..RedriveMeta::fresh(original)
    }
}

/// The `x-redrive` of order `n`'s message whose consumer recorded a transient `code` on its
/// first attempt ("order N: downstream said CODE"): the messages triage groups by code.
pub fn transiently_failed(n: u64, code: &str) -> RedriveMeta {
    RedriveMeta {
        attempt: 1,
        last_error: Some(LastError::new(
            ErrorClass::Transient,
            code,
            &format!("order {n}: downstream said {code}"),
            "2026-11-28T09:00:00Z".into(),
        )),
        ..RedriveMeta::fresh(&format!("00000000-0000-4000-8000-{n:012}"))
    }
}
