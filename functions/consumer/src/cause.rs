//! The cause of each failed attempt, recorded where triage can find it.
//!
//! On every failed attempt (transient or permanent) the consumer writes the failure's class,
//! code and normalised text, its time and the count of failed attempts to a cause item in its
//! own idempotency table, beside the key's idempotency record (item id `cause#<record id>`, the
//! same `expiration` TTL attribute; the claim, complete and release writes never read or touch
//! it). The last failure wins; the first failure's time is kept. A write that fails is logged
//! (never the body) and changes nothing about the message's outcome.
//!
//! Why a record and not a stamp: the `x-redrive` stamp travels only on the copies the consumer
//! sends itself (the permanent failures it dead-letters). A message that SQS moves to the DLQ
//! after `maxReceiveCount` failed receives is the original, untouched; only a record keyed by
//! its idempotency key survives that move. `redrive triage DLQ --causes-table TABLE` reads it
//! back by the same key.
//!
//! A consumer of your own keeps the same convention with [`crate::aws::record_cause`] (feature
//! `dynamodb`), or by writing the item shape of [`redrive_shared::triage::cause`] itself.

pub use redrive_shared::meta::ErrorClass;
pub use redrive_shared::triage::cause::{ID_PREFIX, attr, item_id, recorded_message};

use redrive_shared::config::DEFAULT_IDEMPOTENCY_TTL_SECONDS;
use redrive_shared::key::IdempotencyKey;

use crate::process::ProcessError;

/// One failed attempt's cause, as the cause item records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureCause {
    /// The cause item's `id`: [`item_id`] of the message's idempotency key.
    pub item_id: String,
    pub class: ErrorClass,
    pub code: String,
    /// The failure's text normalised ([`recorded_message`]): no body values, no ids.
    pub message: String,
    /// When the attempt failed, epoch milliseconds.
    pub at_ms: i64,
    /// `expiration`, epoch seconds (the table's TTL attribute).
    pub expiration_s: i64,
}

impl FailureCause {
    /// The cause of a failed attempt of the message keyed `key` (under the consumer's
    /// `namespace`, `IDEMPOTENCY_NAMESPACE`, when it has one), failing now; `message` is
    /// normalised here. It expires with the default idempotency TTL
    /// ([`FailureCause::expiring`] to change it).
    pub fn new(
        key: &IdempotencyKey,
        namespace: Option<&str>,
        class: ErrorClass,
        code: impl Into<String>,
        message: &str,
    ) -> Self {
        let at_ms = crate::engine::now_ms();
        Self {
            item_id: item_id(key, namespace),
            class,
            code: code.into(),
            message: recorded_message(message),
            at_ms,
            expiration_s: at_ms
                .div_euclid(1000)
                .saturating_add(DEFAULT_IDEMPOTENCY_TTL_SECONDS as i64),
        }
    }

    /// The cause of a processing error.
    pub fn of_error(key: &IdempotencyKey, namespace: Option<&str>, error: &ProcessError) -> Self {
        let class = if error.is_permanent() {
            ErrorClass::Permanent
        } else {
            ErrorClass::Transient
        };
        Self::new(key, namespace, class, error.code(), error.message())
    }

    /// Failed at `at_ms` (epoch milliseconds) instead of now.
    pub fn at(mut self, at_ms: i64) -> Self {
        self.at_ms = at_ms;
        self
    }

    /// Expires at `expiration_s` (epoch seconds).
    pub fn expiring(mut self, expiration_s: i64) -> Self {
        self.expiration_s = expiration_s;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_keeps_the_class_and_code_and_only_the_normalised_text() {
        let key = IdempotencyKey::try_from("order-81234@example.com".to_string()).unwrap();
        let error = ProcessError::transient(
            "HTTP_503",
            "POST https://orders.internal/v1/orders/81234 answered 503 for order-81234@example.com",
        );
        let cause = FailureCause::of_error(&key, Some("orders"), &error)
            .at(1_795_255_200_000)
            .expiring(7);
        assert_eq!(
            cause.item_id,
            format!("cause#orders#{}", key.record_id(None))
        );
        assert_eq!(
            (cause.class, cause.code.as_str()),
            (ErrorClass::Transient, "HTTP_503")
        );
        assert_eq!(cause.message, "POST <url> answered <num> for <email>");
        assert!(!cause.message.contains("81234") && !cause.item_id.contains("81234"));
        assert_eq!((cause.at_ms, cause.expiration_s), (1_795_255_200_000, 7));
        let permanent = FailureCause::of_error(&key, None, &ProcessError::permanent("SCHEMA", "x"));
        assert_eq!(permanent.class, ErrorClass::Permanent);
    }
}
