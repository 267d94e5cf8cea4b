//! The live triage index: every sweep receives every message of its queue (within its budget),
//! so it groups, with no SQS call of its own, the messages it leaves on the queue, and records
//! the pass in the queue's book as `redrive triage --table` does
//! ([`triage_store::record_pass`]): each group's count, first and last failure, source, plan and
//! recommended action. The triage console's widget and the daily digest read that book.
//!
//! - A sweep that went round the whole queue is a complete pass: the groups it did not find
//!   are marked resolved. A sweep stopped by its budget, its deadline or a failure records what
//!   it grouped and resolves nothing.
//! - Messages archived by the sweep have left the queue and are not counted.
//! - Causes are read from what the messages carry (`x-redrive`'s recorded error); a message
//!   with none (SQS moved it after `maxReceiveCount`) is grouped by the cause the consumer
//!   recorded for it (`CAUSES_TABLE`, one BatchGetItem per receive at most), else by its
//!   source and body shape, labelled so. A sweep whose records cannot be read records nothing:
//!   grouped without them, its groups would differ from the book's.
//! - A new group and a regression publish one alert each on `ALERTS_TOPIC_ARN` when it is set.
//! - A book that cannot be written is logged (ERROR) and the sweep's archiving stands.

use std::collections::HashMap;

use redrive_engine::triage_causes::{CauseError, CauseRecords, complete};
use redrive_engine::triage_store::{self, DynamoDbTriageStore};
use redrive_shared::triage::cause::CauseItem;
use redrive_shared::triage::state::Alert;
use redrive_shared::triage::{Grouper, GroupingConfig, Observation};

use crate::config::CausesConfig;
use crate::sweep::QueuedMessage;

/// Where the sweeps record their groups, and where a new group is announced.
pub struct Index {
    pub books: DynamoDbTriageStore,
    /// The SNS client and `ALERTS_TOPIC_ARN`, when alerts are configured.
    pub alerts: Option<(aws_sdk_sns::Client, String)>,
    /// The consumer's cause records (`CAUSES_TABLE`), when configured.
    pub causes: Option<CauseRecords>,
}

impl Index {
    pub fn new(
        sdk: &aws_config::SdkConfig,
        table: &str,
        topic_arn: Option<&str>,
        causes: Option<&CausesConfig>,
    ) -> Self {
        Self {
            books: DynamoDbTriageStore::new(sdk, table),
            alerts: topic_arn.map(|t| (aws_sdk_sns::Client::new(sdk), t.to_string())),
            causes: causes.map(|c| {
                CauseRecords::new(
                    aws_sdk_dynamodb::Client::new(sdk),
                    &c.table,
                    c.key.clone(),
                    c.namespace.clone(),
                )
            }),
        }
    }

    /// Groups one receive's messages into `pass`, each message that carries no cause by the
    /// cause the consumer recorded for it (one BatchGetItem for the batch).
    pub(crate) async fn add(
        &self,
        pass: &mut Grouper,
        messages: &[QueuedMessage],
    ) -> Result<(), CauseError> {
        let ids: Vec<Option<String>> = messages
            .iter()
            .map(|m| {
                let c = self.causes.as_ref()?;
                c.item_id_of(&m.message_id, &m.body, &m.attributes)
            })
            .collect();
        let wanted: Vec<String> = ids.iter().flatten().cloned().collect();
        let items: HashMap<String, CauseItem> = match &self.causes {
            Some(c) if !wanted.is_empty() => c.fetch(&wanted).await?,
            _ => HashMap::new(),
        };
        for (m, id) in messages.iter().zip(ids) {
            let o = observation(m);
            let mut facts = pass.facts(&o);
            let recorded = id.and_then(|id| items.get(&id)?.to_recorded_cause());
            complete(&mut facts, recorded.as_ref());
            pass.add_facts(&o, facts);
        }
        Ok(())
    }

    /// A grouping of one sweep's messages.
    pub(crate) fn pass() -> Grouper {
        Grouper::new(GroupingConfig::default())
    }

    /// Records one sweep's groups in the book of `queue_url`; answers the number of groups
    /// recorded, `None` when the book could not be written.
    pub(crate) async fn record(
        &self,
        queue: &str,
        queue_url: &str,
        pass: Grouper,
        complete: bool,
        now: i64,
    ) -> Option<usize> {
        let groups = pass.finish();
        match triage_store::record_pass(&self.books, queue_url, &groups, complete, now).await {
            Ok(recorded) => {
                self.publish(&recorded.alerts).await;
                Some(groups.len())
            }
            Err(e) => {
                tracing::error!(queue, action = "index-unrecorded", error = %e, "the sweep's groups were not recorded in the triage book");
                None
            }
        }
    }

    /// One SNS message per alert (a new group, a regression), never one per message.
    async fn publish(&self, alerts: &[Alert]) {
        let Some((sns, topic)) = &self.alerts else {
            return;
        };
        for a in alerts {
            let published = sns
                .publish()
                .topic_arn(topic)
                .subject(a.subject())
                .message(serde_json::to_string(a).unwrap_or_default())
                .send()
                .await;
            if let Err(e) = published {
                tracing::error!(group = %a.group, kind = %a.kind, error = %aws_sdk_sns::error::DisplayErrorContext(&e), "the triage alert was not published");
            }
        }
    }
}

/// What triage reads of a message the sweep received.
pub(crate) fn observation(m: &QueuedMessage) -> Observation<'_> {
    Observation {
        message_id: &m.message_id,
        body: &m.body,
        attributes: &m.attributes,
        sent_timestamp_ms: m.sent_timestamp_ms(),
        dead_letter_source_arn: m.dead_letter_source_arn.as_deref(),
    }
}
