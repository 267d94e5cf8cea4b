//! What a drain asks before it handles each received batch, and the adaptive circuit's answer.
//! The drain knows nothing of the circuit: it asks its [`Gate`] whether a batch may go, whether
//! copies go out at once, and tells it what was redriven.

use std::sync::{Mutex, MutexGuard};

use redrive_shared::circuit::{
    Bounce, CircuitRecord, CircuitSettings, Event, Plan, State, Transition, bounce_of,
};
use redrive_shared::meta::RedriveMeta;

use crate::lock;
use crate::ports::Received;

/// The gate's answer for one received batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Handle the batch.
    Pass,
    /// Keep the batch on the DLQ untouched, and go on receiving.
    Keep,
    /// Keep the batch on the DLQ untouched, and stop the drain (`circuit-open`).
    Stop,
}

/// What a drain asks before each batch ("may I?"), and tells after it.
pub(super) trait Gate: Sync {
    /// The verdict on a received batch, at `now_ms` by the engine's clock.
    fn admit(&self, messages: &[Received], now_ms: i64) -> Verdict;
    /// The drain keeps whatever it receives until its end (a watch for a canary), so that it
    /// never sees a message twice.
    fn holds_all(&self) -> bool;
    /// Copies go out without their backoff delay (a canary).
    fn at_once(&self) -> bool;
    /// The drain redrove `total` copies so far.
    fn redriven(&self, total: u64, dry_run: bool);
}

/// The circuit's part of one run.
pub(super) struct CircuitRun {
    pub(super) settings: CircuitSettings,
    pub(super) plan: Plan,
    /// When the run started: its copies are counted as redriven then, which is no later than
    /// any `lastRedrivenAt` they carry (so a canary recognises all its copies).
    pub(super) started: i64,
    /// The drain follows a plan shared by a round of drains: it keeps the bounced copies it
    /// sees, for the round's landing, and writes nothing.
    pub(super) shared: bool,
    state: Mutex<RunState>,
}

pub(super) struct RunState {
    pub(super) record: CircuitRecord,
    /// What the run did and saw, to apply again if another writer changed the record.
    pub(super) events: Vec<Event>,
    pub(super) transitions: Vec<Transition>,
    /// Redriven copies already counted into the record.
    counted: u64,
    pub(super) bounced: u64,
    /// The bounced copies seen, kept when the plan is shared.
    pub(super) seen: Vec<Bounce>,
}

impl CircuitRun {
    /// The run of `plan` over `record`, which already went through `events` (making
    /// `transitions`).
    pub(super) fn new(
        settings: CircuitSettings,
        plan: Plan,
        started: i64,
        shared: bool,
        record: CircuitRecord,
        events: Vec<Event>,
        transitions: Vec<Transition>,
    ) -> Self {
        Self {
            settings,
            plan,
            started,
            shared,
            state: Mutex::new(RunState {
                record,
                events,
                transitions,
                counted: 0,
                bounced: 0,
                seen: Vec::new(),
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, RunState> {
        lock(&self.state)
    }

    pub(super) fn apply(&self, st: &mut RunState, event: Event) {
        let made = st.record.apply(&self.settings, &event);
        st.events.push(event);
        st.transitions.extend(made);
    }

    pub(super) fn count_redriven(&self, total: u64) {
        let mut st = self.lock();
        let n = total.saturating_sub(st.counted);
        if n > 0 {
            st.counted = total;
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            self.apply(
                &mut st,
                Event::Redriven {
                    now: self.started,
                    n,
                },
            );
        }
    }
}

impl Gate for CircuitRun {
    /// Counts the batch's bounced copies; the batch stays on the DLQ when the circuit opened
    /// (then the run stops) or when the run only watches for its canary.
    fn admit(&self, messages: &[Received], now: i64) -> Verdict {
        let bounces: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                bounce_of(&meta, now, &self.settings)
            })
            .collect();
        let mut st = self.lock();
        if self.shared {
            st.seen.extend(bounces.iter().cloned());
        }
        if !bounces.is_empty() {
            st.bounced += bounces.len() as u64;
            self.apply(&mut st, Event::Bounces { now, bounces });
        }
        let now_plan = st.record.plan(&self.settings);
        drop(st);
        match (self.plan, now_plan) {
            (_, Plan::Hold) => Verdict::Stop,
            (Plan::Watch, _) => Verdict::Keep,
            _ => Verdict::Pass,
        }
    }

    fn holds_all(&self) -> bool {
        self.plan == Plan::Watch
    }

    /// A canary run: its copies go out without their backoff delay. They already waited on the
    /// DLQ at least the cool-down while the circuit was open, and a copy delayed by up to
    /// `BACKOFF_MAX_SECONDS` could not come back within the window: the canary would pass
    /// without having been tried.
    fn at_once(&self) -> bool {
        matches!(self.plan, Plan::Canary { .. })
    }

    /// Counts the copies redriven so far into the record. A canary is counted once, at the end
    /// of the run, as one canary of all its copies.
    fn redriven(&self, total: u64, dry_run: bool) {
        if dry_run || matches!(self.plan, Plan::Canary { .. }) {
            return;
        }
        self.count_redriven(total);
    }
}

pub(super) fn log_transition(queue: &str, t: &Transition) {
    match t.to {
        State::Open => {
            tracing::warn!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit opened: nothing is redriven until a canary comes through")
        }
        _ => {
            tracing::info!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit transition")
        }
    }
}
