//! Side by side with AWS's own redrive: the same DLQ moved back to its source by SQS's
//! StartMessageMoveTask and by the re-driver, in one run, on LocalStack (the emulator that
//! implements the move task), each through the counting proxy.
//!
//! Both legs start from the same DLQ on fresh queues: `n` messages of about 300 bytes with two
//! attributes, and a few poison messages (the re-driver's `x-redrive` says their retries are
//! spent, or the consumer stamped a permanent error). Each leg is timed from its first call to
//! an empty DLQ; then, off the clock and not counted, what landed where is read back: how many
//! copies were delayed, when the last became visible, whether each carries a redrive history
//! (`x-redrive` with its attempt and the chain's `originalMessageId`) and its attributes byte
//! for byte, where the poison messages went, and whether anything was lost or repeated.
//!
//! The move task's time on LocalStack is an emulator's in-memory loop (one message at a time,
//! no API calls, no network): a floor, not AWS's figure. AWS moves at a system-optimised rate
//! unless `MaxNumberOfMessagesPerSecond` (at most 500) caps it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, QueueAttributeName, SendMessageBatchRequestEntry};
use redrive_shared::meta::{ATTRIBUTE_NAME, ErrorClass, IsolationReason, LastError, RedriveMeta};
use redrive_tests::{QueueSet, attr_number, attr_string, drain_all, queue_attributes};
use serde::Serialize;
use tokio::time::Instant;

use crate::bench::{body, delete_queues, engine_config, preload, sdk_engine, timed_drain};
use crate::proxy::Proxy;

/// How often the move task's caller asks ListMessageMoveTasks whether it is done.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// `MAX_REDRIVE_ATTEMPTS` of the re-driver's leg (the contract's default).
const MAX_ATTEMPTS: u32 = 5;

/// One leg: who moved the DLQ, how long it took, what it cost, what each message carries.
#[derive(Debug, Clone, Serialize)]
pub struct Leg {
    pub who: String,
    /// Messages on the DLQ at the start (the ordinary ones and the poison ones).
    pub messages: u64,
    /// From the first call to an empty DLQ.
    pub seconds: f64,
    /// Calls the caller made, by operation, counted at the proxy.
    pub calls: BTreeMap<String, u64>,
    /// Copies of the ordinary messages found on the source afterwards.
    pub on_source: u64,
    /// Of those, the copies whose `x-redrive` names the chain (`originalMessageId`, another
    /// message's id) and the attempt (1).
    pub with_history: u64,
    /// Of those, the copies whose two attributes arrived byte for byte.
    pub attributes_kept: u64,
    /// Source messages delayed right after the DLQ emptied (`ApproximateNumberOfMessagesDelayed`).
    pub delayed: u64,
    /// Seconds after the DLQ emptied until every copy on the source was visible (the longest
    /// delay applied, to the poll's 0.5 s).
    pub visible_after_seconds: f64,
    /// Poison messages sent back to the source (they will fail again there).
    pub poison_on_source: u64,
    /// Poison messages parked on the poison queue with an isolation reason.
    pub poison_isolated: u64,
    /// Messages on no queue at all.
    pub lost: u64,
    /// Messages found more than once.
    pub repeated: u64,
}

impl Leg {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn calls_of(&self, operation: &str) -> u64 {
        self.calls.get(operation).copied().unwrap_or(0)
    }
}

/// Both legs of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SideBySide {
    pub messages: u64,
    pub poison: u64,
    /// `BACKOFF_BASE_SECONDS` of the re-driver's leg (jitter `full`, the default).
    pub backoff_base_seconds: u64,
    pub move_task: Leg,
    pub redrive: Leg,
}

