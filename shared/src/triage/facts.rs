//! What triage reads of one message: its recorded cause (the `x-redrive` stamp's `lastError`),
//! its attempts, its standing isolation and its source queue. Nothing is invented: a message
//! that carries no cause has none here.

use crate::attributes::Attributes;
use crate::meta::{ErrorClass, IsolationReason, LastError, MetaSource, RedriveMeta};
use crate::source::QueueArn;
use crate::timefmt::millis_from_rfc3339;

/// One message as received (from a queue, an export or an archive line).
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub message_id: &'a str,
    pub body: &'a str,
    pub attributes: &'a Attributes,
    /// `SentTimestamp`, epoch milliseconds.
    pub sent_timestamp_ms: Option<i64>,
    /// `DeadLetterQueueSourceArn`: the queue SQS moved the message from, when it did.
    pub dead_letter_source_arn: Option<&'a str>,
}

/// Where a recorded cause was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseOrigin {
    /// The `lastError` of the message's `x-redrive` attribute (a copy written by a consumer
    /// that gave up on it).
    Stamp,
    /// A record kept outside the message (keyed by its idempotency key), supplied by the caller.
    Record,
}

/// The cause of a failure as its consumer recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCause {
    pub class: ErrorClass,
    pub code: String,
    pub message: String,
    /// When the failure happened (`lastError.at`), epoch milliseconds, when readable.
    pub at_ms: Option<i64>,
    pub origin: CauseOrigin,
}

impl RecordedCause {
    pub fn from_last_error(e: &LastError, origin: CauseOrigin) -> Self {
        Self {
            class: e.class.clone(),
            code: e.code.clone(),
            message: e.message.clone(),
            at_ms: millis_from_rfc3339(&e.at),
            origin,
        }
    }
}

/// What one message carries, read once.
#[derive(Debug, Clone)]
pub struct Facts {
    pub message_id: String,
    /// `originalMessageId` from `x-redrive`, else the MessageId: the same across copies.
    pub original_message_id: String,
    /// Redrives so far, from `x-redrive` (never SQS's ApproximateReceiveCount).
    pub attempt: u32,
    /// The isolation the stamp stands for, if the message is parked.
    pub reason: Option<IsolationReason>,
    /// The `x-redrive` attribute was there but could not be read.
    pub garbled: bool,
    /// The source queue's name: `DeadLetterQueueSourceArn`, else the stamp's `source`.
    pub source: Option<String>,
    pub cause: Option<RecordedCause>,
    pub sent_ms: Option<i64>,
}

impl Facts {
    pub fn read(m: &Observation<'_>) -> Self {
        let (meta, how) = RedriveMeta::read(m.attributes, m.message_id);
        let reason = standing_reason(&meta).cloned();
        let source = m
            .dead_letter_source_arn
            .or_else(|| meta.source())
            .map(queue_name);
        Self {
            message_id: m.message_id.to_string(),
            original_message_id: meta.original_message_id.clone(),
            attempt: meta.attempt,
            reason,
            garbled: matches!(how, MetaSource::Garbled(_)),
            source,
            cause: meta
                .last_error
                .as_ref()
                .map(|e| RecordedCause::from_last_error(e, CauseOrigin::Stamp)),
            sent_ms: m.sent_timestamp_ms,
        }
    }

    /// When the failure happened: the recorded time, else when the message was sent.
    pub fn failed_at_ms(&self) -> Option<i64> {
        self.cause.as_ref().and_then(|c| c.at_ms).or(self.sent_ms)
    }
}

/// The name of a queue given by ARN (any other text is kept as it is).
pub fn queue_name(arn_or_name: &str) -> String {
    QueueArn::parse(arn_or_name).map_or_else(|_| arn_or_name.to_string(), |arn| arn.name)
}

/// The isolation a stamp stands for: its `reason`, unless the message was sent on after it was
/// isolated (`lastRedrivenAt` later than `isolatedAt`).
pub fn standing_reason(meta: &RedriveMeta) -> Option<&IsolationReason> {
    let moved_on = match (&meta.isolated_at, &meta.last_redriven_at) {
        (Some(isolated), Some(redriven)) => {
            match (millis_from_rfc3339(isolated), millis_from_rfc3339(redriven)) {
                (Some(i), Some(r)) => r > i,
                _ => false,
            }
        }
        _ => false,
    };
    if moved_on { None } else { meta.reason.as_ref() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::MessageAttribute;
    use crate::meta::ATTRIBUTE_NAME;

    fn observe<'a>(attrs: &'a Attributes, dlsa: Option<&'a str>) -> Facts {
        Facts::read(&Observation {
            message_id: "m-1",
            body: "{}",
            attributes: attrs,
            sent_timestamp_ms: Some(5),
            dead_letter_source_arn: dlsa,
        })
    }

    #[test]
    fn the_cause_attempts_and_source_come_from_the_stamp() {
        let mut meta = RedriveMeta {
            attempt: 3,
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "SCHEMA",
                "bad field",
                "2026-11-21T10:00:00Z".into(),
            )),
            ..RedriveMeta::fresh("orig")
        };
        meta.set_source("arn:aws:sqs:eu-west-1:123456789012:orders");
        let mut attrs = Attributes::new();
        meta.write_into(&mut attrs);
        let f = observe(&attrs, None);
        assert_eq!((f.attempt, f.original_message_id.as_str()), (3, "orig"));
        assert_eq!(f.source.as_deref(), Some("orders"));
        let cause = f.cause.unwrap();
        assert_eq!(
            (cause.class, cause.code.as_str()),
            (ErrorClass::Permanent, "SCHEMA")
        );
        assert_eq!(cause.at_ms, Some(1_795_255_200_000));
        // SQS's own stamp of the source wins over the copy's.
        let f = observe(&attrs, Some("arn:aws:sqs:eu-west-1:123456789012:payments"));
        assert_eq!(f.source.as_deref(), Some("payments"));
    }

    #[test]
    fn a_message_that_carries_nothing_has_no_cause_and_no_source() {
        let f = observe(&Attributes::new(), None);
        assert!(f.cause.is_none() && f.source.is_none() && f.reason.is_none());
        assert_eq!((f.attempt, f.failed_at_ms()), (0, Some(5)));
        let mut garbled = Attributes::new();
        garbled.insert(ATTRIBUTE_NAME.into(), MessageAttribute::string("nope"));
        assert!(observe(&garbled, None).garbled);
    }
}
