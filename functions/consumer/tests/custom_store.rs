//! A store of the user's own behind the public `IdempotencyStore` trait, written as a user
//! outside the crate would write it (an in-process map standing in for Redis or another
//! table): the engine gets its guarantees from the trait alone.

use std::collections::HashMap;
use std::sync::Mutex;

use redrive_consumer::fake::{self, FakeQueue, event as fixture_event, in_a_minute, message};
use redrive_consumer::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, PortError};
use redrive_consumer::{Consumer, Message, Outcome, ProcessError, Record};
use redrive_shared::config::ConsumerConfig;
use redrive_shared::key::KeySource;
use serde_json::Value;

/// The user's store: one map from record id to record, with the trait's rules (a claim takes
/// a new, expired or abandoned key; a release removes only the releasing claim's record).
#[derive(Default)]
struct MapStore {
    records: Mutex<HashMap<String, Entry>>,
    calls: Mutex<Vec<&'static str>>,
}

#[derive(Clone)]
enum Entry {
    InProgress { token: String, until_ms: i64 },
    Completed(CompletedRecord),
}

impl IdempotencyStore for MapStore {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, PortError> {
        self.calls.lock().unwrap().push("claim");
        let mut records = self.records.lock().unwrap();
        match records.get(&claim.key) {
            Some(Entry::Completed(done)) if !done.is_expired_at(claim.now_ms) => {
                return Ok(ClaimOutcome::Completed(done.clone()));
            }
            Some(Entry::InProgress { token, until_ms })
                if *token != claim.token && *until_ms >= claim.now_ms =>
            {
                return Ok(ClaimOutcome::InProgress {
                    until_ms: Some(*until_ms),
                });
            }
            _ => {}
        }
        records.insert(
            claim.key.clone(),
            Entry::InProgress {
                token: claim.token.clone(),
                until_ms: claim.in_progress_expiration_ms,
            },
        );
        Ok(ClaimOutcome::Claimed)
    }

    async fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> Result<(), PortError> {
        self.calls.lock().unwrap().push("complete");
        let done = CompletedRecord::new(expiration_s)
            .with_result(result.map(str::to_string))
            .with_payload_hash(claim.payload_hash.clone());
        self.records
            .lock()
            .unwrap()
            .insert(claim.key.clone(), Entry::Completed(done));
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), PortError> {
        self.calls.lock().unwrap().push("release");
        let mut records = self.records.lock().unwrap();
        if matches!(records.get(&claim.key), Some(Entry::InProgress { token, .. }) if *token == claim.token)
        {
            records.remove(&claim.key);
        }
        Ok(())
    }
}

fn config() -> ConsumerConfig {
    ConsumerConfig {
        idempotency_table: "unused-by-a-custom-store".into(),
        ..fake::config(false, KeySource::parse("/orderId").unwrap())
    }
}

fn event(messages: &[(&str, &str)]) -> Value {
    let messages: Vec<Message> = messages
        .iter()
        .map(|(id, body)| message(id, body))
        .collect();
    fixture_event(&messages)
}

#[tokio::test]
async fn a_store_of_the_users_own_gets_the_same_once_per_key_guarantee() {
    // GIVEN a consumer over the user's own store and a processor that counts its side effects
    let store = MapStore::default();
    let queue = FakeQueue::new();
    let effects = Mutex::new(Vec::new());
    let effects_ref = &effects;
    let consumer = Consumer::new(
        &store,
        &queue,
        move |order: Value, _record: Record| async move {
            effects_ref
                .lock()
                .unwrap()
                .push(order["orderId"].to_string());
            Ok::<(), ProcessError>(())
        },
        config(),
    );

    // WHEN a batch with two orders, one of them twice, is handled, and then delivered again
    let batch = event(&[
        ("m-1", r#"{"orderId":"o-1"}"#),
        ("m-2", r#"{"orderId":"o-2"}"#),
        ("m-3", r#"{"orderId":"o-1"}"#),
    ]);
    let first = consumer.handle(&batch, in_a_minute()).await.unwrap();
    let again = consumer.handle(&batch, in_a_minute()).await.unwrap();

    // THEN each order reached its side effect once, and nothing was reported failed
    let mut effects = effects.lock().unwrap().clone();
    effects.sort();
    assert_eq!(effects, [r#""o-1""#, r#""o-2""#]);
    assert!(first.response.batch_item_failures.is_empty());
    assert!(again.response.batch_item_failures.is_empty());
    // AND the redelivered batch was settled from the user's store as duplicates
    for id in ["m-1", "m-2", "m-3"] {
        assert_eq!(again.outcome_of(id), Some(&Outcome::Duplicate), "{id}");
    }
    // AND the store went through the trait: one claim per key and batch (a twin waits for
    // its sibling), one completion per key, no release
    let calls = store.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().filter(|c| **c == "claim").count(),
        4,
        "{calls:?}"
    );
    assert_eq!(
        calls.iter().filter(|c| **c == "complete").count(),
        2,
        "{calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| **c == "release").count(), 0);
    // AND the user's store only ever saw record ids, never the raw business keys
    let records = store.records.lock().unwrap();
    assert_eq!(records.len(), 2);
    for id in records.keys() {
        assert!(!id.contains("o-1") && !id.contains("o-2"), "{id}");
        assert!(
            id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
    }
}
