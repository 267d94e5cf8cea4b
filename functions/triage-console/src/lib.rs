//! The triage console in CloudWatch: two Lambdas behind a dashboard's custom widgets.
//!
//! - **The widget** (`triage-widget`, read only): the dashboard calls it with the documented
//!   custom widget event (`widgetContext`: theme, width, time range, the widget's `params`). It
//!   renders, for the queue `params.queue` names (one of `TRIAGE_QUEUE_URLS`, else a refusal in
//!   the widget), the groups of the queue's triage book (the index each `redrive triage --table`
//!   pass records: title, count, trend, first and last failure, source, state, recommended
//!   action) and the queue's depth, with the renderer of `redrive-console`. `describe: true`
//!   answers the widget's documentation (markdown).
//! - **The action function** (`triage-action`): each button of the widget (a `<cwdb-action>`)
//!   calls it with the button's parameters and the `widgetContext`. It accepts `acknowledge`,
//!   `hold` (`hours` 1..=168), `release` and `note` on a configured queue, for a group the book
//!   holds and the plan the book holds now; applies it to the book (load, change, conditional
//!   save) with an audit entry; and answers the widget re-rendered, with a line saying what was
//!   done or why not. `replay-canary` (the canary of the group's frozen plan to its source,
//!   judged, stopped by itself when it comes back) and `discard` (the plan archived to S3, then
//!   deleted) move messages with the CLI's own group actions (`redrive_engine::triage_act`),
//!   when `count` is the stored plan's size (`moves`).
//!
//! The widget only reads (the book with GetItem, the depth with GetQueueAttributes); the action
//! function also writes the book and moves a group's messages. `make deploy` gives each its own
//! role, and wires one widget per protected DLQ and the poison queue into the stack's dashboard
//! (infra/README.md).
//!
//! Nothing a request carries names an AWS resource: the queue is looked up among the configured
//! ones, the table, the archive bucket and a replay's source are the configured ones. Message
//! bodies are moved (a replay's copy, a discard's archive) but never shown nor logged; every
//! text from the book is escaped by the renderer.

mod config;
mod console;
mod context;
mod lambda;
mod moves;
mod request;
mod samples;
mod view;

pub use config::{ConsoleConfig, MoveConfig};
pub use console::{BookReader, Console};
pub use context::{ContextTimeRange, WidgetContext, Zoom};
pub use lambda::{Function, run};
pub use request::{ActionRequest, Kind, Rejected};
pub use view::{DESCRIBE, depth, group_of, view_of};

/// The longest hold the console's hold button may ask for, in hours (a week).
pub const MAX_HOLD_HOURS: u64 = 168;
/// The longest note accepted from the console, in characters.
pub const MAX_NOTE_CHARS: usize = 1000;
/// Who the audit names for a console action, before the dashboard's name.
pub const CONSOLE_WHO: &str = "console";

#[cfg(test)]
mod tests;
