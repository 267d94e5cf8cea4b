use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};

use crate::unique_name;

/// Creates an on-demand table named `<prefix>-<unique>` whose partition key is `key` (S).
async fn create_keyed_table(ddb: &Client, prefix: &str, key: &str) -> String {
    let name = unique_name(prefix);
    ddb.create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect("name and key type are set"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateTable {name}: {e:?}"));
    name
}

/// Creates the adaptive circuit's table: partition key `queue` (S, the DLQ URL), on-demand.
/// Returns its (unique) name.
pub async fn create_circuit_table(ddb: &Client) -> String {
    create_keyed_table(ddb, "circuit", "queue").await
}

/// Creates an idempotency table as the contract describes it: partition key `id` (S),
/// on-demand, TTL on `expiration`. Returns its (unique) name.
pub async fn create_idempotency_table(ddb: &Client) -> String {
    let name = create_keyed_table(ddb, "idem", "id").await;
    ddb.update_time_to_live()
        .table_name(&name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name("expiration")
                .build()
                .expect("enabled and attribute are set"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("UpdateTimeToLive {name}: {e:?}"));
    name
}
