//! Micro-benchmarks of the shared crate's hot paths, each beside the naive baseline it
//! replaces, measured in the same run:
//!
//! - `decide`: one DLQ message decided (metadata read, backoff, stamp, limits) against the
//!   copy of its body and attributes that any redrive makes.
//! - `meta_parse`: reading `x-redrive` into the typed, validated metadata against parsing the
//!   same text into an untyped `serde_json::Value`.
//! - `meta_write`: writing the compact JSON against serialising the same `Value`.
//! - `split_batches`: splitting 100 outgoing entries by count and payload size against a
//!   plain `chunks(10)` that ignores the payload limit.
//! - `triage_key`: one failed message's group id (its `x-redrive` read, its error text
//!   normalised: ids, numbers, addresses, dates masked, then hashed) against reading the same
//!   message and hashing its raw error text, which would give every message its own group.
//!   The budget: 100,000 messages in 2 s of one core, 20 µs each.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use redrive_shared::backoff::{Backoff, Jitter, seeded_rng};
use redrive_shared::decision::{Policy, ReceivedMessage, decide};
use redrive_shared::limits::split_batches;
use redrive_shared::meta::{ATTRIBUTE_NAME, ErrorClass, LastError, RedriveMeta};
use redrive_shared::triage::{Facts, Observation, group, normalise};
use redrive_shared::{Attributes, MessageAttribute};

const NOW_MS: i64 = 1_795_255_200_000;

fn x_redrive() -> String {
    RedriveMeta {
        attempt: 2,
        first_redriven_at: Some("2026-11-21T10:00:00Z".into()),
        last_redriven_at: Some("2026-11-21T10:04:00Z".into()),
        ..RedriveMeta::fresh("5fea7756-0ea4-451a-a703-a558b933e274")
    }
    .to_json()
}

fn message_parts() -> (String, Attributes) {
    let body = format!(
        r#"{{"orderId":"ord-00001234","customer":"cust-00042","amountCents":4200,"note":"{}"}}"#,
        "x".repeat(200)
    );
    let mut attributes = Attributes::new();
    attributes.insert("tenant".into(), MessageAttribute::string("acme"));
    attributes.insert("priority".into(), MessageAttribute::number("2"));
    attributes.insert(ATTRIBUTE_NAME.into(), MessageAttribute::string(x_redrive()));
    (body, attributes)
}

fn bench_decide(c: &mut Criterion) {
    let (body, attributes) = message_parts();
    let policy = Policy::standard(
        5,
        Backoff::new(60.0, 2.0, 900, Jitter::Full).expect("valid backoff"),
    );
    let mut rng = seeded_rng(1);
    let mut group = c.benchmark_group("decide");
    group.bench_function("redrive", |b| {
        b.iter(|| {
            let view = ReceivedMessage {
                message_id: "1f0e8c1a-33a5-4d7e-9a43-0d4c9c3f1e11",
                body: black_box(&body),
                attributes: black_box(&attributes),
                group_id: None,
            };
            black_box(decide(&view, &policy, NOW_MS, &mut rng))
        })
    });
    group.bench_function("baseline", |b| {
        b.iter(|| black_box((black_box(&body).clone(), black_box(&attributes).clone())))
    });
    group.finish();
}

fn bench_meta(c: &mut Criterion) {
    let text = x_redrive();
    let (_, attributes) = message_parts();
    let mut group = c.benchmark_group("meta_parse");
    group.bench_function("redrive", |b| {
        b.iter(|| black_box(RedriveMeta::read(black_box(&attributes), "current-id")))
    });
    group.bench_function("baseline", |b| {
        b.iter(|| black_box(serde_json::from_str::<serde_json::Value>(black_box(&text))))
    });
    group.finish();

    let meta = RedriveMeta::parse(&text).expect("valid metadata");
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let mut group = c.benchmark_group("meta_write");
    group.bench_function("redrive", |b| {
        b.iter(|| black_box(black_box(&meta).to_json()))
    });
    group.bench_function("baseline", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(&value))))
    });
    group.finish();
}

fn bench_split(c: &mut Criterion) {
    let sizes: Vec<usize> = (0..100).map(|i| 300 + (i * 7919) % 200_000).collect();
    let mut group = c.benchmark_group("split_batches");
    group.bench_function("redrive", |b| {
        b.iter(|| black_box(split_batches(black_box(&sizes).clone(), |s| *s)))
    });
    group.bench_function("baseline", |b| {
        b.iter(|| {
            black_box(
                black_box(&sizes)
                    .clone()
                    .chunks(10)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>(),
            )
        })
    });
    group.finish();
}

fn bench_triage_key(c: &mut Criterion) {
    let (body, _) = message_parts();
    let mut attributes = Attributes::new();
    RedriveMeta {
        attempt: 3,
        last_error: Some(LastError::new(
            ErrorClass::Transient,
            "HTTP_503",
            "order 5fea7756-0ea4-451a-a703-a558b933e274 for cust-00042: POST https://payments.internal:8443/v2/charges failed after 3012 ms at 2026-11-21T10:04:00Z (request 0x7f3a9c)",
            "2026-11-21T10:04:00Z".into(),
        )),
        ..RedriveMeta::fresh("5fea7756-0ea4-451a-a703-a558b933e274")
    }
    .write_into(&mut attributes);
    let observation = Observation {
        message_id: "1f0e8c1a-33a5-4d7e-9a43-0d4c9c3f1e11",
        body: &body,
        attributes: &attributes,
        sent_timestamp_ms: Some(NOW_MS),
        dead_letter_source_arn: Some("arn:aws:sqs:eu-west-1:123456789012:orders"),
    };
    let mut group = c.benchmark_group("triage_key");
    group.bench_function("redrive", |b| {
        b.iter(|| {
            let m = black_box(&observation);
            let facts = Facts::read(m);
            black_box(group::key(m, &facts, &[], normalise::CURRENT))
        })
    });
    group.bench_function("baseline", |b| {
        b.iter(|| {
            use std::hash::{Hash, Hasher};
            let m = black_box(&observation);
            let facts = Facts::read(m);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            facts.cause.as_ref().map(|c| &c.message).hash(&mut h);
            black_box(h.finish())
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_decide,
    bench_meta,
    bench_split,
    bench_triage_key
);
criterion_main!(benches);
