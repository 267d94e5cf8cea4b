//! `redrive export`, `redrive import` and the shared filters, run as the built binary against
//! moto (SQS and S3): what each command did to the queues and the bucket, what it printed,
//! and its exit code.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use aws_sdk_sqs::types::{Message, MessageAttributeValue, QueueAttributeName};
use proptest::prelude::*;
use redrive_shared::archive::{ArchivedMessage, parse_jsonl};
use redrive_shared::attributes::{AttributeValue, Attributes, MessageAttribute};
use redrive_shared::key::{KeySource, derive};
use redrive_shared::meta::{ATTRIBUTE_NAME, ErrorClass, IsolationReason, LastError, RedriveMeta};
use redrive_shared::sdk::{attribute_to_sdk, attributes_from_sdk};
use redrive_tests::{
    ScratchDir, batch_sends_keep_trace_headers, drain_all, moto, producer_trace_header, send_fifo,
    send_raw, send_traced, trace_header_of, unique_name,
};
use serde_json::Value;

use common::{Run, counts, drained_bodies, run_redrive};

/// The binary with moto's environment and nothing of the caller's AWS_* variables, under the
/// operator's managed policy for the queues `args` name (`iam::cli_env`).
fn redrive(args: &[&str]) -> Run {
    run_redrive(args, &[], None)
}

/// [`redrive`] with these environment variables too.
fn redrive_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_redrive(args, env, None)
}

/// [`redrive`] by an operator whose own identity grants `bucket`, their export bucket (the
/// stack's policy does not).
fn redrive_to(bucket: &str, args: &[&str]) -> Run {
    run_redrive(args, &[], Some(bucket))
}

async fn s3() -> aws_sdk_s3::Client {
    // moto answers path-style requests on a custom endpoint (a virtual-hosted bucket would be
    // a DNS name under 127.0.0.1): the adapter's client is path-style.
    redrive_engine::s3::client(&moto().sdk_config().await)
}

async fn bucket(s3: &aws_sdk_s3::Client) -> String {
    let name = unique_name("exports").to_lowercase().replace('_', "-");
    s3.create_bucket().bucket(&name).send().await.unwrap();
    name
}

async fn queue(
    sqs: &aws_sdk_sqs::Client,
    prefix: &str,
    fifo: bool,
    max_size: Option<usize>,
) -> String {
    named_queue(sqs, &unique_name(prefix), fifo, max_size).await
}

/// The queue `name` (`.fifo` added for a FIFO queue).
async fn named_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    fifo: bool,
    max_size: Option<usize>,
) -> String {
    let name = format!("{name}{}", if fifo { ".fifo" } else { "" });
    let mut request = sqs.create_queue().queue_name(&name);
    if fifo {
        request = request
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::ContentBasedDeduplication, "false");
    }
    if let Some(size) = max_size {
        request = request.attributes(QueueAttributeName::MaximumMessageSize, size.to_string());
    }
    request.send().await.unwrap().queue_url.unwrap()
}

async fn send_model(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    body: &str,
    attributes: &Attributes,
) -> String {
    let pairs: Vec<(&str, MessageAttributeValue)> = attributes
        .iter()
        .map(|(k, v)| (k.as_str(), attribute_to_sdk(v)))
        .collect();
    send_raw(sqs, url, body, &pairs).await
}

/// A file `name` in a directory of its own, removed with the directory when dropped.
struct TempFile {
    path: PathBuf,
    _dir: ScratchDir,
}

impl std::ops::Deref for TempFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

fn temp_path(name: &str) -> TempFile {
    let dir = ScratchDir::new("redrive-export");
    TempFile {
        path: dir.file(name),
        _dir: dir,
    }
}

/// `redrive export` of `queue` to `file`, with `flags`.
fn export(file: &Path, queue: &str, flags: &[&str]) -> Run {
    let mut args = vec!["export", "--queue", queue, "--to", file.to_str().unwrap()];
    args.extend_from_slice(flags);
    redrive(&args)
}

