//! The bench of the consumer's cache of completed keys, small: the figures `make bench` prints
//! hold their shape (the cache saves exactly the claims of duplicates it has seen completed,
//! and never a side effect).

use redrive_bench::consumer_cache::{Workload, events, run};

#[tokio::test]
async fn the_cache_saves_the_claims_of_warm_duplicates_and_nothing_else() {
    // GIVEN 20 batches of 10, half of them copies of completed keys, 5 of which another
    // instance completed before the run
    let w = Workload {
        batches: 20,
        batch_size: 10,
        duplicate_share: 0.5,
        preloaded: 5,
    };

    // WHEN the same batches run on a warm instance without and with the cache
    let without = run(w, 0, 7).await;
    let with = run(w, 1000, 7).await;

    // THEN both reach the same side effects: one per new key
    assert_eq!(without.records, 200);
    assert_eq!(without.duplicates, 100);
    assert_eq!(without.side_effects, 100);
    assert_eq!(with.side_effects, 100);
    // AND without the cache every record costs a claim, every new key a COMPLETED write
    assert_eq!((without.claims, without.completes), (200, 100));
    assert_eq!(without.calls_per_record(), 1.5);
    // AND with it, a duplicate costs a claim only when it is the first sighting of a key
    // another instance completed
    let (events, _) = events(w, 7);
    let mut first_sightings = std::collections::HashSet::new();
    for e in &events {
        for r in e["Records"].as_array().unwrap() {
            let body: serde_json::Value =
                serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
            let key = body["orderId"].as_str().unwrap().to_string();
            if key.starts_with("done-") {
                first_sightings.insert(key);
            }
        }
    }
    assert_eq!(with.claims, 100 + first_sightings.len() as u64);
    assert_eq!(with.completes, 100);
    assert!(with.calls_per_record() < without.calls_per_record());
}