/// Runs both legs over `n` ordinary and `poison` poison messages. `direct` reaches the emulator
/// without the proxy (setting up and reading back, not counted); the legs' calls go through
/// `proxy`.
pub async fn side_by_side(
    direct: &Client,
    proxy: &Proxy,
    n: u64,
    poison: u64,
    pipelines: u32,
    backoff_base_seconds: u64,
) -> SideBySide {
    let sdk = crate::sdk_config(&proxy.endpoint(), None).await;
    let through_proxy = Client::new(&sdk);

    let queues = seeded(direct, n, poison).await;
    proxy.take_stats();
    let started = Instant::now();
    run_move_task(&through_proxy, &queues).await;
    let seconds = started.elapsed().as_secs_f64();
    let calls = proxy.take_stats().layer.calls;
    let move_task = read_back(
        "StartMessageMoveTask",
        direct,
        &queues,
        n,
        poison,
        seconds,
        calls,
        5.0,
    )
    .await;
    delete_queues(direct, &queues).await;

    let queues = seeded(direct, n, poison).await;
    let base = backoff_base_seconds.to_string();
    let attempts = MAX_ATTEMPTS.to_string();
    let config = engine_config(
        &[
            ("DLQ_URL", &queues.dlq_url),
            ("SOURCE_QUEUE_URL", &queues.source_url),
            ("POISON_QUEUE_URL", &queues.poison_url),
            ("BACKOFF_BASE_SECONDS", &base),
            ("MAX_REDRIVE_ATTEMPTS", &attempts),
        ],
        pipelines,
        0.0,
    );
    let engine = sdk_engine(through_proxy.clone(), &sdk, config);
    proxy.take_stats();
    let (summary, seconds) = timed_drain(&engine).await;
    let calls = proxy.take_stats().layer.calls;
    assert!(
        summary.failed == 0 && summary.dlq_remaining == Some(0),
        "the re-driver did not empty the DLQ: {summary:?}"
    );
    let wait = backoff_base_seconds as f64 + 5.0;
    let who = format!("redrive ({pipelines} pipelines)");
    let redrive = read_back(&who, direct, &queues, n, poison, seconds, calls, wait).await;
    delete_queues(direct, &queues).await;

    SideBySide {
        messages: n,
        poison,
        backoff_base_seconds,
        move_task,
        redrive,
    }
}

/// Fresh queues whose DLQ holds `n` ordinary messages (`bench::body(i)`, `i < n`) and `poison`
/// poison ones (`i >= n`): even ones at the last attempt, odd ones stamped permanent.
async fn seeded(direct: &Client, n: u64, poison: u64) -> QueueSet {
    let queues = QueueSet::create(direct, false, 3).await;
    preload(direct, &queues.dlq_url, n).await;
    let entries: Vec<SendMessageBatchRequestEntry> = (n..n + poison)
        .map(|i| {
            SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body(i))
                .message_attributes("tenant", attr_string(&format!("t-{}", i % 7)))
                .message_attributes("priority", attr_number(&(i % 3).to_string()))
                .message_attributes(ATTRIBUTE_NAME, attr_string(&poison_meta(i).to_json()))
                .build()
                .expect("id and body are set")
        })
        .collect();
    for chunk in entries.chunks(10) {
        let out = direct
            .send_message_batch()
            .queue_url(&queues.dlq_url)
            .set_entries(Some(chunk.to_vec()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("sending the poison messages: {e:?}"));
        assert!(out.failed.is_empty(), "{:?}", out.failed);
    }
    queues
}

fn poison_meta(i: u64) -> RedriveMeta {
    let at = "2026-11-21T10:00:00Z".to_string();
    let mut meta = RedriveMeta::fresh(&format!("poison-{i}"));
    meta.first_redriven_at = Some(at.clone());
    meta.last_redriven_at = Some(at.clone());
    if i.is_multiple_of(2) {
        meta.attempt = MAX_ATTEMPTS;
    } else {
        meta.attempt = 1;
        meta.last_error = Some(LastError::new(
            ErrorClass::Permanent,
            "422",
            "the downstream refused the payload",
            at,
        ));
    }
    meta
}

/// StartMessageMoveTask from the DLQ to its source, then ListMessageMoveTasks every
/// `POLL_INTERVAL` until the task completed.
async fn run_move_task(sqs: &Client, queues: &QueueSet) {
    sqs.start_message_move_task()
        .source_arn(&queues.dlq_arn)
        .destination_arn(&queues.source_arn)
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartMessageMoveTask: {e:?}"));
    loop {
        tokio::time::sleep(POLL_INTERVAL).await;
        let tasks = sqs
            .list_message_move_tasks()
            .source_arn(&queues.dlq_arn)
            .send()
            .await
            .unwrap_or_else(|e| panic!("ListMessageMoveTasks: {e:?}"));
        let status = tasks
            .results()
            .first()
            .and_then(|t| t.status())
            .unwrap_or_default()
            .to_string();
        match status.as_str() {
            "COMPLETED" => return,
            "FAILED" | "CANCELLED" => panic!("the move task ended {status}: {tasks:?}"),
            _ => {}
        }
    }
}

