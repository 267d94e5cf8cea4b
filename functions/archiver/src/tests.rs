use std::time::Duration;

use redrive_shared::Attributes;
use redrive_shared::archive::{self, SystemAttributes};
use redrive_shared::config::{ConfigError, Env, QueueUrl};

use super::*;
use crate::{DEFAULT_REMINDER_HOUR_UTC, DigestConfig};

fn env(vars: &[(&str, &str)]) -> Result<ArchiverConfig, ConfigError> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ArchiverConfig::from_env(&Env(move |k: &str| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }))
}

const POISON: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-poison";
const DLQ: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq";

#[test]
fn defaults_are_ten_days_the_archive_prefix_and_both_queues() {
    let c = env(&[
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
        ("DLQ_URL", DLQ),
    ])
    .unwrap();
    assert_eq!(c.archive_after, Duration::from_secs(864_000));
    assert_eq!(c.archive_after_variable, "ARCHIVE_AFTER_DAYS");
    assert_eq!(c.prefix, "archive");
    let names: Vec<&str> = c.queues.iter().map(|q| q.name()).collect();
    assert_eq!(names, ["orders-poison", "orders-dlq"]);
    assert_eq!(
        (c.max_messages_per_invocation, c.visibility_timeout_seconds),
        (1000, 120)
    );
}

#[test]
fn seconds_override_days_and_fractions_are_allowed() {
    let c = env(&[
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
        ("ARCHIVE_AFTER_DAYS", "3"),
        ("ARCHIVE_AFTER_SECONDS", "1.5"),
    ])
    .unwrap();
    assert_eq!(
        (c.archive_after, c.archive_after_variable),
        (Duration::from_millis(1500), "ARCHIVE_AFTER_SECONDS")
    );
    let c = env(&[
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
        ("ARCHIVE_AFTER_DAYS", "0.5"),
    ])
    .unwrap();
    assert_eq!(c.archive_after, Duration::from_secs(43_200));
    assert_eq!(c.queues.len(), 1, "no DLQ_URL: the poison queue only");
    let c = env(&[
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
        ("DLQ_URL", DLQ),
        ("ARCHIVE_DLQ", "false"),
    ])
    .unwrap();
    assert_eq!(
        c.queues.len(),
        1,
        "ARCHIVE_DLQ=false: the poison queue only"
    );
}

#[test]
fn invalid_values_fail_naming_the_variable_and_the_value() {
    let base = [
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
    ];
    let cases: &[(&str, &str)] = &[
        ("ARCHIVE_AFTER_DAYS", "14"),
        ("ARCHIVE_AFTER_DAYS", "0"),
        ("ARCHIVE_AFTER_DAYS", "ten"),
        ("ARCHIVE_AFTER_SECONDS", "-1"),
        ("ARCHIVE_AFTER_SECONDS", "1209600"),
        ("ARCHIVE_AFTER_SECONDS", "NaN"),
        ("ARCHIVE_BUCKET", "My_Bucket"),
        ("ARCHIVE_PREFIX", "/archive"),
        ("ARCHIVE_PREFIX", "a//b"),
        ("ARCHIVE_VISIBILITY_SECONDS", "5"),
        ("MAX_MESSAGES_PER_INVOCATION", "0"),
        ("DLQ_URL", POISON),
        ("POISON_QUEUE_URL", "orders-poison"),
    ];
    for (variable, value) in cases {
        let mut vars: Vec<(&str, &str)> = base
            .iter()
            .filter(|(k, _)| k != variable)
            .copied()
            .collect();
        vars.push((variable, value));
        let err = env(&vars)
            .expect_err(&format!("{variable}={value}"))
            .to_string();
        assert!(
            err.contains(variable) && err.contains(value),
            "{variable}={value}: {err}"
        );
    }
    let err = env(&[("POISON_QUEUE_URL", POISON)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing ARCHIVE_BUCKET"), "{err}");
}

#[test]
fn the_threshold_must_be_below_the_retention() {
    let c = env(&[
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
    ])
    .unwrap();
    let q = c.queues[0].clone();
    assert!(check_threshold(&c, &q, 864_001).is_ok());
    let err = check_threshold(&c, &q, 864_000).unwrap_err().to_string();
    assert!(
        err.contains("ARCHIVE_AFTER_DAYS") && err.contains(POISON) && err.contains("864000 s"),
        "{err}"
    );
}

#[test]
fn an_object_holds_one_line_per_message_in_the_shared_format() {
    let q = QueueUrl::parse(POISON).unwrap();
    let m = QueuedMessage {
        message_id: "m-1".into(),
        receipt_handle: "h".into(),
        body: "line one\nline two ✓".into(),
        attributes: Attributes::new(),
        dead_letter_source_arn: None,
        system: SystemAttributes::from_pairs([("SentTimestamp", "1795255200000")]),
    };
    let bytes = archive_object(&q, 1_795_255_260_000, &[m.clone(), m]);
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(
        text.matches('\n').count(),
        2,
        "one line each, newlines in bodies escaped"
    );
    let parsed = archive::parse_jsonl(&text).unwrap();
    assert_eq!(parsed[0].body, "line one\nline two ✓");
    assert_eq!(parsed[0].queue, POISON);
    assert_eq!(
        parsed[0].system.sent_timestamp_ms(),
        Some(1_795_255_200_000)
    );
}

/// An S3 endpoint that answers a PUT after `delay`: a slow network, which no emulator makes.
async fn slow_s3(delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                // The headers, then as many body bytes as they announce.
                let (head_end, length) = loop {
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if head.contains("expect: 100-continue") {
                            let _ = conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
                        }
                        break (end + 4, length);
                    }
                };
                while seen.len() < head_end + length {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(delay).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    url
}

#[tokio::test]
async fn an_upload_slower_than_an_sqs_call_may_be_still_succeeds() {
    // GIVEN the S3 client as the Lambda builds it (the shared SDK timeouts of every client),
    // and an S3 that takes 7 s to acknowledge a 300 KiB object
    let endpoint = slow_s3(Duration::from_secs(7)).await;
    let shared = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "AKIDEXAMPLE",
            "secret",
            None,
            None,
            "test",
        ))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .timeout_config(redrive_shared::sdk::timeout_config())
        .build();
    let client = for_uploads(aws_sdk_s3::Client::from_conf(shared));
    assert!(S3_OPERATION_TIMEOUT > redrive_shared::sdk::OPERATION_TIMEOUT);
    // WHEN the archive object is put
    let put =
        redrive_engine::s3::put_verified(&client, "archive", "k", vec![b'x'; 300 * 1024]).await;
    // THEN it is acknowledged, not cut at the SQS calls' 5 s
    assert!(put.is_ok(), "{put:?}");
}

