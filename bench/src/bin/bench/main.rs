//! `make bench`: every figure against a baseline measured in the same run, printed as a
//! Markdown table and written to `target/bench/` (`latest.md`, `latest.json`, `bench-<time>.json`).
//!
//! ```text
//! bench [--only moto,localstack,fake,scale,sweep,triage,cold,size,micro,cache] [--moto-messages 1000]
//!       [--localstack-messages 1000] [--localstack-poison 5] [--localstack-backoff-base 60]
//!       [--fake-messages 20000] [--latency-ms 20] [--pipelines 4] [--scale-drains 10]
//!       [--scale-cap 6000] [--triage-messages 100000] [--triage-baseline-messages 10000]
//!       [--triage-concurrency 8] [--cold-runs 10] [--lambda-dir target/lambda]
//!       [--arm64-dir target/lambda-arm64] [--criterion-dir target/criterion] [--out target/bench]
//! ```
//! The cold-start and package sections read the artefacts of `cargo lambda build --release`
//! (the Makefile builds them first); the micro section reads criterion's results of
//! `cargo bench -p redrive-shared --bench hot_paths`.

use std::process::{Command, ExitCode};

use redrive_bench::bench::DrainRun;
use redrive_bench::consumer_cache::{self, Workload};
use redrive_bench::report::{Report, Row};
use serde_json::{Value, json};

mod lambdas;
mod modelled;
mod options;
mod queues;
mod triage;

