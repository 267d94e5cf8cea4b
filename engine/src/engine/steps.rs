//! A run made of steps by another front end (the Step Functions workflow's tasks, each its own
//! invocation): bounded drains under the circuit, the circuit checked before them, a round's
//! plan read once and its counts landed once, and the circuit as the steps left it. The end
//! of such a run is in `finish.rs`.

use redrive_shared::circuit::{
    Bounce, CircuitRecord, CircuitSettings, Event, Override, Plan, Sample,
};

use super::admission::{CircuitCheck, CircuitSummary, DrainCounts};
use super::gate::log_transition;
use super::{DrainError, DrainRequest, Engine, Summary};
use crate::circuit::{CircuitStore, update_once};
use crate::ports::{Alarms, Metrics, Queue};

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// One drain of a run made of steps (a workflow's scale-out drain): under the adaptive
    /// circuit as the Lambda's drain, without the guard check (the steps check them first) and
    /// without the end of a run (the run's last step ends it once, [`Engine::finish`]). A DLQ
    /// that cannot be read fails it ([`DrainError`], with what it did before).
    pub async fn drain_step(&self, request: &DrainRequest) -> Result<Summary, DrainError> {
        self.drain_with_circuit(request).await
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
