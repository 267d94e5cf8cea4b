//! The archiver on moto (SQS, S3, CloudWatch): messages made old through its configuration
//! (`ARCHIVE_AFTER_SECONDS`), never through a test-only code path.
//!
//! Faults moto cannot produce (a crash between the S3 put and the deletes) come from a port
//! wrapper around the real SQS adapter.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_cloudwatch::types::{Datapoint, StandardUnit, Statistic};
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use redrive_archiver::{
    Archiver, ArchiverConfig, ArchiverInitError, RunSummary, S3Store, SweepStop, sha256_base64,
};
use redrive_engine::aws::{Clients, CloudWatch, SqsQueue};
use redrive_engine::ports::{HandleEntry, PortError};
use redrive_engine::tap::{Tap, Tapped};
use redrive_shared::archive::{ArchivedMessage, parse_jsonl};
use redrive_shared::config::Env;
use redrive_shared::sdk::attributes_from_sdk;
use redrive_tests::{
    LambdaWatch, QueueSet, attr_binary, attr_custom, attr_number, attr_string, fixture, moto,
    queue_depth, send_fifo, send_raw, unique_name,
};
use serde_json::json;

async fn s3() -> aws_sdk_s3::Client {
    redrive_engine::s3::client(&moto().sdk_config().await)
}

/// A fresh versioned bucket, as the stack's.
async fn bucket(s3: &aws_sdk_s3::Client) -> String {
    let name = unique_name("archive").to_ascii_lowercase();
    s3.create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("CreateBucket");
    s3.put_bucket_versioning()
        .bucket(&name)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("PutBucketVersioning");
    name
}

/// Moto's SQS and S3 clients, a queue set (FIFO or not) and a fresh versioned bucket.
async fn queues_and_bucket(
    fifo: bool,
) -> (aws_sdk_sqs::Client, aws_sdk_s3::Client, QueueSet, String) {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let queues = QueueSet::create(&sqs, fifo, 3).await;
    let bucket = bucket(&s3).await;
    (sqs, s3, queues, bucket)
}

fn config(vars: &[(&str, &str)]) -> ArchiverConfig {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ArchiverConfig::from_env(&Env(move |k: &str| vars.get(k).cloned())).expect("valid config")
}

fn queue_config(queues: &QueueSet, bucket: &str, after_seconds: &str) -> ArchiverConfig {
    config(&[
        ("ARCHIVE_BUCKET", bucket),
        ("POISON_QUEUE_URL", &queues.poison_url),
        ("DLQ_URL", &queues.dlq_url),
        ("ARCHIVE_AFTER_SECONDS", after_seconds),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &unique_name("ns")),
    ])
}

/// The engine's SDK clients on moto.
async fn clients() -> Clients {
    Clients::from_sdk(&moto().sdk_config().await)
}

async fn sqs_port() -> SqsQueue {
    clients().await.sqs
}

/// The archiver on moto's SQS, S3 and CloudWatch with `cfg`, initialised or refused.
async fn init(
    s3: &aws_sdk_s3::Client,
    cfg: ArchiverConfig,
) -> Result<Archiver<SqsQueue, S3Store, CloudWatch>, ArchiverInitError> {
    let clients = clients().await;
    Archiver::init(
        clients.sqs,
        S3Store { client: s3.clone() },
        clients.cloudwatch,
        cfg,
    )
    .await
}

/// The archiver on moto's SQS, S3 and CloudWatch, initialised.
async fn on_moto(
    s3: &aws_sdk_s3::Client,
    cfg: ArchiverConfig,
) -> Archiver<SqsQueue, S3Store, CloudWatch> {
    init(s3, cfg).await.expect("init")
}

/// The archiver started on moto with `cfg`, run once: its summary.
async fn run_once(s3: &aws_sdk_s3::Client, cfg: ArchiverConfig) -> RunSummary {
    on_moto(s3, cfg).await.run(None).await
}

/// The archiver under cargo lambda watch on moto, sweeping `queues` into `bucket`, where every
/// message is old enough to archive.
async fn watch_archiver(queues: &QueueSet, bucket: &str) -> LambdaWatch {
    let mut env = moto().env();
    env.extend([
        ("ARCHIVE_BUCKET".to_string(), bucket.to_string()),
        ("POISON_QUEUE_URL".to_string(), queues.poison_url.clone()),
        ("DLQ_URL".to_string(), queues.dlq_url.clone()),
        ("ARCHIVE_AFTER_SECONDS".to_string(), "0".to_string()),
        ("METRIC_NAMESPACE".to_string(), unique_name("ns")),
    ]);
    LambdaWatch::start(&["archiver"], &env).await
}

/// Every version of every object in the bucket, in key order, each parsed.
async fn archived(s3: &aws_sdk_s3::Client, bucket: &str) -> Vec<(String, Vec<ArchivedMessage>)> {
    let versions = s3
        .list_object_versions()
        .bucket(bucket)
        .send()
        .await
        .expect("ListObjectVersions");
    let mut out = Vec::new();
    for v in versions.versions() {
        let key = v.key().expect("key").to_string();
        let object = s3
            .get_object()
            .bucket(bucket)
            .key(&key)
            .version_id(v.version_id().expect("version id"))
            .send()
            .await
            .expect("GetObject");
        let bytes = object.body.collect().await.expect("body").into_bytes();
        let text = String::from_utf8(bytes.to_vec()).expect("an archive object is UTF-8");
        assert!(text.ends_with('\n'), "every line ends with a newline");
        out.push((key, parse_jsonl(&text).expect("an archive object parses")));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The datapoints of metric `name` of queue `queue_name` over the last ten minutes, with the
/// statistics asked for.
async fn metric_points(
    namespace: &str,
    name: &str,
    queue_name: &str,
    statistics: &[Statistic],
) -> Vec<Datapoint> {
    let cw = moto().cloudwatch().await;
    redrive_tests::metric_points(&cw, namespace, name, queue_name, statistics).await
}

async fn metric_sum(namespace: &str, name: &str, queue_name: &str) -> f64 {
    metric_points(namespace, name, queue_name, &[Statistic::Sum])
        .await
        .iter()
        .filter_map(|d| d.sum())
        .sum()
}

/// What a test sent: id, body, attributes.
struct Sent {
    id: String,
    body: String,
    attributes: Vec<(&'static str, MessageAttributeValue)>,
}

fn every_attribute_type(i: usize) -> Vec<(&'static str, MessageAttributeValue)> {
    vec![
        ("s", attr_string(&format!("héllo ✓ {i}"))),
        ("n", attr_number("-12.50")),
        ("b", attr_binary(&[0, 1, 2, 0xff, 0xfe, i as u8])),
        ("ni", attr_custom("Number.int", "42")),
        (
            "bg",
            MessageAttributeValue::builder()
                .data_type("Binary.gz")
                .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![
                    0x1f, 0x8b, 0, i as u8,
                ]))
                .build()
                .expect("attribute"),
        ),
        (
            "x-redrive",
            attr_string(
                r#"{"v":1,"attempt":6,"originalMessageId":"5fea7756-0000","reason":"max-attempts"}"#,
            ),
        ),
    ]
}

async fn send_all(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    bodies: &[&str],
    with_attributes: bool,
) -> Vec<Sent> {
    let mut out = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let attributes = if with_attributes {
            every_attribute_type(i)
        } else {
            Vec::new()
        };
        let id = send_raw(sqs, url, body, &attributes).await;
        out.push(Sent {
            id,
            body: body.to_string(),
            attributes,
        });
    }
    out
}

