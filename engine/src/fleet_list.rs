//! The protected DLQs' list of a large install, read at init from where deploy wrote it.
//!
//! Lambda holds at most 4 KB of environment, some 25 queue URLs: an install that protects more
//! gets `DLQ_LIST_TABLE` instead of `DLQ_URLS`, and deploy writes the list (the same comma list)
//! into that table (the stack's circuit table) as the item whose `queue` is [`ITEM_KEY`], in its
//! string attribute [`ATTRIBUTE`]. The re-driver and the archiver read it once at init; a list
//! that is missing or cannot be read fails init, naming the variable, the table and the cause.
//! `DLQ_URLS` still works when set (small installs); both set is a configuration error.

use aws_sdk_dynamodb::types::AttributeValue;
use redrive_shared::config::ConfigError;

/// The variable naming the table that holds the list.
pub const VARIABLE: &str = "DLQ_LIST_TABLE";
/// The item's partition key (`queue`, as every circuit record's): not a queue URL, so that no
/// DLQ's circuit record can be this item.
pub const ITEM_KEY: &str = "redrive:fleet:dlq-urls";
/// The item's attribute holding the comma-separated DLQ URLs.
pub const ATTRIBUTE: &str = "dlq_urls";

fn error(table: &str, problem: String) -> ConfigError {
    ConfigError {
        variable: VARIABLE,
        value: Some(table.to_string()),
        problem,
    }
}

/// The list in `table`, as `DLQ_URLS` would hold it.
pub async fn read(ddb: &aws_sdk_dynamodb::Client, table: &str) -> Result<String, ConfigError> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("queue", AttributeValue::S(ITEM_KEY.to_string()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| {
            error(
                table,
                format!(
                    "the protected DLQs' list (item {ITEM_KEY}) could not be read: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e)
                ),
            )
        })?;
    let list = match out.item.as_ref().and_then(|item| item.get(ATTRIBUTE)) {
        Some(AttributeValue::S(list)) => list.clone(),
        Some(_) => {
            return Err(error(
                table,
                format!("item {ITEM_KEY}: {ATTRIBUTE} is not a string"),
            ));
        }
        None => {
            return Err(error(
                table,
                format!(
                    "no item {ITEM_KEY} with {ATTRIBUTE}: the protected DLQs' list is missing (run make deploy)"
                ),
            ));
        }
    };
    if redrive_shared::config::list_items(&list).next().is_none() {
        return Err(error(table, format!("item {ITEM_KEY} lists no queue")));
    }
    Ok(list)
}

/// `DLQ_URLS` for a configuration read through `lookup`: the list of `DLQ_LIST_TABLE` when that
/// is set (read with `ddb`), else `None` (the environment's own `DLQ_URLS`, if any, applies).
pub async fn dlq_urls(
    lookup: impl Fn(&str) -> Option<String>,
    ddb: impl FnOnce() -> aws_sdk_dynamodb::Client,
) -> Result<Option<String>, ConfigError> {
    let set = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
    let Some(table) = set(VARIABLE) else {
        return Ok(None);
    };
    if set("DLQ_URLS").is_some() {
        return Err(error(
            table.trim(),
            "cannot be set with DLQ_URLS: the protected DLQs come from one of them".into(),
        ));
    }
    read(&ddb(), table.trim()).await.map(Some)
}