const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:redrive-alerts";

#[test]
fn the_digest_needs_a_topic_and_a_table_and_its_hour_is_checked_at_init() {
    let base = [
        ("ARCHIVE_BUCKET", "my-archive"),
        ("POISON_QUEUE_URL", POISON),
    ];
    assert_eq!(env(&base).unwrap().digest, None, "no topic: no digest");
    let mut vars = base.to_vec();
    vars.extend([
        ("ALERTS_TOPIC_ARN", TOPIC),
        ("TRIAGE_TABLE", "redrive-circuit"),
    ]);
    assert_eq!(
        env(&vars).unwrap().digest,
        Some(DigestConfig {
            topic_arn: TOPIC.into(),
            table: "redrive-circuit".into(),
            hour_utc: DEFAULT_REMINDER_HOUR_UTC,
        })
    );
    let cases: &[(&str, &str, &str)] = &[
        ("REMINDER_HOUR_UTC", "24", "REMINDER_HOUR_UTC"),
        ("REMINDER_HOUR_UTC", "nine", "REMINDER_HOUR_UTC"),
        ("REMINDER_HOUR_UTC", "-1", "REMINDER_HOUR_UTC"),
        ("ALERTS_TOPIC_ARN", "redrive-alerts", "ALERTS_TOPIC_ARN"),
        ("TRIAGE_TABLE", "a b", "TRIAGE_TABLE"),
    ];
    for (variable, value, named) in cases {
        let mut v = vars.clone();
        v.retain(|(k, _)| k != variable);
        v.push((variable, value));
        let err = env(&v)
            .expect_err(&format!("{variable}={value}"))
            .to_string();
        assert!(err.contains(named) && err.contains(value), "{err}");
    }
    // A bad hour fails even without a topic: a typo shows now, not when the topic is added.
    let mut v = base.to_vec();
    v.push(("REMINDER_HOUR_UTC", "25"));
    assert!(
        env(&v)
            .unwrap_err()
            .to_string()
            .contains("REMINDER_HOUR_UTC")
    );
    // A topic without the books' table.
    let mut v = base.to_vec();
    v.push(("ALERTS_TOPIC_ARN", TOPIC));
    let err = env(&v).unwrap_err().to_string();
    assert!(err.contains("TRIAGE_TABLE"), "{err}");
    let mut v = vars.clone();
    v.push(("REMINDER_HOUR_UTC", "0"));
    assert_eq!(env(&v).unwrap().digest.unwrap().hour_utc, 0);
}

