//! The drains `make bench` times and counts: ours (the re-driver's engine) against the
//! baseline script, on moto behind the latency proxy and on the latency-modelled port fake.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use futures_util::future::join_all;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::fake::{FakeCloudWatch, FakeSqs};
use redrive_engine::{DrainRequest, Engine, Summary};
use redrive_shared::config::{Env, RedriverConfig};
use redrive_shared::{Attributes, MessageAttribute};
use redrive_tests::{QueueSet, attr_number, attr_string, queue_depth, send_entries};
use serde::Serialize;
use tokio::time::Instant;

use crate::baseline::{self, FakeScript, SdkScript};
use crate::proxy::Proxy;

/// One timed, counted drain.
#[derive(Debug, Clone, Serialize)]
pub struct DrainRun {
    pub who: String,
    pub messages: u64,
    pub moved: u64,
    pub seconds: f64,
    /// Calls by operation, as the service would bill them.
    pub calls: BTreeMap<String, u64>,
    pub empty_receives: u64,
    /// The emulator's own time answering, by operation (moto only).
    pub emulator_seconds: BTreeMap<String, f64>,
}

impl DrainRun {
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn calls_per_message(&self) -> f64 {
        self.total_calls() as f64 / self.moved.max(1) as f64
    }

    pub fn per_second(&self) -> f64 {
        self.moved as f64 / self.seconds.max(1e-9)
    }
}

/// A DLQ message body like a real event: about 300 bytes of JSON.
pub fn body(i: u64) -> String {
    format!(
        r#"{{"orderId":"ord-{i:08}","customer":"cust-{c:05}","amountCents":{a},"currency":"EUR","items":[{{"sku":"sku-{s:04}","qty":{q}}}],"note":"{pad}"}}"#,
        c = i % 9973,
        a = 1000 + i % 50_000,
        s = i % 977,
        q = 1 + i % 5,
        pad = "x".repeat(160),
    )
}

/// The two attributes every benchmark message carries (kept byte for byte by both drains).
pub fn attributes(i: u64) -> Attributes {
    let mut a = Attributes::new();
    a.insert(
        "tenant".into(),
        MessageAttribute::string(format!("t-{}", i % 7)),
    );
    a.insert(
        "priority".into(),
        MessageAttribute::number((i % 3).to_string()),
    );
    a
}

/// Sends `n` messages to `url` directly (not through the proxy), 8 batches at a time.
pub async fn preload(sqs: &Client, url: &str, n: u64) {
    let ids: Vec<u64> = (0..n).collect();
    for wave in ids.chunks(80) {
        join_all(wave.chunks(10).map(|chunk| {
            let entries = chunk.iter().enumerate().map(|(entry, &i)| {
                SendMessageBatchRequestEntry::builder()
                    .id(entry.to_string())
                    .message_body(body(i))
                    .message_attributes("tenant", attr_string(&format!("t-{}", i % 7)))
                    .message_attributes("priority", attr_number(&(i % 3).to_string()))
                    .build()
                    .expect("id and body are set")
            });
            send_entries(sqs, url, entries.collect())
        }))
        .await;
    }
}

/// The engine on the SDK's clients: SQS through `sqs` (plain or through the proxy), CloudWatch
/// (alarms and metrics) through `sdk`; jitter seeded for repeatable runs.
pub(crate) fn sdk_engine(
    sqs: Client,
    sdk: &aws_config::SdkConfig,
    config: RedriverConfig,
) -> Engine<SqsQueue, CloudWatch, CloudWatch> {
    Engine::over_sdk(sqs, aws_sdk_cloudwatch::Client::new(sdk), config).with_seed(1)
}

pub(crate) fn engine_config(
    queues: &[(&str, &str)],
    pipelines: u32,
    max_per_second: f64,
) -> RedriverConfig {
    let mut map: HashMap<String, String> = queues
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("MAX_CONCURRENT_BATCHES".into(), pipelines.to_string());
    map.insert("MAX_MESSAGES_PER_SECOND".into(), max_per_second.to_string());
    map.insert("METRIC_NAMESPACE".into(), "RedriveBench".into());
    RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
        .expect("the benchmark's configuration is valid")
}

pub(crate) fn drain_request(n: u64) -> DrainRequest {
    DrainRequest::new(u32::try_from(n).unwrap_or(u32::MAX))
}

