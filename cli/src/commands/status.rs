//! `redrive status`: one row per protected DLQ: depth, in flight, the oldest message's age,
//! the circuit, the last drain, its source queues and the settings its tags put in force.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use aws_sdk_sqs::types::QueueAttributeName;
use clap::Args;
use futures_util::{StreamExt, TryStreamExt, stream};
use redrive_engine::aws::port_error;
use redrive_engine::circuit::{CircuitStore, DynamoDbCircuitStore};
use redrive_engine::fleet_list::queues_tagged;
use redrive_shared::config::tags::{self, PREFIX as TAG_PREFIX};
use redrive_shared::config::{CircuitConfig, Env, QueueUrl, RedriverConfig};
use serde::Serialize;

use crate::context::{CliError, Ctx, Outcome};
use crate::queues::QueueRef;
use redrive_engine::now_ms;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A protected DLQ: name, ARN or URL (repeatable). Default: PROTECT_DLQS, as in
    /// infra/redrive.env.
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub dlq: Vec<QueueRef>,
    /// Every queue of the region with this tag (`key=value`). Default: PROTECT_TAG.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_tag)]
    pub tag: Option<Tag>,
    /// The circuit table (the stack's output CircuitTableName); without it the circuit
    /// column is `-`.
    #[arg(long, value_name = "NAME", env = "CIRCUIT_TABLE")]
    pub circuit_table: Option<String>,
    /// The re-driver's CloudWatch namespace, where the last drain is read.
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "METRIC_NAMESPACE",
        default_value = "DLQRedriver"
    )]
    pub metric_namespace: String,
}

pub fn parse_tag(v: &str) -> Result<Tag, String> {
    match v.split_once('=') {
        Some((k, value)) if !k.trim().is_empty() => {
            Ok((k.trim().to_string(), value.trim().to_string()))
        }
        _ => Err("must be key=value, e.g. redrive:protect=true".into()),
    }
}

/// One protected DLQ.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub queue: String,
    pub url: String,
    /// ApproximateNumberOfMessages.
    pub depth: u64,
    /// ApproximateNumberOfMessagesNotVisible.
    pub in_flight: u64,
    /// The latest datapoint of AWS/SQS ApproximateAgeOfOldestMessage.
    pub oldest_age_seconds: Option<u64>,
    /// closed, open or half-open; None without a circuit table.
    pub circuit: Option<String>,
    /// The time (RFC 3339) of the latest datapoint of the re-driver's `Received` or
    /// `SuccessfulRedrives` metric.
    pub last_drain: Option<String>,
    /// The queues whose RedrivePolicy names this DLQ (ListDeadLetterSourceQueues), by name.
    pub sources: Vec<String>,
    /// The queue's `redrive:*` tags, which override the defaults (the re-driver's variables)
    /// for this DLQ.
    pub settings: BTreeMap<String, String>,
    /// Why the tags cannot be used, naming the tag: the re-driver leaves this DLQ alone.
    pub invalid: Option<String>,
    /// The tag that is invalid.
    #[serde(skip)]
    pub invalid_tag: Option<String>,
}

/// Calls in flight at once.
const CONCURRENCY: usize = 8;

/// The re-driver's metrics that every drain publishes (dimension `QueueName`).
const DRAIN_METRICS: [&str; 2] = ["Received", "SuccessfulRedrives"];

/// A tag `key=value`.
type Tag = (String, String);

/// Which DLQs: the flags, else PROTECT_DLQS and PROTECT_TAG.
fn selection(args: &StatusArgs) -> Result<(Vec<QueueRef>, Option<Tag>), CliError> {
    if !args.dlq.is_empty() || args.tag.is_some() {
        return Ok((args.dlq.clone(), args.tag.clone()));
    }
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let mut dlqs = Vec::new();
    if let Some(list) = var("PROTECT_DLQS") {
        for item in redrive_shared::config::list_items(&list) {
            dlqs.push(
                QueueRef::parse(item)
                    .map_err(|e| CliError::Config(format!("PROTECT_DLQS: '{item}' {e}")))?,
            );
        }
    }
    let tag = match var("PROTECT_TAG") {
        Some(t) => Some(parse_tag(&t).map_err(|e| CliError::Config(format!("PROTECT_TAG: {e}")))?),
        None => None,
    };
    if dlqs.is_empty() && tag.is_none() {
        return Err(CliError::Config(
            "no DLQ to show: pass --dlq QUEUE or --tag KEY=VALUE, or set PROTECT_DLQS or PROTECT_TAG (as in infra/redrive.env)".into(),
        ));
    }
    Ok((dlqs, tag))
}