fn assert_archived_exactly(sent: &[Sent], lines: &[ArchivedMessage], queue_url: &str) {
    for s in sent {
        let line = lines
            .iter()
            .find(|l| l.message_id == s.id)
            .unwrap_or_else(|| panic!("message {} is not in the archive", s.id));
        assert_eq!(line.body.as_bytes(), s.body.as_bytes(), "body of {}", s.id);
        let expected: std::collections::HashMap<String, MessageAttributeValue> = s
            .attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        assert_eq!(
            line.attributes,
            attributes_from_sdk(Some(&expected)),
            "attributes of {}",
            s.id
        );
        assert_eq!(line.queue, queue_url);
        assert!(
            line.system.sent_timestamp_ms().is_some(),
            "SentTimestamp kept"
        );
        assert!(
            line.system.approximate_receive_count.is_some(),
            "ApproximateReceiveCount kept"
        );
    }
}

/// Every queue's sweep of the run ended for `why`.
fn assert_every_sweep_stopped(summary: &RunSummary, why: SweepStop) {
    assert!(
        summary.queues.iter().all(|q| q.stopped_because == why),
        "every sweep stopped because {why:?}: {summary:?}"
    );
}

#[tokio::test]
async fn old_messages_are_archived_byte_exactly_and_young_ones_stay() {
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let cfg = queue_config(&queues, &bucket, "2");
    let namespace = cfg.metric_namespace.clone();

    // GIVEN messages that will be 2 s old (bodies with multi-byte text, escapes, newlines,
    // attributes of every type) and, after that, young ones.
    let old_poison = send_all(
        &sqs,
        &queues.poison_url,
        &[
            "{\"orderId\":42}",
            "ünïcödé 🚀 \"quoted\"\nsecond line\t\\",
            "<xml a='1'/>\r\n",
        ],
        true,
    )
    .await;
    let old_dlq = send_all(&sqs, &queues.dlq_url, &["dlq-old-1", "dlq-old-2 ✓"], false).await;
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let young_poison = send_all(&sqs, &queues.poison_url, &["young-1", "young-2"], true).await;
    let young_dlq = send_all(&sqs, &queues.dlq_url, &["young-dlq"], false).await;

    // WHEN the archiver runs
    let summary = run_once(&s3, cfg).await;

    // THEN the old ones are in S3, exactly, and gone from their queues; the young ones stayed
    // and are visible again at once.
    assert_eq!(
        (summary.archived, summary.kept, summary.failed),
        (5, 3, 0),
        "{summary:?}"
    );
    assert_eq!(summary.queues[0].queue, queues.poison_name);
    assert_eq!(summary.queues[1].queue, queues.dlq_name);
    assert_every_sweep_stopped(&summary, SweepStop::QueueEmpty);
    let objects = archived(&s3, &bucket).await;
    let poison_lines: Vec<ArchivedMessage> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("archive/{}/", queues.poison_name)))
        .flat_map(|(_, l)| l.clone())
        .collect();
    let dlq_lines: Vec<ArchivedMessage> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("archive/{}/", queues.dlq_name)))
        .flat_map(|(_, l)| l.clone())
        .collect();
    assert_eq!(poison_lines.len(), 3);
    assert_eq!(dlq_lines.len(), 2);
    assert_archived_exactly(&old_poison, &poison_lines, &queues.poison_url);
    assert_archived_exactly(&old_dlq, &dlq_lines, &queues.dlq_url);
    for young in young_poison.iter().chain(&young_dlq) {
        assert!(
            !objects
                .iter()
                .any(|(_, l)| l.iter().any(|m| m.message_id == young.id)),
            "a young message was archived"
        );
    }
    let visible = |url: String| {
        let sqs = sqs.clone();
        async move {
            let a = redrive_tests::queue_attributes(&sqs, &url).await;
            (
                a[&QueueAttributeName::ApproximateNumberOfMessages].clone(),
                a[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible].clone(),
            )
        }
    };
    assert_eq!(
        visible(queues.poison_url.clone()).await,
        ("2".into(), "0".into()),
        "young poison messages visible again"
    );
    assert_eq!(
        visible(queues.dlq_url.clone()).await,
        ("1".into(), "0".into()),
        "young DLQ message visible again"
    );

    // S3 stored the bytes it was sent: its SHA-256 is the object's.
    for (key, _) in &objects {
        let head = s3
            .get_object()
            .bucket(&bucket)
            .key(key)
            .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
            .send()
            .await
            .expect("GetObject");
        let echoed = head.checksum_sha256().map(str::to_string);
        let bytes = head.body.collect().await.unwrap().into_bytes();
        assert_eq!(echoed, Some(sha256_base64(&bytes)), "{key}");
    }

    assert_eq!(
        metric_sum(&namespace, "ArchivedMessages", &queues.poison_name).await,
        3.0
    );
    assert_eq!(
        metric_sum(&namespace, "ArchivedMessages", &queues.dlq_name).await,
        2.0
    );
    assert_eq!(
        metric_sum(&namespace, "ArchiveFailures", &queues.poison_name).await,
        0.0
    );
}