/// One drain of the whole DLQ, timed: its summary and its wall (or modelled) seconds.
pub(crate) async fn timed_drain<Q, A, M>(engine: &Engine<Q, A, M>) -> (Summary, f64)
where
    Q: redrive_engine::ports::Queue,
    A: redrive_engine::ports::Alarms,
    M: redrive_engine::ports::Metrics,
{
    let started = Instant::now();
    let summary = engine
        .run(&drain_request(u64::MAX))
        .await
        .expect("the DLQ stays readable");
    (summary, started.elapsed().as_secs_f64())
}

/// Every message left the DLQ. SQS delivers at least once, and so does moto under concurrent
/// receivers: a message received twice is sent twice (the consumer's idempotency absorbs it),
/// so `redriven` may exceed `n`; the figures divide by `n`, the messages that left.
fn check_summary(who: &str, summary: &Summary, n: u64) {
    assert!(
        summary.redriven >= n && summary.failed == 0 && summary.dlq_remaining == Some(0),
        "{who}: the drain did not move every message: {summary:?}"
    );
}

pub(crate) async fn delete_queues(sqs: &Client, queues: &QueueSet) {
    for url in [&queues.source_url, &queues.dlq_url, &queues.poison_url] {
        let _ = sqs.delete_queue().queue_url(url).send().await;
    }
}

