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
