//! Where a message's copy goes and what the destinations allow: the configured source, or for
//! a protected DLQ the source the message names; each destination's `MaximumMessageSize` and
//! the DLQ's retention, read from the queues and kept between drains.

use std::collections::HashMap;
use std::sync::Mutex;

use redrive_shared::config::{QueueUrl, RedriverConfig};
use redrive_shared::decision::Policy;
use redrive_shared::limits::{MAX_DELAY_SECONDS, MAX_MESSAGE_BYTES};
use redrive_shared::meta::RedriveMeta;

use super::calls::Calls;
use crate::lock;
use crate::ports::{PortError, Queue, Received};

/// Where one received batch's redriven copies go: the configured source, or, for a protected
/// DLQ, the source its messages named (its ARN then recorded in each copy's `x-redrive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub url: String,
    pub arn: Option<String>,
}

/// What a wait keeps between the end of a hop and the end of the DLQ's retention period: a
/// hop ends at least this long before its copy could expire (half the period when it is
/// shorter than twice this).
pub const RETENTION_MARGIN_SECONDS: u64 = 300;

/// The longest hop a DLQ whose retention period is `retention_seconds` allows.
pub fn hop_cap(retention_seconds: u64) -> u32 {
    let cap = if retention_seconds > 2 * RETENTION_MARGIN_SECONDS {
        retention_seconds - RETENTION_MARGIN_SECONDS
    } else {
        retention_seconds / 2
    };
    u32::try_from(cap.max(1)).unwrap_or(u32::MAX)
}

/// `MaximumMessageSize` of the source and poison queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestinationLimits {
    pub source_max_bytes: usize,
    pub poison_max_bytes: usize,
}

impl Default for DestinationLimits {
    fn default() -> Self {
        Self {
            source_max_bytes: MAX_MESSAGE_BYTES,
            poison_max_bytes: MAX_MESSAGE_BYTES,
        }
    }
}

/// FIFO when the DLQ or the source is (a protected DLQ's sources are FIFO exactly when it is).
pub(super) fn is_fifo(config: &RedriverConfig) -> bool {
    config.dlq_url.is_fifo()
        || config
            .source_queue_url
            .as_ref()
            .is_some_and(QueueUrl::is_fifo)
}

/// The destinations as last read.
pub(super) struct Destinations {
    /// The destinations' `MaximumMessageSize`, once read.
    limits: Mutex<Option<DestinationLimits>>,
    /// The longest `DelaySeconds` of a copy: a longer backoff waits on the DLQ in hops of at
    /// most this.
    max_delay_seconds: u32,
    /// The DLQ's `MessageRetentionPeriod`, as last read.
    dlq_retention: Mutex<Option<u64>>,
    /// A protected DLQ (no configured source): its sources as last listed
    /// (`ListDeadLetterSourceQueues`, at the start of each drain), each with its
    /// `MaximumMessageSize` once read.
    sources: Mutex<Option<Vec<String>>>,
    source_limits: Mutex<HashMap<String, usize>>,
}

impl Default for Destinations {
    fn default() -> Self {
        Self {
            limits: Mutex::new(None),
            max_delay_seconds: MAX_DELAY_SECONDS,
            dlq_retention: Mutex::new(None),
            sources: Mutex::new(None),
            source_limits: Mutex::new(HashMap::new()),
        }
    }
}

/// A received batch grouped by destination: a group per known source, and the messages whose
/// source is unknown.
pub(super) struct Grouped {
    pub known: Vec<(Route, Vec<Received>)>,
    pub unknown: Vec<Received>,
}

impl Destinations {
    pub(super) fn set_max_delay(&mut self, seconds: u32) {
        self.max_delay_seconds = seconds.clamp(1, MAX_DELAY_SECONDS);
    }

    pub(super) fn max_delay_seconds(&self) -> u32 {
        self.max_delay_seconds
    }

    /// The policy of messages going to `route` (`None`: messages whose source is unknown,
    /// which are only isolated).
    pub(super) fn policy(&self, config: &RedriverConfig, route: Option<&Route>) -> Policy {
        let limits = lock(&self.limits).unwrap_or_default();
        let source_max_bytes = match route {
            Some(r) if config.source_queue_url.is_none() => lock(&self.source_limits)
                .get(&r.url)
                .copied()
                .unwrap_or(MAX_MESSAGE_BYTES),
            _ => limits.source_max_bytes,
        };
        Policy {
            max_attempts: config.max_redrive_attempts,
            backoff: config.backoff,
            source_fifo: is_fifo(config),
            poison_fifo: config.poison_queue_url.is_fifo(),
            source_max_bytes,
            poison_max_bytes: limits.poison_max_bytes,
            max_delay_seconds: self.max_delay_seconds,
            max_hop_seconds: lock(&self.dlq_retention).map_or(self.max_delay_seconds, hop_cap),
            source_arn: route.and_then(|r| r.arn.clone()),
        }
    }

