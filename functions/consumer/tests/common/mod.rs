//! Shared setup of the consumer's integration tests: moto queues and table, a real downstream,
//! Lambda SQS events built from messages really received from moto (real receipt handles), and
//! the event source mapping's part (deleting what was not reported failed).

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{Message as SqsMessage, MessageAttributeValue};
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::{BatchResponse, Consumer, FailedIds, Handled, HttpProcessor};
use redrive_shared::config::{ConsumerConfig, DownstreamConfig, Env};
use redrive_shared::key::{IdempotencyKey, KeySource, derive};
use redrive_shared::meta::RedriveMeta;
use redrive_tests::{Downstream, QueueSet, create_idempotency_table, moto, receive_raw, sqs_event};
use serde_json::Value;

pub type HttpConsumer = Consumer<DynamoDbStore, SqsOps, HttpProcessor>;

/// One test's world: its own queues, table and downstream on one shared moto.
pub struct World {
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    pub queues: QueueSet,
    pub table: String,
    pub downstream: Downstream,
    /// The body sent under each chain id (`originalMessageId`), to find the records of
    /// default (`message`) keys.
    chains: Mutex<HashMap<String, String>>,
}

impl World {
    pub async fn new(fifo: bool) -> World {
        let sqs = moto().sqs().await;
        let ddb = moto().dynamodb().await;
        let queues = QueueSet::create(&sqs, fifo, 5).await;
        let table = create_idempotency_table(&ddb).await;
        let downstream = Downstream::start().await;
        World {
            sqs,
            ddb,
            queues,
            table,
            downstream,
            chains: Mutex::default(),
        }
    }

    /// The consumer's configuration, read the way the Lambda reads it: from variables.
    /// Retry backoff 1 s without jitter unless `extra` says otherwise.
    pub fn config(&self, dlq: bool, extra: &[(&str, &str)]) -> ConsumerConfig {
        let mut vars: HashMap<String, String> = HashMap::from([
            ("IDEMPOTENCY_TABLE".into(), self.table.clone()),
            ("RETRY_BASE_SECONDS".into(), "1".into()),
            ("RETRY_JITTER".into(), "none".into()),
        ]);
        if dlq {
            vars.insert("DLQ_URL".into(), self.queues.dlq_url.clone());
        }
        for (k, v) in extra {
            vars.insert(k.to_string(), v.to_string());
        }
        ConsumerConfig::from_env(&Env(move |k: &str| vars.get(k).cloned())).unwrap()
    }

    /// The downstream rejects bodies containing `poison` (400: permanent) and is unavailable
    /// for those containing `flaky` (503: transient).
    pub fn reject_poison_and_flaky(&self) {
        self.downstream.reject_bodies_containing("poison", 400);
        self.downstream.reject_bodies_containing("flaky", 503);
    }

    /// Every message on the DLQ (drained), each with its `x-redrive` metadata.
    pub async fn dead_letters(&self) -> Vec<(SqsMessage, RedriveMeta)> {
        drain(&self.sqs, &self.queues.dlq_url)
            .await
            .into_iter()
            .map(|m| {
                let (meta, _) = RedriveMeta::read(&attrs(&m), m.message_id().unwrap_or_default());
                (m, meta)
            })
            .collect()
    }

    pub fn http(&self) -> HttpProcessor {
        HttpProcessor::new(&DownstreamConfig {
            url: self.downstream.url(),
            timeout: Duration::from_secs(5),
        })
        .unwrap()
    }

    pub fn store(&self) -> DynamoDbStore {
        DynamoDbStore::new(self.ddb.clone(), self.table.clone())
    }

    pub fn queue_ops(&self) -> SqsOps {
        SqsOps {
            client: self.sqs.clone(),
        }
    }

    /// The shipped consumer (DynamoDB, SQS, HTTP) against this world.
    pub fn consumer(&self, config: ConsumerConfig) -> HttpConsumer {
        Consumer::new(self.store(), self.queue_ops(), self.http(), config)
    }

    /// Sends the bodies (with attributes) to the source queue and returns their MessageIds.
    pub async fn send(&self, messages: &[(&str, &[(&str, MessageAttributeValue)])]) -> Vec<String> {
        let mut ids = Vec::new();
        for (body, attributes) in messages {
            let id =
                redrive_tests::send_raw(&self.sqs, &self.queues.source_url, body, attributes).await;
            let stamp = attributes
                .iter()
                .find(|(name, _)| *name == redrive_shared::meta::ATTRIBUTE_NAME)
                .and_then(|(_, a)| a.string_value());
            let chain = match stamp {
                Some(text) => RedriveMeta::parse(text)
                    .map(|meta| meta.original_message_id)
                    .unwrap_or_else(|_| id.clone()),
                None => id.clone(),
            };
            self.chains.lock().unwrap().insert(chain, body.to_string());
            ids.push(id);
        }
        ids
    }

    /// Receives exactly `n` messages from the source queue (visibility 300 s, so that only the
    /// consumer's own ChangeMessageVisibility can bring one back early).
    pub async fn receive(&self, n: usize) -> Vec<SqsMessage> {
        receive_n(&self.sqs, &self.queues.source_url, n).await
    }

