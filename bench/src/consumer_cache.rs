//! The consumer's in-memory cache of completed keys (`IDEMPOTENCY_CACHE_SIZE`): calls to the
//! idempotency table per record on a warm instance whose batches carry duplicates, with and
//! without the cache, on the consumer's own fake store (which counts every call).
//!
//! The workload: one warm instance handles `batches` batches of `batch_size` records; in each,
//! `duplicate_share` of the records are copies of keys completed before them, drawn at random
//! (seeded) from every key completed so far, `preloaded` of which another instance completed
//! before the run (the first sighting of one costs a claim even with the cache); the rest are
//! new keys. A new key costs a claim and a COMPLETED write either way; a duplicate costs a
//! claim without the cache and nothing with it once the instance has seen the key completed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redrive_consumer::Consumer;
use redrive_consumer::fake::{FakeQueue, FakeStore, Record, ScriptedProcessor, Status};
use redrive_shared::backoff::{RandomSource, seeded_rng};
use redrive_shared::clock::now_ms;
use serde::Serialize;
use serde_json::{Value, json};

use crate::quiet_consumer;

/// The workload.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Workload {
    pub batches: usize,
    pub batch_size: usize,
    /// Share of each batch that repeats a completed key, 0.0 to 1.0.
    pub duplicate_share: f64,
    /// Keys another instance completed before the run.
    pub preloaded: usize,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            batches: 100,
            batch_size: 10,
            duplicate_share: 0.5,
            preloaded: 50,
        }
    }
}

/// What one run cost.
#[derive(Debug, Clone, Serialize)]
pub struct CacheRun {
    pub cache_size: usize,
    pub records: u64,
    pub duplicates: u64,
    pub claims: u64,
    pub completes: u64,
    pub releases: u64,
    pub reads: u64,
    /// Side effects: one per new key, whatever the cache.
    pub side_effects: u64,
}

impl CacheRun {
    pub fn calls(&self) -> u64 {
        self.claims + self.completes + self.releases + self.reads
    }

    pub fn calls_per_record(&self) -> f64 {
        self.calls() as f64 / self.records as f64
    }
}

fn record_json(id: &str, key: &str) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("handle-{id}"),
        "body": json!({"orderId": key}).to_string(),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764000000000"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1"
    })
}

/// The batches of the workload (the same for every cache size: seeded), each a Lambda SQS
/// event, and how many records repeat a completed key. The duplicates of one batch are of
/// distinct keys.
pub fn events(w: Workload, seed: u64) -> (Vec<Value>, u64) {
    let mut rng = seeded_rng(seed);
    let mut completed: Vec<String> = (0..w.preloaded).map(|i| format!("done-{i}")).collect();
    let per_batch = ((w.batch_size as f64) * w.duplicate_share).round() as usize;
    let mut next = 0usize;
    let mut duplicates = 0u64;
    let mut events = Vec::with_capacity(w.batches);
    for b in 0..w.batches {
        let mut records = Vec::with_capacity(w.batch_size);
        let mut fresh = Vec::new();
        let mut chosen: Vec<String> = Vec::new();
        for r in 0..w.batch_size {
            let id = format!("m-{b}-{r}");
            let key = if r < per_batch && completed.len() > r {
                duplicates += 1;
                // Distinct within the batch: same-key records of one batch are twins, which
                // the consumer settles once with or without the cache.
                loop {
                    let pick = (rng.next_unit() * completed.len() as f64) as usize;
                    let key = &completed[pick.min(completed.len() - 1)];
                    if !chosen.contains(key) {
                        chosen.push(key.clone());
                        break key.clone();
                    }
                }
            } else {
                next += 1;
                let key = format!("order-{next}");
                fresh.push(key.clone());
                key
            };
            records.push(record_json(&id, &key));
        }
        completed.extend(fresh);
        events.push(json!({ "Records": records }));
    }
    (events, duplicates)
}

/// Runs the workload on one warm consumer with `cache_size` (0: no cache).
pub async fn run(w: Workload, cache_size: usize, seed: u64) -> CacheRun {
    let (store, queue, processor) = (
        FakeStore::new(),
        FakeQueue::new(),
        ScriptedProcessor::default(),
    );
    let expiration_s = now_ms() / 1000 + 3600;
    for i in 0..w.preloaded {
        // The table holds the key's hash (no namespace: the configuration below has none).
        let id = redrive_shared::key::IdempotencyKey::try_from(format!("done-{i}"))
            .map(|key| key.record_id(None))
            .unwrap_or_default();
        store.insert(
            &id,
            Record {
                status: Status::Completed,
                expiration_s,
                in_progress_expiration_ms: 0,
                token: None,
                result: None,
                payload_hash: None,
            },
        );
    }
    let map = std::collections::HashMap::from([
        ("IDEMPOTENCY_TABLE", "idempotency".to_string()),
        ("IDEMPOTENCY_KEY", "/orderId".to_string()),
        ("IDEMPOTENCY_CACHE_SIZE", cache_size.to_string()),
    ]);
    let config =
        redrive_consumer::ConsumerConfig::from_env(&redrive_shared::config::Env(move |k: &str| {
            map.get(k).cloned()
        }))
        .expect("the bench's consumer configuration is valid");
    let consumer = Consumer::with_settings(&store, &queue, &processor, config, quiet_consumer());
    let (events, duplicates) = events(w, seed);
    let deadline = (now_ms() + Duration::from_secs(60).as_millis() as i64) as u64;
    let mut records = 0u64;
    for event in &events {
        let handled = consumer
            .handle(event, deadline)
            .await
            .expect("an SQS event");
        assert!(
            handled.response.batch_item_failures.is_empty(),
            "every record settles: {:?}",
            handled.response
        );
        records += handled.records.len() as u64;
    }
    let side_effects = u64::from(processor.total_calls());
    CacheRun {
        cache_size,
        records,
        duplicates,
        claims: store.calls.claim.load(Ordering::SeqCst),
        completes: store.calls.complete.load(Ordering::SeqCst),
        releases: store.calls.release.load(Ordering::SeqCst),
        reads: store.calls.read.load(Ordering::SeqCst),
        side_effects,
    }
}
