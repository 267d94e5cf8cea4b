//! The archiver: moves messages older than a threshold from the poison queue (and from the DLQ,
//! when it cannot be drained) to S3 before SQS retention deletes them.
//!
//! Rules, each kept in one place below:
//! - The threshold (`ARCHIVE_AFTER_DAYS`, default 10, or `ARCHIVE_AFTER_SECONDS`, which wins) is
//!   checked at init against every queue's real `MessageRetentionPeriod`: a threshold that is
//!   not below it would let SQS delete messages before they are archived, so init fails.
//! - A message's age is counted from its `SentTimestamp`, the clock SQS's retention runs on (a
//!   message a standard queue dead-letters keeps its original enqueue time).
//! - Old messages are written as one JSON Lines object per receive batch, with their SHA-256,
//!   which S3 verifies before it acknowledges the put. A message is deleted from its queue only
//!   after that acknowledgement. A crash or a failed delete between the two leaves the message
//!   on its queue and in the archive: the next run archives it again (an object twice, never a
//!   loss).
//! - Messages that are not old yet are hidden only for the sweep (at most the visibility timeout,
//!   which the sweep never outlasts) and made visible again (visibility 0) when it ends.
//! - Every run publishes, per queue it sweeps, the age of the oldest message it received
//!   (`OldestMessageAgeSeconds`, from `SentTimestamp`; 0 for an empty queue). SQS's own
//!   `ApproximateAgeOfOldestMessage` leaves out a message received three times or more, and
//!   the archiver receives every message every run: the age alarms of the DLQ and the poison
//!   queue read this metric instead.
//! - At the reminder hour (`REMINDER_HOUR_UTC`, with `ALERTS_TOPIC_ARN`), the first run of
//!   the day publishes one daily digest for the whole fleet: each DLQ with messages or groups
//!   not resolved, with its groups from triage's books ([`digest`]).
//! - With `TRIAGE_TABLE`, each sweep records the groups of the messages it left on the queue in
//!   the queue's triage book: the live index the console and the digest read ([`index`]).
//! - Bodies are never logged.

mod config;
pub mod digest;
pub mod index;
mod store;
mod sweep;

pub use config::{
    ArchiverConfig, ArchiverInitError, CausesConfig, DEFAULT_ARCHIVE_AFTER_DAYS,
    DEFAULT_ARCHIVE_PREFIX, DEFAULT_REMINDER_HOUR_UTC, DigestConfig, MAX_RETENTION_SECONDS,
    check_threshold,
};
pub use store::{
    ObjectStore, S3_ATTEMPT_TIMEOUT, S3_OPERATION_TIMEOUT, S3Store, archive_object, for_uploads,
    sha256_base64,
};
pub use sweep::{
    ArchiveCounts, Archiver, LEFT_ALONE_METRIC, QueueSummary, QueuedMessage, RunSummary,
    SWEEP_MARGIN, SweepStop,
};

#[cfg(test)]
mod tests;
