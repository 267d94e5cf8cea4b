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

/// The triage group id of a message carrying `meta` (body `{}`), as `redrive triage` computes it
/// with its default grouping.
pub fn triage_group(meta: &RedriveMeta) -> String {
    let mut attributes = redrive_shared::Attributes::new();
    meta.write_into(&mut attributes);
    let mut g =
        redrive_shared::triage::Grouper::new(redrive_shared::triage::GroupingConfig::default());
    g.add(&redrive_shared::triage::Observation {
        message_id: "m",
        body: "{}",
        attributes: &attributes,
        sent_timestamp_ms: None,
        dead_letter_source_arn: None,
    })
    .expect("a message with x-redrive has a group")
    .to_string()
}

/// Five failed orders and the transient code each recorded: three 503s (a downstream that was
/// down) and two 429s (throttled), two triage groups.
pub const FAILED_ORDERS: [(u64, &str); 5] = [
    (1, "HTTP_503"),
    (2, "HTTP_503"),
    (3, "HTTP_503"),
    (4, "HTTP_429"),
    (5, "HTTP_429"),
];
