//! The engine's side of the adaptive circuit: load the record and tick it, turn its
//! plan into the run's limits, count bounced copies batch by batch (stopping when the circuit
//! opens), save what the run did, and log and report every transition. The rule is in
//! [`redrive_shared::circuit`], the store in [`crate::circuit`].
//!
//! Drains that run side by side as one round (a workflow's scale-out drains) share one plan
//! instead: the round's plan is read once ([`Engine::round_plan`]) and split among them
//! ([`Admission::split`]: a canary of n messages is n in all, a ramp budget B is B in all);
//! each drain follows its [`Admission`] (in its [`DrainRequest`]) and writes nothing to the
//! record, and reports what it did and saw ([`DrainCounts`]); the round's counts then land
//! once ([`Engine::land_round`]): one write, one canary, one step of the ramp.

use std::sync::Mutex;

use redrive_shared::circuit::{
    Bounce, CircuitRecord, CircuitSettings, Event, Override, Plan, Sample, State, Transition,
    bounce_of,
};
use redrive_shared::config::CircuitConfig;
use redrive_shared::meta::RedriveMeta;
use serde::{Deserialize, Serialize};

use super::{DrainRequest, Engine, Run, StopReason, Summary};
use crate::circuit::{CircuitStore, SaveOutcome, update_once, write_token};
use crate::ports::{Alarms, CircuitMetrics, Metrics, Queue, Received};

/// The circuit in the response (`"circuit"`), present only when the circuit is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitSummary {
    /// After the run: `closed`, `open` or `half-open`.
    pub state: State,
    /// The operator's override: `auto`, `open` or `closed`.
    pub operator: Override,
    /// What the run was allowed to do: `drain`, `canary`, `watch` (half-open, canary out:
    /// looking for it, redriving nothing) or `hold` (open: nothing received).
    pub plan: &'static str,
    /// The most messages the circuit let the run redrive (`null`: no limit of its own).
    pub budget: Option<u32>,
    /// Redriven copies the run saw back on the DLQ within the window.
    pub bounced: u64,
    /// Transitions the run made (each is logged and kept in the record's history).
    pub transitions: u64,
    /// A drain that followed an [`Admission`]: what it did and saw, for the round's landing
    /// ([`Engine::land_round`]). Absent from the Lambda's response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<DrainCounts>,
}

/// One drain's share of a plan that the drains of a round share (see the module's docs).
/// The round's plan is read once; a canary or a ramp budget is split among the drains, so
/// that the round redrives at most the canary, or the budget, in all. A drain whose share is
/// 0 receives nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "kebab-case")]
pub enum Admission {
    /// Closed: drain, at most `budget` messages (this drain's share of the ramp) when set.
    Drain {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<u32>,
    },
    /// Half-open: this drain's share of the canary, its copies sent without their backoff.
    Canary { size: u32 },
    /// Half-open with the canary out: look for canary copies coming back, redrive nothing.
    Watch,
    /// Open: receive nothing.
    Hold,
}

impl Admission {
    /// The plan this drain follows.
    pub fn plan(self) -> Plan {
        match self {
            Self::Drain { budget } => Plan::Drain { budget },
            Self::Canary { size } => Plan::Canary { size },
            Self::Watch => Plan::Watch,
            Self::Hold => Plan::Hold,
        }
    }

    /// The round's `plan` split among drains that may take `caps[i]` messages each: a canary
    /// or a ramp budget spread evenly (never beyond a drain's cap, the rest to the others), so
    /// that the shares add up to at most the canary or the budget. Watch, hold and an
    /// unlimited drain are every drain's.
    pub fn split(plan: Plan, caps: &[u32]) -> Vec<Self> {
        let spread = |total: u32| {
            let mut got = vec![0u32; caps.len()];
            let mut left = total;
            loop {
                let open: Vec<usize> = (0..caps.len()).filter(|&i| got[i] < caps[i]).collect();
                if left == 0 || open.is_empty() {
                    return got;
                }
                let each = (left / open.len() as u32).max(1);
                for i in open {
                    let give = each.min(caps[i] - got[i]).min(left);
                    got[i] += give;
                    left -= give;
                }
            }
        };
        match plan {
            Plan::Drain { budget: None } => vec![Self::Drain { budget: None }; caps.len()],
            Plan::Drain { budget: Some(b) } => spread(b)
                .into_iter()
                .map(|n| Self::Drain { budget: Some(n) })
                .collect(),
            Plan::Canary { size } => spread(size)
                .into_iter()
                .map(|size| Self::Canary { size })
                .collect(),
            Plan::Watch => vec![Self::Watch; caps.len()],
            Plan::Hold => vec![Self::Hold; caps.len()],
        }
    }

