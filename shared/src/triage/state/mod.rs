//! What an operator decided about each group, kept outside SQS: the book of one queue. Pure:
//! the store (one DynamoDB item per queue, written on the version read) is the engine's
//! (`redrive_engine::triage_store`), the commands are the CLI's, and the re-driver reads the
//! holds.
//!
//! A group's lifecycle:
//!
//! | state          | entered when                                                         |
//! |----------------|----------------------------------------------------------------------|
//! | `new`          | a triage pass first sees the group (alert: `new-group`)               |
//! | `acknowledged` | an operator acknowledges it                                          |
//! | `held`         | an operator holds it: the re-driver leaves its messages on the DLQ    |
//! | `replaying`    | a group replay starts (canary first)                                 |
//! | `replay-failed`| a canary came back to the DLQ or was isolated (alert: `canary-failed`) |
//! | `resolved`     | a replay or discard emptied it, or a complete pass no longer finds it |
//! | `regressed`    | a resolved group is seen again (alert: `regressed`)                   |
//!
//! Alerts are transitions: each is raised by the one write that makes the transition, so a
//! group that gains 3,000 messages raises `new-group` once.

mod book;
mod operations;
mod record;
#[cfg(test)]
mod tests;

pub use book::{Book, Refused};
pub use operations::{Finish, stages};
pub use record::{Alert, AuditEntry, GroupRecord, Hold, Note, PassFacts, ReplayTally, State, thin};

/// Entries of a group's audit kept in the book (older ones are only in the logs).
pub const AUDIT_KEPT: usize = 100;
/// Notes kept per group.
pub const NOTES_KEPT: usize = 50;
/// The largest `--count` of a hold: the ids it counts are kept in the book.
pub const MAX_HOLD_COUNT: u32 = 1000;
/// Groups a book keeps; past it the least recently seen resolved groups are dropped.
pub const GROUPS_KEPT: usize = 500;
/// Failure times a group's record keeps for its trend (evenly thinned from the pass's).
pub const TIMES_KEPT: usize = 200;
