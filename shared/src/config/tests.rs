use std::collections::HashMap;
use std::time::Duration;

use crate::key::{KeySource, PayloadSource};

use super::*;

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";
const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders";
const POISON: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-poison";

fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Env(move |k: &str| map.get(k).cloned())
}

fn redriver(extra: &[(&str, &str)]) -> Result<RedriverConfig, ConfigError> {
    let mut pairs = vec![
        ("DLQ_URL", DLQ),
        ("SOURCE_QUEUE_URL", SRC),
        ("POISON_QUEUE_URL", POISON),
    ];
    pairs.extend_from_slice(extra);
    RedriverConfig::from_env(&env(&pairs))
}

// Adaptive circuit
#[test]
fn circuit_is_off_without_a_table_and_reads_its_variables() {
    assert_eq!(redriver(&[]).unwrap().circuit, None);
    let c = redriver(&[("CIRCUIT_TABLE", "redrive-circuit")])
        .unwrap()
        .circuit
        .unwrap();
    assert_eq!(c.table, "redrive-circuit");
    assert_eq!(c.settings, crate::circuit::CircuitSettings::default());
    let c = redriver(&[
        ("CIRCUIT_TABLE", "t-1"),
        ("CIRCUIT_THRESHOLD", "0.25"),
        ("CIRCUIT_MIN_BOUNCES", "2"),
        ("CIRCUIT_WINDOW_SECONDS", "20"),
        ("CIRCUIT_COOLDOWN_SECONDS", "5"),
        ("CIRCUIT_MAX_COOLDOWN_SECONDS", "40"),
        ("CIRCUIT_CANARY_SIZE", "3"),
    ])
    .unwrap()
    .circuit
    .unwrap();
    let s = c.settings;
    assert_eq!(
        (s.threshold, s.min_bounces, s.window_ms, s.cooldown_ms),
        (0.25, 2, 20_000, 5_000)
    );
    assert_eq!((s.max_cooldown_ms, s.canary_size), (40_000, 3));
    // A long cool-down raises the default maximum with it.
    let c = redriver(&[
        ("CIRCUIT_TABLE", "t-1"),
        ("CIRCUIT_COOLDOWN_SECONDS", "7200"),
    ]);
    assert_eq!(
        c.unwrap().circuit.unwrap().settings.max_cooldown_ms,
        7_200_000
    );
}