/// Reads back what a leg left (not counted, not timed): waits up to `wait` seconds for every
/// copy on the source to become visible, then drains the three queues.
#[allow(clippy::too_many_arguments)]
async fn read_back(
    who: &str,
    direct: &Client,
    queues: &QueueSet,
    n: u64,
    poison: u64,
    seconds: f64,
    calls: BTreeMap<String, u64>,
    wait: f64,
) -> Leg {
    let count = |attributes: &HashMap<QueueAttributeName, String>, name| {
        attributes
            .get(&name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let attributes = queue_attributes(direct, &queues.dlq_url).await;
    let left = count(&attributes, QueueAttributeName::ApproximateNumberOfMessages)
        + count(
            &attributes,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        );
    assert_eq!(left, 0, "{who}: the DLQ is not empty");
    let emptied = Instant::now();
    let delayed = count(
        &queue_attributes(direct, &queues.source_url).await,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    );
    // A copy still delayed after `wait` is missed by the drain below and counted lost.
    while emptied.elapsed().as_secs_f64() < wait {
        let attributes = queue_attributes(direct, &queues.source_url).await;
        if count(
            &attributes,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ) == 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let visible_after_seconds = emptied.elapsed().as_secs_f64();
    let on_source = drain_all(direct, &queues.source_url).await;
    let on_poison = drain_all(direct, &queues.poison_url).await;
    let on_dlq = drain_all(direct, &queues.dlq_url).await;

    // `bench::body(i)` starts `{"orderId":"ord-` and the 8 digits of i.
    let index = |m: &Message| {
        let text = m.body().unwrap_or_default();
        let i = text.get(16..24)?.parse::<u64>().ok()?;
        (i < n + poison && body(i) == text).then_some(i)
    };
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut leg = Leg {
        who: who.to_string(),
        messages: n + poison,
        seconds,
        calls,
        on_source: 0,
        with_history: 0,
        attributes_kept: 0,
        delayed,
        visible_after_seconds,
        poison_on_source: 0,
        poison_isolated: 0,
        lost: 0,
        repeated: 0,
    };
    for m in on_source.iter().chain(&on_poison).chain(&on_dlq) {
        if let Some(i) = index(m) {
            *seen.entry(i).or_default() += 1;
        }
    }
    for m in &on_source {
        let Some(i) = index(m) else { continue };
        if i >= n {
            leg.poison_on_source += 1;
            continue;
        }
        leg.on_source += 1;
        let message_attributes = m.message_attributes().cloned().unwrap_or_default();
        let text = |name: &str| {
            message_attributes
                .get(name)
                .and_then(|a| a.string_value())
                .map(str::to_string)
        };
        let history = text(ATTRIBUTE_NAME).and_then(|t| RedriveMeta::parse(&t).ok());
        if history.is_some_and(|h| {
            h.attempt == 1 && h.original_message_id != m.message_id().unwrap_or_default()
        }) {
            leg.with_history += 1;
        }
        if text("tenant") == Some(format!("t-{}", i % 7))
            && text("priority") == Some((i % 3).to_string())
        {
            leg.attributes_kept += 1;
        }
    }
    for m in &on_poison {
        let isolated = m
            .message_attributes()
            .and_then(|a| a.get(ATTRIBUTE_NAME))
            .and_then(|a| a.string_value())
            .and_then(|t| RedriveMeta::parse(t).ok())
            .is_some_and(|h| {
                matches!(
                    h.reason,
                    Some(IsolationReason::MaxAttempts | IsolationReason::PermanentFailure)
                )
            });
        if index(m).is_some_and(|i| i >= n) && isolated {
            leg.poison_isolated += 1;
        }
    }
    leg.lost = (0..n + poison).filter(|i| !seen.contains_key(i)).count() as u64;
    leg.repeated = seen.values().map(|c| c.saturating_sub(1)).sum();
    leg
}