#[tokio::test]
async fn fifo_group_and_deduplication_ids_and_sequence_numbers_are_archived() {
    let (sqs, s3, queues, bucket) = queues_and_bucket(true).await;
    let a = send_fifo(&sqs, &queues.poison_url, "first", "g1", "d1", &[]).await;
    let b = send_fifo(&sqs, &queues.poison_url, "second", "g1", "d2", &[]).await;
    let summary = run_once(&s3, queue_config(&queues, &bucket, "0")).await;
    assert_eq!(summary.archived, 2, "{summary:?}");
    let lines: Vec<ArchivedMessage> = archived(&s3, &bucket)
        .await
        .into_iter()
        .flat_map(|(_, l)| l)
        .collect();
    let ids: Vec<&str> = lines.iter().map(|l| l.message_id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str()], "order within the group kept");
    for (line, dedup) in lines.iter().zip(["d1", "d2"]) {
        assert_eq!(line.system.message_group_id.as_deref(), Some("g1"));
        assert_eq!(line.system.message_deduplication_id.as_deref(), Some(dedup));
        assert!(line.system.sequence_number.is_some());
    }
    assert_eq!(queue_depth(&sqs, &queues.poison_url).await, 0);
}

#[tokio::test]
async fn the_oldest_age_read_from_sent_timestamps_is_published_per_queue_zero_when_empty() {
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    // GIVEN a poison message received three times (SQS's ApproximateAgeOfOldestMessage leaves
    // such a message out), two seconds old, a younger one, and an empty DLQ
    send_all(&sqs, &queues.poison_url, &["oldest"], true).await;
    for _ in 0..3 {
        assert_eq!(
            redrive_tests::receive_raw(&sqs, &queues.poison_url, 0)
                .await
                .len(),
            1
        );
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    send_all(&sqs, &queues.poison_url, &["younger"], true).await;
    // (nothing is old enough to archive: the sweep only reads)
    let cfg = queue_config(&queues, &bucket, "3600");
    let namespace = cfg.metric_namespace.clone();

    // WHEN the archiver runs
    let summary = run_once(&s3, cfg).await;
    assert_eq!((summary.kept, summary.archived), (2, 0), "{summary:?}");

    // THEN each queue it swept has one OldestMessageAgeSeconds datum, in seconds: the poison
    // queue's oldest message's age, and 0 for the empty DLQ
    let read = |queue: String| {
        let namespace = namespace.clone();
        async move {
            metric_points(
                &namespace,
                "OldestMessageAgeSeconds",
                &queue,
                &[Statistic::Maximum, Statistic::SampleCount],
            )
            .await
        }
    };
    let poison = read(queues.poison_name.clone()).await;
    assert_eq!(poison.len(), 1, "{poison:?}");
    assert_eq!(poison[0].sample_count(), Some(1.0), "{poison:?}");
    assert_eq!(poison[0].unit(), Some(&StandardUnit::Seconds), "{poison:?}");
    let oldest = poison[0].maximum().unwrap_or_default();
    assert!((2.0..60.0).contains(&oldest), "{poison:?}");
    let dlq = read(queues.dlq_name.clone()).await;
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(
        (dlq[0].sample_count(), dlq[0].maximum()),
        (Some(1.0), Some(0.0)),
        "{dlq:?}"
    );
}

#[tokio::test]
async fn a_put_failure_leaves_every_message_on_its_queue() {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let queues = QueueSet::create(&sqs, false, 3).await;
    // A bucket that does not exist: S3 (moto) refuses every put with NoSuchBucket.
    let missing = unique_name("no-such-bucket").to_ascii_lowercase();
    send_all(&sqs, &queues.poison_url, &["p1", "p2", "p3"], true).await;
    send_all(&sqs, &queues.dlq_url, &["d1", "d2"], false).await;
    let cfg = queue_config(&queues, &missing, "0");
    let namespace = cfg.metric_namespace.clone();
    let summary = run_once(&s3, cfg).await;

    assert_eq!(
        (summary.archived, summary.failed, summary.objects),
        (0, 5, 0),
        "{summary:?}"
    );
    assert_every_sweep_stopped(&summary, SweepStop::PutFailed);
    // Every message is still there, and visible again at once for the next run.
    for (url, n) in [(&queues.poison_url, "3"), (&queues.dlq_url, "2")] {
        let a = redrive_tests::queue_attributes(&sqs, url).await;
        assert_eq!(
            a[&QueueAttributeName::ApproximateNumberOfMessages],
            n,
            "{url}"
        );
    }
    assert_eq!(
        metric_sum(&namespace, "ArchiveFailures", &queues.poison_name).await,
        3.0
    );
    assert_eq!(
        metric_sum(&namespace, "ArchiveFailures", &queues.dlq_name).await,
        2.0
    );
}

/// On the real SQS adapter, deletes never happen: the process "dies" after S3 acknowledged
/// the object. The receipt handles it was given are kept, so the test can end their
/// visibility as the visibility timeout would.
struct CrashBeforeDelete {
    handles: Mutex<Vec<HandleEntry>>,
}

impl Tap for CrashBeforeDelete {
    fn deleting(&self, _: &str, entries: &[HandleEntry]) -> Result<(), PortError> {
        self.handles.lock().unwrap().extend(entries.iter().cloned());
        Err(PortError {
            operation: "DeleteMessageBatch",
            code: "Crash".into(),
            message: "the process died between the put and the delete".into(),
            retryable: false,
            source: None,
        })
    }
}

#[tokio::test]
async fn a_crash_between_the_put_and_the_delete_gives_a_duplicate_object_never_a_loss() {
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let sent = send_all(&sqs, &queues.poison_url, &["crash-1", "crash-2 ✓"], true).await;
    let cfg = queue_config(&queues, &bucket, "0");

    // Run 1 dies after the put: the messages are in S3 AND still on their queue.
    let crashing = Tapped {
        inner: sqs_port().await,
        tap: CrashBeforeDelete {
            handles: Mutex::new(Vec::new()),
        },
    };
    let first = Archiver::init(
        crashing,
        S3Store { client: s3.clone() },
        clients().await.cloudwatch,
        cfg.clone(),
    )
    .await
    .expect("init");
    let summary = first.run(None).await;
    assert_eq!(
        (summary.archived, summary.failed, summary.objects),
        (0, 2, 1),
        "{summary:?}"
    );
    assert_eq!(
        queue_depth(&sqs, &queues.poison_url).await,
        2,
        "nothing deleted"
    );
    assert_eq!(archived(&s3, &bucket).await.len(), 1);

    // Their visibility ends (as the visibility timeout would end it).
    let handles = std::mem::take(&mut *first_handles(&first));
    for h in handles {
        sqs.change_message_visibility()
            .queue_url(&queues.poison_url)
            .receipt_handle(h.receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .expect("ChangeMessageVisibility");
    }
    // Keys carry the archive time to the second: the second run is in another second.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // Run 2 archives them again and deletes them.
    let second = on_moto(&s3, cfg).await;
    let summary = second.run(None).await;
    assert_eq!((summary.archived, summary.failed), (2, 0), "{summary:?}");
    assert_eq!(queue_depth(&sqs, &queues.poison_url).await, 0);

    // Each message is in the archive twice (two objects), byte-exactly both times.
    let objects = archived(&s3, &bucket).await;
    assert_eq!(objects.len(), 2, "an object twice");
    for (_, lines) in &objects {
        assert_archived_exactly(&sent, lines, &queues.poison_url);
    }
}

fn first_handles<'a>(
    a: &'a Archiver<Tapped<SqsQueue, CrashBeforeDelete>, S3Store, CloudWatch>,
) -> std::sync::MutexGuard<'a, Vec<HandleEntry>> {
    a.queue().tap.handles.lock().unwrap()
}