/// Ours on moto: one manual drain of `n` messages through the proxy.
pub async fn moto_ours(direct: &Client, proxy: &Proxy, n: u64, pipelines: u32) -> DrainRun {
    let queues = QueueSet::create(direct, false, 3).await;
    preload(direct, &queues.dlq_url, n).await;
    let config = engine_config(
        &[
            ("DLQ_URL", &queues.dlq_url),
            ("SOURCE_QUEUE_URL", &queues.source_url),
            ("POISON_QUEUE_URL", &queues.poison_url),
        ],
        pipelines,
        0.0,
    );
    let sdk = crate::sdk_config(&proxy.endpoint(), None).await;
    let engine = sdk_engine(Client::new(&sdk), &sdk, config);
    proxy.take_stats();
    let (summary, seconds) = timed_drain(&engine).await;
    let stats = proxy.take_stats();
    let who = format!("redrive ({pipelines} pipelines)");
    check_summary(&who, &summary, n);
    // moto computes each count of GetQueueAttributes in its own pass, so a copy whose delay
    // ends between two passes is missed by that read: one read of n or more settles it.
    let mut depth = 0;
    for _ in 0..5 {
        depth = depth.max(queue_depth(direct, &queues.source_url).await);
        if depth >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if depth < n {
        // Find out which messages are missing, by content, before failing.
        let mut seen = std::collections::BTreeSet::new();
        for url in [&queues.source_url, &queues.dlq_url, &queues.poison_url] {
            for m in redrive_tests::drain_all(direct, url).await {
                seen.insert(
                    m.body()
                        .unwrap_or_default()
                        .get(12..24)
                        .unwrap_or("")
                        .to_string(),
                );
            }
        }
        panic!(
            "{who}: {summary:?}, but the source holds {depth} < {n} messages; {} distinct bodies across the three queues",
            seen.len()
        );
    }
    delete_queues(direct, &queues).await;
    DrainRun {
        who,
        messages: n,
        moved: n,
        seconds,
        calls: stats.layer.calls,
        empty_receives: stats.empty_receives,
        emulator_seconds: stats.upstream_seconds,
    }
}

/// The baseline script on moto, through the proxy.
pub async fn moto_baseline(direct: &Client, proxy: &Proxy, n: u64) -> DrainRun {
    let queues = QueueSet::create(direct, false, 3).await;
    preload(direct, &queues.dlq_url, n).await;
    let sdk = crate::sdk_config(&proxy.endpoint(), None).await;
    let script = SdkScript(Client::new(&sdk));
    proxy.take_stats();
    let started = Instant::now();
    let moved = baseline::redrive(&script, &queues.dlq_url, &queues.source_url, u64::MAX)
        .await
        .unwrap_or_else(|e| panic!("the baseline script failed: {e}"));
    let seconds = started.elapsed().as_secs_f64();
    let stats = proxy.take_stats();
    assert_eq!(moved, n, "the baseline did not move every message");
    assert_eq!(queue_depth(direct, &queues.source_url).await, n);
    delete_queues(direct, &queues).await;
    DrainRun {
        who: "baseline script".into(),
        messages: n,
        moved,
        seconds,
        calls: stats.layer.calls,
        empty_receives: stats.empty_receives,
        emulator_seconds: stats.upstream_seconds,
    }
}

const FAKE_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/bench-dlq";
const FAKE_SOURCE: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/bench-source";
const FAKE_POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/bench-poison";

fn fake_with(n: u64, latency: Duration) -> Arc<FakeSqs> {
    let sqs = FakeSqs::with_latency(latency);
    for url in [FAKE_DLQ, FAKE_SOURCE, FAKE_POISON] {
        sqs.create_queue(url);
    }
    for i in 0..n {
        sqs.push(FAKE_DLQ, &body(i), attributes(i), None);
    }
    sqs
}

/// A drain on the port fake: its figures and the fake's call counts.
fn fake_run(
    who: String,
    messages: u64,
    moved: u64,
    seconds: f64,
    sqs: &FakeSqs,
    metrics_calls: u64,
) -> DrainRun {
    DrainRun {
        who,
        messages,
        moved,
        seconds,
        calls: fake_calls(sqs, metrics_calls),
        empty_receives: sqs.calls.empty_receive.load(Ordering::SeqCst),
        emulator_seconds: BTreeMap::new(),
    }
}

fn fake_calls(sqs: &FakeSqs, metrics_calls: u64) -> BTreeMap<String, u64> {
    let c = &sqs.calls;
    let mut calls = BTreeMap::new();
    for (name, n) in [
        ("ReceiveMessage", c.receive.load(Ordering::SeqCst)),
        ("SendMessageBatch", c.send_batch.load(Ordering::SeqCst)),
        ("DeleteMessageBatch", c.delete_batch.load(Ordering::SeqCst)),
        ("GetQueueAttributes", c.depth.load(Ordering::SeqCst)),
        ("PutMetricData", metrics_calls),
    ] {
        if n > 0 {
            calls.insert(name.to_string(), n);
        }
    }
    calls
}

/// The re-driver over the port fakes.
type FakeEngine = Engine<Arc<FakeSqs>, Arc<FakeCloudWatch>, Arc<FakeCloudWatch>>;

/// The re-driver over the port fake's three queues, with `pipelines` concurrent batches.
fn fake_engine(sqs: &Arc<FakeSqs>, pipelines: u32) -> (Arc<FakeCloudWatch>, FakeEngine) {
    let cw = FakeCloudWatch::new();
    let engine = capped_engine(sqs, &cw, pipelines, 0.0, 1);
    (cw, engine)
}

/// [`fake_engine`] with `MAX_MESSAGES_PER_SECOND` = `max_per_second`, reporting to `cw`.
fn capped_engine(
    sqs: &Arc<FakeSqs>,
    cw: &Arc<FakeCloudWatch>,
    pipelines: u32,
    max_per_second: f64,
    seed: u64,
) -> FakeEngine {
    let config = engine_config(
        &[
            ("DLQ_URL", FAKE_DLQ),
            ("SOURCE_QUEUE_URL", FAKE_SOURCE),
            ("POISON_QUEUE_URL", FAKE_POISON),
        ],
        pipelines,
        max_per_second,
    );
    Engine::new(sqs.clone(), cw.clone(), cw.clone(), config).with_seed(seed)
}

/// `k` bounded drains of the same engine at once over one DLQ: the Step Functions Map of drain
/// tasks.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleOut {
    pub drains: u32,
    /// The velocity cap all drains share (`MAX_MESSAGES_PER_SECOND`); each drain gets
    /// `global_cap / drains`.
    pub global_cap: f64,
    pub per_drain_cap: f64,
    /// Each drain's `max_messages`: the DLQ's messages split evenly, rounded up.
    pub per_drain_limit: u64,
    /// The aggregate: every drain's calls, the time until the last one ended.
    pub run: DrainRun,
    /// Messages redriven by each drain.
    pub redriven: Vec<u64>,
    /// Messages on neither the source nor the DLQ (a loss).
    pub lost: u64,
    /// Messages on both, or twice on the source (a repeat).
    pub repeated: u64,
}

