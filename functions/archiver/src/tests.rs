use std::time::Duration;

use redrive_shared::Attributes;
use redrive_shared::archive::{self, SystemAttributes};
use redrive_shared::config::{ConfigError, Env, QueueUrl};

use super::*;

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