    /// The route of each message: the configured source's for all, or for a protected DLQ the
    /// source each names (`DeadLetterQueueSourceArn`, else the one its `x-redrive` recorded).
    pub(super) fn group(&self, config: &RedriverConfig, messages: Vec<Received>) -> Grouped {
        if let Some(source) = &config.source_queue_url {
            let route = Route {
                url: source.as_str().to_string(),
                arn: None,
            };
            return Grouped {
                known: vec![(route, messages)],
                unknown: Vec::new(),
            };
        }
        let sources = lock(&self.sources).clone().unwrap_or_default();
        let mut grouped = Grouped {
            known: Vec::new(),
            unknown: Vec::new(),
        };
        for m in messages {
            // `decide` parses x-redrive anyway: here only for a message SQS did not stamp.
            let system = m
                .dead_letter_source_arn
                .as_deref()
                .filter(|s| !s.is_empty());
            let recorded = match system {
                Some(_) => None,
                None => RedriveMeta::read(&m.attributes, &m.message_id)
                    .0
                    .source()
                    .map(str::to_string),
            };
            match redrive_shared::source::resolve(system, recorded.as_deref(), &sources) {
                Ok(found) => match grouped.known.iter_mut().find(|(r, _)| r.url == found.url) {
                    Some((_, members)) => members.push(m),
                    None => grouped.known.push((
                        Route {
                            url: found.url.to_string(),
                            arn: Some(found.arn),
                        },
                        vec![m],
                    )),
                },
                Err(why) => {
                    tracing::warn!(message_id = %m.message_id, problem = %why, action = "isolate:unknown-source", "the message's source queue is not known: isolated, never guessed");
                    grouped.unknown.push(m);
                }
            }
        }
        grouped
    }

    /// Whether the DLQ's retention has been read (it bounds every hop of a wait).
    pub(super) fn retention_known(&self) -> bool {
        lock(&self.dlq_retention).is_some()
    }

    /// See [`super::Engine::read_dlq_retention`].
    pub(super) async fn read_retention<Q: Queue>(
        &self,
        queue: &Q,
        calls: Calls<'_>,
        config: &RedriverConfig,
    ) {
        let read = calls
            .bounded(
                "GetQueueAttributes",
                queue.retention_seconds(config.dlq_url.as_str()),
            )
            .await;
        match read {
            Ok(seconds) => *lock(&self.dlq_retention) = Some(seconds),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the DLQ's MessageRetentionPeriod; waits hop by the last one read, or by the delay cap");
            }
        }
    }

    /// See [`super::Engine::read_sources`].
    pub(super) async fn read_sources<Q: Queue>(
        &self,
        queue: &Q,
        calls: Calls<'_>,
        config: &RedriverConfig,
    ) -> Result<(), PortError> {
        if config.source_queue_url.is_some() {
            return Ok(());
        }
        let dlq = config.dlq_url.as_str();
        let listed = calls
            .bounded("ListDeadLetterSourceQueues", queue.dead_letter_sources(dlq))
            .await;
        let urls = match listed {
            Ok(urls) => urls,
            Err(e) => {
                let known = lock(&self.sources).is_some();
                tracing::warn!(error = %e, known, "cannot list the DLQ's sources; the last list read serves, if any");
                return if known { Ok(()) } else { Err(e) };
            }
        };
        let new: Vec<String> = {
            let known = lock(&self.source_limits);
            urls.iter()
                .filter(|u| !known.contains_key(*u))
                .cloned()
                .collect()
        };
        for url in new {
            let size = calls
                .bounded("GetQueueAttributes", queue.max_message_size(&url))
                .await;
            match size {
                Ok(size) => {
                    let size = size.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES);
                    tracing::info!(source = %url, max_bytes = size, "source of the DLQ");
                    lock(&self.source_limits).insert(url, size);
                }
                Err(e) => {
                    // Assumed 1 MiB until read: an oversize copy meets the send-rejected rule.
                    tracing::warn!(source = %url, error = %e, "cannot read the source's MaximumMessageSize yet");
                }
            }
        }
        if urls.is_empty() {
            tracing::warn!(
                action = "no-source",
                "no queue names this DLQ in its RedrivePolicy: every message is isolated unknown-source"
            );
        }
        *lock(&self.sources) = Some(urls);
        Ok(())
    }

    /// See [`super::Engine::load_limits`].
    pub(super) async fn load_limits<Q: Queue>(
        &self,
        queue: &Q,
        calls: Calls<'_>,
        config: &RedriverConfig,
    ) -> Result<DestinationLimits, PortError> {
        if let Some(known) = *lock(&self.limits) {
            return Ok(known);
        }
        let source = config.source_queue_url.as_ref().map(QueueUrl::as_str);
        let poison = config.poison_queue_url.as_str();
        let (s, p) = futures_util::future::join(
            async {
                match source {
                    Some(source) => {
                        calls
                            .bounded("GetQueueAttributes", queue.max_message_size(source))
                            .await
                    }
                    // A protected DLQ's sources are read with their list.
                    None => Ok(None),
                }
            },
            calls.bounded("GetQueueAttributes", queue.max_message_size(poison)),
        )
        .await;
        let limits = DestinationLimits {
            source_max_bytes: s?.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES),
            poison_max_bytes: p?.unwrap_or(MAX_MESSAGE_BYTES).min(MAX_MESSAGE_BYTES),
        };
        tracing::info!(
            source_max_bytes = limits.source_max_bytes,
            poison_max_bytes = limits.poison_max_bytes,
            "destination MaximumMessageSize"
        );
        *lock(&self.limits) = Some(limits);
        Ok(limits)
    }
}
