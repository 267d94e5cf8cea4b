//! What the CLI's integration tests share: the built binary run against moto under the
//! operator's policy, and the parked messages they start from. Each test file that declares
//! `mod common;` uses a part of it.
#![allow(dead_code)]

use std::process::Command;

use aws_sdk_sqs::types::{Message, QueueAttributeName};
use redrive_shared::meta::{ATTRIBUTE_NAME, ErrorClass, IsolationReason, LastError, RedriveMeta};
use redrive_tests::{attr_string, moto, queue_attributes, send_raw};
use serde_json::Value;

/// Variables of the re-driver and the consumer, and output switches, that a developer's shell
/// might have set.
const CALLER_VARS: [&str; 19] = [
    "PROTECT_DLQS",
    "PROTECT_TAG",
    "CIRCUIT_TABLE",
    "METRIC_NAMESPACE",
    "NO_COLOR",
    "CLICOLOR_FORCE",
    "RUST_LOG",
    "DLQ_URL",
    "SOURCE_QUEUE_URL",
    "POISON_QUEUE_URL",
    "MAX_MESSAGES_PER_INVOCATION",
    "MAX_MESSAGES_PER_SECOND",
    "DRY_RUN",
    "GUARD_ALARM_NAMES",
    "BACKOFF_BASE_SECONDS",
    "IDEMPOTENCY_TTL_SECONDS",
    "REDRIVE_CAUSES_TABLE",
    "REDRIVE_CAUSES_KEY",
    "REDRIVE_CAUSES_NAMESPACE",
];

/// How a run of the binary ended.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the run ended with `code` and its stderr contains `text`.
    pub fn assert_stderr_has(&self, code: i32, text: &str) {
        assert_eq!(self.code, code, "{}", self.stderr);
        assert!(self.stderr.contains(text), "{}", self.stderr);
    }

    /// Asserts the run ended with `code` and its stderr names each of `texts`.
    pub fn assert_stderr_names(&self, code: i32, texts: &[&str]) {
        assert_eq!(self.code, code, "{}", self.stderr);
        for text in texts {
            assert!(self.stderr.contains(text), "{text:?} in {}", self.stderr);
        }
    }

    /// Asserts the run ended with `code` and its stdout contains `text`.
    pub fn assert_stdout_has(&self, code: i32, text: &str) {
        assert_eq!(self.code, code, "{}", self.stderr);
        assert!(self.stdout.contains(text), "{}", self.stdout);
    }

    /// Asserts the run ended with `code` and its stderr begins with `prefix`.
    pub fn assert_stderr_starts(&self, code: i32, prefix: &str) {
        assert_eq!(self.code, code, "{}", self.stderr);
        assert!(self.stderr.starts_with(prefix), "{}", self.stderr);
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs the binary with moto's environment (and nothing of the caller's AWS_* or re-driver
/// variables) plus `env` (an empty value removes a variable), under the operator's managed
/// policy for the queues `args` name (`iam::cli_env`). With `own_bucket`, the operator's own
/// identity also grants that bucket, their export bucket (the stack's policy does not).
pub fn run_redrive(args: &[&str], env: &[(&str, &str)], own_bucket: Option<&str>) -> Run {
    let extra: Vec<Value> = own_bucket
        .map(redrive_tests::iam::own_bucket_statement)
        .into_iter()
        .collect();
    run_redrive_granted(args, env, &extra)
}

/// `run_redrive` for an operator whose own identity also holds the IAM statements `extra`.
pub fn run_redrive_granted(args: &[&str], env: &[(&str, &str)], extra: &[Value]) -> Run {
    run_redrive_as(redrive_tests::iam::cli_policy(args), args, env, extra)
}

/// The `redrive` binary set up to run `args` as `run_redrive` runs it (the operator's policy
/// for the command, moto's endpoints, no shared config files of the developer's), for a test
/// that starts it and stops it itself.
pub fn redrive_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redrive"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || CALLER_VARS.contains(&k.as_str()) {
            command.env_remove(k);
        }
    }
    command
        .args(args)
        .envs(redrive_tests::iam::cli_env(&moto().env(), args))
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
    command
}