async fn queue_with_retention(sqs: &aws_sdk_sqs::Client, seconds: &str) -> String {
    let out = sqs
        .create_queue()
        .queue_name(unique_name("short"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, seconds)
        .send()
        .await
        .expect("CreateQueue");
    out.queue_url.expect("QueueUrl")
}

/// Archiving `queues`' poison queue and the DLQ `hour` (its retention one hour) after
/// `seconds`.
fn below_hour_config(queues: &QueueSet, hour: &str, seconds: &str) -> ArchiverConfig {
    config(&[
        ("ARCHIVE_BUCKET", "some-bucket"),
        ("POISON_QUEUE_URL", &queues.poison_url),
        ("DLQ_URL", hour),
        ("ARCHIVE_AFTER_SECONDS", seconds),
    ])
}

#[tokio::test]
async fn a_threshold_not_below_a_queues_retention_fails_init_naming_it_and_receives_nothing() {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let four_days = queue_with_retention(&sqs, "345600").await;
    send_raw(&sqs, &four_days, "stays", &[]).await;
    let hour = queue_with_retention(&sqs, "3600").await;

    // The default, 10 days, against a 4-day queue.
    let err = init(
        &s3,
        config(&[
            ("ARCHIVE_BUCKET", "some-bucket"),
            ("POISON_QUEUE_URL", &four_days),
        ]),
    )
    .await
    .err()
    .expect("init fails")
    .to_string();
    assert!(
        err.contains("ARCHIVE_AFTER_DAYS")
            && err.contains(&four_days)
            && err.contains("345600")
            && err.contains("864000"),
        "{err}"
    );

    // Seconds equal to the retention: not below it. The DLQ is checked too.
    let queues = QueueSet::create(&sqs, false, 3).await;
    let err = init(&s3, below_hour_config(&queues, &hour, "3600"))
        .await
        .err()
        .expect("init fails")
        .to_string();
    assert!(
        err.contains("ARCHIVE_AFTER_SECONDS") && err.contains(&hour) && err.contains("3600 s"),
        "{err}"
    );

    // Just below is accepted.
    init(&s3, below_hour_config(&queues, &hour, "3599.5"))
        .await
        .expect("a threshold below every retention");

    // Nothing was received by the refused init.
    redrive_tests::fixture::assert_never_received(&sqs, &four_days).await;
}

#[tokio::test]
async fn the_archiver_runs_as_a_lambda_on_its_schedule_and_never_logs_bodies() {
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let sent = send_all(
        &sqs,
        &queues.poison_url,
        &["secret-body-1", "secret-body-2"],
        true,
    )
    .await;
    let watch = watch_archiver(&queues, &bucket).await;
    let response = watch
        .invoke("archiver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("invoke");
    assert_eq!(response["archived"], json!(2), "{response}");
    assert_eq!(response["failed"], json!(0), "{response}");
    assert_eq!(queue_depth(&sqs, &queues.poison_url).await, 0);
    let lines: Vec<ArchivedMessage> = archived(&s3, &bucket)
        .await
        .into_iter()
        .flat_map(|(_, l)| l)
        .collect();
    assert_archived_exactly(&sent, &lines, &queues.poison_url);
    let log = watch.log();
    assert!(
        log.contains("\"action\":\"archived\""),
        "per-message action lines"
    );
    assert!(log.contains(&sent[0].id));
    assert!(
        !log.contains("secret-body"),
        "a message body leaked into the logs"
    );
}

#[tokio::test]
async fn the_archivers_log_lines_carry_the_invocation_ids_and_its_archive_the_trace_header() {
    // GIVEN the archiver under cargo lambda watch, and a traced producer's message parked
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let watch = watch_archiver(&queues, &bucket).await;
    let header = redrive_tests::producer_trace_header();
    let traced =
        redrive_tests::send_traced(&sqs, &queues.poison_url, "traced-body", &[], &header).await;

    // WHEN it runs on its schedule twice, a message to archive each time
    let mut seen = Vec::new();
    for round in 0..2 {
        if round == 1 {
            send_raw(&sqs, &queues.poison_url, "plain-body", &[]).await;
        }
        let (response, lines) = watch
            .invoke_logged("archiver", &fixture("eventbridge-scheduled.json"))
            .await;
        assert_eq!(response.unwrap()["archived"], json!(1));

        // THEN every line it logged during the run carries the invocation's requestId and
        // xrayTraceId
        let ids = redrive_tests::invocation_ids(&lines).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            lines.iter().any(|l| l["fields"]["action"] == "archived"),
            "{lines:?}"
        );
        seen.push(ids);
    }
    assert_ne!(seen[0], seen[1]);

    // AND the traced message's archive line keeps its AWSTraceHeader, for import to send on
    let lines: Vec<ArchivedMessage> = archived(&s3, &bucket)
        .await
        .into_iter()
        .flat_map(|(_, l)| l)
        .collect();
    let line = lines.iter().find(|l| l.message_id == traced).unwrap();
    assert_eq!(
        line.system.aws_trace_header.as_deref(),
        Some(header.as_str())
    );
}

#[tokio::test]
async fn every_protected_dlq_is_archived_under_its_own_prefix_at_its_own_tagged_age() {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let bucket = bucket(&s3).await;
    let mut urls = Vec::new();
    for name in ["orders-dlq", "billing-dlq", "mail-dlq", "poison"] {
        let url = sqs
            .create_queue()
            .queue_name(unique_name(name))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        urls.push(url);
    }
    let (orders, billing, mail, poison) = (&urls[0], &urls[1], &urls[2], &urls[3]);
    // billing's owners keep theirs on the DLQ for half a day; mail's tag is unusable.
    for (url, value) in [(billing, "0.5"), (mail, "20")] {
        sqs.tag_queue()
            .queue_url(url)
            .tags("redrive:archive-after-days", value)
            .send()
            .await
            .unwrap();
    }
    for url in [orders, billing, mail] {
        send_all(&sqs, url, &["old-1", "old-2"], false).await;
    }
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let list = format!("{orders},{billing},{mail}");
    let cfg = config(&[
        ("ARCHIVE_BUCKET", &bucket),
        ("POISON_QUEUE_URL", poison),
        ("DLQ_URLS", &list),
        ("ARCHIVE_AFTER_SECONDS", "2"),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &unique_name("ns")),
    ]);
    assert_eq!(cfg.queues.len(), 4, "the poison queue and the three DLQs");
    // A bad tag on one DLQ does not stop the archiver.
    let summary = run_once(&s3, cfg).await;
    let swept: Vec<&str> = summary.queues.iter().map(|q| q.queue.as_str()).collect();
    let name = |url: &str| url.rsplit('/').next().unwrap().to_string();
    assert_eq!(
        swept,
        [name(poison), name(orders), name(billing)],
        "mail-dlq is left alone"
    );
    assert_eq!((summary.archived, summary.kept), (2, 2), "{summary:?}");
    let objects = archived(&s3, &bucket).await;
    assert!(!objects.is_empty());
    assert!(
        objects
            .iter()
            .all(|(k, _)| k.starts_with(&format!("archive/{}/", name(orders)))),
        "{objects:?}"
    );
    assert_eq!(queue_depth(&sqs, orders).await, 0);
    assert_eq!(
        queue_depth(&sqs, billing).await,
        2,
        "its own threshold: half a day"
    );
    assert_eq!(queue_depth(&sqs, mail).await, 2, "left alone, not lost");
}

