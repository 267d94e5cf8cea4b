//! The protected DLQs' list read at init from the table deploy writes it to (`DLQ_LIST_TABLE`),
//! on moto under the roles the templates give the re-driver and the archiver, or from the
//! queues' tags (`DLQ_TAG_KEY`).

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

fn no_sqs() -> aws_sdk_sqs::Client {
    panic!("no queue's tags are read without DLQ_TAG_KEY")
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
        let read = fleet_list::dlq_urls(env, || ddb.clone(), no_sqs)
            .await
            .expect(role);
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
    assert_eq!(
        fleet_list::dlq_urls(env, unused, no_sqs).await.unwrap(),
        None
    );
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
    let err = fleet_list::dlq_urls(env, || ddb.clone(), no_sqs)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot be set with DLQ_URLS"),
        "{err}"
    );
}

fn no_ddb() -> aws_sdk_dynamodb::Client {
    panic!("no table is read with DLQ_TAG_KEY")
}

/// A queue of `name`, tagged `tags`.
async fn queue(sqs: &aws_sdk_sqs::Client, name: &str, tags: &[(&str, &str)]) -> String {
    let mut call = sqs.create_queue().queue_name(name);
    for (k, v) in tags {
        call = call.tags(*k, *v);
    }
    call.send().await.expect("CreateQueue").queue_url.unwrap()
}

#[tokio::test]
async fn with_dlq_tag_key_the_fleet_is_the_queues_tagged_dlq_for_the_install_and_no_other() {
    // GIVEN an account's queues: two tagged as this install's DLQs (one also a source), its
    // source, one untagged, and a DLQ of another install
    let sqs = moto().sqs().await;
    let install = redrive_tests::unique_name("redrive-install:st");
    let other = redrive_tests::unique_name("redrive-install:other");
    let name = |n: &str| redrive_tests::unique_name(n);
    let orders_dlq = queue(&sqs, &name("b-orders-dlq"), &[(&install, "dlq")]).await;
    let ledger = queue(&sqs, &name("a-ledger"), &[(&install, "dlq+source")]).await;
    queue(&sqs, &name("orders"), &[(&install, "source")]).await;
    queue(&sqs, &name("plain"), &[]).await;
    queue(&sqs, &name("theirs-dlq"), &[(&other, "dlq")]).await;

    // WHEN the fleet is read as init reads it
    let env = |k: &str| (k == fleet_list::TAG_VARIABLE).then(|| install.clone());
    let read = fleet_list::dlq_urls(env, no_ddb, || sqs.clone())
        .await
        .expect("the tagged DLQs");

    // THEN it is exactly this install's two DLQs, sorted, and a configuration's DLQ_URLS
    let mut want = [orders_dlq, ledger];
    want.sort();
    assert_eq!(read.as_deref(), Some(want.join(",").as_str()));
    let fleet = RedriverConfig::fleet_from_env(&Env::with_dlq_urls(
        |k| (k == "POISON_QUEUE_URL").then(|| POISON.to_string()),
        read,
    ))
    .expect("the list is DLQ_URLS");
    assert_eq!(fleet.len(), 2);
}

#[tokio::test]
async fn a_tag_that_marks_no_queue_a_bad_key_or_a_second_list_fails_naming_dlq_tag_key() {
    let sqs = moto().sqs().await;
    let nobody = redrive_tests::unique_name("redrive-install:nobody");
    queue(
        &sqs,
        &redrive_tests::unique_name("src"),
        &[(&nobody, "source")],
    )
    .await;
    for (key, others, says) in [
        (nobody.as_str(), vec![], "no queue of this region is tagged"),
        ("bad{key}", vec![], "must be a tag key"),
        (
            nobody.as_str(),
            vec![("DLQ_URLS", urls(1))],
            "cannot be set with DLQ_URLS",
        ),
        (
            nobody.as_str(),
            vec![(fleet_list::VARIABLE, "circuit".to_string())],
            "cannot be set with DLQ_LIST_TABLE",
        ),
    ] {
        let env = |k: &str| {
            if k == fleet_list::TAG_VARIABLE {
                return Some(key.to_string());
            }
            others.iter().find(|(o, _)| *o == k).map(|(_, v)| v.clone())
        };
        let err = fleet_list::dlq_urls(env, no_ddb, || sqs.clone())
            .await
            .unwrap_err();
        assert_eq!(err.variable, "DLQ_TAG_KEY", "{err}");
        assert_eq!(err.value.as_deref(), Some(key), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
}