pub async fn run(ctx: &Ctx, args: StatusArgs) -> Result<Outcome, CliError> {
    let (dlqs, tag) = selection(&args)?;
    let circuit = match &args.circuit_table {
        Some(table) => Some(circuit_config(table)?),
        None => None,
    };
    let mut urls: Vec<QueueUrl> = ctx.queues.resolve_all(&dlqs).await?;
    if let Some((key, value)) = &tag {
        urls.extend(tagged(ctx, key, value).await?);
    }
    let mut seen = BTreeSet::new();
    urls.retain(|u| seen.insert(u.to_string()));

    // A few DLQs at a time: a fleet of a hundred is a few hundred calls.
    let rows: Vec<Row> = stream::iter(&urls)
        .map(|url| row(ctx, &args, circuit.as_ref(), url))
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    if ctx.json {
        crate::output::print_json(&serde_json::to_value(&rows).unwrap_or_default());
    } else {
        print_table(ctx, &rows);
    }
    Ok(Outcome::Done)
}

fn circuit_config(table: &str) -> Result<CircuitConfig, CliError> {
    let table = table.to_string();
    let env = Env(move |k: &str| {
        if k == "CIRCUIT_TABLE" {
            return Some(table.clone());
        }
        std::env::var(k).ok()
    });
    match CircuitConfig::from_env(&env) {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(CliError::Config("CIRCUIT_TABLE is empty".into())),
        Err(e) => Err(CliError::Config(e.to_string())),
    }
}

/// Every queue of the region tagged `key=value`. A queue the operator's policy may not read is
/// no DLQ of this install (the stack's OperatorPolicy grants ListQueueTags on every queue it
/// protects): skipped, as the account's other queues are.
async fn tagged(ctx: &Ctx, key: &str, value: &str) -> Result<Vec<QueueUrl>, CliError> {
    let urls = queues_tagged(&ctx.clients.sqs.client, key, &[value], true).await?;
    Ok(urls
        .iter()
        .filter_map(|u| QueueUrl::parse(u).ok())
        .collect())
}

async fn tags(ctx: &Ctx, url: &QueueUrl) -> Result<BTreeMap<String, String>, CliError> {
    let out = ctx
        .clients
        .sqs
        .client
        .list_queue_tags()
        .queue_url(url.as_str())
        .send()
        .await
        .map_err(|e| port_error("ListQueueTags", e))?;
    Ok(out
        .tags()
        .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default())
}

async fn row(
    ctx: &Ctx,
    args: &StatusArgs,
    circuit: Option<&CircuitConfig>,
    url: &QueueUrl,
) -> Result<Row, CliError> {
    let sqs = &ctx.clients.sqs.client;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url.as_str())
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| port_error("GetQueueAttributes", e))?;
    let count = |name: QueueAttributeName| -> u64 {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mut sources = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = sqs
            .list_dead_letter_source_queues()
            .queue_url(url.as_str())
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| port_error("ListDeadLetterSourceQueues", e))?;
        sources.extend(
            out.queue_urls()
                .iter()
                .map(|u| u.rsplit('/').next().unwrap_or(u).to_string()),
        );
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => break,
        }
    }
    sources.sort();
    let settings: BTreeMap<String, String> = tags(ctx, url)
        .await?
        .into_iter()
        .filter(|(k, _)| k.starts_with(TAG_PREFIX))
        .collect();
    let (invalid, invalid_tag) = match check_tags(url, &settings) {
        Ok(()) => (None, None),
        Err(e) => (Some(e.to_string()), Some(e.tag)),
    };
    let oldest = latest(
        ctx,
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        Statistic::Maximum,
        url.name(),
    )
    .await?;
    // Each drain publishes its counts once, zeros included: `Received`, and the contract's
    // `SuccessfulRedrives`; the later of the two is the last drain.
    let mut drained = None;
    for metric in DRAIN_METRICS {
        let got = latest(
            ctx,
            &args.metric_namespace,
            metric,
            Statistic::Sum,
            url.name(),
        )
        .await?;
        drained = drained.max(got.map(|(t, _)| t));
    }
    let circuit = match circuit {
        Some(cfg) => Some(circuit_state(ctx, cfg, url).await?),
        None => None,
    };
    Ok(Row {
        queue: url.name().to_string(),
        url: url.to_string(),
        depth: count(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        oldest_age_seconds: oldest.map(|(_, v)| v.max(0.0) as u64),
        circuit,
        last_drain: drained,
        sources,
        settings,
        invalid,
        invalid_tag,
    })
}

