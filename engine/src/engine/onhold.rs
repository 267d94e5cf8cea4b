//! Triage holds: a group an operator held (`redrive triage hold`) stays on the DLQ, neither
//! redriven nor isolated, while the rest drains. The drain reads the DLQ's book once at its
//! start; each received message of a held group is kept (made visible again when the drain
//! ends) and counted `onHold`; at the end the book learns which messages were left, which ends
//! a hold by count. A book that cannot be read stops the drain before anything is received:
//! a hold is never broken because DynamoDB did not answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use redrive_shared::triage::grouper::belongs;
use redrive_shared::triage::state::Book;
use redrive_shared::triage::{GroupId, GroupingConfig, Observation};

use super::Engine;
use crate::circuit::{CircuitStore, SaveOutcome, VersionedWrite};
use crate::lock;
use crate::ports::{Alarms, Metrics, PortError, Queue, Received};
use crate::triage_store::{self, DynamoDbTriageStore, MemoryTriageStore, TriageStore};

/// Where the engine reads the holds: the triage table (`TRIAGE_TABLE`), or memory in tests.
#[derive(Debug, Clone)]
pub enum TriageBooks {
    DynamoDb(DynamoDbTriageStore),
    Memory(Arc<MemoryTriageStore>),
}

impl TriageStore for TriageBooks {
    async fn load(&self, queue_url: &str) -> Result<Option<(u64, Book)>, PortError> {
        match self {
            Self::DynamoDb(s) => s.load(queue_url).await,
            Self::Memory(s) => s.load(queue_url).await,
        }
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, Book>,
    ) -> Result<SaveOutcome, PortError> {
        match self {
            Self::DynamoDb(s) => s.save(queue_url, write).await,
            Self::Memory(s) => s.save(queue_url, write).await,
        }
    }

    async fn save_plan(&self, plan_id: &str, ids: &[String]) -> Result<(), PortError> {
        match self {
            Self::DynamoDb(s) => s.save_plan(plan_id, ids).await,
            Self::Memory(s) => s.save_plan(plan_id, ids).await,
        }
    }

    async fn load_plan(&self, plan_id: &str) -> Result<Option<Vec<String>>, PortError> {
        match self {
            Self::DynamoDb(s) => s.load_plan(plan_id).await,
            Self::Memory(s) => s.load_plan(plan_id).await,
        }
    }
}

/// The held groups of one drain, and the messages it left under each.
pub(super) struct OnHold {
    groups: Vec<GroupId>,
    cfg: GroupingConfig,
    left: Mutex<BTreeMap<String, Vec<String>>>,
}

impl OnHold {
    /// Splits a received batch into the messages of held groups and the rest.
    pub(super) fn split(&self, messages: Vec<Received>) -> (Vec<Received>, Vec<Received>) {
        let mut held = Vec::new();
        let mut rest = Vec::new();
        for m in messages {
            let o = Observation {
                message_id: &m.message_id,
                body: &m.body,
                attributes: &m.attributes,
                sent_timestamp_ms: m.sent_timestamp_ms,
                dead_letter_source_arn: m.dead_letter_source_arn.as_deref(),
            };
            let facts = redrive_shared::triage::Facts::read(&o);
            match self
                .groups
                .iter()
                .find(|g| belongs(g, &o, &facts, &self.cfg))
            {
                Some(g) => {
                    let (meta, _) =
                        redrive_shared::meta::RedriveMeta::read(&m.attributes, &m.message_id);
                    tracing::info!(message_id = %m.message_id, original_message_id = %meta.original_message_id, attempt = meta.attempt, group = %g, action = "on-hold", "its group is held: left on the DLQ");
                    lock(&self.left)
                        .entry(g.to_string())
                        .or_default()
                        .push(m.message_id.clone());
                    held.push(m);
                }
                None => rest.push(m),
            }
        }
        (held, rest)
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// Triage's book, whose holds this engine's drains keep (`TRIAGE_TABLE`); `None`: none.
    pub fn with_triage(mut self, books: Option<TriageBooks>) -> Self {
        self.triage = books;
        self
    }

    /// The held groups of the DLQ now, `None` when triage is off or nothing is held.
    pub(super) async fn holds(&self) -> Result<Option<OnHold>, PortError> {
        let Some(books) = &self.triage else {
            return Ok(None);
        };
        let book = triage_store::load_or_new(books, self.config.dlq_url.as_str()).await?;
        let held: BTreeSet<String> = book.held((self.clock)());
        if held.is_empty() {
            return Ok(None);
        }
        tracing::info!(groups = ?held, action = "on-hold", "held groups stay on the DLQ");
        Ok(Some(OnHold {
            groups: held.iter().filter_map(|g| GroupId::parse(g).ok()).collect(),
            cfg: GroupingConfig {
                max_attempts: self.config.max_redrive_attempts,
                ..GroupingConfig::default()
            },
            left: Mutex::new(BTreeMap::new()),
        }))
    }

    /// Tells the book which messages a drain left on hold (a hold by count ends once enough
    /// distinct messages were left). A failure is logged: the hold then lasts longer, never
    /// shorter.
    pub(super) async fn record_left(&self, on_hold: OnHold, dry_run: bool) {
        let left = on_hold.left.into_inner().unwrap_or_else(|e| e.into_inner());
        let Some(books) = self
            .triage
            .as_ref()
            .filter(|_| !left.is_empty() && !dry_run)
        else {
            return;
        };
        let now = (self.clock)();
        let written = triage_store::update(books, self.config.dlq_url.as_str(), |b| {
            let ended: Vec<String> = left
                .iter()
                .filter(|(g, ids)| b.left(g, ids, now))
                .map(|(g, _)| g.clone())
                .collect();
            Ok(ended)
        })
        .await;
        match written {
            Ok((ended, _)) if !ended.is_empty() => {
                tracing::info!(groups = ?ended, action = "hold-ended", "holds ended by count: the groups drain from the next run")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, action = "on-hold-unrecorded", "could not record the messages left on hold")
            }
        }
    }
}
