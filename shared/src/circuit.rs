//! The adaptive circuit's rule: canary first, and a circuit that opens by itself when redriven
//! copies bounce back to the DLQ. Pure: every function takes the time (`now_ms`, epoch
//! milliseconds); no I/O, no clock. The durable record and the engine's side are in
//! `redrive_engine::circuit`.
//!
//! Closed drains and counts copies redriven and copies bounced ([`bounce_of`]) over the window;
//! open receives nothing; half-open sends a canary, then closes and ramps up, or opens again with
//! a doubled cool-down. The rule, its settings, the response, the metrics and the operator's
//! override are described in `docs/circuit.md`.

use serde::{Deserialize, Serialize};

/// Transitions kept in the record (oldest dropped first).
pub const HISTORY_LEN: usize = 20;
/// Tokens of applied writes kept in the record (oldest dropped first): more than the writers
/// that can come between a write whose answer was lost and its retry.
pub const APPLIED_WRITES: usize = 16;
/// Sample buckets kept per window (counts are merged into buckets of window / this).
const BUCKETS_PER_WINDOW: i64 = 20;

crate::text_enum! {
    /// The state of the circuit.
    #[derive(Debug, PartialEq, Eq, Hash)]
    pub enum State {
        /// Drain as usual.
        Closed,
        /// Nothing is redriven: messages stay on the DLQ without spending attempts.
        Open,
        /// A canary is (or is about to be) out; nothing else is redriven.
        HalfOpen,
    }
}

crate::text_enum! {
    /// The operator's override.
    #[derive(Debug, Default, PartialEq, Eq, Hash)]
    pub enum Override {
        /// The measurements decide.
        #[default]
        Auto,
        /// Held open whatever the measurements say.
        Open,
        /// Forced closed whatever the measurements say.
        Closed,
    }
}

impl Override {
    /// `auto`, `open`, `closed` (also `close`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "open" => Ok(Self::Open),
            "closed" | "close" => Ok(Self::Closed),
            _ => Err("must be auto, open or closed".into()),
        }
    }
}

/// The tunables of the rule (the `CIRCUIT_*` variables: see `docs/circuit.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CircuitSettings {
    /// Bounced / redriven over the window at which the circuit opens, in (0, 1].
    pub threshold: f64,
    /// Fewer bounced copies than this in the window never open the circuit.
    pub min_bounces: u32,
    pub window_ms: i64,
    pub cooldown_ms: i64,
    pub max_cooldown_ms: i64,
    pub canary_size: u32,
}

impl Default for CircuitSettings {
    fn default() -> Self {
        Self {
            threshold: 0.5,
            min_bounces: 3,
            window_ms: 900_000,
            cooldown_ms: 300_000,
            max_cooldown_ms: 3_600_000,
            canary_size: 10,
        }
    }
}

/// A count at a time (epoch milliseconds, the start of its bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub at: i64,
    pub n: u32,
}

/// The canary a half-open circuit sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// When it was sent; copies redriven from this second on are canary copies.
    pub sent_at: i64,
    pub sent: u32,
    /// `originalMessageId`s of the canary copies seen back on the DLQ (each counted once).
    #[serde(default)]
    pub bounced: Vec<String>,
}

/// One change of state, kept in the record's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at: i64,
    pub from: State,
    pub to: State,
    pub reason: String,
}

/// A bounced copy: what the rule needs from its `x-redrive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bounce {
    pub original_message_id: String,
    pub last_redriven_at: i64,
}

/// What a run may do, given the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "plan", content = "n")]
pub enum Plan {
    /// Drain as usual, at most `budget` messages when ramping up after a canary.
    Drain { budget: Option<u32> },
    /// Half-open: redrive at most this many messages, the canary.
    Canary { size: u32 },
    /// Half-open with the canary out: look for canary copies coming back, redrive nothing.
    Watch,
    /// Open: receive nothing.
    Hold,
}

impl Plan {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drain { .. } => "drain",
            Self::Canary { .. } => "canary",
            Self::Watch => "watch",
            Self::Hold => "hold",
        }
    }

    /// The most messages this run may redrive (`None`: no limit of the circuit's own).
    pub fn budget(self) -> Option<u32> {
        match self {
            Self::Drain { budget } => budget,
            Self::Canary { size } => Some(size),
            Self::Watch | Self::Hold => Some(0),
        }
    }
}

/// One thing a run did or saw, in order: a run keeps its events so that, when another writer
/// changed the record meanwhile (a conditional write that failed), it applies them again to
/// the record as it now is instead of overwriting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The run started: [`CircuitRecord::tick`].
    Tick { now: i64 },
    /// [`CircuitRecord::observe_bounces`].
    Bounces { now: i64, bounces: Vec<Bounce> },
    /// [`CircuitRecord::observe_bounced`]: bounced copies counted by several runs that share
    /// one plan, landed together.
    Bounced {
        now: i64,
        samples: Vec<Sample>,
        canary_copies: Vec<Bounce>,
    },
    /// [`CircuitRecord::record_redriven`].
    Redriven { now: i64, n: u32 },
    /// [`CircuitRecord::end_run`].
    EndRun { plan: Plan, max_per_run: u32 },
    /// [`CircuitRecord::set_override`].
    Override { now: i64, mode: Override },
}