    /// One message with this body sent to the source queue and received: its MessageId, and
    /// the received batch of that one message.
    pub async fn send_and_receive_one(&self, body: &str) -> (String, Vec<SqsMessage>) {
        let id = self.send(&[(body, &[])]).await.remove(0);
        (id, self.receive(1).await)
    }

    pub fn event(&self, messages: &[SqsMessage]) -> Value {
        sqs_event(messages, &self.queues.source_arn)
    }

    /// `consumer` handles the event of these received messages, a minute before its deadline.
    pub async fn handle(&self, consumer: &HttpConsumer, messages: &[SqsMessage]) -> Handled {
        consumer
            .handle(&self.event(messages), deadline_in(60))
            .await
            .expect("an event of received messages has a Records array")
    }

    /// The event source mapping's part after a successful invocation: delete every message of
    /// the batch that was not reported failed.
    pub async fn settle(&self, messages: &[SqsMessage], response: &BatchResponse) {
        let failed = response.failed_ids();
        for m in messages {
            if !failed.contains(&m.message_id().unwrap()) {
                self.sqs
                    .delete_message()
                    .queue_url(&self.queues.source_url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    /// The record of `key`: an idempotency key (`p-77`, `["c-1","o-1"]`), or a chain id sent by
    /// [`World::send`], whose default key is `<originalMessageId>:<body digest>`. The table
    /// holds hashes of keys ([`IdempotencyKey::record_id`]), under any namespace; a record a
    /// test wrote through the store itself is found by its id as it is.
    pub async fn record(&self, key: &str) -> Option<HashMap<String, AttributeValue>> {
        let mut hashes = vec![Self::hash_of(key)];
        if let Some(body) = self.chains.lock().unwrap().get(key) {
            let key = derive(&KeySource::Message, key, body, &Default::default()).unwrap();
            hashes.push(Self::hash_of(key.as_str()));
        }
        self.scan().await.into_iter().find(|item| {
            let id = item["id"].as_s().unwrap();
            // A key's cause item (`cause#<record id>`) is not its record.
            if id.starts_with(redrive_consumer::cause::ID_PREFIX) {
                return false;
            }
            id == key
                || hashes
                    .iter()
                    .any(|h| id.rsplit('#').next() == Some(h.as_str()))
        })
    }

    fn hash_of(key: &str) -> String {
        IdempotencyKey::try_from(key.to_string())
            .map(|k| k.record_id(None))
            .unwrap_or_default()
    }

    /// The cause item of `key` (an idempotency key, or a chain id sent by [`World::send`]),
    /// for a consumer without a namespace.
    pub async fn cause(&self, key: &str) -> Option<HashMap<String, AttributeValue>> {
        let mut ids = vec![Self::cause_id_of(key)];
        if let Some(body) = self.chains.lock().unwrap().get(key) {
            let key = derive(&KeySource::Message, key, body, &Default::default()).unwrap();
            ids.push(Self::cause_id_of(key.as_str()));
        }
        self.scan()
            .await
            .into_iter()
            .find(|item| ids.iter().any(|id| item["id"].as_s().unwrap() == id))
    }

    fn cause_id_of(key: &str) -> String {
        IdempotencyKey::try_from(key.to_string())
            .map(|k| redrive_consumer::cause::item_id(&k, None))
            .unwrap_or_default()
    }

    /// Every item of the idempotency table.
    pub async fn scan(&self) -> Vec<HashMap<String, AttributeValue>> {
        self.ddb
            .scan()
            .table_name(&self.table)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .items
            .unwrap_or_default()
    }

    pub async fn status(&self, key: &str) -> Option<String> {
        self.record(key)
            .await
            .and_then(|r| r.get("status").and_then(|s| s.as_s().ok()).cloned())
    }

    pub async fn depth(&self, url: &str) -> u64 {
        redrive_tests::queue_depth(&self.sqs, url).await
    }
}

pub async fn receive_n(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) -> Vec<SqsMessage> {
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(receive_raw(sqs, url, 300).await);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "received {} of {n} messages from {url}",
            got.len()
        );
    }
    assert_eq!(
        got.len(),
        n,
        "received more messages than expected from {url}"
    );
    got
}

/// Polls until `n` messages are visible again (received with a 300 s visibility), or panics
/// after `within`.
pub async fn comes_back(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    n: usize,
    within: Duration,
) -> Vec<SqsMessage> {
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(receive_raw(sqs, url, 300).await);
        if started.elapsed() > within {
            panic!(
                "only {} of {n} messages came back to {url} within {within:?}",
                got.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

pub use redrive_shared::clock::now_ms;

/// A Lambda deadline `secs` from now, epoch ms.
pub fn deadline_in(secs: u64) -> u64 {
    now_ms() as u64 + secs * 1000
}

pub fn number(record: &HashMap<String, AttributeValue>, name: &str) -> i64 {
    record[name].as_n().unwrap().parse().unwrap()
}

/// The body of every message of a queue, with its attributes, drained (deleted).
pub async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<SqsMessage> {
    redrive_tests::drain_all(sqs, url).await
}

pub fn attrs(m: &SqsMessage) -> redrive_shared::Attributes {
    redrive_shared::sdk::attributes_from_sdk(m.message_attributes.as_ref())
}
