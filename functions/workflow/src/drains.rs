//! Scale-out: K bounded engine drains in parallel, each with a 1/K share of the velocity cap.

use std::sync::Arc;

use redrive_engine::circuit::CircuitStore;
use redrive_engine::engine::{DrainRequest, Engine};
use redrive_engine::ports::{Alarms, Metrics, Queue};
use redrive_shared::config::RedriverConfig;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::MAX_PARALLEL;
use crate::error::{TaskError, invalid};
use crate::state::DrainItem;
use crate::workflow::{Drainer, Workflow, to_value};

impl<Q, A, M, C> Workflow<Q, A, M, C>
where
    Q: Queue + Clone,
    A: Alarms + Clone,
    M: Metrics + Clone,
    C: CircuitStore + Clone + Send,
{
    pub(crate) fn drainer(&self, drains: u32) -> Drainer<Q, A, M, C> {
        let mut map = self.drainers.lock().unwrap_or_else(|e| e.into_inner());
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
                    .with_circuit(self.engine.circuit.clone()),
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
        // Under the adaptive circuit when it is on, as in the Lambda: the drain follows the
        // record's plan, counts its bounced and redriven copies into it and stops with
        // circuit-open when it opens (no metrics here: `summary` publishes once).
        let summary = engine
            .drain_step(&DrainRequest {
                dry_run: d.dry_run,
                deadline,
                ..DrainRequest::new(d.max_messages)
            })
            .await;
        if let Some(reason) = &summary.dlq_unreadable {
            tracing::error!(error = %reason, action = "dlq-unreadable", "the drain could not read the DLQ");
            return Err(TaskError::DlqUnreadable(reason.clone()));
        }
        tracing::info!(
            index = d.index,
            drains = d.drains,
            received = summary.received,
            redriven = summary.redriven,
            isolated = summary.isolated,
            failed = summary.failed,
            stopped_because = summary.stopped_because.as_str(),
            "drain"
        );
        let mut out = to_value(&summary);
        out["index"] = json!(d.index);
        Ok(out)
    }
}