/// Exports `queue` to a new file `name` with `flags` on top; asserts the run succeeded and
/// returns the file and its lines.
fn export_to_file(queue: &str, name: &str, flags: &[&str]) -> (TempFile, Vec<ArchivedMessage>) {
    let file = temp_path(name);
    let run = export(&file, queue, flags);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = parse_jsonl(&std::fs::read_to_string(&file).unwrap()).unwrap();
    (file, lines)
}

/// `redrive import` of `file` to the queue `dest`, with `flags`.
fn import(file: &Path, dest: &str, flags: &[&str]) -> Run {
    let mut args = vec!["import", "--from", file.to_str().unwrap(), "--to", dest];
    args.extend_from_slice(flags);
    redrive(&args)
}

/// Imports `file` to the queue `dest`; asserts the run succeeded.
fn import_file(file: &Path, dest: &str) {
    let run = import(file, dest, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// The consumer's default idempotency key of a received message.
fn consumer_key(m: &Message) -> String {
    let attributes = attributes_from_sdk(m.message_attributes.as_ref());
    let id = m.message_id().unwrap();
    let (meta, _) = RedriveMeta::read(&attributes, id);
    derive(
        &KeySource::Message,
        &meta.original_message_id,
        m.body().unwrap(),
        &attributes,
    )
    .unwrap()
    .to_string()
}

fn parked(original: &str, reason: IsolationReason, code: &str) -> MessageAttribute {
    RedriveMeta {
        attempt: 5,
        isolated_at: Some("2026-11-21T11:00:00Z".into()),
        reason: Some(reason),
        last_error: Some(LastError::new(
            ErrorClass::Permanent,
            code,
            "rejected",
            "2026-11-21T10:59:00Z".into(),
        )),
        ..RedriveMeta::fresh(original)
    }
    .to_attribute()
}

/// Characters SQS accepts in a body or a string attribute.
fn sqs_char() -> impl Strategy<Value = char> {
    proptest::char::ranges(
        vec![
            '\t'..='\n',
            '\r'..='\r',
            ' '..='\u{D7FF}',
            '\u{E000}'..='\u{FFFD}',
            '\u{10000}'..='\u{10FFFF}',
        ]
        .into(),
    )
}

fn sqs_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(sqs_char(), 1..max).prop_map(|c| c.into_iter().collect())
}

fn attribute() -> impl Strategy<Value = MessageAttribute> {
    prop_oneof![
        ("(String|String\\.[a-z]{1,6})", sqs_text(40)).prop_map(|(t, v)| MessageAttribute {
            data_type: t,
            value: AttributeValue::String(v),
        }),
        ("(Number|Number\\.int)", "-?[0-9]{1,12}(\\.[0-9]{1,6})?").prop_map(|(t, v)| {
            MessageAttribute {
                data_type: t,
                value: AttributeValue::String(v),
            }
        }),
        (
            "(Binary|Binary\\.gz)",
            proptest::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(t, v)| MessageAttribute {
                data_type: t,
                value: AttributeValue::Binary(v),
            }),
    ]
}

#[derive(Debug, Clone)]
struct Sample {
    body: String,
    attributes: Attributes,
}

/// A body of random SQS characters; `big` repeats it to within 300 bytes of 1 MiB with its
/// attributes (the import stamps x-redrive into that room).
fn sample() -> impl Strategy<Value = Sample> {
    (
        sqs_text(300),
        any::<bool>(),
        proptest::collection::btree_map("[a-zA-Z][a-zA-Z0-9_-]{0,12}", attribute(), 0..9),
        proptest::option::of("chain-[a-z0-9]{16}"),
    )
        .prop_map(|(seed, big, mut attributes, chain)| {
            attributes.remove(ATTRIBUTE_NAME);
            if let Some(chain) = chain {
                attributes.insert(
                    ATTRIBUTE_NAME.into(),
                    RedriveMeta {
                        attempt: 3,
                        ..RedriveMeta::fresh(&chain)
                    }
                    .to_attribute(),
                );
            }
            let mut body = seed.clone();
            if big {
                let target =
                    1_048_576 - 300 - redrive_shared::attributes::message_size("", &attributes);
                while body.len() + seed.len() <= target {
                    body.push_str(&seed);
                }
            }
            Sample { body, attributes }
        })
}

/// Every message of `dest`, keyed by the originalMessageId of its x-redrive: as archived, or
/// stamped by the import with the MessageId it had on the exported queue.
async fn imported(sqs: &aws_sdk_sqs::Client, dest: &str) -> HashMap<String, (String, Attributes)> {
    drain_all(sqs, dest)
        .await
        .into_iter()
        .map(|m| {
            let attributes = attributes_from_sdk(m.message_attributes.as_ref());
            let (meta, _) = RedriveMeta::read(&attributes, m.message_id().unwrap());
            (
                meta.original_message_id,
                (m.body().unwrap().to_string(), attributes),
            )
        })
        .collect()
}

async fn round_trip(samples: Vec<Sample>) {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let bucket = bucket(&s3).await;
    let source = queue(&sqs, "rt-src", false, None).await;
    // By the originalMessageId each copy will carry: the stamped chain, else the MessageId.
    let mut sent = BTreeMap::new();
    let mut by_message_id = BTreeMap::new();
    for s in &samples {
        let id = send_model(&sqs, &source, &s.body, &s.attributes).await;
        let (meta, _) = RedriveMeta::read(&s.attributes, &id);
        by_message_id.insert(id, s.clone());
        sent.insert(meta.original_message_id, s.clone());
    }
    let n = samples.len();

    // WHEN the queue is exported to a file and to S3, without --delete
    let file = temp_path("rt.jsonl");
    let to_file = export(&file, &source, &["--json"]);
    assert_eq!(to_file.code, 0, "{}", to_file.stderr);
    assert_eq!(to_file.json()["exported"], n);
    let location = format!("s3://{bucket}/round/trip");
    let to_s3 = redrive_to(
        &bucket,
        &["export", "--queue", &source, "--to", &location, "--json"],
    );
    assert_eq!(to_s3.code, 0, "{}", to_s3.stderr);
    assert_eq!(to_s3.json()["exported"], n);

    // THEN the queue is as it was
    assert_eq!(counts(&sqs, &source).await, (n as u64, 0));
    // AND the file holds every message as sent, with its SentTimestamp
    let lines = parse_jsonl(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(lines.len(), n);
    for line in &lines {
        let s = &by_message_id[&line.message_id];
        assert_eq!(line.body, s.body);
        assert_eq!(line.attributes, s.attributes);
        assert_eq!(line.queue, source);
        assert!(line.system.sent_timestamp_ms().is_some());
    }

    // WHEN each is imported to a queue of its own
    for from in [file.to_str().unwrap(), &location] {
        let dest = queue(&sqs, "rt-dst", false, None).await;
        let run = redrive_to(
            &bucket,
            &["import", "--from", from, "--to", &dest, "--json"],
        );
        assert_eq!(run.code, 0, "{from}: {}", run.stderr);
        assert_eq!(run.json()["sent"].as_array().unwrap().len(), n);

        // THEN every body and attribute arrived byte for byte, with its type; a message
        // exported without x-redrive carries one keyed on its original MessageId
        let got = imported(&sqs, &dest).await;
        assert_eq!(got.len(), n, "{from}");
        for (id, s) in &sent {
            let (body, mut attributes) = got
                .get(id)
                .unwrap_or_else(|| panic!("{from}: {id} not imported"))
                .clone();
            assert!(body == s.body, "{from}: the body of {id} differs");
            if !s.attributes.contains_key(ATTRIBUTE_NAME) {
                let stamp = attributes.remove(ATTRIBUTE_NAME).expect("stamped");
                let meta = RedriveMeta::parse(stamp.as_str().unwrap()).unwrap();
                assert_eq!(
                    (meta.original_message_id.as_str(), meta.attempt),
                    (id.as_str(), 0)
                );
            }
            assert_eq!(attributes, s.attributes, "{from}: attributes of {id}");
        }
    }
}

proptest! {
    // Few cases: each one runs the binary four times against moto.
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]
    #[test]
    fn export_then_import_round_trips_bodies_and_attributes_byte_exactly(
        samples in proptest::collection::vec(sample(), 1..4)
    ) {
        tokio::runtime::Runtime::new().unwrap().block_on(round_trip(samples));
    }
}

#[tokio::test]
async fn an_import_run_twice_reaches_the_consumer_with_the_same_keys() {
    // GIVEN an export of a stamped message and two unstamped ones
    let sqs = moto().sqs().await;
    let source = queue(&sqs, "twice-src", false, None).await;
    let mut stamped = Attributes::new();
    stamped.insert(
        ATTRIBUTE_NAME.into(),
        parked("chain-a", IsolationReason::MaxAttempts, "HTTP_503"),
    );
    send_model(&sqs, &source, "stamped", &stamped).await;
    send_raw(&sqs, &source, "plain-1", &[]).await;
    send_raw(&sqs, &source, "plain-2", &[]).await;
    let (file, _) = export_to_file(&source, "twice.jsonl", &["--delete"]);

    // WHEN it is imported twice
    let dest = queue(&sqs, "twice-dst", false, None).await;
    for _ in 0..2 {
        import_file(&file, &dest);
    }

    // THEN the six copies carry three consumer keys, each twice: the consumer's side effect
    // happens once per message
    let mut keys: BTreeMap<String, usize> = BTreeMap::new();
    for m in drain_all(&sqs, &dest).await {
        *keys.entry(consumer_key(&m)).or_default() += 1;
    }
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.values().all(|&n| n == 2), "{keys:?}");
    assert!(keys.keys().any(|k| k.starts_with("chain-a:")), "{keys:?}");
}