#[tokio::test]
async fn a_protected_dlq_whose_retention_is_too_short_is_left_alone_and_said_the_others_are_archived()
 {
    // GIVEN three protected DLQs: one untagged at a one-hour retention, which the install's
    // threshold (one hour) is not below, and one the archiver cannot read at all (deleted
    // since the deploy); the third's owners archive after a few seconds (its tag)
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let bucket = bucket(&s3).await;
    let short = queue_with_retention(&sqs, "3600").await;
    let gone = queue_with_retention(&sqs, "345600").await;
    let tagged = queue_with_retention(&sqs, "345600").await;
    let poison = queue_with_retention(&sqs, "1209600").await;
    sqs.tag_queue()
        .queue_url(&tagged)
        .tags("redrive:archive-after-days", "0.00002")
        .send()
        .await
        .unwrap();
    send_all(&sqs, &short, &["kept-1"], false).await;
    send_all(&sqs, &tagged, &["old-1", "old-2"], false).await;
    sqs.delete_queue().queue_url(&gone).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let namespace = unique_name("ns");
    let list = format!("{short},{gone},{tagged}");
    let cfg = config(&[
        ("ARCHIVE_BUCKET", &bucket),
        ("POISON_QUEUE_URL", &poison),
        ("DLQ_URLS", &list),
        ("ARCHIVE_AFTER_SECONDS", "3600"),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &namespace),
    ]);

    // WHEN the archiver starts and runs
    let summary = run_once(&s3, cfg).await;

    // THEN the poison queue and the tagged DLQ are swept, the other two are left alone, and each
    // of those says so in DlqLeftAlone at every run (the fleet's alarm pages on it)
    let name = |url: &str| url.rsplit('/').next().unwrap().to_string();
    let swept: Vec<&str> = summary.queues.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(swept, [name(&poison), name(&tagged)]);
    assert_eq!(summary.archived, 2, "{summary:?}");
    assert_eq!(queue_depth(&sqs, &short).await, 1, "left alone, not lost");
    for left in [&short, &gone] {
        assert_eq!(
            metric_sum(&namespace, "DlqLeftAlone", &name(left)).await,
            1.0
        );
    }
    for served in [&poison, &tagged] {
        assert_eq!(
            metric_sum(&namespace, "DlqLeftAlone", &name(served)).await,
            0.0
        );
    }
}

/// The alerts topic on moto, an SQS queue subscribed to it (what a test reads the topic
/// through), and a books' table. The inbox is on moto's own SQS whatever emulator serves the
/// archiver's queues: moto's SNS delivers only to its own queues.
struct DigestRig {
    topic: String,
    inbox: String,
    table: String,
    own: aws_sdk_sqs::Client,
}

