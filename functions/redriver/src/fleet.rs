//! One re-driver for every protected DLQ of an install (`DLQ_URLS`).
//!
//! - An alarm notification drains the DLQ its `QueueName` dimension names (an alarm that
//!   names none of them is answered as a single DLQ answers it: `other-queue`).
//! - A scheduled or manual event drains every DLQ, each bounded by its own
//!   `MAX_MESSAGES_PER_INVOCATION` and by an equal share of the time left, starting one DLQ
//!   further each invocation: a DLQ's backlog never starves another.
//! - Each DLQ's settings are its tags ([`redrive_shared::config::tags`]) over the install's,
//!   read when the function starts. A DLQ whose tags cannot be read or are invalid is left
//!   alone (nothing received, `stoppedBecause` `bad-settings`, an error log naming the queue
//!   and the tag) and tried again at the next invocation; the others are served.
//!
//! With one DLQ the response is that DLQ's, as the contract has it. With several, a scheduled
//! or manual drain answers the totals and `queues`, one entry per DLQ in the order drained.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use redrive_shared::config::tags::{self, TagError};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::event::{Trigger, recognize};
use serde::Serialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use redrive_engine::circuit::CircuitStore;
use redrive_engine::ports::{Alarms, MetricValue, Metrics, PortError, Queue};
use redrive_engine::{DrainError, Engine, StopReason, Summary};

use crate::InvocationError;

type EnvFn = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;
type Build<Q, A, M, C> = Box<dyn Fn(RedriverConfig) -> Engine<Q, A, M, C> + Send + Sync>;

enum Member<Q, A, M, C> {
    Ready(Box<Engine<Q, A, M, C>>),
    /// Left alone until its tags read and validate.
    Waiting {
        base: Box<RedriverConfig>,
        problem: String,
    },
}

/// A DLQ's name and its engine (or why it has none yet).
type Slot<Q, A, M, C> = (String, Mutex<Member<Q, A, M, C>>);

/// Every protected DLQ's engine.
pub struct Fleet<Q, A, M, C> {
    members: Vec<Slot<Q, A, M, C>>,
    /// Where the next scheduled drain starts.
    next: AtomicUsize,
    env: EnvFn,
    build: Build<Q, A, M, C>,
    tags: Q,
    /// Where a DLQ left alone says so (`DlqLeftAlone` = 1 at each invocation that finds it so),
    /// in which namespace: the attach stack's `dlq-left-alone` alarm pages on it.
    left_alone: Option<(M, String)>,
}

/// The metric of a DLQ the fleet leaves alone (its tags invalid or unreadable), 1 per invocation.
pub use redrive_engine::ports::LEFT_ALONE_METRIC;

/// One DLQ's part of a fleet's drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    pub queue: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// Why the DLQ was left alone or failed (a bad tag, an unreadable DLQ).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A fleet's response to a scheduled or manual drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetSummary {
    pub received: u64,
    pub redriven: u64,
    pub isolated: u64,
    pub failed: u64,
    pub dry_run: bool,
    pub queues: Vec<QueueSummary>,
}

impl<Q: Queue + Clone, A: Alarms, M: Metrics, C: CircuitStore> Fleet<Q, A, M, C> {
    /// The fleet of `configs` (from [`RedriverConfig::fleet_from_env`] over `env`), each DLQ's
    /// tags read through `queue` and its engine made by `build`.
    pub async fn new(
        configs: Vec<RedriverConfig>,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
        queue: Q,
        build: impl Fn(RedriverConfig) -> Engine<Q, A, M, C> + Send + Sync + 'static,
    ) -> Self {
        let mut fleet = Self {
            members: Vec::with_capacity(configs.len()),
            next: AtomicUsize::new(0),
            env: Box::new(env),
            build: Box::new(build),
            tags: queue,
            left_alone: None,
        };
        let single = configs.len() == 1 && configs[0].source_queue_url.is_some();
        for base in configs {
            let name = base.dlq_url.name().to_string();
            // A DLQ redrive created takes its settings from its function alone.
            let member = if single {
                Member::Ready(Box::new((fleet.build)(base)))
            } else {
                fleet.settle(base).await
            };
            fleet.members.push((name, Mutex::new(member)));
        }
        fleet
    }

    /// Publishes `DlqLeftAlone` for each DLQ left alone through `metrics`, in `namespace`.
    pub fn with_left_alone_metrics(mut self, metrics: M, namespace: String) -> Self {
        self.left_alone = Some((metrics, namespace));
        self
    }