    /// The round's plan from its drains' shares (`None`: no shares, no shared plan): a canary
    /// or a budget is the sum of the shares.
    pub fn round(shares: &[Self]) -> Option<Plan> {
        let first = shares.first()?;
        let sum = |f: fn(&Self) -> Option<u32>| {
            shares
                .iter()
                .map(f)
                .try_fold(0u32, |a, n| Some(a.saturating_add(n?)))
        };
        Some(match first {
            Self::Drain { .. } => Plan::Drain {
                budget: sum(|a| match a {
                    Self::Drain { budget } => *budget,
                    _ => None,
                }),
            },
            Self::Canary { .. } => Plan::Canary {
                size: sum(|a| match a {
                    Self::Canary { size } => Some(*size),
                    _ => Some(0),
                })
                .unwrap_or(0),
            },
            Self::Watch => Plan::Watch,
            Self::Hold => Plan::Hold,
        })
    }
}

/// What one drain that followed an [`Admission`] did and saw, for the round's landing
/// ([`Engine::land_round`]): counts, not messages (a drain's answer stays small).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainCounts {
    /// When the drain started, epoch ms: no later than any `lastRedrivenAt` its copies carry.
    pub started_at: i64,
    /// Copies it redrove (0 in a dry run).
    pub redriven: u64,
    /// The bounced copies it saw, by their `lastRedrivenAt`.
    #[serde(default)]
    pub bounced: Vec<Sample>,
    /// Those of them that may be copies of the canary out (redriven since it was sent), by
    /// chain, so that each is counted once against the canary.
    #[serde(default)]
    pub canary_copies: Vec<Bounce>,
}

impl CircuitSummary {
    pub(super) fn metrics(&self) -> CircuitMetrics {
        CircuitMetrics {
            open: self.state != State::Closed,
            transitions: self.transitions,
            bounced: self.bounced,
        }
    }
}

/// The circuit's part of one run.
pub(crate) struct CircuitRun {
    settings: CircuitSettings,
    plan: Plan,
    /// When the run started: its copies are counted as redriven then, which is no later than
    /// any `lastRedrivenAt` they carry (so a canary recognises all its copies).
    started: i64,
    /// The drain follows a plan shared by a round of drains: it keeps the bounced copies it
    /// sees, for the round's landing, and writes nothing.
    shared: bool,
    state: Mutex<RunState>,
}

struct RunState {
    record: CircuitRecord,
    /// What the run did and saw, to apply again if another writer changed the record.
    events: Vec<Event>,
    transitions: Vec<Transition>,
    /// Redriven copies already counted into the record.
    counted: u64,
    bounced: u64,
    /// The bounced copies seen, kept when the plan is shared.
    seen: Vec<Bounce>,
}

impl CircuitRun {
    pub(super) fn watching(&self) -> bool {
        self.plan == Plan::Watch
    }