#[tokio::test]
async fn export_keeps_the_aws_trace_header_and_import_sends_it_on() {
    // GIVEN a message of a traced producer and an untraced one
    let sqs = moto().sqs().await;
    let source = queue(&sqs, "traced-src", false, None).await;
    let header = producer_trace_header();
    send_traced(&sqs, &source, "traced", &[], &header).await;
    send_raw(&sqs, &source, "untraced", &[]).await;

    // WHEN they are exported
    let (file, lines) = export_to_file(&source, "traced.jsonl", &["--delete"]);

    // THEN the traced message's line keeps its header in `system`, the other's names none
    let line = |body: &str| lines.iter().find(|l| l.body == body).unwrap();
    assert_eq!(
        line("traced").system.aws_trace_header.as_deref(),
        Some(header.as_str())
    );
    assert_eq!(line("untraced").system.aws_trace_header, None);

    // AND WHEN they are imported, the traced copy carries the producer's header
    let dest = queue(&sqs, "traced-dst", false, None).await;
    import_file(&file, &dest);
    let copies = drain_all(&sqs, &dest).await;
    assert_eq!(copies.len(), 2);
    if batch_sends_keep_trace_headers() {
        let copy = |body: &str| copies.iter().find(|m| m.body() == Some(body)).unwrap();
        assert_eq!(trace_header_of(copy("traced")), Some(header.as_str()));
        assert_eq!(trace_header_of(copy("untraced")), None);
    }
}

