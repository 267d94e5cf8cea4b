//! Scale-out: K bounded engine drains in parallel, each with a 1/K share of the velocity cap
//! and its share of one circuit plan.
//!
//! The K drains of a round share one plan of the adaptive circuit, as one Lambda drain follows
//! one: the task that plans a round (`start` for the first, the previous round's `tally`)
//! reads the record once and splits its canary or ramp budget among the drains
//! ([`Workflow::admit`]); each drain follows its share and writes nothing to the record; the
//! round's `tally` lands their counts once ([`Workflow::land_drains`]). So a half-open circuit
//! sends one canary of at most `CIRCUIT_CANARY_SIZE` messages in all, a ramping one redrives
//! at most its budget in all, and a round makes one write and at most one transition, not K.

use std::sync::Arc;

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::{Admission, DrainCounts, DrainRequest, Engine};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_shared::config::RedriverConfig;
use redrive_shared::sync::lock;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::MAX_PARALLEL;
use crate::error::{TaskError, invalid};
use crate::state::{DrainItem, Mode, Run, Totals};
use crate::tally::tally;
use crate::workflow::{Drainer, Workflow, to_value};

impl<Q: Queue + Clone, A: Alarms + Clone, M: Metrics + Clone, C: CircuitStore + Clone + Send>
    Workflow<Q, A, M, C>
{
    pub(crate) fn drainer(&self, drains: u32) -> Drainer<Q, A, M, C> {
        let mut map = lock(&self.drainers);
        map.entry(drains)
            .or_insert_with(|| {
                let cfg = &self.config.redriver;
                let config = RedriverConfig {
                    max_messages_per_second: cfg.max_messages_per_second / f64::from(drains),
                    ..cfg.clone()
                };
                Arc::new(
                    Engine::new(
                        self.engine.queue.clone(),
                        self.engine.alarms.clone(),
                        self.engine.metrics.clone(),
                        config,
                    )
                    .with_settings(self.settings.clone())
                    .with_clock(self.clock)
                    .with_circuit(self.engine.circuit.clone())
                    .with_triage(self.engine.triage.clone()),
                )
            })
            .clone()
    }

    /// One bounded engine drain with a 1/K share of `MAX_MESSAGES_PER_SECOND` and the
    /// re-driver's 900 s backoff cap: a scale-out Map item (or the FIFO drain).
    pub async fn drain(
        &self,
        d: &DrainItem,
        deadline: Option<Instant>,
    ) -> Result<Value, TaskError> {
        if !(1..=MAX_PARALLEL).contains(&d.drains) {
            return Err(invalid(format!(
                "drains {} must be from 1 to {MAX_PARALLEL}",
                d.drains
            )));
        }
        let engine = self.drainer(d.drains);
        if let Err(e) = engine.load_limits().await {
            tracing::warn!(error = %e, "cannot read the destinations' MaximumMessageSize; assuming 1 MiB");
        }
        // Each drain reads the DLQ's retention as it is now (a drainer lives across rounds of a
        // warm task): a message that arrives waiting hops no longer than it allows.
        if !engine.fifo() {
            engine.read_dlq_retention().await;
        }
        // Under the adaptive circuit when it is on: the drain follows its share of the round's
        // plan, judges the bounced copies it sees (stopping with circuit-open when they open
        // the circuit) and reports its counts for the round's tally to land (no metrics here:
        // `summary` publishes once).
        let summary = engine
            .drain_step(
                &DrainRequest {
                    dry_run: d.dry_run,
                    deadline,
                    ..DrainRequest::new(d.max_messages)
                }
                .with_admission(d.circuit),
            )
            .await;
        let summary = crate::messages::finished("drain", Some(d.index), summary)?;
        let mut out = to_value(&summary);
        out["index"] = json!(d.index);
        Ok(out)
    }
}

impl<Q, A, M, C> Workflow<Q, A, M, C>
where
    Q: Queue,
    A: Alarms,
    M: Metrics,
    C: CircuitStore,
{
    /// The `tally` task: [`tally`], with the circuit's side of a scale-out round: the counts
    /// of the round just run landed once ([`Self::land_drains`]), and the next round's drains
    /// given their shares of the plan ([`Self::admit`]).
    pub async fn tally_round(
        &self,
        run: &Run,
        totals: Totals,
        batch: Option<&Value>,
        results: &[Value],
    ) -> Totals {
        self.land_drains(run, &totals, results).await;
        let mut after = tally(run, totals, batch, results);
        self.admit(&mut after.drain_plan).await;
        after
    }

    /// Gives the drains of a round their shares of the circuit's plan, read once now (nothing
    /// when the circuit is off: the drains then run without it).
    pub(crate) async fn admit(&self, drains: &mut [DrainItem]) {
        if drains.is_empty() {
            return;
        }
        let Some(plan) = self.engine.round_plan().await else {
            return;
        };
        let caps: Vec<u32> = drains.iter().map(|d| d.max_messages).collect();
        for (d, share) in drains.iter_mut().zip(Admission::split(plan, &caps)) {
            d.circuit = Some(share);
        }
    }

    /// Lands in the circuit record, once, what the drains of the round just run (`totals`'
    /// plan, their `results`) did and saw under their shared plan. Nothing for a dry run, a
    /// round planned without shares, or `messages` mode.
    pub(crate) async fn land_drains(&self, run: &Run, totals: &Totals, results: &[Value]) {
        if run.mode != Mode::ScaleOut || run.dry_run {
            return;
        }
        let shares: Vec<Admission> = totals.drain_plan.iter().filter_map(|d| d.circuit).collect();
        let Some(round) = Admission::round(&shares) else {
            return;
        };
        let counts: Vec<DrainCounts> = results
            .iter()
            .filter_map(|r| r.get("circuit")?.get("round").cloned())
            .filter_map(|c| serde_json::from_value(c).ok())
            .collect();
        // One name per round of one execution, the same when the tally is tried again.
        let first = counts.iter().map(|c| c.started_at).min().unwrap_or(0);
        let token = format!("round-{}-{}-{first}", totals.started_at, totals.rounds);
        self.engine.land_round(round, &counts, &token).await;
    }
}