/// Runs [`ScaleOut`]: `n` messages on the port fake with `latency` per call, `k` drains of
/// `pipelines` pipelines each capped at `global_cap / k` messages per second, started together.
pub async fn fake_scale_out(
    n: u64,
    latency: Duration,
    pipelines: u32,
    k: u32,
    global_cap: f64,
) -> ScaleOut {
    let k = k.max(1);
    let sqs = fake_with(n, latency);
    let cw = FakeCloudWatch::new();
    let per_drain_cap = global_cap / f64::from(k);
    let per_drain_limit = n.div_ceil(u64::from(k));
    let engines: Vec<FakeEngine> = (0..k)
        .map(|i| capped_engine(&sqs, &cw, pipelines, per_drain_cap, 1 + u64::from(i)))
        .collect();
    let request = drain_request(per_drain_limit);
    let started = Instant::now();
    let summaries: Vec<_> = join_all(engines.iter().map(|e| e.run(&request)))
        .await
        .into_iter()
        .map(|s| s.expect("the DLQ stays readable"))
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    for (i, s) in summaries.iter().enumerate() {
        assert!(
            s.failed == 0 && s.isolated == 0 && s.redriven <= per_drain_limit,
            "drain {i} of {k}: {s:?}"
        );
    }
    // Every message is on the source (moved) or still on the DLQ; bodies are distinct.
    let mut seen: HashMap<String, u32> = HashMap::new();
    for m in sqs
        .messages(FAKE_SOURCE)
        .into_iter()
        .chain(sqs.messages(FAKE_DLQ))
    {
        *seen.entry(m.body).or_default() += 1;
    }
    let lost = (0..n).filter(|&i| !seen.contains_key(&body(i))).count() as u64;
    let repeated = seen.values().map(|&c| u64::from(c.saturating_sub(1))).sum();
    let moved = sqs.len(FAKE_SOURCE) as u64;
    let published = cw.published.lock().map(|p| p.len() as u64).unwrap_or(0);
    ScaleOut {
        drains: k,
        global_cap,
        per_drain_cap,
        per_drain_limit,
        run: fake_run(
            format!("redrive ({k} drains of {pipelines} pipelines)"),
            n,
            moved,
            seconds,
            &sqs,
            published,
        ),
        redriven: summaries.iter().map(|s| s.redriven).collect(),
        lost,
        repeated,
    }
}

/// Ours on the port fake with `latency` per call, on the current runtime's clock (run it on a
/// paused runtime for the modelled time, on a normal one for wall time).
pub async fn fake_ours(n: u64, latency: Duration, pipelines: u32) -> DrainRun {
    let sqs = fake_with(n, latency);
    let (cw, engine) = fake_engine(&sqs, pipelines);
    let (summary, seconds) = timed_drain(&engine).await;
    let who = format!("redrive ({pipelines} pipelines)");
    check_summary(&who, &summary, n);
    assert_eq!(sqs.len(FAKE_SOURCE) as u64, summary.redriven);
    let published = cw.published.lock().map(|p| p.len() as u64).unwrap_or(0);
    fake_run(who, n, n, seconds, &sqs, published)
}

