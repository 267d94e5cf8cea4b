//! Key sources, hashed record ids, the payload check and the shipped table snippet, against moto
//! (real conditional writes, real queues) and a real HTTP downstream on loopback.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    PointInTimeRecoverySpecification, ScalarAttributeType, TimeToLiveSpecification,
};
use common::*;
use redrive_consumer::fake::{ScriptedProcessor, Step};
use redrive_consumer::{Consumer, Outcome};
use redrive_tests::{attr_binary, attr_string, unique_name};
use serde_json::{Value, json};

fn order(customer: &str, order: &str, amount: u32, sender: &str) -> String {
    json!({"customerId": customer, "orderId": order, "amount": amount, "sentBy": sender})
        .to_string()
}

fn outcomes(handled: &redrive_consumer::Handled) -> Vec<&'static str> {
    handled.records.iter().map(|r| r.outcome.as_str()).collect()
}

/// `IDEMPOTENCY_KEY`, four messages (body, `OrderId` attribute), and the key of the first.
type Case = (&'static str, [(String, Option<&'static str>); 4], String);

#[tokio::test]
async fn compound_attribute_and_body_keys_deliver_once_per_key() {
    // GIVEN for each key source three messages, the first and third with one key (their
    // bodies differing beyond the key, except for `body`), and later a fourth with that key
    let cases: [Case; 3] = [
        (
            "/customerId,/orderId",
            [
                (order("c-1", "o-1", 5, "a"), None),
                (order("c-1", "o-2", 5, "b"), None),
                (order("c-1", "o-1", 5, "c"), None),
                (order("c-1", "o-1", 5, "d"), None),
            ],
            r#"["c-1","o-1"]"#.into(),
        ),
        (
            "attribute:OrderId",
            [
                ("first".into(), Some("o-1")),
                ("second".into(), Some("o-2")),
                ("third".into(), Some("o-1")),
                ("fourth".into(), Some("o-1")),
            ],
            "o-1".into(),
        ),
        (
            "body",
            [
                (r#"{"order":1}"#.into(), None),
                (r#"{"order":2}"#.into(), None),
                (r#"{"order":1}"#.into(), None),
                (r#"{"order":1}"#.into(), None),
            ],
            redrive_shared::key::sha256_hex(br#"{"order":1}"#, 64),
        ),
    ];
    for (source, messages, twin_key) in cases {
        let twin_key = twin_key.as_str();
        let w = World::new(false).await;
        let consumer = w.consumer(w.config(true, &[("IDEMPOTENCY_KEY", source)]));
        let send = |(body, attribute): &(String, Option<&str>)| {
            let attributes: Vec<_> = attribute
                .iter()
                .map(|v| ("OrderId", attr_string(v)))
                .collect();
            (body.clone(), attributes)
        };
        let batch: Vec<_> = messages[..3].iter().map(send).collect();
        for (body, attributes) in &batch {
            w.send(&[(body.as_str(), attributes.as_slice())]).await;
        }

        // WHEN they are received and handled as one batch, then the fourth alone
        let received = w.receive(3).await;
        let first = w.handle(&consumer, &received).await;
        let (body, attributes) = send(&messages[3]);
        w.send(&[(body.as_str(), attributes.as_slice())]).await;
        let later = w.receive(1).await;
        let second = w.handle(&consumer, &later).await;

        // THEN the shared key reached the downstream once, with the key in its header
        let mut first_outcomes = outcomes(&first);
        first_outcomes.sort();
        assert_eq!(
            first_outcomes,
            ["duplicate", "processed", "processed"],
            "{source}"
        );
        assert_eq!(outcomes(&second), ["duplicate"], "{source}");
        assert_eq!(w.downstream.deliveries(twin_key), 1, "{source}");
        assert_eq!(w.downstream.total_attempts(), 2, "{source}");
        assert_eq!(
            w.status(twin_key).await.as_deref(),
            Some("COMPLETED"),
            "{source}"
        );
    }
}

#[tokio::test]
async fn a_missing_or_binary_key_attribute_is_dead_lettered_with_its_code() {
    // GIVEN messages keyed on attribute:OrderId: one without it, one with a Binary value
    let w = World::new(false).await;
    let ids = w
        .send(&[
            ("no attribute", &[]),
            ("binary attribute", &[("OrderId", attr_binary(b"o-1"))]),
        ])
        .await;
    let received = w.receive(2).await;
    let consumer = w.consumer(w.config(true, &[("IDEMPOTENCY_KEY", "attribute:OrderId")]));

    // WHEN they are handled
    let handled = w.handle(&consumer, &received).await;

    // THEN each is on the DLQ with its own code, deleted from the source, never delivered
    assert!(handled.response.batch_item_failures.is_empty());
    let mut codes: Vec<(String, String)> = w
        .dead_letters()
        .await
        .into_iter()
        .map(|(_, meta)| (meta.original_message_id, meta.last_error.unwrap().code))
        .collect();
    codes.sort();
    let mut want = vec![
        (ids[0].clone(), "KEY_ATTRIBUTE_MISSING".to_string()),
        (ids[1].clone(), "KEY_ATTRIBUTE_BINARY".to_string()),
    ];
    want.sort();
    assert_eq!(codes, want);
    assert_eq!(w.depth(&w.queues.source_url).await, 0);
    assert_eq!(w.downstream.total_attempts(), 0);
}

/// Every string and number of every item of the table.
fn texts(items: &[HashMap<String, AttributeValue>]) -> Vec<String> {
    items
        .iter()
        .flat_map(|item| item.iter())
        .flat_map(|(name, value)| {
            let text = match value {
                AttributeValue::S(s) | AttributeValue::N(s) => s.clone(),
                other => format!("{other:?}"),
            };
            [name.clone(), text]
        })
        .collect()
}

#[tokio::test]
async fn no_raw_key_or_payload_value_reaches_the_table() {
    // GIVEN a key of personal data (an e-mail and an attribute), a payload check and a namespace
    let w = World::new(false).await;
    let vars = [
        ("IDEMPOTENCY_KEY", "/customer/email,attribute:OrderId"),
        ("IDEMPOTENCY_PAYLOAD", "/amount"),
        ("IDEMPOTENCY_NAMESPACE", "orders-consumer"),
    ];
    let raw = [
        "alice@example.com",
        "bob@example.com",
        "ORD-4711-X",
        "ORD-4712-Y",
        "12345.67",
    ];
    let body = |email: &str| json!({"customer": {"email": email}, "amount": 12345.67}).to_string();
    w.send(&[
        (&body(raw[0]), &[("OrderId", attr_string(raw[2]))]),
        (&body(raw[1]), &[("OrderId", attr_string(raw[3]))]),
    ])
    .await;
    let received = w.receive(2).await;

    // WHEN one is processed (COMPLETED) and the other's claim is left by a crashed invocation
    // (IN_PROGRESS, with its claim token)
    let (done, crashed): (Vec<_>, Vec<_>) = received
        .into_iter()
        .partition(|m| m.body().unwrap().contains(raw[0]));
    let handled = w
        .consumer(w.config(true, &vars))
        .handle(&w.event(&done), deadline_in(60))
        .await
        .unwrap();
    assert_eq!(handled.records[0].outcome, Outcome::Processed);
    let hanging = ScriptedProcessor::new(Step::Hang);
    let stuck = Consumer::new(w.store(), w.queue_ops(), &hanging, w.config(true, &vars));
    let event = w.event(&crashed);
    let invocation = stuck.handle(&event, deadline_in(60));
    let _ = tokio::time::timeout(Duration::from_secs(2), invocation).await;

    // THEN the table holds both records, under `<namespace>#<SHA-256 of the key>`, and no
    // attribute of any record carries a key, a part of one, or a payload value
    let items = w.scan().await;
    let mut statuses: Vec<&str> = items
        .iter()
        .map(|i| i["status"].as_s().unwrap().as_str())
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["COMPLETED", "IN_PROGRESS"]);
    let key = format!(r#"["{}","{}"]"#, raw[0], raw[2]);
    let id = redrive_shared::key::IdempotencyKey::try_from(key.clone())
        .unwrap()
        .record_id(Some("orders-consumer"));
    assert!(items.iter().any(|i| i["id"].as_s().unwrap() == &id));
    for item in &items {
        let id = item["id"].as_s().unwrap();
        let hash = id.strip_prefix("orders-consumer#").unwrap();
        assert_eq!(hash.len(), 64, "{id}");
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        let payload = item["payloadHash"].as_s().unwrap();
        assert_eq!(payload.len(), 8 + 1 + 64, "{payload}");
    }
    let stored = texts(&items);
    for secret in raw.iter().copied().chain([key.as_str(), "alice"]) {
        assert!(
            !stored.iter().any(|t| t.contains(secret)),
            "{secret} is in the table: {stored:?}"
        );
    }
}

#[tokio::test]
async fn a_different_payload_under_a_processed_key_is_dead_lettered_never_delivered() {
    // GIVEN an order processed for 5, with the payload check on /amount
    let w = World::new(false).await;
    let vars = [
        ("IDEMPOTENCY_KEY", "/orderId"),
        ("IDEMPOTENCY_PAYLOAD", "/amount"),
    ];
    let consumer = w.consumer(w.config(true, &vars));
    w.send(&[(&order("c-1", "o-1", 5, "a"), &[])]).await;
    let first = w.receive(1).await;
    let done = w.handle(&consumer, &first).await;
    w.settle(&first, &done.response).await;

    // WHEN the same order comes for 7, and again for 5 from another sender
    let ids = w
        .send(&[
            (&order("c-1", "o-1", 7, "b"), &[]),
            (&order("c-1", "o-1", 5, "c"), &[]),
        ])
        .await;
    let received = w.receive(2).await;
    let handled = w.handle(&consumer, &received).await;

    // THEN the 7 is a payload mismatch: a stamped copy on the DLQ, the original deleted, the
    // downstream not called; the 5 is a duplicate
    assert!(handled.response.batch_item_failures.is_empty());
    assert_eq!(
        handled.outcome_of(&ids[0]),
        Some(&Outcome::PayloadMismatch {
            dead_lettered: true,
            stamped: true
        })
    );
    assert_eq!(handled.outcome_of(&ids[1]), Some(&Outcome::Duplicate));
    assert_eq!(w.downstream.deliveries("o-1"), 1);
    assert_eq!(w.downstream.total_attempts(), 1);
    let dlq = w.dead_letters().await;
    assert_eq!(dlq.len(), 1);
    let (copy, meta) = &dlq[0];
    assert_eq!(copy.body(), Some(order("c-1", "o-1", 7, "b").as_str()));
    assert_eq!(meta.original_message_id, ids[0]);
    assert_eq!(
        meta.last_error.as_ref().unwrap().code,
        "IDEMPOTENCY_PAYLOAD_MISMATCH"
    );
    // (the duplicate is still in flight for the event source mapping; the mismatch is gone)
    assert_eq!(w.depth(&w.queues.source_url).await, 1);
    assert_eq!(w.status("o-1").await.as_deref(), Some("COMPLETED"));
}

/// The shipped snippet (infra/snippets/idempotency-table.yaml) in CloudFormation's long JSON
/// form, read with the infra's own YAML reader.
fn snippet() -> Value {
    let root = redrive_tests::workspace_root();
    let scratch = redrive_tests::ScratchDir::new("snippet");
    let out = scratch.file("snippet.json");
    let status = std::process::Command::new(redrive_tests::venv_bin().join("python"))
        .arg(root.join("infra/cfn_yaml.py"))
        .arg("compact")
        .arg(root.join("infra/snippets/idempotency-table.yaml"))
        .arg(&out)
        .status()
        .expect("the venv's python runs: `make setup`");
    assert!(status.success(), "cfn_yaml.py could not read the snippet");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).unwrap()
}

/// Creates the snippet's table on moto, property by property (CreateTable takes the same
/// names), and returns its name.
async fn table_from_snippet(ddb: &aws_sdk_dynamodb::Client) -> String {
    let template = snippet();
    let table = &template["Resources"]["IdempotencyTable"];
    assert_eq!(table["Type"], "AWS::DynamoDB::Table");
    let p = &table["Properties"];
    let name = unique_name("snippet-idem");
    let mut create = ddb
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::from(p["BillingMode"].as_str().unwrap()));
    for d in p["AttributeDefinitions"].as_array().unwrap() {
        create = create.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(d["AttributeName"].as_str().unwrap())
                .attribute_type(ScalarAttributeType::from(
                    d["AttributeType"].as_str().unwrap(),
                ))
                .build()
                .unwrap(),
        );
    }
    for k in p["KeySchema"].as_array().unwrap() {
        create = create.key_schema(
            KeySchemaElement::builder()
                .attribute_name(k["AttributeName"].as_str().unwrap())
                .key_type(KeyType::from(k["KeyType"].as_str().unwrap()))
                .build()
                .unwrap(),
        );
    }
    create.send().await.unwrap();
    let ttl = &p["TimeToLiveSpecification"];
    ddb.update_time_to_live()
        .table_name(&name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(ttl["AttributeName"].as_str().unwrap())
                .enabled(ttl["Enabled"].as_bool().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let pitr = &p["PointInTimeRecoverySpecification"];
    ddb.update_continuous_backups()
        .table_name(&name)
        .point_in_time_recovery_specification(
            PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(
                    pitr["PointInTimeRecoveryEnabled"].as_bool().unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn the_table_from_the_shipped_snippet_is_the_one_the_store_uses() {
    // GIVEN a table made from the snippet users paste into their templates
    let mut w = World::new(false).await;
    w.table = table_from_snippet(&w.ddb).await;
    let ttl = w
        .ddb
        .describe_time_to_live()
        .table_name(&w.table)
        .send()
        .await
        .unwrap();
    let ttl_attribute = ttl
        .time_to_live_description()
        .and_then(|d| d.attribute_name())
        .unwrap()
        .to_string();
    assert_eq!(ttl_attribute, redrive_consumer::aws::item::EXPIRATION);

    // WHEN the consumer claims, completes, finds a duplicate and a payload mismatch on it
    let consumer = w.consumer(w.config(
        true,
        &[
            ("IDEMPOTENCY_KEY", "/customerId,/orderId"),
            ("IDEMPOTENCY_PAYLOAD", "/amount"),
        ],
    ));
    w.send(&[(&order("c-1", "o-1", 5, "a"), &[])]).await;
    let first = w.receive(1).await;
    let done = w.handle(&consumer, &first).await;
    w.send(&[
        (&order("c-1", "o-1", 5, "b"), &[]),
        (&order("c-1", "o-1", 6, "c"), &[]),
    ])
    .await;
    let later = w.receive(2).await;
    let again = w.handle(&consumer, &later).await;

    // THEN it works as on the harness's own table, and the records carry the TTL attribute
    // the snippet declares, under the partition key it declares
    assert_eq!(outcomes(&done), ["processed"]);
    let mut later_outcomes = outcomes(&again);
    later_outcomes.sort();
    assert_eq!(later_outcomes, ["duplicate", "payload-mismatch"]);
    assert_eq!(w.downstream.deliveries(r#"["c-1","o-1"]"#), 1);
    let record = w.record(r#"["c-1","o-1"]"#).await.unwrap();
    assert_eq!(record["status"].as_s().unwrap(), "COMPLETED");
    let expiration = number(&record, &ttl_attribute);
    assert!(expiration > now_ms() / 1000, "{expiration}");
    let key =
        snippet()["Resources"]["IdempotencyTable"]["Properties"]["KeySchema"][0]["AttributeName"]
            .clone();
    assert_eq!(key, redrive_consumer::aws::item::ID);
    assert!(record.contains_key(redrive_consumer::aws::item::ID));
}