mod digest_message {
    use redrive_shared::triage::state::Book;

    use crate::digest::{
        DIGEST_GROUPS_PER_QUEUE, QueueFacts, claim_key, compose, hour_utc, queue_entry,
    };

    // 2026-11-21T09:30:00Z
    const NOW: i64 = 1_795_253_400_000;

    fn book(groups: &[(&str, u64)]) -> Book {
        let mut b = Book::new("q");
        for (g, n) in groups {
            b.observe(
                g,
                &format!("TimeoutError in {g}"),
                None,
                *n,
                None,
                NOW - 60_000,
            );
        }
        b
    }

    #[test]
    fn the_clock_gives_the_hour_and_the_days_claim() {
        assert_eq!(hour_utc(NOW), 9);
        assert_eq!(hour_utc(NOW + 3_600_000), 10);
        assert_eq!(claim_key(NOW), "redrive:digest:2026-11-21");
        assert_eq!(claim_key(NOW + 15 * 3_600_000), "redrive:digest:2026-11-22");
    }

    #[test]
    fn a_dlq_lists_its_largest_groups_not_resolved_with_and_n_more() {
        let groups: Vec<(String, u64)> = (0..25).map(|i| (format!("g-{i:02}"), i + 1)).collect();
        let refs: Vec<(&str, u64)> = groups.iter().map(|(g, n)| (g.as_str(), *n)).collect();
        let mut b = book(&refs);
        b.groups.get_mut("g-24").unwrap().state = redrive_shared::triage::state::State::Resolved;
        b.hold("g-00", "ops", Some(NOW + 3_600_000), None, NOW)
            .unwrap();
        let facts = QueueFacts {
            queue: "orders-dlq".into(),
            depth: Some(300),
            book: Ok(Some(b)),
        };
        let (entry, total) = queue_entry(&facts, NOW).unwrap();
        assert_eq!(total, 24, "the resolved group is not counted");
        assert_eq!(entry.groups.len(), DIGEST_GROUPS_PER_QUEUE);
        assert_eq!(entry.more_groups, 4);
        assert_eq!(entry.groups[0].group, "g-23", "the largest first");
        assert!(entry.groups.iter().all(|g| g.group != "g-24"));
        assert!(
            entry.groups.iter().all(|g| g.group != "g-00"),
            "among the 4 more"
        );
        let b2 = {
            let mut b = book(&[("held", 1)]);
            b.hold("held", "ops", Some(NOW + 3_600_000), None, NOW)
                .unwrap();
            b
        };
        let (entry, _) = queue_entry(
            &QueueFacts {
                queue: "q".into(),
                depth: Some(1),
                book: Ok(Some(b2)),
            },
            NOW,
        )
        .unwrap();
        assert_eq!(entry.groups[0].state.as_str(), "held");
        assert_eq!(
            entry.groups[0].held_until.as_deref(),
            Some("2026-11-21T10:30:00Z")
        );
    }

    #[test]
    fn only_dlqs_with_messages_or_open_groups_are_listed_and_nothing_sends_nothing() {
        let empty = |name: &str| QueueFacts {
            queue: name.into(),
            depth: Some(0),
            book: Ok(None),
        };
        assert_eq!(compose(&[empty("a"), empty("b")], NOW), None);
        let mut resolved = book(&[("g", 3)]);
        resolved.groups.get_mut("g").unwrap().state =
            redrive_shared::triage::state::State::Resolved;
        let facts = [
            empty("a"),
            QueueFacts {
                queue: "b".into(),
                depth: Some(0),
                book: Ok(Some(resolved)),
            },
            QueueFacts {
                queue: "c".into(),
                depth: Some(7),
                book: Ok(None),
            },
            QueueFacts {
                queue: "d".into(),
                depth: Some(0),
                book: Ok(Some(book(&[("x", 2), ("y", 1)]))),
            },
            QueueFacts {
                queue: "e".into(),
                depth: None,
                book: Err(()),
            },
        ];
        let (subject, json) = compose(&facts, NOW).unwrap();
        assert_eq!(subject, "redrive: 2 groups on 3 DLQs");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["kind"], "daily-digest");
        assert_eq!(v["at"], "2026-11-21T09:30:00Z");
        let names: Vec<&str> = v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["queue"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["c", "d", "e"]);
        assert_eq!(v["queues"][1]["groups"][0]["title"], "TimeoutError in x");
        assert_eq!(v["queues"][1]["groups"][0]["count"], 2);
        assert_eq!(v["queues"][2]["bookUnreadable"], true);
    }
}