#[test]
fn triages_book_is_the_triage_table_else_the_circuit_table_and_a_blank_one_fails_init() {
    assert_eq!(redriver(&[]).unwrap().triage_table, None);
    let c = redriver(&[("CIRCUIT_TABLE", "redrive-circuit")]).unwrap();
    assert_eq!(c.triage_table.as_deref(), Some("redrive-circuit"));
    let c = redriver(&[
        ("CIRCUIT_TABLE", "redrive-circuit"),
        ("TRIAGE_TABLE", "redrive-triage"),
    ])
    .unwrap();
    assert_eq!(c.triage_table.as_deref(), Some("redrive-triage"));
    assert_eq!(c.circuit.unwrap().table, "redrive-circuit");
    let c = redriver(&[("TRIAGE_TABLE", " redrive-triage ")]).unwrap();
    assert_eq!(c.triage_table.as_deref(), Some("redrive-triage"));
    for blank in ["", "  "] {
        let e = redriver(&[
            ("CIRCUIT_TABLE", "redrive-circuit"),
            ("TRIAGE_TABLE", blank),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "TRIAGE_TABLE", "{e}");
        assert!(e.to_string().contains("CIRCUIT_TABLE"), "{e}");
    }
    let e = redriver(&[("TRIAGE_TABLE", "t")]).unwrap_err();
    assert_eq!(e.variable, "TRIAGE_TABLE");
    assert!(e.to_string().contains("DynamoDB table name"), "{e}");
}

#[test]
fn circuit_errors_name_the_variable() {
    for (var, value) in [
        ("CIRCUIT_TABLE", "x"),
        ("CIRCUIT_THRESHOLD", "0"),
        ("CIRCUIT_THRESHOLD", "1.5"),
        ("CIRCUIT_MIN_BOUNCES", "0"),
        ("CIRCUIT_WINDOW_SECONDS", "0"),
        ("CIRCUIT_COOLDOWN_SECONDS", "soon"),
        ("CIRCUIT_CANARY_SIZE", "0"),
        ("CIRCUIT_MAX_COOLDOWN_SECONDS", "1"),
    ] {
        let e = redriver(&[("CIRCUIT_TABLE", "t-1"), (var, value)]).unwrap_err();
        assert_eq!(e.variable, var, "{e}");
        assert!(e.to_string().contains(value), "{e}");
    }
    // Checked even while the circuit is off: a typo is not silently ignored.
    let e = redriver(&[("CIRCUIT_CANARY_SIZE", "ten")]).unwrap_err();
    assert_eq!(e.variable, "CIRCUIT_CANARY_SIZE");
}

#[test]
fn redriver_defaults_follow_the_contract() {
    let c = redriver(&[]).unwrap();
    assert_eq!(c.dlq_url.name(), "orders-dlq");
    assert_eq!(c.max_redrive_attempts, 5);
    assert_eq!(
        c.backoff,
        Backoff::new(60.0, 2.0, 900, Jitter::Full).unwrap()
    );
    assert_eq!(c.max_messages_per_invocation, 100);
    assert_eq!(c.max_messages_per_second, 0.0);
    assert!(c.guard_alarm_names.is_empty());
    assert!(c.rearm_alarm);
    assert_eq!(c.trigger_alarm_name, None);
    assert_eq!(c.metric_namespace, "DLQRedriver");
    assert!(!c.dry_run);
    assert_eq!(c.max_concurrent_batches, 4);
}

#[test]
fn redriver_reads_every_variable() {
    let c = redriver(&[
        ("MAX_REDRIVE_ATTEMPTS", "3"),
        ("BACKOFF_BASE_SECONDS", "1.5"),
        ("BACKOFF_MULTIPLIER", "3"),
        ("BACKOFF_MAX_SECONDS", "30"),
        ("BACKOFF_JITTER", "proportional:0.2"),
        ("MAX_MESSAGES_PER_INVOCATION", "500"),
        ("MAX_MESSAGES_PER_SECOND", "2.5"),
        ("GUARD_ALARM_NAMES", " downstream-5xx, ,payments-errors "),
        ("REARM_ALARM", "false"),
        ("TRIGGER_ALARM_NAME", "orders-dlq-not-empty"),
        ("METRIC_NAMESPACE", "Team/Redrive"),
        ("DRY_RUN", "TRUE"),
        ("MAX_CONCURRENT_BATCHES", "8"),
    ])
    .unwrap();
    assert_eq!(c.max_redrive_attempts, 3);
    assert_eq!(
        c.backoff,
        Backoff::new(1.5, 3.0, 30, Jitter::Proportional(0.2)).unwrap()
    );
    assert_eq!(c.max_messages_per_invocation, 500);
    assert_eq!(c.max_messages_per_second, 2.5);
    assert_eq!(c.guard_alarm_names, ["downstream-5xx", "payments-errors"]);
    assert!(!c.rearm_alarm && c.dry_run);
    assert_eq!(
        c.trigger_alarm_name.as_deref(),
        Some("orders-dlq-not-empty")
    );
    assert_eq!(c.metric_namespace, "Team/Redrive");
    assert_eq!(c.max_concurrent_batches, 8);
}

#[test]
fn every_bad_value_names_its_variable_and_value() {
    let cases: &[(&str, &str)] = &[
        ("MAX_REDRIVE_ATTEMPTS", "-1"),
        ("MAX_REDRIVE_ATTEMPTS", "five"),
        ("BACKOFF_BASE_SECONDS", "-2"),
        ("BACKOFF_MULTIPLIER", "0.5"),
        ("BACKOFF_MAX_SECONDS", "901"),
        ("BACKOFF_JITTER", "fullish"),
        ("MAX_MESSAGES_PER_INVOCATION", "0"),
        ("MAX_MESSAGES_PER_SECOND", "fast"),
        ("REARM_ALARM", "maybe"),
        ("METRIC_NAMESPACE", "AWS/SQS"),
        ("DRY_RUN", "2"),
        ("MAX_CONCURRENT_BATCHES", "0"),
        ("DLQ_URL", "orders-dlq"),
        (
            "SOURCE_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/000000000000/",
        ),
        ("POISON_QUEUE_URL", "ftp://x/y"),
    ];
    for (var, value) in cases {
        let err = redriver(&[(var, value)]).unwrap_err();
        assert_eq!(err.variable, *var, "{var}={value}: {err}");
        assert_eq!(err.value.as_deref(), Some(*value));
        let text = err.to_string();
        assert!(text.contains(var) && text.contains(value), "{text}");
    }
}

#[test]
fn missing_required_urls_are_named() {
    let err = RedriverConfig::from_env(&env(&[("SOURCE_QUEUE_URL", SRC)])).unwrap_err();
    assert_eq!(err.variable, "DLQ_URL");
    assert_eq!(
        err.to_string(),
        "missing DLQ_URL: this variable is required"
    );
    let err =
        RedriverConfig::from_env(&env(&[("DLQ_URL", DLQ), ("SOURCE_QUEUE_URL", " ")])).unwrap_err();
    assert_eq!(err.variable, "POISON_QUEUE_URL");
}

#[test]
fn a_dlq_without_a_source_sends_each_message_back_to_its_own() {
    let c =
        RedriverConfig::from_env(&env(&[("DLQ_URL", DLQ), ("POISON_QUEUE_URL", POISON)])).unwrap();
    assert_eq!(c.source_queue_url, None);
    assert_eq!(
        redriver(&[]).unwrap().source_queue_url.unwrap().as_str(),
        SRC
    );
}

const OTHER_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/billing-dlq.fifo";

#[test]
fn a_fleet_is_every_dlq_of_dlq_urls_each_with_its_own_trigger_alarm() {
    let list = format!(" {DLQ} , {OTHER_DLQ},");
    let fleet = RedriverConfig::fleet_from_env(&env(&[
        ("DLQ_URLS", &list),
        ("POISON_QUEUE_URL", POISON),
        ("TRIGGER_ALARM_NAME", "redrive-{queue}-age"),
    ]))
    .unwrap();
    let dlqs: Vec<&str> = fleet.iter().map(|c| c.dlq_url.as_str()).collect();
    assert_eq!(dlqs, [DLQ, OTHER_DLQ]);
    assert!(fleet.iter().all(|c| c.source_queue_url.is_none()));
    assert_eq!(
        fleet[1].trigger_alarm_name.as_deref(),
        Some("redrive-billing-dlq.fifo-age")
    );
    // Without DLQ_URLS: the one DLQ of DLQ_URL.
    let one = RedriverConfig::fleet_from_env(&env(&[
        ("DLQ_URL", DLQ),
        ("SOURCE_QUEUE_URL", SRC),
        ("POISON_QUEUE_URL", POISON),
    ]))
    .unwrap();
    assert_eq!(one, vec![redriver(&[]).unwrap()]);
}

#[test]
fn a_fleet_refuses_a_single_dlqs_settings_duplicates_and_the_poison_queue() {
    for (extra, problem) in [
        (("DLQ_URL", DLQ), "cannot be set with DLQ_URL"),
        (
            ("SOURCE_QUEUE_URL", SRC),
            "cannot be set with SOURCE_QUEUE_URL",
        ),
    ] {
        let err = RedriverConfig::fleet_from_env(&env(&[
            ("DLQ_URLS", OTHER_DLQ),
            ("POISON_QUEUE_URL", POISON),
            extra,
        ]))
        .unwrap_err();
        assert_eq!(err.variable, "DLQ_URLS");
        assert!(err.problem.contains(problem), "{err}");
    }
    let twice = format!("{DLQ},{DLQ}");
    let err =
        RedriverConfig::fleet_from_env(&env(&[("DLQ_URLS", &twice), ("POISON_QUEUE_URL", POISON)]))
            .unwrap_err();
    assert!(err.problem.contains("listed twice"), "{err}");
    let err = RedriverConfig::fleet_from_env(&env(&[
        ("DLQ_URLS", "orders-dlq"),
        ("POISON_QUEUE_URL", POISON),
    ]))
    .unwrap_err();
    assert_eq!(err.variable, "DLQ_URLS");
    assert!(err.to_string().contains("orders-dlq"), "{err}");
    let with_poison = format!("{DLQ},{POISON}");
    let err = RedriverConfig::fleet_from_env(&env(&[
        ("DLQ_URLS", &with_poison),
        ("POISON_QUEUE_URL", POISON),
    ]))
    .unwrap_err();
    assert_eq!(err.variable, "POISON_QUEUE_URL");
}

#[test]
fn queues_must_differ() {
    let err = redriver(&[("POISON_QUEUE_URL", DLQ)]).unwrap_err();
    assert_eq!(err.variable, "POISON_QUEUE_URL");
    let err = redriver(&[("SOURCE_QUEUE_URL", DLQ)]).unwrap_err();
    assert_eq!(err.variable, "SOURCE_QUEUE_URL");
}

#[test]
fn queue_urls() {
    let q = QueueUrl::parse("http://127.0.0.1:5000/123456789012/orders.fifo").unwrap();
    assert_eq!(q.name(), "orders.fifo");
    assert!(q.is_fifo());
    for bad in [
        "",
        "orders",
        "https://",
        "https://host",
        "https://host/",
        "https://host/123/a b",
        "https://host/123/.fifo",
        "https://host/123/",
        "https://host/orders",
        "https://host/1/2/orders",
    ] {
        assert!(QueueUrl::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn consumer_defaults_and_errors() {
    let c =
        ConsumerConfig::from_env(&env(&[("IDEMPOTENCY_TABLE", "redrive-idempotency")])).unwrap();
    assert_eq!(c.key_source, KeySource::Message);
    assert_eq!(c.key_namespace, None);
    assert_eq!(c.payload, None, "the payload check is opt-in");
    assert_eq!(c.ttl_seconds, DEFAULT_IDEMPOTENCY_TTL_SECONDS);
    assert_eq!(c.dlq_url, None);
    assert_eq!(c.retry, Backoff::new(2.0, 3.0, 900, Jitter::Full).unwrap());
    assert_eq!(c.cache_size, 0, "the cache of completed keys is opt-in");
    assert!(!c.fail_when_all_failed);
    assert_eq!(c.fifo_on_failure, FifoOnFailure::SkipGroup);
    assert_eq!(c.metric_namespace, "RedriveConsumer");

    let c = ConsumerConfig::from_env(&env(&[
        ("IDEMPOTENCY_TABLE", "t-1"),
        ("IDEMPOTENCY_KEY", "/paymentId"),
        ("IDEMPOTENCY_TTL_SECONDS", "3600"),
        ("DLQ_URL", DLQ),
        ("RETRY_BASE_SECONDS", "1"),
        ("RETRY_MULTIPLIER", "2"),
        ("RETRY_MAX_SECONDS", "10"),
        ("RETRY_JITTER", "none"),
        ("IDEMPOTENCY_CACHE_SIZE", "1000"),
        ("FAIL_WHEN_ALL_FAILED", "true"),
        ("FIFO_ON_FAILURE", "stop-batch"),
        ("METRIC_NAMESPACE", "Team/Orders"),
    ]))
    .unwrap();
    assert_eq!(c.key_source, KeySource::pointer("/paymentId").unwrap());
    assert_eq!(c.dlq_url.unwrap().name(), "orders-dlq");
    assert_eq!(c.retry, Backoff::new(1.0, 2.0, 10, Jitter::None).unwrap());
    assert_eq!(c.cache_size, 1000);
    assert!(c.fail_when_all_failed);
    assert_eq!(c.fifo_on_failure, FifoOnFailure::StopBatch);
    assert_eq!(c.metric_namespace, "Team/Orders");

    for (var, value) in [
        ("IDEMPOTENCY_TABLE", "x"),
        ("IDEMPOTENCY_KEY", "paymentId"),
        ("IDEMPOTENCY_KEY", "/a,,/b"),
        ("IDEMPOTENCY_KEY", "attribute:x-redrive"),
        ("IDEMPOTENCY_NAMESPACE", "a#b"),
        ("AWS_LAMBDA_FUNCTION_NAME", "a b"),
        ("IDEMPOTENCY_PAYLOAD", "message"),
        ("IDEMPOTENCY_PAYLOAD", "amount"),
        ("IDEMPOTENCY_TTL_SECONDS", "0"),
        ("DLQ_URL", "not-a-url"),
        ("RETRY_BASE_SECONDS", "abc"),
        ("RETRY_MULTIPLIER", "0"),
        ("RETRY_MAX_SECONDS", "1000"),
        ("RETRY_JITTER", "random"),
        ("IDEMPOTENCY_CACHE_SIZE", "-1"),
        ("IDEMPOTENCY_CACHE_SIZE", "1000001"),
        ("FAIL_WHEN_ALL_FAILED", "sometimes"),
        ("FIFO_ON_FAILURE", "stop"),
        ("METRIC_NAMESPACE", "AWS/Lambda"),
    ] {
        let mut pairs = vec![("IDEMPOTENCY_TABLE", "table-ok")];
        pairs.retain(|(k, _)| *k != var);
        pairs.push((var, value));
        let err = ConsumerConfig::from_env(&env(&pairs)).unwrap_err();
        assert_eq!(
            (err.variable, err.value.as_deref()),
            (var, Some(value)),
            "{err}"
        );
    }
    assert_eq!(
        ConsumerConfig::from_env(&env(&[])).unwrap_err().variable,
        "IDEMPOTENCY_TABLE"
    );
}

#[test]
fn key_sources_namespace_and_payload_check_are_read_at_init() {
    // GIVEN a compound key, a payload check and the function's name
    let c = ConsumerConfig::from_env(&env(&[
        ("IDEMPOTENCY_TABLE", "t-1"),
        ("IDEMPOTENCY_KEY", "/customerId, attribute:OrderId"),
        ("IDEMPOTENCY_PAYLOAD", "/amount,/currency"),
        ("AWS_LAMBDA_FUNCTION_NAME", "orders-consumer"),
    ]))
    .unwrap();
    // THEN they are parsed once, and the namespace defaults to the function's name
    assert_eq!(c.key_source.to_string(), "/customerId,attribute:OrderId");
    assert_eq!(c.payload.unwrap().to_string(), "/amount,/currency");
    assert_eq!(c.key_namespace.as_deref(), Some("orders-consumer"));
    // AND IDEMPOTENCY_NAMESPACE wins over the function's name
    let c = ConsumerConfig::from_env(&env(&[
        ("IDEMPOTENCY_TABLE", "t-1"),
        ("IDEMPOTENCY_KEY", "body"),
        ("IDEMPOTENCY_PAYLOAD", "body"),
        ("IDEMPOTENCY_NAMESPACE", "orders"),
        ("AWS_LAMBDA_FUNCTION_NAME", "orders-consumer-v2"),
    ]))
    .unwrap();
    assert_eq!(c.key_source, KeySource::Body);
    assert_eq!(c.payload, Some(PayloadSource::Body));
    assert_eq!(c.key_namespace.as_deref(), Some("orders"));
    // AND a bad key names the variable, the value and what is wrong
    let err = ConsumerConfig::from_env(&env(&[
        ("IDEMPOTENCY_TABLE", "t-1"),
        ("IDEMPOTENCY_KEY", "/customerId,orderId"),
    ]))
    .unwrap_err();
    assert_eq!(err.variable, "IDEMPOTENCY_KEY");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "invalid IDEMPOTENCY_KEY=\"/customerId,orderId\": \"orderId\" is neither a JSON pointer"
        ),
        "{text}"
    );
}

fn consumer_with_ttl(ttl: &str) -> Result<ConsumerConfig, ConfigError> {
    ConsumerConfig::from_env(&env(&[
        ("IDEMPOTENCY_TABLE", "t-1"),
        ("IDEMPOTENCY_TTL_SECONDS", ttl),
    ]))
}

#[test]
fn ttl_shorter_than_the_longest_claim_is_an_init_error() {
    // A record that expires while its claim still holds lets a second invocation run the
    // same key's side effect at once.
    for short in ["1", "60", "899", "900"] {
        let err = consumer_with_ttl(short).unwrap_err();
        assert_eq!(
            (err.variable, err.value.as_deref()),
            ("IDEMPOTENCY_TTL_SECONDS", Some(short))
        );
        let text = err.to_string();
        assert!(
            text.contains("IDEMPOTENCY_TTL_SECONDS") && text.contains(short),
            "{text}"
        );
    }
    assert_eq!(consumer_with_ttl("960").unwrap().ttl_seconds, 960);
}

#[test]
fn default_ttl_covers_the_whole_retention_chain() {
    let c = ConsumerConfig::from_env(&env(&[("IDEMPOTENCY_TABLE", "t-1")])).unwrap();
    // Source retention (at most 14 days) + DLQ (14 days) + poison queue (14 days).
    assert_eq!(c.ttl_seconds, 3 * 14 * 86_400);
    assert_eq!(c.ttl_seconds, 3_628_800);
}

#[test]
fn downstream_config() {
    let d = DownstreamConfig::from_env(&env(&[("DOWNSTREAM_URL", "http://127.0.0.1:9/orders")]))
        .unwrap();
    assert_eq!(d.timeout, Duration::from_secs(10));
    let err = DownstreamConfig::from_env(&env(&[])).unwrap_err();
    assert_eq!(err.variable, "DOWNSTREAM_URL");
    let err = DownstreamConfig::from_env(&env(&[("DOWNSTREAM_URL", "localhost:80")])).unwrap_err();
    assert!(err.to_string().contains("localhost:80"));
    let err = DownstreamConfig::from_env(&env(&[
        ("DOWNSTREAM_URL", "http://h"),
        ("DOWNSTREAM_TIMEOUT_SECONDS", "0"),
    ]))
    .unwrap_err();
    assert_eq!(err.variable, "DOWNSTREAM_TIMEOUT_SECONDS");
}

#[test]
fn a_list_setting_is_its_trimmed_items_without_empty_ones() {
    assert_eq!(
        super::list_items(" a, b ,,c ,").collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(super::list_items(" , ,").count(), 0);
}