async fn digest_rig() -> DigestRig {
    let sdk = moto().sdk_config().await;
    let own = aws_sdk_sqs::Client::new(&moto().own_sdk_config().await);
    let sqs = &own;
    let sns = aws_sdk_sns::Client::new(&sdk);
    let topic = sns
        .create_topic()
        .name(unique_name("alerts"))
        .send()
        .await
        .expect("CreateTopic")
        .topic_arn
        .expect("TopicArn");
    let inbox = sqs
        .create_queue()
        .queue_name(unique_name("inbox"))
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("QueueUrl");
    let inbox_arn =
        redrive_tests::queue_attributes(sqs, &inbox).await[&QueueAttributeName::QueueArn].clone();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(inbox_arn)
        .send()
        .await
        .expect("Subscribe");
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    DigestRig {
        topic,
        inbox,
        table,
        own,
    }
}

/// Every SNS notification the inbox holds: (Subject, Message as JSON).
async fn notifications(sqs: &aws_sdk_sqs::Client, inbox: &str) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    loop {
        let got = redrive_tests::receive_raw(sqs, inbox, 1).await;
        if got.is_empty() {
            return out;
        }
        for m in got {
            let envelope: serde_json::Value =
                serde_json::from_str(m.body().unwrap_or_default()).expect("an SNS envelope");
            let message = serde_json::from_str(envelope["Message"].as_str().unwrap_or_default())
                .expect("the digest is JSON");
            out.push((
                envelope["Subject"].as_str().unwrap_or_default().to_string(),
                message,
            ));
            sqs.delete_message()
                .queue_url(inbox)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("DeleteMessage");
        }
    }
}

/// A book for `dlq_url` with two groups, the second held for a day from `now_ms`.
async fn two_groups_one_held(table: &str, dlq_url: &str, now_ms: i64) {
    let store =
        redrive_engine::triage_store::DynamoDbTriageStore::new(&moto().sdk_config().await, table);
    redrive_engine::triage_store::update(&store, dlq_url, |b| {
        b.observe(
            "g2-timeout",
            "TimeoutError: upstream timed out after <n> ms",
            None,
            3,
            None,
            now_ms,
        );
        b.observe(
            "g2-schema",
            "ValidationError: missing field <field>",
            None,
            2,
            None,
            now_ms,
        );
        b.hold("g2-schema", "ops", Some(now_ms + 86_400_000), None, now_ms)
    })
    .await
    .expect("the book is written");
}

#[tokio::test]
async fn at_the_reminder_hour_one_digest_lists_each_dlqs_groups_once_a_day() {
    use redrive_archiver::digest::{Digest, DigestOutcome};
    // GIVEN a DLQ with messages and a book of two groups, one held; an empty second DLQ; the
    // alerts topic read through a subscribed queue
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let rig = digest_rig().await;
    let quiet = queue_with_retention(&sqs, "345600").await;
    send_all(
        &sqs,
        &queues.dlq_url,
        &["secret-digest-body-1", "secret-digest-body-2"],
        false,
    )
    .await;
    // 2026-11-21T09:30:00Z, the reminder hour; the book written then
    let nine = 1_795_253_400_000_i64;
    two_groups_one_held(&rig.table, &queues.dlq_url, nine - 600_000).await;
    let list = format!("{},{quiet}", queues.dlq_url);
    let cfg = config(&[
        ("ARCHIVE_BUCKET", &bucket),
        ("POISON_QUEUE_URL", &queues.poison_url),
        ("DLQ_URLS", &list),
        ("ARCHIVE_AFTER_SECONDS", "3600"),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &unique_name("ns")),
        ("ALERTS_TOPIC_ARN", &rig.topic),
        ("TRIAGE_TABLE", &rig.table),
        ("REMINDER_HOUR_UTC", "9"),
    ]);
    let digest = Digest::new(
        &moto().sdk_config().await,
        cfg.digest.clone().expect("a digest"),
    );
    let archiver = on_moto(&s3, cfg).await.with_digest(Some(digest));

    // WHEN it runs in another hour, THEN nothing is published (and the day is not claimed)
    let eight = nine - 3_600_000;
    let summary = archiver.run_at(None, eight).await;
    assert_eq!(summary.digest, Some(DigestOutcome::NotTheHour));
    assert!(notifications(&rig.own, &rig.inbox).await.is_empty());

    // WHEN it runs at the reminder hour
    let summary = archiver.run_at(None, nine).await;

    // THEN exactly one message lists the DLQ with its depth and both groups with their states,
    // and no body; the empty DLQ is not listed; the archiving ran as always
    assert_eq!(summary.digest, Some(DigestOutcome::Sent), "{summary:?}");
    assert_eq!(summary.queues.len(), 3, "every queue swept: {summary:?}");
    let got = notifications(&rig.own, &rig.inbox).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let (subject, message) = &got[0];
    assert_eq!(subject, "redrive: 2 groups on 1 DLQ");
    assert_eq!(message["kind"], "daily-digest");
    assert_eq!(message["at"], "2026-11-21T09:30:00Z");
    let listed = message["queues"].as_array().expect("queues");
    assert_eq!(listed.len(), 1, "{message}");
    assert_eq!(listed[0]["queue"], json!(queues.dlq_name));
    assert_eq!(listed[0]["depth"], json!(2));
    let groups = listed[0]["groups"].as_array().expect("groups");
    let by_id = |id: &str| {
        groups
            .iter()
            .find(|g| g["group"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not in {message}"))
    };
    let timeout = by_id("g2-timeout");
    assert_eq!(
        (
            timeout["state"].clone(),
            timeout["count"].clone(),
            timeout["heldUntil"].clone()
        ),
        (json!("new"), json!(3), json!(null))
    );
    assert_eq!(
        timeout["title"],
        "TimeoutError: upstream timed out after <n> ms"
    );
    assert_eq!(timeout["lastSeen"], "2026-11-21T09:20:00Z");
    let schema = by_id("g2-schema");
    assert_eq!(
        (
            schema["state"].clone(),
            schema["count"].clone(),
            schema["heldUntil"].clone()
        ),
        (json!("held"), json!(2), json!("2026-11-22T09:20:00Z"))
    );
    assert!(
        !message.to_string().contains("secret-digest-body"),
        "a body in the digest"
    );

    // AND a second run the same day publishes nothing more, from this archiver or another
    let again = archiver.run_at(None, nine + 1_200_000).await;
    assert_eq!(again.digest, Some(DigestOutcome::AlreadySent));
    assert!(notifications(&rig.own, &rig.inbox).await.is_empty());
}

#[tokio::test]
async fn a_failed_publish_is_logged_and_the_archiving_goes_on() {
    use redrive_archiver::digest::{Digest, DigestOutcome};
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let rig = digest_rig().await;
    send_all(&sqs, &queues.poison_url, &["old-1"], false).await;
    send_all(&sqs, &queues.dlq_url, &["waiting"], false).await;
    // A topic that does not exist: SNS refuses the publish.
    let missing = format!("{}-gone", rig.topic);
    let cfg = config(&[
        ("ARCHIVE_BUCKET", &bucket),
        ("POISON_QUEUE_URL", &queues.poison_url),
        ("DLQ_URL", &queues.dlq_url),
        ("ARCHIVE_AFTER_SECONDS", "0"),
        ("ARCHIVE_DLQ", "true"),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &unique_name("ns")),
        ("ALERTS_TOPIC_ARN", &missing),
        ("TRIAGE_TABLE", &rig.table),
        ("REMINDER_HOUR_UTC", "9"),
    ]);
    let digest = Digest::new(&moto().sdk_config().await, cfg.digest.clone().unwrap());
    let archiver = on_moto(&s3, cfg).await.with_digest(Some(digest));
    let summary = archiver.run_at(None, 1_795_253_400_000).await;
    assert_eq!(summary.digest, Some(DigestOutcome::Failed));
    assert_eq!((summary.archived, summary.failed), (2, 0), "{summary:?}");
}