/// The durable record of one DLQ's circuit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitRecord {
    pub state: State,
    #[serde(default)]
    pub operator: Override,
    /// When the current state was entered.
    pub since: i64,
    /// The cool-down of the current (or next) open spell.
    pub cooldown_ms: i64,
    #[serde(default)]
    pub canary: Option<Canary>,
    /// Closed after a canary: the most messages the next run may redrive.
    #[serde(default)]
    pub ramp: Option<u32>,
    /// Copies redriven, by the time they were sent, within the window.
    #[serde(default)]
    pub redriven: Vec<Sample>,
    /// Bounced copies, by their `lastRedrivenAt`, within the window.
    #[serde(default)]
    pub bounced: Vec<Sample>,
    /// The last [`HISTORY_LEN`] transitions, oldest first.
    #[serde(default)]
    pub history: Vec<Transition>,
    /// The tokens of the last [`APPLIED_WRITES`] writes that applied events, oldest first. A
    /// conditional write can commit and lose its answer; retried (by the SDK, which then fails
    /// its condition, or by the writer), it finds its token here and applies nothing twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// The Step Functions execution that drains this DLQ now, if any (see [`Lease`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

/// The right to drain a DLQ, held by one workflow execution at a time: taken by its `start`,
/// renewed before each round, released by its summary. A holder that never releases it (an
/// execution stopped or failed) loses it at `expires_at`. Written like the rest of the record,
/// on the version read, so two executions that take a free lease together cannot both win.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The execution's ARN.
    pub holder: String,
    /// Epoch milliseconds.
    pub expires_at: i64,
}

impl Lease {
    /// Held by someone until `expires_at` (exclusive).
    pub fn live(&self, now_ms: i64) -> bool {
        now_ms < self.expires_at
    }
}

impl CircuitRecord {
    /// A circuit never seen before: closed, automatic.
    pub fn new(settings: &CircuitSettings, now_ms: i64) -> Self {
        Self {
            state: State::Closed,
            operator: Override::Auto,
            since: now_ms,
            cooldown_ms: settings.cooldown_ms,
            canary: None,
            ramp: None,
            redriven: Vec::new(),
            bounced: Vec::new(),
            history: Vec::new(),
            applied: Vec::new(),
            lease: None,
        }
    }

    /// The lease as `holder` may take or renew it: free, expired, or its own. Otherwise the
    /// live lease of the other holder, and the record unchanged.
    pub fn take_lease(&mut self, holder: &str, now_ms: i64, ttl_ms: i64) -> Result<(), Lease> {
        match &self.lease {
            Some(l) if l.holder != holder && l.live(now_ms) => Err(l.clone()),
            _ => {
                self.lease = Some(Lease {
                    holder: holder.to_string(),
                    expires_at: now_ms.saturating_add(ttl_ms),
                });
                Ok(())
            }
        }
    }

    /// Drops the lease if `holder` holds it (live or expired); whether it did.
    pub fn release_lease(&mut self, holder: &str) -> bool {
        if self.lease.as_ref().is_some_and(|l| l.holder == holder) {
            self.lease = None;
            true
        } else {
            false
        }
    }

    /// Whether the write carrying `token` already applied its events to this record.
    pub fn has_applied(&self, token: &str) -> bool {
        self.applied.iter().any(|t| t == token)
    }

    /// Notes that the write carrying `token` applied its events (see [`Self::apply_once`]).
    pub fn mark_applied(&mut self, token: &str) {
        if self.has_applied(token) {
            return;
        }
        self.applied.push(token.to_string());
        if self.applied.len() > APPLIED_WRITES {
            let excess = self.applied.len() - APPLIED_WRITES;
            self.applied.drain(..excess);
        }
    }

    /// Applies `events` as the write carrying `token` (unique to one writer's attempts at one
    /// update) and returns the transitions they made; `None`, with the record unchanged, when
    /// that write already applied them here (it committed, and its answer was lost).
    pub fn apply_once(
        &mut self,
        settings: &CircuitSettings,
        token: &str,
        events: &[Event],
    ) -> Option<Vec<Transition>> {
        if self.has_applied(token) {
            return None;
        }
        let made = events
            .iter()
            .flat_map(|e| self.apply(settings, e))
            .collect();
        self.mark_applied(token);
        Some(made)
    }
}

mod rule;

pub use rule::bounce_of;

#[cfg(test)]
mod tests;