/// Ours as the Lambda runs it: invocations of `per_invocation` messages (the default
/// `MAX_MESSAGES_PER_INVOCATION` is 100) until the DLQ is empty, each with its depth and
/// metrics calls; no latency.
pub async fn fake_invocations(n: u64, per_invocation: u64, pipelines: u32) -> DrainRun {
    let sqs = fake_with(n, Duration::ZERO);
    let (cw, engine) = fake_engine(&sqs, pipelines);
    let started = Instant::now();
    let mut moved = 0;
    loop {
        let summary = engine
            .run(&drain_request(per_invocation))
            .await
            .expect("the DLQ stays readable");
        moved += summary.redriven;
        if summary.dlq_remaining == Some(0) || summary.received == 0 {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(moved, n, "every message moved");
    let published = cw.published.lock().map(|p| p.len() as u64).unwrap_or(0);
    fake_run(
        format!("redrive ({pipelines} pipelines, {per_invocation} per invocation)"),
        n,
        moved,
        seconds,
        &sqs,
        published,
    )
}

/// The baseline script on the port fake with `latency` per call.
pub async fn fake_baseline(n: u64, latency: Duration) -> DrainRun {
    let sqs = fake_with(n, latency);
    let started = Instant::now();
    let moved = baseline::redrive(&FakeScript(sqs.clone()), FAKE_DLQ, FAKE_SOURCE, u64::MAX)
        .await
        .unwrap_or_else(|e| panic!("the baseline script failed: {e}"));
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(moved, n);
    DrainRun {
        who: "baseline script".into(),
        messages: n,
        moved,
        seconds,
        calls: fake_calls(&sqs, 0),
        empty_receives: sqs.calls.empty_receive.load(Ordering::SeqCst),
        emulator_seconds: BTreeMap::new(),
    }
}

/// Runs a future on a fresh single-threaded runtime whose clock is paused: every sleep (the
/// latency model) completes as soon as nothing else can run, and the elapsed time the future
/// measures is the modelled time.
pub fn on_modelled_clock<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("building a paused runtime")
        .block_on(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_modelled_clock_ours_needs_a_third_of_a_call_per_message() {
        let n = 1000;
        let ours = on_modelled_clock(fake_ours(n, Duration::from_millis(20), 4));
        let base = on_modelled_clock(fake_baseline(n, Duration::from_millis(20)));
        // 100 receives + 100 sends + 100 deletes, plus the end: empty receives (one per
        // pipeline at most), one depth and one metrics call.
        assert!(ours.calls_per_message() <= 0.31, "{ours:?}");
        // One receive per 10, then a send and a delete per message, plus the empty receive.
        assert_eq!(base.total_calls(), 100 + 2000 + 1);
        // Sequential calls of 20 ms each: the modelled time is exactly the calls' latency.
        assert!(
            (base.seconds - 2101.0 * 0.020).abs() < 0.001,
            "{}",
            base.seconds
        );
        assert!(
            ours.seconds < base.seconds / 20.0,
            "{} vs {}",
            ours.seconds,
            base.seconds
        );
    }

    #[test]
    fn invocations_of_100_cost_about_a_third_of_a_call_per_message() {
        let run = on_modelled_clock(fake_invocations(1000, 100, 4));
        // Per invocation: 10 receives, 10 sends, 10 deletes, one depth, one metrics call.
        assert_eq!(run.total_calls(), 10 * 32);
        assert!(run.calls_per_message() <= 0.35);
    }

    #[test]
    fn k_drains_over_one_dlq_lose_nothing_and_split_the_velocity_cap() {
        // 2,000 messages, 5 drains of 2 pipelines, a global cap of 1,000 msg/s: each drain may
        // take 400 messages at 200 msg/s, on the modelled clock (behaviour, not timing).
        let (n, k, cap) = (2_000, 5, 1_000.0);
        let out = on_modelled_clock(fake_scale_out(n, Duration::from_millis(20), 2, k, cap));
        assert_eq!((out.lost, out.repeated), (0, 0), "{out:?}");
        assert_eq!(
            out.run.moved, n,
            "the drains' shares cover the DLQ: {out:?}"
        );
        assert_eq!(out.redriven.iter().sum::<u64>(), n);
        assert_eq!(out.per_drain_cap, 200.0);
        assert_eq!(out.per_drain_limit, 400);
        assert!(out.redriven.iter().all(|&r| r <= 400), "{:?}", out.redriven);
        // The pacer grants each drain's receives at its share: the last of 400 messages
        // (10 per receive) is granted (400 - 10) / 200 s after the start, so together the
        // drains never go faster than the global cap.
        assert!(out.run.seconds >= 390.0 / 200.0, "{}", out.run.seconds);
        assert!(out.run.per_second() <= cap, "{}", out.run.per_second());
        // A third of a call per message, as one drain: the drains' ends (an empty receive per
        // pipeline at most, a depth and a metrics call each) are 5 x 4 calls at most.
        assert!(out.run.calls_per_message() <= 0.31, "{:?}", out.run);
        // Without the split, one drain at the global cap would take 2,000 messages at up to
        // 1,000 msg/s: the split is what keeps K drains inside the cap.
        let one = on_modelled_clock(fake_scale_out(n, Duration::from_millis(20), 2, 1, cap));
        assert_eq!((one.lost, one.redriven.as_slice()), (0, &[n][..]));
        assert_eq!(one.per_drain_cap, cap);
    }

    #[test]
    fn bodies_are_distinct_and_about_300_bytes() {
        assert_ne!(body(1), body(2));
        assert!(
            (250..400).contains(&body(12345).len()),
            "{}",
            body(12345).len()
        );
    }
}