/// The tags read and validated as the re-driver reads them, over its variables in this
/// environment.
fn check_tags(url: &QueueUrl, settings: &BTreeMap<String, String>) -> Result<(), tags::TagError> {
    // The settings do not depend on the poison queue, which the re-driver's configuration
    // requires: any valid URL stands in for it when the variable is not set.
    let env = Env(|k: &str| {
        std::env::var(k).ok().or_else(|| {
            (k == "POISON_QUEUE_URL")
                .then(|| "https://sqs.us-east-1.amazonaws.com/000000000000/unused-poison".into())
        })
    });
    let Ok(base) = RedriverConfig::for_dlq(&env, url.clone(), None) else {
        // The variables themselves are wrong: `redrive drain` says how; the tags alone are
        // judged over the defaults.
        let defaults = Env(|k: &str| {
            (k == "POISON_QUEUE_URL")
                .then(|| "https://sqs.us-east-1.amazonaws.com/000000000000/unused-poison".into())
        });
        let Ok(base) = RedriverConfig::for_dlq(&defaults, url.clone(), None) else {
            return Ok(());
        };
        return tags::apply(&defaults, &base, &settings.clone().into_iter().collect()).map(|_| ());
    };
    tags::apply(&env, &base, &settings.clone().into_iter().collect()).map(|_| ())
}

/// The latest datapoint (its time, RFC 3339, and value) of `metric` for the queue over the
/// last day, at one-minute periods (1440 datapoints, GetMetricStatistics' limit).
async fn latest(
    ctx: &Ctx,
    namespace: &str,
    metric: &str,
    statistic: Statistic,
    queue: &str,
) -> Result<Option<(String, f64)>, CliError> {
    // A minute ahead: the end is exclusive and a datapoint of this very second counts.
    let end = SystemTime::now() + Duration::from_secs(60);
    let start = end - Duration::from_secs(24 * 3600);
    let out = ctx
        .clients
        .cloudwatch
        .client
        .get_metric_statistics()
        .namespace(namespace)
        .metric_name(metric)
        .dimensions(Dimension::builder().name("QueueName").value(queue).build())
        .start_time(start.into())
        .end_time(end.into())
        .period(60)
        .statistics(statistic.clone())
        .send()
        .await
        .map_err(|e| port_error("GetMetricStatistics", e))?;
    let value = |d: &aws_sdk_cloudwatch::types::Datapoint| match statistic {
        Statistic::Sum => d.sum(),
        _ => d.maximum(),
    };
    Ok(out
        .datapoints()
        .iter()
        .filter_map(|d| Some((d.timestamp()?, value(d)?)))
        .max_by_key(|(t, _)| (t.secs(), t.subsec_nanos()))
        .map(|(t, v)| {
            let ms = t.secs() * 1000 + i64::from(t.subsec_nanos() / 1_000_000);
            (redrive_shared::timefmt::rfc3339_from_millis(ms), v)
        }))
}

/// The circuit's state as the next run would see it (the passing of time applied).
async fn circuit_state(ctx: &Ctx, cfg: &CircuitConfig, url: &QueueUrl) -> Result<String, CliError> {
    let store = DynamoDbCircuitStore {
        client: ctx.clients.dynamodb.clone(),
        table: cfg.table.clone(),
    };
    Ok(match store.load(url.as_str()).await? {
        Some(stored) => {
            let mut record = stored.record;
            record.tick(&cfg.settings, now_ms());
            record.state.to_string()
        }
        None => "closed".to_string(),
    })
}

fn print_table(ctx: &Ctx, rows: &[Row]) {
    let s = &ctx.style;
    let dash = || "-".to_string();
    let header = [
        "QUEUE",
        "DEPTH",
        "IN FLIGHT",
        "OLDEST",
        "CIRCUIT",
        "LAST DRAIN",
        "SOURCES",
        "SETTINGS",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let settings: Vec<String> =
                r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
            [
                r.queue.clone(),
                r.depth.to_string(),
                r.in_flight.to_string(),
                r.oldest_age_seconds.map_or_else(dash, crate::output::age),
                r.circuit.clone().unwrap_or_else(dash),
                r.last_drain.clone().unwrap_or_else(dash),
                if r.sources.is_empty() {
                    dash()
                } else {
                    r.sources.join(",")
                },
                match (&r.invalid_tag, settings.is_empty()) {
                    (Some(tag), _) => format!("invalid: {tag}"),
                    (None, true) => "defaults".to_string(),
                    (None, false) => settings.join(" "),
                },
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| {
        let mut out = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_string()
    };
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    println!("{}", s.bold(&line(&head)));
    for row in &cells {
        println!("{}", line(row));
    }
    if rows.is_empty() {
        println!("{}", s.dim("no queue matches"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_key_equals_value() {
        assert_eq!(
            parse_tag("redrive:protect=true"),
            Ok(("redrive:protect".into(), "true".into()))
        );
        assert_eq!(parse_tag("team="), Ok(("team".into(), String::new())));
        assert!(parse_tag("=x").is_err());
        assert!(parse_tag("novalue").is_err());
    }
}