    /// The DLQs' names, in order.
    pub fn queues(&self) -> Vec<&str> {
        self.members.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Reads and applies `base`'s tags.
    async fn settle(&self, base: RedriverConfig) -> Member<Q, A, M, C> {
        let queue = base.dlq_url.name().to_string();
        let read: Result<HashMap<String, String>, PortError> =
            self.tags.tags(base.dlq_url.as_str()).await;
        let tagged = match read {
            Ok(t) => t,
            Err(e) => {
                let problem = format!(
                    "queue {queue}: cannot read its tags: {e}; left alone, read again at the next invocation"
                );
                tracing::error!(queue = %queue, error = %e, action = "left-alone:tags-unreadable", "{problem}");
                return Member::Waiting {
                    base: Box::new(base),
                    problem,
                };
            }
        };
        let env = Env(|k: &str| (self.env)(k));
        match tags::apply(&env, &base, &tagged) {
            Ok(config) => {
                if tagged.keys().any(|k| k.starts_with(tags::PREFIX)) {
                    tracing::info!(queue = %queue, max_attempts = config.max_redrive_attempts, backoff_max_seconds = config.backoff.max(), max_messages = config.max_messages_per_invocation, max_per_second = config.max_messages_per_second, circuit = config.circuit.is_some(), "settings from the queue's tags");
                }
                Member::Ready(Box::new((self.build)(config)))
            }
            Err(e) => {
                let TagError { tag, value, .. } = &e;
                tracing::error!(queue = %queue, tag = %tag, value = %value, action = "left-alone:bad-tag", "{e}");
                Member::Waiting {
                    base: Box::new(base),
                    problem: e.to_string(),
                }
            }
        }
    }

    /// Connects and reads each ready engine's limits at init, bounded by the caller.
    pub async fn warm_up(&self) {
        for (_, m) in &self.members {
            if let Member::Ready(engine) = &*m.lock().await {
                let _ = engine.warm_up().await;
            }
        }
    }

    /// One invocation. The response is one DLQ's [`Summary`] when it names one DLQ (an alarm,
    /// or a fleet of one), else a [`FleetSummary`].
    pub async fn handle(
        &self,
        event: &serde_json::Value,
        deadline: Option<Instant>,
    ) -> Result<serde_json::Value, InvocationError> {
        let trigger = recognize(event)?;
        let targets: Vec<usize> = match &trigger {
            Trigger::Alarm(alarm) => {
                let named: Vec<usize> = self
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(_, (name, _))| alarm.queue_names.iter().any(|q| q == name))
                    .map(|(i, _)| i)
                    .collect();
                if named.is_empty() && alarm.queue_names.is_empty() {
                    (0..self.members.len()).collect()
                } else {
                    named
                }
            }
            _ => (0..self.members.len()).collect(),
        };
        if let Trigger::Alarm(_) = trigger
            && targets.len() <= 1
        {
            // One DLQ's alarm, or none of ours: that DLQ's engine answers (it also skips an
            // alarm that is not in ALARM or names another queue).
            let i = targets.first().copied().unwrap_or(0);
            let (queue, summary, error) = self.drain_one(i, &trigger, deadline).await?;
            if let Some(error) = error {
                tracing::warn!(queue = %queue, "{error}");
            }
            return Ok(serde_json::to_value(summary).unwrap_or_default());
        }
        if self.members.len() == 1 {
            let (_, summary, _) = self.drain_one(0, &trigger, deadline).await?;
            return Ok(serde_json::to_value(summary).unwrap_or_default());
        }
        // Every DLQ, fairly: one further each time, an equal share of the time left each.
        let n = targets.len();
        let start = self.next.fetch_add(1, Ordering::SeqCst) % n.max(1);
        let mut queues = Vec::with_capacity(n);
        let mut unreadable = Vec::new();
        for k in 0..n {
            let i = targets[(start + k) % n];
            let share = deadline.map(|d| {
                let now = Instant::now();
                now + d.saturating_duration_since(now) / (n - k) as u32
            });
            match self.drain_one(i, &trigger, share).await {
                Ok((queue, summary, error)) => queues.push(QueueSummary {
                    queue,
                    summary,
                    error,
                }),
                Err(InvocationError::Drain(DrainError::DlqUnreadable { reason, summary })) => {
                    let queue = self.members[i].0.clone();
                    unreadable.push(format!("{queue}: {reason}"));
                    queues.push(QueueSummary {
                        queue,
                        summary: *summary,
                        error: Some(reason.to_string()),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        let total = |f: fn(&Summary) -> u64| queues.iter().map(|q| f(&q.summary)).sum();
        let out = FleetSummary {
            received: total(|s| s.received),
            redriven: total(|s| s.redriven),
            isolated: total(|s| s.isolated),
            failed: total(|s| s.failed),
            dry_run: queues.iter().any(|q| q.summary.dry_run),
            queues,
        };
        redrive_engine::info_counts!(out, queues = out.queues.len(), "fleet summary");
        if let Some(first) = unreadable.first() {
            // Every other DLQ was served; the invocation still fails so that the function's
            // Errors alarm sees it.
            tracing::error!(unreadable = ?unreadable, "a DLQ of the fleet cannot be read");
            return Err(InvocationError::Drain(DrainError::DlqUnreadable {
                reason: PortError::new("ReceiveMessage", "FleetDlqUnreadable", first, false),
                summary: Box::new(Summary::new(out.dry_run, StopReason::Other)),
            }));
        }
        Ok(serde_json::to_value(out).unwrap_or_default())
    }

    /// Drains member `i` (settling its tags first if it waits for them).
    async fn drain_one(
        &self,
        i: usize,
        trigger: &Trigger,
        deadline: Option<Instant>,
    ) -> Result<(String, Summary, Option<String>), InvocationError> {
        let (queue, member) = &self.members[i];
        let mut member = member.lock().await;
        if let Member::Waiting { base, .. } = &*member {
            *member = self.settle((**base).clone()).await;
        }
        match &*member {
            Member::Ready(engine) => {
                let summary = crate::handle_trigger(engine, trigger.clone(), deadline).await?;
                Ok((queue.clone(), summary, None))
            }
            Member::Waiting { problem, .. } => {
                if let Some((metrics, namespace)) = &self.left_alone {
                    let values = [MetricValue::count(LEFT_ALONE_METRIC, 1)];
                    if let Err(e) = metrics.put(namespace, queue, &values).await {
                        tracing::error!(queue = %queue, error = %e, "publishing DlqLeftAlone failed");
                    }
                }
                Ok((
                    queue.clone(),
                    Summary::new(false, StopReason::BadSettings),
                    Some(problem.clone()),
                ))
            }
        }
    }
}