    /// A canary run: its copies go out without their backoff delay. They already waited on the
    /// DLQ at least the cool-down while the circuit was open, and a copy delayed by up to
    /// `BACKOFF_MAX_SECONDS` could not come back within the window: the canary would pass
    /// without having been tried.
    pub(super) fn canary(&self) -> bool {
        matches!(self.plan, Plan::Canary { .. })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn apply(&self, st: &mut RunState, event: Event) {
        let made = st.record.apply(&self.settings, &event);
        st.events.push(event);
        st.transitions.extend(made);
    }

    /// Counts the copies redriven so far (`total`, the run's counter) into the record. A
    /// canary is counted once, at the end of the run, as one canary of all its copies.
    pub(super) fn note_redriven(&self, total: u64, dry_run: bool) {
        if dry_run || matches!(self.plan, Plan::Canary { .. }) {
            return;
        }
        self.count_redriven(total);
    }

    fn count_redriven(&self, total: u64) {
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

fn log_transition(queue: &str, t: &Transition) {
    match t.to {
        State::Open => {
            tracing::warn!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit opened: nothing is redriven until a canary comes through")
        }
        _ => {
            tracing::info!(queue, from = %t.from, to = %t.to, reason = %t.reason, action = "circuit-transition", "circuit transition")
        }
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// The circuit's configuration when it is on: `CIRCUIT_TABLE` set and a store given.
    pub fn circuit_config(&self) -> Option<&CircuitConfig> {
        if !self.circuit.enabled() {
            if self.config.circuit.is_some() {
                tracing::warn!(
                    "CIRCUIT_TABLE is set but this engine has no circuit store; the circuit is off"
                );
            }
            return None;
        }
        self.config.circuit.as_ref()
    }

    /// A run that only looks for the canary's copies coming back: nothing is redriven, so it
    /// stops with `circuit-open` unless a deadline or another reason stopped it first.
    async fn watch(&self, request: &DrainRequest, run: &CircuitRun) -> Summary {
        let s = self.drain_with(request, Some(run)).await;
        Summary {
            stopped_because: match s.stopped_because {
                StopReason::Other | StopReason::Deadline => s.stopped_because,
                _ => StopReason::CircuitOpen,
            },
            ..s
        }
    }

    /// The drain, under the adaptive circuit when it is on (else exactly [`Self::drain`]).
    pub(super) async fn drain_with_circuit(&self, request: &DrainRequest) -> Summary {
        let Some(cfg) = self.circuit_config() else {
            return self.drain(request).await;
        };
        let settings = cfg.settings;
        if let Some(admission) = request.admission {
            return self.drain_admitted(request, admission, settings).await;
        }
        let dlq = self.config.dlq_url.as_str();
        let end = request.deadline;
        let now = (self.clock)();
        let loaded = self.bounded(end, "GetItem", self.circuit.load(dlq)).await;
        let (version, loaded) = match loaded {
            Ok(Some(stored)) => (Some(stored.version), stored.record),
            Ok(None) => (None, CircuitRecord::new(&settings, now)),
            Err(e) => {
                // Fail closed, as with the guard alarms: a circuit whose state is unknown may
                // be open for a reason, and replaying into an outage costs attempts.
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; treating the circuit as open");
                return Summary::new(request.dry_run, StopReason::CircuitOpen);
            }
        };
        let mut record = loaded.clone();
        let tick = Event::Tick { now };
        let mut transitions = record.apply(&settings, &tick);
        let plan = record.plan(&settings);
        tracing::info!(queue = dlq, state = %record.state, operator = %record.operator, plan = plan.as_str(), budget = plan.budget(), "circuit");
        let run = CircuitRun {
            settings,
            plan,
            started: now,
            state: Mutex::new(RunState {
                record,
                events: vec![tick],
                transitions: std::mem::take(&mut transitions),
                counted: 0,
                bounced: 0,
                seen: Vec::new(),
            }),
            shared: false,
        };
        let mut summary = match plan {
            Plan::Hold => {
                tracing::info!(
                    queue = dlq,
                    action = "circuit-open",
                    "circuit open: nothing received, nothing redriven"
                );
                Summary::new(request.dry_run, StopReason::CircuitOpen)
            }
            Plan::Watch => self.watch(request, &run).await,
            Plan::Canary { .. } | Plan::Drain { .. } => {
                let max_messages = plan
                    .budget()
                    .map_or(request.max_messages, |b| request.max_messages.min(b));
                let limited = DrainRequest {
                    max_messages,
                    ..request.clone()
                };
                let s = self.drain_with(&limited, Some(&run)).await;
                if !request.dry_run {
                    run.count_redriven(s.redriven);
                }
                s
            }
        };
        let (bounced, mut record, mut transitions, events) = {
            let mut st = run.lock();
            if let Plan::Drain { .. } = plan {
                let end_run = Event::EndRun {
                    plan,
                    max_per_run: self.config.max_messages_per_invocation,
                };
                run.apply(&mut st, end_run);
            }
            (
                st.bounced,
                st.record.clone(),
                std::mem::take(&mut st.transitions),
                std::mem::take(&mut st.events),
            )
        };
        // A dry run changes nothing durable; an unchanged record is not written again.
        if !request.dry_run && record != loaded {
            // One token for this run's write and its tries: applied once, however often tried.
            let token = write_token();
            record.mark_applied(&token);
            let saved = self
                .bounded(end, "PutItem", self.circuit.save(dlq, &record, version))
                .await;
            let try_again = match saved {
                Ok(SaveOutcome::Saved { .. }) => false,
                // Another writer (the operator, a concurrent run) changed the record, or this
                // write landed and its answer was lost (the SDK's retry then fails the condition).
                Ok(SaveOutcome::Conflict) => true,
                Err(e) if e.retryable => {
                    tracing::warn!(error = %e, "saving the circuit record failed; it may have landed: loading it again");
                    true
                }
                Err(e) => {
                    tracing::error!(error = %e, "saving the circuit record failed; this run's counts are lost");
                    false
                }
            };
            if try_again {
                // Apply this run's events to what is there now, unless this write is there.
                let again = self
                    .bounded(end, "PutItem", async {
                        update_once(
                            &self.circuit,
                            dlq,
                            &settings,
                            now,
                            &token,
                            &events,
                            transitions.clone(),
                        )
                        .await
                        .map_err(|e| match e {
                            crate::circuit::CircuitError::Port(p) => p,
                            other => crate::ports::PortError::new(
                                "PutItem",
                                "Contended",
                                other.to_string(),
                                false,
                            ),
                        })
                    })
                    .await;
                match again {
                    Ok((r, t)) => {
                        record = r;
                        transitions = t;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "saving the circuit record failed; this run's counts are lost")
                    }
                }
            }
        }
        for t in &transitions {
            log_transition(dlq, t);
        }
        if summary.stopped_because != StopReason::CircuitOpen
            && record.plan(&settings) == Plan::Hold
        {
            summary.stopped_because = StopReason::CircuitOpen;
        }
        summary.circuit = Some(CircuitSummary {
            state: record.state,
            operator: record.operator,
            plan: plan.as_str(),
            budget: plan.budget(),
            bounced,
            transitions: transitions.len() as u64,
            round: None,
        });
        summary
    }

    /// A drain that follows its share of a round's plan (`admission`): it reads the record
    /// once to judge the bounced copies it sees as it goes (stopping with `circuit-open` when
    /// they open the circuit, as the Lambda's drain does), writes nothing, and answers with
    /// what it did and saw in `circuit.round`.
    async fn drain_admitted(
        &self,
        request: &DrainRequest,
        admission: Admission,
        settings: CircuitSettings,
    ) -> Summary {
        let plan = admission.plan();
        let dlq = self.config.dlq_url.as_str();
        if plan == Plan::Hold {
            tracing::info!(
                queue = dlq,
                action = "circuit-open",
                "circuit open: nothing received, nothing redriven"
            );
            return Summary::new(request.dry_run, StopReason::CircuitOpen);
        }
        let now = (self.clock)();
        let mut record = match self
            .bounded(request.deadline, "GetItem", self.circuit.load(dlq))
            .await
        {
            Ok(Some(stored)) => stored.record,
            Ok(None) => CircuitRecord::new(&settings, now),
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; treating the circuit as open");
                return Summary::new(request.dry_run, StopReason::CircuitOpen);
            }
        };
        record.tick(&settings, now);
        // Copies redriven since the canary out was sent may be canary copies (the stamp has
        // one-second precision).
        let canary_since = record
            .canary
            .as_ref()
            .map(|c| c.sent_at - c.sent_at.rem_euclid(1000));
        tracing::info!(queue = dlq, state = %record.state, operator = %record.operator, plan = plan.as_str(), budget = plan.budget(), "circuit: this drain's share of the round");
        let held = record.plan(&settings) == Plan::Hold;
        let run = CircuitRun {
            settings,
            plan,
            started: now,
            shared: true,
            state: Mutex::new(RunState {
                record,
                events: Vec::new(),
                transitions: Vec::new(),
                counted: 0,
                bounced: 0,
                seen: Vec::new(),
            }),
        };
        let mut summary = if held {
            // Held since the round was planned (an operator's `open`): nothing received.
            Summary::new(request.dry_run, StopReason::CircuitOpen)
        } else if plan == Plan::Watch {
            self.watch(request, &run).await
        } else {
            let max_messages = plan
                .budget()
                .map_or(request.max_messages, |b| request.max_messages.min(b));
            let limited = DrainRequest {
                max_messages,
                ..request.clone()
            };
            self.drain_with(&limited, Some(&run)).await
        };
        let st = run.lock();
        if st.record.plan(&settings) == Plan::Hold {
            summary.stopped_because = StopReason::CircuitOpen;
        }
        let mut bounced: Vec<Sample> = Vec::new();
        let mut canary_copies: Vec<Bounce> = Vec::new();
        for b in &st.seen {
            match bounced.iter_mut().find(|s| s.at == b.last_redriven_at) {
                Some(s) => s.n = s.n.saturating_add(1),
                None => bounced.push(Sample {
                    at: b.last_redriven_at,
                    n: 1,
                }),
            }
            if canary_since.is_some_and(|at| b.last_redriven_at >= at)
                && !canary_copies
                    .iter()
                    .any(|c| c.original_message_id == b.original_message_id)
            {
                canary_copies.push(b.clone());
            }
        }
        summary.circuit = Some(CircuitSummary {
            state: st.record.state,
            operator: st.record.operator,
            plan: plan.as_str(),
            budget: plan.budget(),
            bounced: st.bounced,
            // Nothing written: the round's landing makes its transitions.
            transitions: 0,
            round: Some(DrainCounts {
                started_at: now,
                redriven: if request.dry_run { 0 } else { summary.redriven },
                bounced,
                canary_copies,
            }),
        });
        summary
    }

    /// The plan of a round of drains that share it (see [`Admission::split`]), read once
    /// (the record is not written: the round's landing ticks it). `None` when the circuit is
    /// off; a record that cannot be read holds (fail closed).
    pub async fn round_plan(&self) -> Option<Plan> {
        let settings = self.circuit_settings()?;
        let dlq = self.config.dlq_url.as_str();
        let now = (self.clock)();
        let plan = match self.circuit.load(dlq).await {
            Ok(None) => CircuitRecord::new(&settings, now).plan(&settings),
            Ok(Some(stored)) => {
                let mut record = stored.record;
                record.tick(&settings, now);
                record.plan(&settings)
            }
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; treating the circuit as open");
                Plan::Hold
            }
        };
        tracing::info!(
            queue = dlq,
            plan = plan.as_str(),
            budget = plan.budget(),
            "circuit: the round's plan"
        );
        Some(plan)
    }

    /// Lands what the drains of a round that shared `round` did and saw, in one write: the
    /// bounced copies first (the round is judged on all of them at once, never more leniently
    /// than any of its drains judged its own), then the copies redriven, counted from the
    /// earliest drain's start (a half-open round's are its one canary), then one step of the
    /// ramp. `token` names the round: a landing tried again applies nothing twice. A failed
    /// write is logged: those counts are lost.
    pub async fn land_round(&self, round: Plan, drains: &[DrainCounts], token: &str) {
        let Some(settings) = self.circuit_settings() else {
            return;
        };
        let dlq = self.config.dlq_url.as_str();
        let now = (self.clock)();
        let mut samples: Vec<Sample> = Vec::new();
        let mut canary_copies: Vec<Bounce> = Vec::new();
        for d in drains {
            for s in &d.bounced {
                match samples.iter_mut().find(|x| x.at == s.at) {
                    Some(x) => x.n = x.n.saturating_add(s.n),
                    None => samples.push(*s),
                }
            }
            for c in &d.canary_copies {
                if !canary_copies
                    .iter()
                    .any(|x| x.original_message_id == c.original_message_id)
                {
                    canary_copies.push(c.clone());
                }
            }
        }
        let redriven: u64 = drains.iter().map(|d| d.redriven).sum();
        let sent_at = drains.iter().map(|d| d.started_at).min().unwrap_or(now);
        let mut events = vec![Event::Tick { now }];
        if !samples.is_empty() || !canary_copies.is_empty() {
            events.push(Event::Bounced {
                now,
                samples,
                canary_copies,
            });
        }
        if redriven > 0 {
            events.push(Event::Redriven {
                now: sent_at,
                n: u32::try_from(redriven).unwrap_or(u32::MAX),
            });
        }
        if let Plan::Drain { budget: Some(_) } = round {
            events.push(Event::EndRun {
                plan: round,
                max_per_run: self.config.max_messages_per_invocation,
            });
        }
        if events.len() == 1 {
            // Nothing done, nothing seen: the passing of time alone is not written.
            return;
        }
        match update_once(
            &self.circuit,
            dlq,
            &settings,
            now,
            token,
            &events,
            Vec::new(),
        )
        .await
        {
            Ok((record, transitions)) => {
                for t in &transitions {
                    log_transition(dlq, t);
                }
                tracing::info!(queue = dlq, redriven, state = %record.state, plan = round.as_str(), "circuit: the round's counts landed");
            }
            Err(e) => {
                tracing::error!(error = %e, redriven, "saving the circuit record failed; the round's counts are lost")
            }
        }
    }

    /// Counts the batch's bounced copies; false when the batch must stay on the DLQ (the
    /// circuit opened, then the run stops; or the run only watches for its canary).
    pub(super) fn circuit_admits(
        &self,
        run: &Run<'_>,
        c: &CircuitRun,
        messages: &[Received],
    ) -> bool {
        let now = (self.clock)();
        let bounces: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                bounce_of(&meta, now, &c.settings)
            })
            .collect();
        let mut st = c.lock();
        if c.shared {
            st.seen.extend(bounces.iter().cloned());
        }
        if !bounces.is_empty() {
            st.bounced += bounces.len() as u64;
            c.apply(&mut st, Event::Bounces { now, bounces });
        }
        let now_plan = st.record.plan(&c.settings);
        drop(st);
        match (c.plan, now_plan) {
            (_, Plan::Hold) => {
                run.stop(StopReason::CircuitOpen);
                false
            }
            (Plan::Watch, _) => false,
            _ => true,
        }
    }
}