#[tokio::test]
async fn the_archiver_lambda_publishes_the_digest_at_its_reminder_hour() {
    let (sqs, _s3, queues, bucket) = queues_and_bucket(false).await;
    let rig = digest_rig().await;
    // The Lambda reads its own clock: the hour set here must still be the hour of both
    // invocations, so a test that would start in an hour's last two minutes waits for the next.
    const HOUR_MS: i64 = 3_600_000;
    let into_hour = redrive_shared::clock::now_ms().rem_euclid(HOUR_MS);
    if into_hour > HOUR_MS - 120_000 {
        tokio::time::sleep(Duration::from_millis((HOUR_MS - into_hour + 1_000) as u64)).await;
    }
    let now = redrive_shared::clock::now_ms();
    two_groups_one_held(&rig.table, &queues.dlq_url, now).await;
    send_raw(&sqs, &queues.dlq_url, "secret-lambda-digest-body", &[]).await;
    let hour = redrive_archiver::digest::hour_utc(now).to_string();
    let mut env = moto().env();
    env.extend([
        ("ARCHIVE_BUCKET".to_string(), bucket.clone()),
        ("POISON_QUEUE_URL".to_string(), queues.poison_url.clone()),
        ("DLQ_URL".to_string(), queues.dlq_url.clone()),
        ("ARCHIVE_AFTER_SECONDS".to_string(), "3600".to_string()),
        ("METRIC_NAMESPACE".to_string(), unique_name("ns")),
        ("ALERTS_TOPIC_ARN".to_string(), rig.topic.clone()),
        ("TRIAGE_TABLE".to_string(), rig.table.clone()),
        ("REMINDER_HOUR_UTC".to_string(), hour),
    ]);
    let watch = LambdaWatch::start(&["archiver"], &env).await;
    let response = watch
        .invoke("archiver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("invoke");
    assert_eq!(
        response["digest"],
        json!("sent"),
        "{response}\n{}",
        watch.log()
    );
    // The digest, and the alert of the group the sweep found after it (the live index: the
    // message sent by hand, a group the book did not know).
    let (got, alerts): (Vec<_>, Vec<_>) = notifications(&rig.own, &rig.inbox)
        .await
        .into_iter()
        .partition(|(_, m)| m["kind"] == "daily-digest");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "redrive: 2 groups on 1 DLQ");
    assert_eq!(
        got[0].1["queues"][0]["groups"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].1["kind"], "new-group");
    assert_eq!(response["queues"][1]["groups"], json!(1), "{response}");
    let response = watch
        .invoke("archiver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("invoke");
    assert_eq!(response["digest"], json!("already-sent"), "{response}");
    assert!(notifications(&rig.own, &rig.inbox).await.is_empty());
    let log = watch.log();
    assert!(log.contains("digest-sent"), "{log}");
    assert!(!log.contains("secret-lambda-digest-body"));
}

#[tokio::test]
async fn a_bad_reminder_hour_fails_the_lambdas_init_naming_it() {
    let (sqs, _s3, queues, bucket) = queues_and_bucket(false).await;
    let rig = digest_rig().await;
    send_raw(&sqs, &queues.poison_url, "stays", &[]).await;
    let mut env = moto().env();
    env.extend([
        ("ARCHIVE_BUCKET".to_string(), bucket.clone()),
        ("POISON_QUEUE_URL".to_string(), queues.poison_url.clone()),
        ("ARCHIVE_AFTER_SECONDS".to_string(), "0".to_string()),
        ("ALERTS_TOPIC_ARN".to_string(), rig.topic.clone()),
        ("TRIAGE_TABLE".to_string(), rig.table.clone()),
        ("REMINDER_HOUR_UTC".to_string(), "24".to_string()),
    ]);
    let watch = LambdaWatch::start(&["archiver"], &env).await;
    let err = watch
        .invoke("archiver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect_err("init fails");
    assert!(err.contains("REMINDER_HOUR_UTC"), "{err}");
    // Nothing was archived: the refused init touched no queue.
    redrive_tests::fixture::assert_never_received(&sqs, &queues.poison_url).await;
    assert!(notifications(&rig.own, &rig.inbox).await.is_empty());
}

/// Sends order `n`'s message whose consumer recorded a transient `code` (body `{}`).
async fn send_failed_order(sqs: &aws_sdk_sqs::Client, url: &str, n: u64, code: &str) {
    let meta = redrive_tests::transiently_failed(n, code);
    let attribute = attr_string(&meta.to_json());
    send_raw(
        sqs,
        url,
        "{}",
        &[(redrive_shared::meta::ATTRIBUTE_NAME, attribute)],
    )
    .await;
}

#[tokio::test]
async fn each_sweep_records_the_groups_it_left_on_the_dlq_in_its_triage_book() {
    use redrive_archiver::index::Index;
    use redrive_shared::triage::state::State;
    // GIVEN a DLQ holding three causes: three orders a downstream answered 503, two it
    // throttled (429), and one message sent by hand with no recorded cause; none old enough
    // to archive; the books' table and the alerts topic configured
    let (sqs, s3, queues, bucket) = queues_and_bucket(false).await;
    let rig = digest_rig().await;
    for (n, code) in redrive_tests::FAILED_ORDERS {
        send_failed_order(&sqs, &queues.dlq_url, n, code).await;
    }
    send_raw(&sqs, &queues.dlq_url, r#"{"order":7}"#, &[]).await;
    let now = redrive_shared::clock::now_ms();
    // Not the reminder hour: this run sends no digest.
    let hour = (redrive_archiver::digest::hour_utc(now) + 12) % 24;
    let cfg = config(&[
        ("ARCHIVE_BUCKET", &bucket),
        ("POISON_QUEUE_URL", &queues.poison_url),
        ("DLQ_URL", &queues.dlq_url),
        ("ARCHIVE_AFTER_SECONDS", "3600"),
        ("ARCHIVE_VISIBILITY_SECONDS", "30"),
        ("METRIC_NAMESPACE", &unique_name("ns")),
        ("ALERTS_TOPIC_ARN", &rig.topic),
        ("TRIAGE_TABLE", &rig.table),
        ("REMINDER_HOUR_UTC", &hour.to_string()),
    ]);
    assert_eq!(cfg.triage_table.as_deref(), Some(rig.table.as_str()));
    let sdk = moto().sdk_config().await;
    let index = Index::new(&sdk, &rig.table, Some(&rig.topic), None);
    let archiver = on_moto(&s3, cfg).await.with_index(Some(index));
    let books = redrive_engine::triage_store::DynamoDbTriageStore::new(&sdk, &rig.table);
    let book = || async {
        books
            .read(&queues.dlq_url)
            .await
            .expect("the book reads")
            .expect("the sweep wrote the DLQ's book")
    };
    let timeout = redrive_tests::triage_group(&redrive_tests::transiently_failed(1, "HTTP_503"));
    let throttled = redrive_tests::triage_group(&redrive_tests::transiently_failed(4, "HTTP_429"));

    // WHEN it sweeps
    let first = archiver.run(None).await;

    // THEN the DLQ's book holds exactly the three groups with their counts, each new
    let dlq = first
        .queues
        .iter()
        .find(|q| queues.dlq_url.ends_with(&q.queue))
        .expect("the DLQ was swept");
    assert_eq!((dlq.kept, dlq.archived), (6, 0));
    assert_eq!(dlq.groups, Some(3), "{first:?}");
    let b = book().await;
    assert_eq!(b.groups.len(), 3, "{:?}", b.groups.keys());
    assert_eq!(b.groups[&timeout].last_count, 3);
    assert_eq!(b.groups[&throttled].last_count, 2);
    let by_hand: Vec<_> = b
        .groups
        .iter()
        .filter(|(id, _)| **id != timeout && **id != throttled)
        .collect();
    assert_eq!(by_hand.len(), 1);
    assert_eq!(by_hand[0].1.last_count, 1);
    assert!(b.groups.values().all(|g| g.state == State::New));
    assert!(b.passed_at.is_some(), "the book says when it was indexed");
    // ... and one alert per new group went out, never one per message, with no body in them
    let alerts = notifications(&rig.own, &rig.inbox).await;
    let mut kinds: Vec<(String, String)> = alerts
        .iter()
        .map(|(_, a)| (a["kind"].to_string(), a["group"].to_string()))
        .collect();
    kinds.sort();
    assert_eq!(alerts.len(), 3, "{kinds:?}");
    assert!(alerts.iter().all(|(_, a)| a["kind"] == "new-group"));
    assert!(alerts.iter().all(|(s, _)| !s.contains("order")));
    // the poison queue, empty, has a book with no group
    let poison = books
        .read(&queues.poison_url)
        .await
        .expect("the book reads")
        .expect("the poison queue's book");
    assert!(poison.groups.is_empty());

    // WHEN the throttled orders leave the DLQ and it sweeps again
    let mut received = Vec::new();
    while received.len() < 6 {
        received.extend(redrive_tests::receive_raw(&sqs, &queues.dlq_url, 60).await);
    }
    for m in received {
        let throttled_order = m
            .message_attributes()
            .and_then(|a| a.get(redrive_shared::meta::ATTRIBUTE_NAME))
            .and_then(|v| v.string_value())
            .is_some_and(|v| v.contains("HTTP_429"));
        let handle = m.receipt_handle().unwrap_or_default();
        if throttled_order {
            let deleted = sqs
                .delete_message()
                .queue_url(&queues.dlq_url)
                .receipt_handle(handle);
            deleted.send().await.expect("DeleteMessage");
        } else {
            let shown = sqs.change_message_visibility().queue_url(&queues.dlq_url);
            let shown = shown.receipt_handle(handle).visibility_timeout(0);
            shown.send().await.expect("ChangeMessageVisibility");
        }
    }
    redrive_tests::wait_for_depth(&sqs, &queues.dlq_url, 4, Duration::from_secs(10)).await;
    let second = archiver.run(None).await;

    // THEN the group that left is resolved, the others counted again, and no alert repeats
    let dlq = second
        .queues
        .iter()
        .find(|q| queues.dlq_url.ends_with(&q.queue))
        .expect("the DLQ was swept");
    assert_eq!((dlq.kept, dlq.groups), (4, Some(2)), "{second:?}");
    let b = book().await;
    assert_eq!(b.groups[&throttled].state, State::Resolved);
    assert_eq!(b.groups[&timeout].state, State::New);
    assert_eq!(b.groups[&timeout].last_count, 3);
    assert!(notifications(&rig.own, &rig.inbox).await.is_empty());
}
