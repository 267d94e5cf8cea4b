//! The protected DLQs' list of a large install, read at init: from where deploy wrote it, or
//! from the queues' tags.
//!
//! Lambda holds at most 4 KB of environment, some 25 queue URLs: an install that protects more
//! gets `DLQ_LIST_TABLE` instead of `DLQ_URLS`, and deploy writes the list (the same comma list)
//! into that table (the stack's circuit table) as the item whose `queue` is [`ITEM_KEY`], in its
//! string attribute [`ATTRIBUTE`]. The re-driver and the archiver read it once at init; a list
//! that is missing or cannot be read fails init, naming the variable, the table and the cause.
//! `DLQ_URLS` still works when set (small installs); both set is a configuration error.
//!
//! An install that no deploy step lists (the self-contained template, deployed as a StackSet in
//! accounts it knows nothing of) gets `DLQ_TAG_KEY` ([`TAG_VARIABLE`]) instead: the protected
//! DLQs are the queues of the function's region whose tag of that key is `dlq` or
//! `dlq+source` ([`TAGGED_DLQ_VALUES`]), the same tags that grant the install's roles their
//! queues. They are read once at init (ListQueues, then ListQueueTags of each queue,
//! [`TAG_READS_AT_ONCE`] at a time); a queue tagged later is protected from the next cold start.
//! A list that cannot be read, or that finds no queue, fails init naming the variable.

use aws_sdk_dynamodb::types::AttributeValue;
use redrive_shared::config::ConfigError;

use crate::aws::port_error;
use crate::ports::PortError;

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

/// The variable naming the tag key that marks the protected DLQs.
pub const TAG_VARIABLE: &str = "DLQ_TAG_KEY";
/// The values of the [`TAG_VARIABLE`] tag that mark a protected DLQ (`dlq+source`: a queue that
/// is also another DLQ's source).
pub const TAGGED_DLQ_VALUES: [&str; 2] = ["dlq", "dlq+source"];
/// ListQueueTags calls in flight at once while the tagged DLQs are read at init.
pub const TAG_READS_AT_ONCE: usize = 32;

fn tag_error(key: &str, problem: String) -> ConfigError {
    ConfigError {
        variable: TAG_VARIABLE,
        value: Some(key.to_string()),
        problem,
    }
}

/// The URLs of the queues of `sqs`'s region tagged `key` = `dlq` or `dlq+source`, sorted, as a
/// comma list (`DLQ_URLS`). A queue deleted while it is read is not listed; any other failure,
/// or no queue found, is an error naming [`TAG_VARIABLE`].
pub async fn tagged(sqs: &aws_sdk_sqs::Client, key: &str) -> Result<String, ConfigError> {
    let valid = !key.is_empty()
        && key.chars().count() <= 128
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || " _.:/=+-@".contains(c));
    if !valid {
        return Err(tag_error(
            key,
            "must be a tag key: 1 to 128 letters, digits, spaces and _.:/=+-@".into(),
        ));
    }
    let mut protected = queues_tagged(sqs, key, &TAGGED_DLQ_VALUES, false)
        .await
        .map_err(|e| {
            tag_error(
                key,
                format!(
                    "the tagged queues could not be read ({}): {}",
                    e.operation, e.message
                ),
            )
        })?;
    if protected.is_empty() {
        return Err(tag_error(
            key,
            format!(
                "no queue of this region is tagged {key} = dlq or dlq+source: tag each DLQ to protect (aws sqs tag-queue --queue-url URL --tags '{key}=dlq')"
            ),
        ));
    }
    protected.sort();
    Ok(protected.join(","))
}

/// SQS's codes for a call IAM refused (the JSON protocol's and the Query protocol's).
pub fn is_access_denied(code: &str) -> bool {
    matches!(code, "AccessDenied" | "AccessDeniedException")
}

/// The URLs of the queues of `sqs`'s region whose tag `key` has one of `values`, in the order
/// ListQueues gives them (its pages of 1,000; each queue's tags read [`TAG_READS_AT_ONCE`] at a
/// time). A queue deleted while it is read is not listed; one whose tags the caller may not read
/// is not listed either when `skip_denied` (an operator whose policy reads only the install's
/// queues), else that is an error, as every other failure is.
pub async fn queues_tagged(
    sqs: &aws_sdk_sqs::Client,
    key: &str,
    values: &[&str],
    skip_denied: bool,
) -> Result<Vec<String>, PortError> {
    use futures_util::{StreamExt, TryStreamExt};

    let mut found = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = sqs
            .list_queues()
            .max_results(1000)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| port_error("ListQueues", e))?;
        let page: Vec<Option<String>> =
            futures_util::stream::iter(out.queue_urls.unwrap_or_default())
                .map(|url| async move {
                    match sqs.list_queue_tags().queue_url(&url).send().await {
                        Ok(tags) => {
                            let value = tags.tags.unwrap_or_default().remove(key);
                            Ok(value.filter(|v| values.contains(&v.as_str())).map(|_| url))
                        }
                        Err(e) => {
                            let e = port_error("ListQueueTags", e);
                            if e.code.contains("NonExistentQueue")
                                || e.code.contains("QueueDoesNotExist")
                                || (skip_denied && is_access_denied(&e.code))
                            {
                                Ok(None)
                            } else {
                                Err(e)
                            }
                        }
                    }
                })
                .buffered(TAG_READS_AT_ONCE)
                .try_collect()
                .await?;
        found.extend(page.into_iter().flatten());
        match out.next_token {
            Some(t) if !t.is_empty() => next = Some(t),
            _ => break,
        }
    }
    Ok(found)
}

/// `DLQ_URLS` for a configuration read through `lookup`: the list of `DLQ_LIST_TABLE` when that
/// is set (read with `ddb`), the queues tagged for `DLQ_TAG_KEY` when that is (read with `sqs`),
/// else `None` (the environment's own `DLQ_URLS`, if any, applies). At most one of the three.
pub async fn dlq_urls(
    lookup: impl Fn(&str) -> Option<String>,
    ddb: impl FnOnce() -> aws_sdk_dynamodb::Client,
    sqs: impl FnOnce() -> aws_sdk_sqs::Client,
) -> Result<Option<String>, ConfigError> {
    let set = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
    let (table, tag) = (set(VARIABLE), set(TAG_VARIABLE));
    let conflict = |variable: &'static str, value: &str, other: &str| ConfigError {
        variable,
        value: Some(value.trim().to_string()),
        problem: format!("cannot be set with {other}: the protected DLQs come from one of them"),
    };
    if let Some(tag) = tag {
        for other in ["DLQ_URLS", VARIABLE] {
            if set(other).is_some() {
                return Err(conflict(TAG_VARIABLE, &tag, other));
            }
        }
        return tagged(&sqs(), tag.trim()).await.map(Some);
    }
    let Some(table) = table else {
        return Ok(None);
    };
    if set("DLQ_URLS").is_some() {
        return Err(conflict(VARIABLE, &table, "DLQ_URLS"));
    }
    read(&ddb(), table.trim()).await.map(Some)
}