#[tokio::test]
async fn a_fifo_import_keeps_groups_and_deduplicates_a_repeat() {
    // GIVEN a FIFO queue with two groups, exported
    let sqs = moto().sqs().await;
    let source = queue(&sqs, "fifo-src", true, None).await;
    for (body, group) in [("a1", "a"), ("b1", "b"), ("a2", "a")] {
        send_fifo(&sqs, &source, body, group, &format!("d-{body}"), &[]).await;
    }
    let (file, lines) = export_to_file(&source, "fifo.jsonl", &[]);
    assert!(
        lines
            .iter()
            .all(|l| l.system.message_group_id.is_some() && l.system.sequence_number.is_some())
    );

    // WHEN it is imported to another FIFO queue twice (within the deduplication window)
    let dest = queue(&sqs, "fifo-dst", true, None).await;
    for _ in 0..2 {
        import_file(&file, &dest);
    }

    // THEN each message arrived once, in its group, in order
    let got = drain_all(&sqs, &dest).await;
    let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &got {
        let group = m.attributes().unwrap()
            [&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId]
            .clone();
        by_group
            .entry(group)
            .or_default()
            .push(m.body().unwrap().to_string());
    }
    assert_eq!(by_group["a"], ["a1", "a2"]);
    assert_eq!(by_group["b"], ["b1"]);
    assert_eq!(got.len(), 3);
}

