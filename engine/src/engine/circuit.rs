//! The engine's side of the adaptive circuit: load the record and tick it, turn its
//! plan into the run's limits, count bounced copies batch by batch (stopping when the circuit
//! opens), save what the run did, and log and report every transition. The rule is in
//! [`redrive_shared::circuit`], the store in [`crate::circuit`].

use std::sync::Mutex;

use redrive_shared::circuit::{
    CircuitRecord, CircuitSettings, Event, Override, Plan, State, Transition, bounce_of,
};
use redrive_shared::config::CircuitConfig;
use redrive_shared::meta::RedriveMeta;
use serde::Serialize;

use super::{DrainRequest, Engine, Run, StopReason, Summary};
use crate::circuit::{
    CircuitError, CircuitStore, SaveOutcome, load_or_new, update, update_once, write_token,
};
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

    /// The drain, under the adaptive circuit when it is on (else exactly [`Self::drain`]).
    pub(super) async fn drain_with_circuit(&self, request: &DrainRequest) -> Summary {
        let Some(cfg) = self.circuit_config() else {
            return self.drain(request).await;
        };
        let settings = cfg.settings;
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
            }),
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
            Plan::Watch => {
                let s = self.drain_with(request, Some(&run)).await;
                // Nothing was redriven: the run only looked for the canary.
                Summary {
                    stopped_because: match s.stopped_because {
                        StopReason::Other | StopReason::Deadline => s.stopped_because,
                        _ => StopReason::CircuitOpen,
                    },
                    ..s
                }
            }
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
        });
        summary
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

/// What the circuit lets a batch received by another front end do (see [`Engine::gate_batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Closed (or off): the batch is decided as usual.
    Pass,
    /// Half-open: this many messages are the canary, sent without their backoff; the rest go
    /// back on the DLQ.
    Canary(u32),
    /// Open, or watching for the canary: the whole batch goes back on the DLQ.
    Hold,
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

    /// Counts a received batch's bounced copies into the record (a write on the version read;
    /// none when there are none), then the record's plan decides what the batch may do. A
    /// record that cannot be read or written holds (fail closed). With the gate: the bounced
    /// copies counted.
    pub async fn gate_batch(&self, messages: &[Received]) -> (Gate, u64) {
        let Some(settings) = self.circuit_settings() else {
            return (Gate::Pass, 0);
        };
        let dlq = self.config.dlq_url.as_str();
        let now = (self.clock)();
        let bounces: Vec<_> = messages
            .iter()
            .filter_map(|m| {
                let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
                bounce_of(&meta, now, &settings)
            })
            .collect();
        let bounced = bounces.len() as u64;
        let looked = if bounces.is_empty() {
            load_or_new(&self.circuit, dlq, &settings, now)
                .await
                .map(|(_, mut record)| {
                    record.tick(&settings, now);
                    (record, Vec::new())
                })
                .map_err(CircuitError::from)
        } else {
            let events = [Event::Tick { now }, Event::Bounces { now, bounces }];
            update(&self.circuit, dlq, &settings, now, &events).await
        };
        let (record, transitions) = match looked {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, action = "circuit-open", "cannot read or write the circuit record; treating the circuit as open");
                return (Gate::Hold, 0);
            }
        };
        for t in &transitions {
            log_transition(dlq, t);
        }
        let plan = record.plan(&settings);
        tracing::info!(queue = dlq, bounced, state = %record.state, plan = plan.as_str(), "circuit");
        let gate = match plan {
            Plan::Hold | Plan::Watch => Gate::Hold,
            Plan::Canary { size } => Gate::Canary(size),
            Plan::Drain { .. } => Gate::Pass,
        };
        (gate, bounced)
    }

    /// Counts `n` copies redriven by steps into the record, as sent at `sent_at` (no later
    /// than any `lastRedrivenAt` they carry, so that a canary recognises all its copies): the
    /// bounce-back rate's denominator. A failed write is logged: those counts are lost.
    pub async fn count_redriven(&self, sent_at: i64, n: u64) {
        let Some(settings) = self.circuit_settings() else {
            return;
        };
        if n == 0 {
            return;
        }
        let dlq = self.config.dlq_url.as_str();
        let now = (self.clock)();
        let events = [
            Event::Tick { now },
            Event::Redriven {
                now: sent_at,
                n: u32::try_from(n).unwrap_or(u32::MAX),
            },
        ];
        match update(&self.circuit, dlq, &settings, now, &events).await {
            Ok((_, transitions)) => {
                for t in &transitions {
                    log_transition(dlq, t);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, redriven = n, "saving the circuit record failed; these redriven copies are not counted")
            }
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
        })
    }
}