use lambdas::{cold_section, size_section};
use modelled::{fake_section, scale_section, sweep_section};
use options::Options;
use queues::{localstack_section, moto_section};
use triage::triage_section;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(redrive_tests::workspace_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn host() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

/// CPU seconds a process has used (user + system), from `/proc/<pid>/stat`.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), 1-based: utime is 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // USER_HZ is 100 on Linux.
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

pub(crate) fn calls_note(run: &DrainRun) -> String {
    calls_text(&run.calls)
}

pub(crate) fn calls_text(calls: &std::collections::BTreeMap<String, u64>) -> String {
    calls
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn merge_raw(report: &mut Report, key: &str, value: Value) {
    if !report.raw.is_object() {
        report.raw = json!({});
    }
    report.raw[key] = value;
}

fn micro_section(o: &Options, report: &mut Report) {
    let estimate = |group: &str, bench: &str| -> Option<f64> {
        let path = o
            .criterion_dir
            .join(group)
            .join(bench)
            .join("new")
            .join("estimates.json");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        v.pointer("/mean/point_estimate")?.as_f64()
    };
    let section = "Micro-benchmarks of the shared crate (criterion, mean per call)";
    let mut raw = serde_json::Map::new();
    for (group, figure, baseline) in [
        (
            "decide",
            "decide one DLQ message",
            "copying its body and attributes",
        ),
        (
            "meta_parse",
            "read x-redrive (typed, validated)",
            "serde_json::Value parse",
        ),
        ("meta_write", "write x-redrive", "serde_json::Value write"),
        (
            "split_batches",
            "split 100 entries by count and bytes",
            "chunks(10)",
        ),
        (
            "triage_key",
            "one failed message's triage group id (normalise, hash; budget 20 us)",
            "the same message read, its raw error text hashed",
        ),
    ] {
        match (estimate(group, "redrive"), estimate(group, "baseline")) {
            (Some(ours), Some(base)) => {
                raw.insert(group.into(), json!({"ours_ns": ours, "baseline_ns": base}));
                report.rows.push(
                    Row::new(section, figure, ours, base, "ns")
                        .fraction()
                        .note(format!("baseline: {baseline}")),
                );
            }
            _ => report.notes.push(format!(
                "micro: no criterion results for {group} in {} (run `cargo bench -p redrive-shared --bench hot_paths`)",
                o.criterion_dir.display()
            )),
        }
    }
    merge_raw(report, "micro", Value::Object(raw));
}

/// The consumer's in-memory cache of completed keys: DynamoDB calls per record on a warm
/// instance whose batches carry duplicates, with the cache (ours) and without (baseline).
fn cache_section(rt: &tokio::runtime::Runtime, report: &mut Report) {
    let w = Workload::default();
    eprintln!(
        "bench: consumer cache, {} batches of {} with {:.0}% duplicates...",
        w.batches,
        w.batch_size,
        w.duplicate_share * 100.0
    );
    let seed = 0xcac4e;
    let without = rt.block_on(consumer_cache::run(w, 0, seed));
    let with = rt.block_on(consumer_cache::run(w, 1000, seed));
    let section = format!(
        "Consumer on a warm instance: {} batches of {}, {:.0}% duplicates of completed keys (in-memory fake store counting calls)",
        w.batches,
        w.batch_size,
        w.duplicate_share * 100.0
    );
    let calls = |r: &consumer_cache::CacheRun| {
        format!(
            "{} claims + {} COMPLETED writes + {} releases + {} reads for {} records, {} duplicates, {} side effects",
            r.claims, r.completes, r.releases, r.reads, r.records, r.duplicates, r.side_effects
        )
    };
    report.rows.push(
        Row::new(
            &section,
            "DynamoDB calls per record, IDEMPOTENCY_CACHE_SIZE=1000 vs 0",
            with.calls_per_record(),
            without.calls_per_record(),
            "",
        )
        .fraction()
        .note(format!(
            "with the cache: {}; without: {}",
            calls(&with),
            calls(&without)
        )),
    );
    let per_duplicate = |r: &consumer_cache::CacheRun| {
        r.claims.saturating_sub(r.completes) as f64 / r.duplicates as f64
    };
    report.rows.push(
        Row::new(
            &section,
            "DynamoDB calls per duplicate record, IDEMPOTENCY_CACHE_SIZE=1000 vs 0",
            per_duplicate(&with),
            per_duplicate(&without),
            "",
        )
        .fraction()
        .note(format!(
            "the duplicates repeat keys completed before them; {} keys another instance completed before the run are among them, and the first sighting of each costs a claim with the cache too",
            w.preloaded
        )),
    );
    merge_raw(
        report,
        "cache",
        json!({"workload": w, "with_cache": with, "without_cache": without}),
    );
}

fn main() -> ExitCode {
    let o = match Options::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let now_ms = redrive_shared::clock::now_ms();
    let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    let mut report = Report {
        started_at: redrive_shared::timefmt::rfc3339_from_millis(now_ms),
        host: host(),
        commit: format!(
            "{}{}",
            git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into()),
            if dirty { "+changes" } else { "" }
        ),
        ..Report::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if o.wants("moto") {
        rt.block_on(moto_section(&o, &mut report));
    }
    if o.wants("localstack") {
        rt.block_on(localstack_section(&o, &mut report));
    }
    if o.wants("fake") {
        fake_section(&o, &rt, &mut report);
    }
    if o.wants("scale") {
        scale_section(&o, &rt, &mut report);
    }
    if o.wants("sweep") {
        sweep_section(&o, &mut report);
    }
    if o.wants("triage") {
        triage_section(&o, &rt, &mut report);
    }
    if o.wants("cold") {
        rt.block_on(cold_section(&o, &mut report));
    }
    if o.wants("size") {
        size_section(&o, &mut report);
    }
    if o.wants("micro") {
        micro_section(&o, &mut report);
    }
    if o.wants("cache") {
        cache_section(&rt, &mut report);
    }
    println!("{}", report.markdown());
    let stamp = report.started_at.replace([':', '-'], "");
    match report.write(&o.out, &stamp) {
        Ok(path) => eprintln!(
            "bench: written to {} (and latest.md / latest.json)",
            path.display()
        ),
        Err(e) => eprintln!(
            "bench: could not write the results to {}: {e}",
            o.out.display()
        ),
    }
    if !report.all_met() {
        eprintln!("bench: some targets were not met (see the Met column)");
    }
    ExitCode::SUCCESS
}
