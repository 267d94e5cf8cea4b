//! Acting on a triage group: `ack`, `hold`, `release`, `note`, `history`, `replay` (canary
//! first) and `discard` (archived first). The group's state, hold, notes and audit are the
//! queue's book in the triage table (`redrive_shared::triage::state`,
//! `redrive_engine::triage_store`); the message ids an action moves are the frozen plan the
//! last `redrive triage` pass stored. Moving messages is `replay`'s and `export`'s own work
//! (send, check, then delete; archive, check, then delete). docs/triage.md has the workflow.

mod args;
mod book;
mod confirm;
mod group_discard;
mod group_replay;

pub use args::{
    BookArgs, CONFIRM_ABOVE, ConfirmArgs, GroupArgs, GroupDiscardArgs, GroupReplayArgs, HoldArgs,
    NoteArgs, TYPED_ABOVE, parse_duration,
};
pub use book::{ack, history, hold, note, record_pass, release};
pub use group_discard::discard_group;
pub use group_replay::replay_group;
