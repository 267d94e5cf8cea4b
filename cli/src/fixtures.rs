//! Fixtures of the unit tests.

use redrive_engine::ports::Received;
use redrive_shared::Attributes;

/// A message received once, with receipt handle `h`, no group, no trace header and no
/// `SentTimestamp`; tests set the other fields with `..received(...)`.
pub(crate) fn received(message_id: &str, body: &str, attributes: Attributes) -> Received {
    Received {
        message_id: message_id.into(),
        receipt_handle: "h".into(),
        body: body.into(),
        attributes,
        group_id: None,
        receive_count: 1,
        sent_timestamp_ms: None,
        trace_header: None,
        dead_letter_source_arn: None,
    }
}
