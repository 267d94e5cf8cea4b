//! The drain under the adaptive circuit: load the record and tick it, turn its plan into the
//! drain's limits and [`Gate`](super::gate::Gate), save what the run did, and log and report
//! every transition. The rule is in [`redrive_shared::circuit`], the store in
//! [`crate::circuit`]; a drain that follows its share of a round's plan is in `admitted`.

use redrive_shared::circuit::{Bounce, CircuitRecord, CircuitSettings, Event, Plan, Sample};
use redrive_shared::config::CircuitConfig;

use super::admission::{Admission, CircuitSummary, DrainCounts};
use super::gate::{CircuitRun, log_transition};
use super::request::{summary_of, summary_of_mut};
use super::{DrainError, DrainRequest, Engine, StopReason, Summary};
use crate::circuit::{
    CircuitError, CircuitStore, SaveOutcome, VersionedWrite, update_once, write_token,
};
use crate::ports::{Alarms, Metrics, PortError, Queue};

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
    async fn watch(&self, request: &DrainRequest, run: &CircuitRun) -> Result<Summary, DrainError> {
        let mut outcome = self.drain_with(request, Some(run)).await;
        let s = summary_of_mut(&mut outcome);
        s.stopped_because = match s.stopped_because {
            StopReason::Other | StopReason::Deadline => s.stopped_because,
            _ => StopReason::CircuitOpen,
        };
        outcome
    }

    /// The drain of `plan`'s budget (a canary or a ramp), gated by `run`.
    async fn drain_budget(
        &self,
        request: &DrainRequest,
        plan: Plan,
        run: &CircuitRun,
    ) -> Result<Summary, DrainError> {
        let max_messages = plan
            .budget()
            .map_or(request.max_messages, |b| request.max_messages.min(b));
        let limited = DrainRequest {
            max_messages,
            ..request.clone()
        };
        self.drain_with(&limited, Some(run)).await
    }

    /// The drain, under the adaptive circuit when it is on (else exactly [`Self::drain`]).
    /// A DLQ that cannot be read fails it, the circuit's part of the run saved all the same.
    pub(super) async fn drain_with_circuit(
        &self,
        request: &DrainRequest,
    ) -> Result<Summary, DrainError> {
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
                return Ok(Summary::new(request.dry_run, StopReason::CircuitOpen));
            }
        };
        let mut record = loaded.clone();
        let tick = Event::Tick { now };
        let transitions = record.apply(&settings, &tick);
        let plan = record.plan(&settings);
        tracing::info!(queue = dlq, state = %record.state, operator = %record.operator, plan = plan.as_str(), budget = plan.budget(), "circuit");
        let run = CircuitRun::new(settings, plan, now, false, record, vec![tick], transitions);
        let mut outcome = match plan {
            Plan::Hold => {
                tracing::info!(
                    queue = dlq,
                    action = "circuit-open",
                    "circuit open: nothing received, nothing redriven"
                );
                Ok(Summary::new(request.dry_run, StopReason::CircuitOpen))
            }
            Plan::Watch => self.watch(request, &run).await,
            Plan::Canary { .. } | Plan::Drain { .. } => {
                let s = self.drain_budget(request, plan, &run).await;
                if !request.dry_run {
                    run.count_redriven(summary_of(&s).redriven);
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
        if !request.dry_run
            && record != loaded
            && let Some((r, t)) = self
                .save_run(
                    request,
                    &settings,
                    now,
                    version,
                    record.clone(),
                    &events,
                    transitions.clone(),
                )
                .await
        {
            record = r;
            transitions = t;
        }
        for t in &transitions {
            log_transition(dlq, t);
        }
        let summary = summary_of_mut(&mut outcome);
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
        outcome
    }

    /// Saves the record a run left (`record`, made by `events` from the one read at
    /// `version`), as one write that applies once however often it is tried: on the version
    /// read; when another writer changed the record meanwhile (or this write landed and lost
    /// its answer), the run's events applied to what is there now ([`update_once`]). The
    /// record written and its transitions; `None` (an ERROR logged) when the run's counts are
    /// lost.
    #[allow(clippy::too_many_arguments)]
    async fn save_run(
        &self,
        request: &DrainRequest,
        settings: &CircuitSettings,
        now: i64,
        version: Option<u64>,
        mut record: CircuitRecord,
        events: &[Event],
        transitions: Vec<redrive_shared::circuit::Transition>,
    ) -> Option<(CircuitRecord, Vec<redrive_shared::circuit::Transition>)> {
        let dlq = self.config.dlq_url.as_str();
        let end = request.deadline;
        // One token for this run's write and its tries: applied once, however often tried.
        let token = write_token();
        record.mark_applied(&token);
        let saved = self
            .bounded(
                end,
                "PutItem",
                self.circuit
                    .save(dlq, VersionedWrite::new(&record, version)),
            )
            .await;
        match saved {
            Ok(SaveOutcome::Saved { .. }) => return Some((record, transitions)),
            // Another writer (the operator, a concurrent run) changed the record, or this
            // write landed and its answer was lost (the SDK's retry then fails the condition).
            Ok(SaveOutcome::Conflict) => {}
            Err(e) if e.retryable => {
                tracing::warn!(error = %e, "saving the circuit record failed; it may have landed: loading it again");
            }
            Err(e) => {
                tracing::error!(error = %e, "saving the circuit record failed; this run's counts are lost");
                return None;
            }
        }
        // Apply this run's events to what is there now, unless this write is there.
        let again = self
            .bounded(end, "PutItem", async {
                update_once(
                    &self.circuit,
                    dlq,
                    settings,
                    now,
                    &token,
                    events,
                    transitions,
                )
                .await
                .map_err(|e| match e {
                    CircuitError::Port(p) => p,
                    other => PortError::new("PutItem", "Contended", other.to_string(), false),
                })
            })
            .await;
        match again {
            Ok(saved) => Some(saved),
            Err(e) => {
                tracing::error!(error = %e, "saving the circuit record failed; this run's counts are lost");
                None
            }
        }
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
    ) -> Result<Summary, DrainError> {
        let plan = admission.plan();
        let dlq = self.config.dlq_url.as_str();
        if plan == Plan::Hold {
            tracing::info!(
                queue = dlq,
                action = "circuit-open",
                "circuit open: nothing received, nothing redriven"
            );
            return Ok(Summary::new(request.dry_run, StopReason::CircuitOpen));
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
                return Ok(Summary::new(request.dry_run, StopReason::CircuitOpen));
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
        let run = CircuitRun::new(settings, plan, now, true, record, Vec::new(), Vec::new());
        let mut outcome = if held {
            // Held since the round was planned (an operator's `open`): nothing received.
            Ok(Summary::new(request.dry_run, StopReason::CircuitOpen))
        } else if plan == Plan::Watch {
            self.watch(request, &run).await
        } else {
            self.drain_budget(request, plan, &run).await
        };
        let st = run.lock();
        let summary = summary_of_mut(&mut outcome);
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
        outcome
    }
}
