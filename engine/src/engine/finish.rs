//! The end of every run, whichever front end ran it: the DLQ's depth, one PutMetricData, the
//! re-arm of the trigger alarm, the summary line.

use std::time::Duration;

use tokio::time::Instant;

use super::admission::CircuitSummary;
use super::invoke::log_summary;
use super::{DrainRequest, Engine, StopReason, Summary};
use crate::circuit::CircuitStore;
use crate::lock;
use crate::ports::{AlarmState, Alarms, Metrics, Queue, RunMetrics};

/// What a run made of steps counted (the workflow's totals), for [`Engine::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTotals {
    pub received: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub failed: u64,
    pub stopped_because: StopReason,
    /// When the first step ran, epoch ms: the circuit's transitions since then are the run's
    /// (0: unknown, none claimed).
    pub started_at: i64,
    /// Redriven copies the steps saw back on the DLQ.
    pub bounced: u64,
    /// Messages the steps left on the DLQ untouched because their source refused the sender
    /// ([`Summary::ungranted`]): reported, and `DlqLeftAlone` published, as the Lambda does.
    pub ungranted: u64,
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// The end of a run made of steps, as the Lambda's run ends: its summary (with the circuit
    /// as the steps left it, when it is on), then [`Self::end_run`]'s depth, metrics, re-arm
    /// and summary line.
    pub async fn finish(&self, request: &DrainRequest, totals: StepTotals) -> Summary {
        let mut summary = Summary {
            received: totals.received,
            redriven: totals.redriven,
            isolated: totals.isolated,
            failed: totals.failed,
            ungranted: totals.ungranted,
            circuit: self.circuit_since(totals.started_at, totals.bounced).await,
            ..Summary::new(request.dry_run, totals.stopped_because)
        };
        self.end_run(request, &mut summary, false).await;
        summary
    }

    /// The end of every run, whichever front end ran it (the Lambda, a workflow's summary):
    /// the DLQ's depth, one PutMetricData, the re-arm of the trigger alarm, the summary line.
    /// Each call is bounded by `call_timeout` and by the deadline itself. `dlq_unreadable`: the
    /// run failed because the DLQ could not be read (`DlqReceiveFailures`).
    pub(super) async fn end_run(
        &self,
        request: &DrainRequest,
        summary: &mut Summary,
        dlq_unreadable: bool,
    ) {
        summary.dlq_remaining = self.dlq_remaining(request.deadline).await;
        self.publish(summary, dlq_unreadable, request.deadline)
            .await;
        self.rearm(request, summary).await;
        log_summary(summary);
    }

    /// The guard alarms that keep the circuit open: those in ALARM, and those that do not exist
    /// (a misspelt or deleted guard fails closed). INSUFFICIENT_DATA is not ALARM.
    pub(super) async fn open_guards(&self, end: Option<Instant>) -> Option<Vec<String>> {
        let names = &self.config.guard_alarm_names;
        if names.is_empty() {
            return None;
        }
        match self
            .bounded(end, "DescribeAlarms", self.alarms.describe(names))
            .await
        {
            Ok(found) => {
                let mut open: Vec<String> = found
                    .iter()
                    .filter(|a| a.state == AlarmState::Alarm && names.contains(&a.name))
                    .map(|a| a.name.clone())
                    .collect();
                let missing: Vec<&String> = names
                    .iter()
                    .filter(|n| !found.iter().any(|a| &a.name == *n))
                    .collect();
                if !missing.is_empty() {
                    tracing::error!(guards = ?missing, action = "circuit-open", "guard alarm does not exist (misspelt or deleted): treating the circuit as open");
                    open.extend(missing.into_iter().map(|n| format!("missing:{n}")));
                }
                (!open.is_empty()).then_some(open)
            }
            Err(e) => {
                // Fail closed: replaying into a system whose health is unknown risks a storm.
                tracing::error!(error = %e, "cannot read guard alarms; treating the circuit as open");
                Some(vec![format!("unknown: {e}")])
            }
        }
    }

    pub(super) async fn dlq_remaining(&self, end: Option<Instant>) -> Option<u64> {
        let dlq = self.config.dlq_url.as_str();
        match self
            .bounded(end, "GetQueueAttributes", self.queue.depth(dlq))
            .await
        {
            Ok(d) => Some(d.total()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the DLQ depth");
                None
            }
        }
    }

    pub(super) async fn publish(
        &self,
        summary: &Summary,
        dlq_unreadable: bool,
        end: Option<Instant>,
    ) {
        let mut metrics = if summary.dry_run {
            RunMetrics {
                redrive_failures: summary.failed,
                ..RunMetrics::default()
            }
        } else {
            RunMetrics {
                successful_redrives: summary.redriven,
                poison_pills_isolated: summary.isolated,
                redrive_failures: summary.failed,
                unplaceable_messages: summary.unplaceable,
                dlq_left_alone: u64::from(summary.ungranted > 0),
                ..RunMetrics::default()
            }
        };
        metrics.dlq_receive_failures = u64::from(dlq_unreadable);
        metrics.circuit = summary.circuit.as_ref().map(CircuitSummary::metrics);
        let result = self
            .bounded(
                end,
                "PutMetricData",
                self.metrics.publish(
                    &self.config.metric_namespace,
                    self.config.dlq_url.name(),
                    metrics,
                ),
            )
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "publishing metrics failed; the drain itself is unaffected");
        }
    }

    /// An alarm notifies only on a state change: after a drain that is not a dry run (alarm,
    /// schedule, manual, a workflow's summary) whose trigger alarm is still in ALARM, set it to
    /// OK whatever the backlog, so that inflow during or after the drain fires it again at its
    /// next evaluation. A drain that moved nothing (an open circuit,
    /// sends that keep failing) re-arms at most once per alarm period, so that a guard incident
    /// costs one notification per period rather than one per evaluation.
    pub(super) async fn rearm(&self, request: &DrainRequest, summary: &Summary) {
        let Some(alarm) = &request.trigger_alarm else {
            return;
        };
        if !self.config.rearm_alarm || request.dry_run {
            return;
        }
        let end = request.deadline;
        let names = std::slice::from_ref(alarm);
        let period = match self
            .bounded(end, "DescribeAlarms", self.alarms.describe(names))
            .await
        {
            Ok(found) => match found.into_iter().find(|a| &a.name == alarm) {
                Some(a) if a.state == AlarmState::Alarm => {
                    Duration::from_secs(a.period_seconds.unwrap_or(60).max(1))
                }
                Some(a) => {
                    tracing::debug!(alarm = %alarm, state = ?a.state, "trigger alarm not in ALARM: nothing to re-arm");
                    return;
                }
                None => {
                    tracing::warn!(alarm = %alarm, "the triggering alarm does not exist: nothing to re-arm");
                    return;
                }
            },
            Err(e) => {
                // Unknown state: re-arming a stuck alarm matters more than one spare call.
                tracing::warn!(alarm = %alarm, error = %e, "cannot read the triggering alarm; re-arming anyway");
                Duration::from_secs(60)
            }
        };
        let stuck = summary.stopped_because == StopReason::CircuitOpen
            || (summary.received > 0 && summary.redriven + summary.isolated == 0);
        let now = Instant::now();
        if stuck {
            let last = lock(&self.rearmed).get(alarm).copied();
            if last.is_some_and(|t| now < t + period) {
                tracing::info!(alarm = %alarm, action = "rearm-skipped", period_seconds = period.as_secs(), "no progress and re-armed less than one alarm period ago");
                return;
            }
        }
        let reason = format!(
            "redrive re-arm: stopped by {} with {} messages left on the DLQ; the next evaluation fires again",
            summary.stopped_because.as_str(),
            summary
                .dlq_remaining
                .map_or("unknown".to_string(), |n| n.to_string())
        );
        match self
            .bounded(end, "SetAlarmState", self.alarms.set_ok(alarm, &reason))
            .await
        {
            Ok(()) => {
                lock(&self.rearmed).insert(alarm.clone(), now);
                tracing::info!(alarm = %alarm, action = "rearm", "alarm set to OK so that it fires again")
            }
            Err(e) => tracing::error!(alarm = %alarm, error = %e, "re-arming the alarm failed"),
        }
    }
}
