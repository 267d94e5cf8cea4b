//! The cause record: the cause of a message's last failed attempt, kept outside the message in
//! the consumer's idempotency table, under an id made from the message's idempotency key.
//!
//! Why a record and not only the `x-redrive` stamp: a stamp travels only on the copies a
//! consumer sends itself (the permanent failures it dead-letters). A message that SQS moves to
//! the DLQ after `maxReceiveCount` failed receives is the original, untouched: nothing can be
//! added to it on the way. Only a record keyed by something the moved message still carries (its
//! idempotency key) survives that move, and triage reads it back by the same key.
//!
//! The item (one per idempotency key, beside the key's idempotency record and never touching
//! it), as any consumer may write it:
//!
//! | attribute | type | value |
//! |---|---|---|
//! | `id` | S | `cause#` + the key's record id ([`item_id`]) |
//! | `class` | S | `transient` or `permanent` |
//! | `code` | S | the failure's code (`HTTP_503`, `SCHEMA_INVALID`) |
//! | `message` | S | the failure's text normalised ([`recorded_message`]): no values, no ids |
//! | `normaliserVersion` | N | the normaliser version that produced `message` |
//! | `firstFailedAt` | S | RFC 3339, the first failure recorded (kept by later writes) |
//! | `lastFailedAt` | S | RFC 3339, the last failure recorded |
//! | `attempts` | N | failed attempts recorded (one added per write) |
//! | `expiration` | N | epoch seconds, the table's TTL attribute |
//!
//! The last failure wins (class, code, message, `lastFailedAt`); the first failure's time is
//! kept.

use super::facts::{CauseOrigin, RecordedCause};
use super::normalise::{self, normalise};
use crate::key::IdempotencyKey;
use crate::meta::{ErrorClass, MAX_ERROR_MESSAGE_CHARS};
use crate::timefmt::millis_from_rfc3339;

/// The prefix of a cause item's `id`.
pub const ID_PREFIX: &str = "cause#";

/// Attribute names of a cause item.
pub mod attr {
    pub const ID: &str = "id";
    pub const CLASS: &str = "class";
    pub const CODE: &str = "code";
    pub const MESSAGE: &str = "message";
    pub const NORMALISER_VERSION: &str = "normaliserVersion";
    pub const FIRST_FAILED_AT: &str = "firstFailedAt";
    pub const LAST_FAILED_AT: &str = "lastFailedAt";
    pub const ATTEMPTS: &str = "attempts";
    pub const EXPIRATION: &str = "expiration";
}

/// The cause item's `id` for an idempotency key: `cause#` and the key's record id (its hash,
/// under the consumer's namespace when it has one), so that the key itself is never stored.
pub fn item_id(key: &IdempotencyKey, namespace: Option<&str>) -> String {
    format!("{ID_PREFIX}{}", key.record_id(namespace))
}

/// A failure's text as a cause item keeps it: normalised with the current normaliser (values,
/// ids, numbers, addresses and times masked), cut to 256 characters.
pub fn recorded_message(text: &str) -> String {
    normalise(text, normalise::CURRENT)
        .template
        .chars()
        .take(MAX_ERROR_MESSAGE_CHARS)
        .collect()
}

/// A cause item as read back: the attributes triage needs, as text (a missing `class` or
/// `code` makes it unreadable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CauseItem {
    pub class: String,
    pub code: String,
    pub message: String,
    pub first_failed_at: Option<String>,
    pub last_failed_at: Option<String>,
    pub attempts: Option<u32>,
}

impl CauseItem {
    /// The recorded cause triage groups by (origin [`CauseOrigin::Record`]); `None` when the
    /// item has no class or no code.
    pub fn to_recorded_cause(&self) -> Option<RecordedCause> {
        if self.class.is_empty() || self.code.is_empty() {
            return None;
        }
        Some(RecordedCause {
            class: ErrorClass::from_text(&self.class),
            code: self.code.clone(),
            message: self.message.clone(),
            at_ms: self.last_failed_at.as_deref().and_then(millis_from_rfc3339),
            origin: CauseOrigin::Record,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_item_id_is_the_record_id_under_its_prefix_and_never_the_key() {
        let key = IdempotencyKey::try_from("customer@example.com".to_string()).unwrap();
        let id = item_id(&key, None);
        assert_eq!(id, format!("cause#{}", key.record_id(None)));
        assert!(!id.contains("customer"));
        assert_eq!(
            item_id(&key, Some("orders")),
            format!("cause#orders#{}", key.record_id(None))
        );
    }

    #[test]
    fn a_recorded_message_keeps_no_values_and_is_cut() {
        let text = "POST https://orders.internal/v1/orders/6f1c2a9e-8d7b-4c3a-9f0e-1b2c3d4e5f60 returned 503 (request id 12345) for alice@example.com";
        let kept = recorded_message(text);
        assert_eq!(
            kept,
            "POST <url> returned <num> (request id <num>) for <email>"
        );
        assert_eq!(recorded_message(&"word ".repeat(200)).chars().count(), 256);
    }

    #[test]
    fn an_item_reads_as_a_recorded_cause_of_origin_record() {
        let item = CauseItem {
            class: "transient".into(),
            code: "HTTP_503".into(),
            message: "downstream answered <num>".into(),
            first_failed_at: Some("2026-11-21T10:00:00Z".into()),
            last_failed_at: Some("2026-11-21T10:00:00Z".into()),
            attempts: Some(2),
        };
        let cause = item.to_recorded_cause().unwrap();
        assert_eq!(cause.class, ErrorClass::Transient);
        assert_eq!(cause.origin, CauseOrigin::Record);
        assert_eq!(cause.at_ms, Some(1_795_255_200_000));
        let no_code = CauseItem {
            code: String::new(),
            ..item
        };
        assert!(no_code.to_recorded_cause().is_none());
    }
}
