//! Triage: the messages of a DLQ or poison queue grouped by cause, each group with a stable id
//! and one recommended action. Pure: the CLI (and any reader of a queue, an export or an
//! archive) feeds it what it received.
//!
//! - [`normalise`]: the versioned normaliser of variable text (ids, numbers, addresses, times).
//! - [`facts`]: what one message carries: its recorded cause, attempts, isolation, source.
//! - [`cause`]: the cause record a consumer keeps outside the message, keyed by its
//!   idempotency key, for the messages SQS moves to the DLQ untouched.
//! - [`shape`]: the body shape (JSON keys and types) that groups a message with no cause.
//! - [`group`]: the group id, a pure function of the cause and the normaliser version.
//! - [`action`]: the fixed table of recommended actions.
//! - [`rules`]: the operator's ordered rules file, which merges or splits groups.
//! - [`state`]: what operators decided about each group (states, holds, notes, audit, alerts).
//! - [`grouper`]: one pass over messages, folded into groups (counts, times, top values, ids).
//!
//! The design notes are in docs/triage.md.

pub mod action;
pub mod cause;
pub mod facts;
pub mod group;
pub mod grouper;
pub mod normalise;
pub mod rules;
pub mod shape;
pub mod state;

pub use action::Action;
pub use facts::{Facts, Observation, RecordedCause};
pub use group::GroupId;
pub use grouper::{Group, Grouper, GroupingConfig};
pub use normalise::{Kind, Normalised, Version, normalise};
pub use rules::Rules;

#[cfg(test)]
mod tests;
