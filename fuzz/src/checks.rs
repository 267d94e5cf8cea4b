//! The properties the fuzz targets check, one function per target. They live here so that
//! `cargo test` in the main workspace replays the committed corpora (and any crash saved
//! into them) without libFuzzer: see `bench/tests/fuzz_corpus.rs`.

use redrive_shared::backoff::{Backoff, Fixed, Jitter};
use redrive_shared::config::{ConsumerConfig, DownstreamConfig, Env, RedriverConfig};
use redrive_shared::decision::{Decision, Policy, ReceivedMessage, decide};
use redrive_shared::event::{AlarmNotification, MANUAL_KEYS, Trigger, recognize};
use redrive_shared::limits::{MAX_ATTRIBUTES, MAX_DELAY_SECONDS};
use redrive_shared::meta::{ATTRIBUTE_NAME, LEGACY_ATTEMPT_ATTRIBUTE, RedriveMeta, VERSION};
use redrive_shared::{Attributes, MessageAttribute};
use serde_json::Value;
use std::collections::HashMap;

/// The `x-redrive` attribute. Reading is total (every input yields usable metadata), what is
/// read can always be written and read back unchanged, and deciding on any message never
/// panics and never breaks the contract's invariants.
///
/// Input: the first byte picks where the text goes (the `x-redrive` String attribute, a
/// binary one, the legacy `x-redrive-attempt` Number, or beside nine other attributes); the
/// rest is the text.
pub fn x_redrive(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest).into_owned();

    // The typed parse: whatever it accepts round-trips through the compact JSON.
    if let Ok(meta) = RedriveMeta::parse(&text) {
        let written = meta.to_json();
        let back = RedriveMeta::parse(&written).expect("what we write, we read");
        assert_eq!(back, RedriveMeta { v: VERSION, ..meta });
    }

    let mut attributes = Attributes::new();
    match mode % 4 {
        0 => {
            attributes.insert(
                ATTRIBUTE_NAME.into(),
                MessageAttribute::string(text.clone()),
            );
        }
        1 => {
            attributes.insert(
                ATTRIBUTE_NAME.into(),
                MessageAttribute::binary(rest.to_vec()),
            );
        }
        2 => {
            attributes.insert(
                LEGACY_ATTEMPT_ATTRIBUTE.into(),
                MessageAttribute::number(text.clone()),
            );
        }
        _ => {
            for i in 0..9 {
                attributes.insert(format!("a{i}"), MessageAttribute::string("v"));
            }
            attributes.insert(
                ATTRIBUTE_NAME.into(),
                MessageAttribute::string(text.clone()),
            );
        }
    }

    // Reading is total, and what was read is writable and reads back the same.
    let (meta, _) = RedriveMeta::read(&attributes, "current-message-id");
    assert!(!meta.original_message_id.is_empty());
    let mut rewritten = Attributes::new();
    meta.write_into(&mut rewritten);
    let (again, _) = RedriveMeta::read(&rewritten, "other-id");
    assert_eq!(
        again,
        RedriveMeta {
            v: VERSION,
            ..meta.clone()
        }
    );

    // Deciding never panics, and never yields a message SQS would reject.
    let policy = Policy {
        max_attempts: 3,
        backoff: Backoff::new(60.0, 2.0, 900, Jitter::Full).expect("valid"),
        source_fifo: mode & 4 != 0,
        poison_fifo: mode & 8 != 0,
        source_max_bytes: redrive_shared::limits::MAX_MESSAGE_BYTES,
        poison_max_bytes: redrive_shared::limits::MAX_MESSAGE_BYTES,
        max_delay_seconds: 900,
        max_hop_seconds: 900,
        source_arn: None,
    };
    let view = ReceivedMessage {
        message_id: "current-message-id",
        body: &text,
        attributes: &attributes,
        group_id: (mode & 16 != 0).then_some("group-1"),
    };
    let decision = decide(&view, &policy, 1_795_255_200_000, &mut Fixed(0.5));
    assert!(decision.attributes().len() <= MAX_ATTRIBUTES.max(attributes.len()));
    assert_eq!(
        decision.meta().original_message_id,
        meta.original_message_id
    );
    match &decision {
        Decision::Redrive(plan) => {
            // A message whose wait is over goes as the attempt decided when the wait began.
            let decided = u32::from(meta.not_before_ms().is_none());
            assert_eq!(plan.meta.attempt, meta.attempt + decided);
            assert!(plan.attributes.len() <= MAX_ATTRIBUTES);
            assert!(plan.delay_seconds.is_none_or(|d| d <= MAX_DELAY_SECONDS));
        }
        Decision::Isolate(plan) => assert!(plan.meta.reason.is_some()),
        Decision::Wait(plan) => {
            assert!((1..=MAX_DELAY_SECONDS).contains(&plan.delay_seconds));
            assert!(plan.meta.not_before_ms().is_some());
        }
    }
}