/// `run_redrive_granted` under the managed policy `policy` (a reader trying to act, say).
pub fn run_redrive_as(policy: &str, args: &[&str], env: &[(&str, &str)], extra: &[Value]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redrive"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || CALLER_VARS.contains(&k.as_str()) {
            command.env_remove(k);
        }
    }
    let mut full_env = moto().env();
    full_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    command
        .args(args)
        .envs(redrive_tests::iam::cli_env_as(
            &full_env, args, extra, policy,
        ))
        // No shared config files of the developer's.
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
    for (k, v) in env {
        if v.is_empty() {
            command.env_remove(k);
        } else {
            command.env(k, v);
        }
    }
    let out = command.output().expect("running the redrive binary");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `x-redrive` of a message the re-driver parked on its `attempt`, for `reason`, with a
/// permanent `lastError` of `error` when given.
pub fn parked(
    original: &str,
    attempt: u32,
    reason: IsolationReason,
    error: Option<&str>,
) -> RedriveMeta {
    RedriveMeta {
        attempt,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        last_redriven_at: Some("2026-11-21T10:30:00Z".into()),
        isolated_at: Some("2026-11-21T11:00:00Z".into()),
        reason: Some(reason),
        last_error: error.map(|code| {
            LastError::new(
                ErrorClass::Permanent,
                code,
                "rejected",
                "2026-11-21T10:59:00Z".into(),
            )
        }),
        ..RedriveMeta::fresh(original)
    }
}

/// On the DLQ after a redrive whose copy the downstream rejected for good (`HTTP_400`): the
/// re-driver isolates it.
pub fn rejected_on_the_way(original: &str) -> RedriveMeta {
    RedriveMeta {
        last_error: Some(LastError::new(
            ErrorClass::Permanent,
            "HTTP_400",
            "bad",
            "t".into(),
        )),
        ..RedriveMeta::fresh(original)
    }
}

/// Parked on its `attempt` as a permanent failure with `lastError` `code`.
pub fn permanent(original: &str, attempt: u32, code: &str) -> RedriveMeta {
    parked(
        original,
        attempt,
        IsolationReason::PermanentFailure,
        Some(code),
    )
}

/// Parked after its fifth and last attempt.
pub fn out_of_attempts(original: &str) -> RedriveMeta {
    parked(original, 5, IsolationReason::MaxAttempts, None)
}

/// `meta` as the `x-redrive` message attribute.
pub fn meta_attr(meta: &RedriveMeta) -> aws_sdk_sqs::types::MessageAttributeValue {
    attr_string(&meta.to_json())
}

/// Sends `body` to `url` with `meta` as its `x-redrive`; returns its MessageId.
pub async fn send_with_meta(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    body: &str,
    meta: &RedriveMeta,
) -> String {
    send_raw(sqs, url, body, &[(ATTRIBUTE_NAME, meta_attr(meta))]).await
}

/// The `x-redrive` a received message carries.
pub fn meta_of(m: &Message) -> RedriveMeta {
    let text = m.message_attributes().unwrap()[ATTRIBUTE_NAME]
        .string_value()
        .unwrap();
    RedriveMeta::parse(text).unwrap()
}

/// The bodies of `messages`, sorted.
pub fn bodies(messages: &[Message]) -> Vec<String> {
    let mut b: Vec<String> = messages
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect();
    b.sort();
    b
}

/// The bodies `url` held, sorted, drained (see [`redrive_tests::drain_all`]).
pub async fn drained_bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    bodies(&redrive_tests::drain_all(sqs, url).await)
}

/// (visible, in flight)
pub async fn counts(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    let a = queue_attributes(sqs, url).await;
    let get = |k: QueueAttributeName| a.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0);
    (
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// Messages visible on a queue.
pub async fn visible(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    counts(sqs, url).await.0
}
