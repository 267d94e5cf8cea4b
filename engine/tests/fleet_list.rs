//! The protected DLQs' list read at init from the table deploy writes it to (`DLQ_LIST_TABLE`),
//! on moto under the roles the templates give the re-driver and the archiver.

use aws_sdk_dynamodb::types::AttributeValue;
use redrive_engine::fleet_list;
use redrive_shared::config::{Env, RedriverConfig};
use redrive_tests::create_circuit_table;
use redrive_tests::iam::Resources;
use redrive_tests::moto;

const POISON: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/install-poison";

fn urls(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "https://sqs.us-east-1.amazonaws.com/123456789012/{i:04}-{}",
                "d".repeat(75)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

async fn table_with(list: Option<&str>) -> String {
    let ddb = moto().dynamodb().await;
    let table = create_circuit_table(&ddb).await;
    if let Some(list) = list {
        ddb.put_item()
            .table_name(&table)
            .item("queue", AttributeValue::S(fleet_list::ITEM_KEY.into()))
            .item(fleet_list::ATTRIBUTE, AttributeValue::S(list.into()))
            .send()
            .await
            .expect("PutItem");
    }
    table
}

async fn client_as(role: &str, table: &str) -> aws_sdk_dynamodb::Client {
    let resources: Resources = [("CircuitTable".to_string(), table.to_string())].into();
    aws_sdk_dynamodb::Client::new(&moto().sdk_config_as(role, &resources).await)
}

#[tokio::test]
async fn both_roles_read_a_list_far_above_the_environments_4_kb_and_the_fleet_is_its_dlqs() {
    let list = urls(500);
    assert!(list.len() > 4096 * 10);
    let table = table_with(Some(&list)).await;
    for role in ["RedriverRole", "ArchiverRole"] {
        let ddb = client_as(role, &table).await;
        let env = |k: &str| match k {
            fleet_list::VARIABLE => Some(table.clone()),
            _ => None,
        };
        let read = fleet_list::dlq_urls(env, || ddb.clone()).await.expect(role);
        assert_eq!(read.as_deref(), Some(list.as_str()), "{role}");
        let fleet = RedriverConfig::fleet_from_env(&Env::with_dlq_urls(
            |k| (k == "POISON_QUEUE_URL").then(|| POISON.to_string()),
            read,
        ))
        .expect("the list is DLQ_URLS");
        assert_eq!(fleet.len(), 500, "{role}");
    }
}

#[tokio::test]
async fn without_dlq_list_table_dlq_urls_applies_as_it_always_did() {
    let unused =
        || -> aws_sdk_dynamodb::Client { panic!("no table is read without DLQ_LIST_TABLE") };
    let env = |k: &str| (k == "DLQ_URLS").then(|| urls(2));
    assert_eq!(fleet_list::dlq_urls(env, unused).await.unwrap(), None);
}

#[tokio::test]
async fn a_missing_or_empty_list_or_an_unreadable_table_fails_naming_the_variable_and_the_table() {
    let missing = table_with(None).await;
    let empty = table_with(Some(" , ")).await;
    let ddb = client_as("RedriverRole", &missing).await;
    for (table, says) in [
        (&missing, "the protected DLQs' list is missing"),
        (&empty, "lists no queue"),
    ] {
        let err = fleet_list::read(&moto().dynamodb().await, table)
            .await
            .unwrap_err();
        assert_eq!(err.variable, "DLQ_LIST_TABLE");
        assert_eq!(err.value.as_deref(), Some(table.as_str()));
        assert!(err.to_string().contains(says), "{err}");
    }
    // A table that is gone (or not granted: moto authorizes DynamoDB on "*" only, so the
    // renderer cannot narrow the role to its table here) cannot be read: named, with the cause.
    let gone = format!("{missing}-gone");
    let err = fleet_list::read(&ddb, &gone).await.unwrap_err();
    assert!(err.to_string().contains("could not be read"), "{err}");
    assert!(err.to_string().contains(&gone), "{err}");
    // Both set: which list is meant is not guessed.
    let env = |k: &str| match k {
        "DLQ_URLS" => Some(urls(1)),
        fleet_list::VARIABLE => Some(missing.clone()),
        _ => None,
    };
    let err = fleet_list::dlq_urls(env, || ddb.clone()).await.unwrap_err();
    assert!(
        err.to_string().contains("cannot be set with DLQ_URLS"),
        "{err}"
    );
}