/// The re-driver's event recognizer: any JSON is recognized or rejected, never a panic, and a
/// manual drain is only recognized from its two allowed keys with valid values.
pub fn event_recognize(data: &[u8]) {
    // The SNS Message field is itself text: parse it on its own too.
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(alarm) = AlarmNotification::parse(text)
    {
        let _ = alarm.skip_for("orders-dlq");
    }
    let Ok(event) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match recognize(&event) {
        Ok(Trigger::Manual(m)) => {
            let obj = event.as_object().expect("a manual drain is an object");
            assert!(obj.keys().all(|k| MANUAL_KEYS.contains(&k.as_str())));
            assert!(m.max_messages.is_none_or(|n| n >= 1));
            if let Some(d) = m.dry_run {
                assert_eq!(obj.get("dryRun"), Some(&Value::Bool(d)));
            }
        }
        Ok(Trigger::Alarm(_)) => assert!(event.get("Records").is_some()),
        Ok(Trigger::Scheduled) => assert!(event.is_object()),
        Err(e) => {
            // Every rejection explains itself.
            assert!(!e.to_string().is_empty());
        }
    }
}

pub const KNOWN: [&str; 22] = [
    "DLQ_URL",
    "SOURCE_QUEUE_URL",
    "POISON_QUEUE_URL",
    "MAX_REDRIVE_ATTEMPTS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MULTIPLIER",
    "BACKOFF_MAX_SECONDS",
    "BACKOFF_JITTER",
    "MAX_MESSAGES_PER_INVOCATION",
    "MAX_MESSAGES_PER_SECOND",
    "GUARD_ALARM_NAMES",
    "REARM_ALARM",
    "METRIC_NAMESPACE",
    "DRY_RUN",
    "MAX_CONCURRENT_BATCHES",
    "IDEMPOTENCY_TABLE",
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_TTL_SECONDS",
    "RETRY_BASE_SECONDS",
    "RETRY_JITTER",
    "DOWNSTREAM_URL",
    "DOWNSTREAM_TIMEOUT_SECONDS",
];

/// The configuration parsers of both Lambdas: any environment yields a configuration or an
/// error naming the variable (and the value) at fault, never a panic; a configuration that
/// exists is within the contract's bounds.
///
/// Input: lines of `NAME=VALUE`; a one-character NAME stands for one of the known variables
/// (so that the fuzzer reaches every variable without guessing their names).
pub fn config_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut env: HashMap<String, String> = HashMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let name = match name.as_bytes() {
            [b] => KNOWN[*b as usize % KNOWN.len()].to_string(),
            _ => name.to_string(),
        };
        env.insert(name, value.to_string());
    }
    let lookup = Env(|k: &str| env.get(k).cloned());

    match RedriverConfig::from_env(&lookup) {
        Ok(c) => {
            assert!(c.backoff.max() <= 900);
            assert!((1..=50).contains(&c.max_concurrent_batches));
            assert!(c.max_messages_per_invocation >= 1);
            assert!(c.max_messages_per_second >= 0.0);
            assert_ne!(Some(&c.dlq_url), c.source_queue_url.as_ref());
            assert_ne!(c.poison_queue_url, c.dlq_url);
        }
        Err(e) => assert!(e.to_string().contains(e.variable), "{e}"),
    }
    match ConsumerConfig::from_env(&lookup) {
        Ok(c) => {
            assert!(c.ttl_seconds >= 1);
            assert!(c.retry.max() <= 900);
        }
        Err(e) => assert!(e.to_string().contains(e.variable), "{e}"),
    }
    match DownstreamConfig::from_env(&lookup) {
        Ok(c) => assert!(c.url.starts_with("http://") || c.url.starts_with("https://")),
        Err(e) => assert!(e.to_string().contains(e.variable), "{e}"),
    }
}