#[tokio::test]
async fn a_bad_file_sends_nothing_and_the_error_names_the_line() {
    let sqs = moto().sqs().await;
    let source = queue(&sqs, "bad-src", false, None).await;
    for i in 0..3 {
        send_raw(&sqs, &source, &format!("{{\"n\":{i}}}"), &[]).await;
    }
    send_raw(&sqs, &source, &"x".repeat(2000), &[]).await;
    let (file, _) = export_to_file(&source, "good.jsonl", &[]);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (small, big): (Vec<&str>, Vec<&str>) = lines.iter().partition(|l| l.len() < 1500);
    let dest = queue(&sqs, "bad-dst", false, Some(1024)).await;

    let cases: Vec<(String, &str)> = vec![
        // line 2's body edited: its digest no longer matches
        (
            format!(
                "{}\n{}\n{}\n",
                small[0],
                small[1].replacen("\\\"n\\\":", "\\\"m\\\":", 1),
                small[2]
            ),
            "line 2: bodySha256",
        ),
        // line 3 is not JSON
        (
            format!("{}\n{}\n{{oops\n", small[0], small[1]),
            "line 3: line: not a JSON object",
        ),
        // line 2 is an unknown format
        (
            format!(
                "{}\n{}\n",
                small[0],
                small[1].replace("redrive.archive/1", "other/9")
            ),
            "line 2: format",
        ),
        // line 2 is larger than the destination accepts
        (
            format!("{}\n{}\n{}\n", small[0], big[0], small[1]),
            "line 2: message",
        ),
    ];
    for (content, expected) in cases {
        let bad = temp_path("bad.jsonl");
        std::fs::write(&bad, &content).unwrap();
        let run = import(&bad, &dest, &[]);
        assert_eq!(run.code, 2, "{expected}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
        assert!(run.stderr.contains("nothing was sent"), "{}", run.stderr);
        assert_eq!(
            counts(&sqs, &dest).await,
            (0, 0),
            "{expected}: something was sent"
        );
    }
    let size_error = import(&file, &dest, &[]);
    assert!(size_error.stderr.contains("1024"), "{}", size_error.stderr);

    // A file that is not UTF-8 names its line too.
    let binary = temp_path("binary.jsonl");
    std::fs::write(&binary, [small[0].as_bytes(), b"\n\xff\xfe\n"].concat()).unwrap();
    let run = import(&binary, &dest, &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("line 2: not UTF-8"), "{}", run.stderr);
    assert_eq!(counts(&sqs, &dest).await, (0, 0));
}

#[tokio::test]
async fn an_archive_older_than_the_idempotency_ttl_is_refused_unless_allowed() {
    // GIVEN an archive of two messages: one sent 50 days ago (past the consumer's default
    // idempotency TTL of 42 days, so it may have forgotten the key), one sent an hour ago
    let sqs = moto().sqs().await;
    let dest = queue(&sqs, "late-dst", false, None).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let archived = |id: &str, age_ms: i64| {
        redrive_shared::archive::to_line(&redrive_shared::archive::ArchivedMessage {
            queue: dest.clone(),
            archived_at_ms: now,
            message_id: id.into(),
            body: format!("{{\"order\":\"{id}\"}}"),
            attributes: Attributes::new(),
            system: redrive_shared::archive::SystemAttributes::from_pairs([(
                "SentTimestamp",
                (now - age_ms).to_string().as_str(),
            )]),
        })
    };
    let file = temp_path("late.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n",
            archived("fresh-1", 3_600_000),
            archived("late-1", 50 * 86_400_000)
        ),
    )
    .unwrap();
    let from = file.to_str().unwrap();

    // WHEN it is imported, THEN nothing is sent and the error says which line, how old, the
    // TTL and how to override
    let run = redrive(&["import", "--from", from, "--to", &dest]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    for needle in [
        "line 2: message late-1 is 43200",
        "idempotency TTL of 3628800 s",
        "--allow-past-ttl",
        "nothing was sent",
    ] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(!run.stderr.contains("fresh-1"), "{}", run.stderr);
    assert_eq!(counts(&sqs, &dest).await, (0, 0));
    // The consumer's TTL, from the environment: 60 days covers both lines.
    let run = redrive_with(
        &["import", "--from", from, "--to", &dest, "--dry-run"],
        &[("IDEMPOTENCY_TTL_SECONDS", "5184000")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // A shorter TTL given on the command line refuses even the hour-old line.
    let run = redrive(&[
        "import",
        "--from",
        from,
        "--to",
        &dest,
        "--idempotency-ttl-seconds",
        "1800",
    ]);
    run.assert_stderr_has(2, "2 message(s)");
    // Forced: both are sent.
    let run = redrive(&["import", "--from", from, "--to", &dest, "--allow-past-ttl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(drain_all(&sqs, &dest).await.len(), 2);
}

#[tokio::test]
async fn export_leaves_the_queue_unless_delete_and_then_deletes_what_it_stored() {
    let sqs = moto().sqs().await;
    let s3 = s3().await;
    let bucket = bucket(&s3).await;
    let source = queue(&sqs, "del-src", false, None).await;
    for i in 0..12 {
        send_raw(&sqs, &source, &format!("m{i}"), &[]).await;
    }

    // An existing file is never overwritten, and the queue is not touched.
    let existing = temp_path("existing.jsonl");
    std::fs::write(&existing, "keep me\n").unwrap();
    let run = export(&existing, &source, &["--delete"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("never overwrites"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");
    assert_eq!(counts(&sqs, &source).await, (12, 0));

    // Without --delete: all exported, all still there and visible.
    let copy = temp_path("copy.jsonl");
    let run = export(&copy, &source, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("left as it was"), "{}", run.stdout);
    assert_eq!(std::fs::read_to_string(&copy).unwrap().lines().count(), 12);
    assert_eq!(counts(&sqs, &source).await, (12, 0));

    // --max bounds it.
    let five = temp_path("five.jsonl");
    let run = export(&five, &source, &["--max", "5", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["status"], "limit");
    assert_eq!(std::fs::read_to_string(&five).unwrap().lines().count(), 5);

    // With --delete to S3: the object holds every message, and the queue is empty.
    let run = redrive_to(
        &bucket,
        &[
            "export",
            "--queue",
            &source,
            "--to",
            &format!("s3://{bucket}/moved"),
            "--delete",
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    assert_eq!(
        (report["exported"].as_u64(), report["deleted"].as_u64()),
        (Some(12), Some(12))
    );
    assert_eq!(counts(&sqs, &source).await, (0, 0));
    let objects = report["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 1);
    let key = objects[0]
        .as_str()
        .unwrap()
        .strip_prefix(&format!("s3://{bucket}/"))
        .unwrap();
    assert!(key.starts_with("moved/"), "{key}");
    assert!(key.ends_with("-12.jsonl"), "{key}");
    let body = s3
        .get_object()
        .bucket(&bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    let text = String::from_utf8(body.body.collect().await.unwrap().into_bytes().to_vec()).unwrap();
    let mut bodies: Vec<String> = parse_jsonl(&text)
        .unwrap()
        .into_iter()
        .map(|m| m.body)
        .collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(bodies, expected);

    // A bucket that does not exist is an error before the queue is touched.
    send_raw(&sqs, &source, "stays", &[]).await;
    let run = redrive_to(
        "no-such-bucket-here",
        &[
            "export",
            "--queue",
            &source,
            "--to",
            "s3://no-such-bucket-here/x",
            "--delete",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(!run.stderr.contains("AccessDenied"), "{}", run.stderr);
    assert_eq!(counts(&sqs, &source).await, (1, 0));
}

fn ids(v: &Value, field: &str) -> Vec<String> {
    let mut out: Vec<String> = v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} missing: {v}"))
        .iter()
        .map(|m| m["messageId"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn the_filters_select_the_same_messages_on_every_command() {
    // GIVEN a poison queue with a gold permanent failure, a silver max-attempts message and
    // an unstamped non-JSON one of another tenant
    let sqs = moto().sqs().await;
    // Named as the stack's poison and source queues are (`<base>-poison`, `<base>`): the
    // operator's policy covers those.
    let base = unique_name("flt");
    let poison = named_queue(&sqs, &format!("{base}-poison"), false, None).await;
    let source = named_queue(&sqs, &base, false, None).await;
    let tenant = |t: &str| MessageAttribute::string(t);
    let mut a = Attributes::new();
    a.insert("tenant".into(), tenant("acme"));
    a.insert(
        ATTRIBUTE_NAME.into(),
        parked("chain-a", IsolationReason::PermanentFailure, "HTTP_400"),
    );
    let gold = send_model(&sqs, &poison, r#"{"customer":{"tier":"gold","id":7}}"#, &a).await;
    let mut b = Attributes::new();
    b.insert("tenant".into(), tenant("acme"));
    b.insert(
        ATTRIBUTE_NAME.into(),
        parked("chain-b", IsolationReason::MaxAttempts, "HTTP_503"),
    );
    let silver = send_model(
        &sqs,
        &poison,
        r#"{"customer":{"tier":"silver","id":8}}"#,
        &b,
    )
    .await;
    let mut c = Attributes::new();
    c.insert("tenant".into(), tenant("other"));
    let other = send_model(&sqs, &poison, "tier=gold", &c).await;
    let sorted = |mut v: Vec<&String>| {
        v.sort();
        v.into_iter().cloned().collect::<Vec<String>>()
    };

    // peek
    let peek = |filters: &[&str]| {
        let mut args = vec!["peek", "--queue", &poison, "--json"];
        args.extend(filters);
        let run = redrive(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        ids(&run.json(), "messages")
    };
    assert_eq!(
        peek(&["--where", "/customer/tier=gold"]),
        vec![gold.clone()]
    );
    assert_eq!(peek(&["--where", "/customer/id=8"]), vec![silver.clone()]);
    assert_eq!(
        peek(&["--attribute", "tenant=acme"]),
        sorted(vec![&gold, &silver])
    );
    assert_eq!(
        peek(&["--newer-than", "1h"]),
        sorted(vec![&gold, &silver, &other])
    );
    assert!(peek(&["--older-than", "1h"]).is_empty());
    assert_eq!(peek(&["--error-code", "HTTP_503"]), vec![silver.clone()]);
    assert_eq!(
        peek(&[
            "--reason",
            "permanent-failure",
            "--attribute",
            "tenant=acme"
        ]),
        vec![gold.clone()]
    );

    // replay (dry run)
    let run = redrive(&[
        "replay",
        "--from",
        &poison,
        "--to",
        &source,
        "--all",
        "--error-code",
        "HTTP_503",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(&run.json(), "replayed"), vec![silver.clone()]);

    // discard (without --yes: lists what it would delete)
    let run = redrive(&[
        "discard",
        "--queue",
        &poison,
        "--all",
        "--attribute",
        "tenant=other",
        "--json",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(ids(&run.json(), "wouldDelete"), vec![other.clone()]);

    // export
    let (_, lines) = export_to_file(&poison, "filtered.jsonl", &["--reason", "max-attempts"]);
    assert_eq!(
        lines.iter().map(|l| &l.message_id).collect::<Vec<_>>(),
        [&silver]
    );

    // import (dry run, then for real) from a full export
    let (all, _) = export_to_file(&poison, "all.jsonl", &[]);
    let run = import(
        &all,
        &source,
        &["--where", "/customer/tier=gold", "--dry-run", "--json"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(ids(&run.json(), "wouldSend"), vec![gold.clone()]);
    assert_eq!(
        counts(&sqs, &source).await,
        (0, 0),
        "a dry run sends nothing"
    );
    let run = import(&all, &source, &["--attribute", "tenant=other"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(drained_bodies(&sqs, &source).await, ["tier=gold"]);

    // Nothing was consumed by looking.
    assert_eq!(counts(&sqs, &poison).await, (3, 0));

    // Bad filter values are usage errors.
    for bad in [
        &["--older-than", "2 days"][..],
        &["--where", "customer=1"],
        &["--attribute", "novalue"],
    ] {
        let mut args = vec!["peek", "--queue", &poison];
        args.extend(bad);
        assert_eq!(redrive(&args).code, 2, "{bad:?}");
    }
}