/// The circuit and the guard alarms before a run made of steps (see [`Engine::check_circuit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitCheck {
    /// The guard alarms that hold the circuit open (in ALARM, missing, or unreadable).
    pub guards: Vec<String>,
    /// The record's operator override (`auto`, `open`, `closed`), `unknown` when the record
    /// cannot be read; `None` when the adaptive circuit is off.
    pub operator: Option<&'static str>,
    /// The record holds the circuit open (an operator's `open`, or open and cooling down).
    pub held: bool,
}

impl CircuitCheck {
    /// Nothing may be received.
    pub fn open(&self) -> bool {
        !self.guards.is_empty() || self.held
    }
}

/// The circuit gate of a run made of steps, as the Lambda's drain applies it within one
/// invocation: the guards first, then each received batch's bounces, then the redriven count,
/// and at the end the circuit as the steps left it.
impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    fn circuit_settings(&self) -> Option<CircuitSettings> {
        self.circuit_config().map(|c| c.settings)
    }

    /// The guard alarms, then the circuit record, read only (the tick shows what the record
    /// holds now; the steps that drain write it). A record that cannot be read holds the
    /// circuit open (fail closed, as unreadable guard alarms do).
    pub async fn check_circuit(&self, deadline: Option<tokio::time::Instant>) -> CircuitCheck {
        let guards = self.open_guards(deadline).await.unwrap_or_default();
        if !guards.is_empty() {
            tracing::warn!(guards = ?guards, action = "circuit-open", "guard alarm in ALARM: nothing is received");
        }
        let Some(settings) = self.circuit_settings() else {
            return CircuitCheck {
                guards,
                operator: None,
                held: false,
            };
        };
        let dlq = self.config.dlq_url.as_str();
        let (operator, held) = match self.circuit.load(dlq).await {
            Ok(None) => (Override::Auto.as_str(), false),
            Ok(Some(stored)) => {
                let mut record = stored.record;
                record.tick(&settings, (self.clock)());
                let held = record.plan(&settings) == Plan::Hold;
                if held {
                    tracing::warn!(
                        operator = record.operator.as_str(),
                        action = "circuit-open",
                        "the circuit record holds the circuit open: nothing is received"
                    );
                }
                (record.operator.as_str(), held)
            }
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; treating the circuit as open");
                ("unknown", true)
            }
        };
        CircuitCheck {
            guards,
            operator: Some(operator),
            held,
        }
    }

    /// The circuit as steps that started at `started_at` left it (read only), as the Lambda's
    /// response reports it: state, operator, plan and budget, the `bounced` copies the steps
    /// saw, and the record's transitions since `started_at` (none claimed when it is 0,
    /// unknown). `None` when the circuit is off or the record cannot be read (an ERROR
    /// logged), as the Lambda's response on an unreadable record has none.
    pub(super) async fn circuit_since(
        &self,
        started_at: i64,
        bounced: u64,
    ) -> Option<CircuitSummary> {
        let settings = self.circuit_settings()?;
        let dlq = self.config.dlq_url.as_str();
        let record = match self.circuit.load(dlq).await {
            Ok(Some(stored)) => stored.record,
            Ok(None) => CircuitRecord::new(&settings, (self.clock)()),
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read the circuit record; the response carries no circuit state and no circuit metrics");
                return None;
            }
        };
        let plan = record.plan(&settings);
        let transitions = if started_at > 0 {
            record.history.iter().filter(|t| t.at >= started_at).count() as u64
        } else {
            0
        };
        Some(CircuitSummary {
            state: record.state,
            operator: record.operator,
            plan: plan.as_str(),
            budget: plan.budget(),
            bounced,
            transitions,
            round: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(shares: &[Admission]) -> Vec<Option<u32>> {
        shares.iter().map(|a| a.plan().budget()).collect()
    }

    #[test]
    fn a_canary_or_a_budget_is_split_so_that_the_shares_add_up_to_it() {
        let canary = Admission::split(Plan::Canary { size: 10 }, &[25, 25, 25, 25]);
        assert_eq!(sizes(&canary), [Some(3), Some(3), Some(2), Some(2)]);
        assert_eq!(Admission::round(&canary), Some(Plan::Canary { size: 10 }));
        // A canary smaller than the drains: the others get nothing.
        let small = Admission::split(Plan::Canary { size: 2 }, &[10, 10, 10, 10]);
        assert_eq!(sizes(&small), [Some(1), Some(1), Some(0), Some(0)]);
        // A drain's cap is never exceeded; its part goes to the others.
        let ramp = Admission::split(Plan::Drain { budget: Some(12) }, &[1, 10, 10]);
        assert_eq!(sizes(&ramp), [Some(1), Some(6), Some(5)]);
        assert_eq!(
            Admission::round(&ramp),
            Some(Plan::Drain { budget: Some(12) })
        );
        // Nothing to split: every drain's.
        let open = Admission::split(Plan::Drain { budget: None }, &[5, 5]);
        assert_eq!(sizes(&open), [None, None]);
        assert_eq!(Admission::round(&open), Some(Plan::Drain { budget: None }));
        assert_eq!(
            Admission::split(Plan::Watch, &[5, 5]),
            [Admission::Watch, Admission::Watch]
        );
        assert_eq!(Admission::round(&[]), None);
    }

    #[test]
    fn an_admission_reads_as_its_plan() {
        let json = |a: Admission| serde_json::to_value(a).unwrap();
        assert_eq!(
            json(Admission::Canary { size: 3 }),
            serde_json::json!({"plan": "canary", "size": 3})
        );
        assert_eq!(
            json(Admission::Drain { budget: None }),
            serde_json::json!({"plan": "drain"})
        );
        let back: Admission =
            serde_json::from_value(serde_json::json!({"plan": "drain", "budget": 4})).unwrap();
        assert_eq!(back, Admission::Drain { budget: Some(4) });
    }
}
