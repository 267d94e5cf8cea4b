//! The drains on emulators: moto behind the counting proxy, and LocalStack side by side with
//! StartMessageMoveTask.

use redrive_bench::bench::{moto_baseline, moto_ours};
use redrive_bench::move_task::{POLL_INTERVAL, side_by_side};
use redrive_bench::proxy::Proxy;
use redrive_bench::report::{Report, Row};
use serde_json::{Value, json};

use crate::options::Options;
use crate::{calls_note, calls_text, cpu_seconds, merge_raw};

pub(crate) async fn moto_section(o: &Options, report: &mut Report) {
    let ms = o.latency.as_millis();
    let n = o.moto_messages;
    let mut raw = Vec::new();
    // The target is judged on moto with its clock read through time.time() (the same SQS
    // behaviour without the emulator CPU that grows with every message in the queue, see
    // tests/moto_launcher.py); stock moto is measured right after and shown beside it.
    for (fast_clock, label) in [(true, "moto (fast clock)"), (false, "stock moto")] {
        let moto = if fast_clock {
            redrive_tests::moto_fast_clock()
        } else {
            redrive_tests::moto()
        };
        let direct = moto.sqs().await;
        let proxy = Proxy::start(redrive_bench::endpoint_addr(&moto.endpoint()), o.latency)
            .await
            .expect("starting the proxy");
        eprintln!("bench: {label}, {n} messages: ours...");
        let cpu0 = cpu_seconds(moto.pid());
        let ours = moto_ours(&direct, &proxy, n, o.pipelines).await;
        let cpu1 = cpu_seconds(moto.pid());
        eprintln!("bench: {label}, {n} messages: baseline...");
        let base = moto_baseline(&direct, &proxy, n).await;
        let cpu2 = cpu_seconds(moto.pid());
        let moto_cpu = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        };
        let (ours_cpu, base_cpu) = (moto_cpu(cpu0, cpu1), moto_cpu(cpu1, cpu2));
        let section = format!("Drain on {label} behind a {ms} ms/call proxy, {n} messages");
        let mut calls = Row::new(
            &section,
            "API calls per redriven message",
            ours.calls_per_message(),
            base.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "counted at the proxy: ours {}; baseline {}",
            calls_note(&ours),
            calls_note(&base)
        ));
        let mut speed = Row::new(
            &section,
            "Drain throughput",
            ours.per_second(),
            base.per_second(),
            "msg/s",
        )
        .speedup()
        .note(format!(
            "wall {:.1} s vs {:.1} s; moto's own CPU {:.1} s vs {:.1} s",
            ours.seconds, base.seconds, ours_cpu, base_cpu
        ));
        if fast_clock {
            calls = calls.target("ours ≤ 0.35", ours.calls_per_message() <= 0.35);
            let ratio = ours.per_second() / base.per_second();
            speed = speed.target("≥ 3× faster", ratio >= 3.0);
        }
        report.rows.push(calls);
        report.rows.push(speed);
        raw.push(
            json!({"moto": label, "messages": n, "ours": ours, "baseline": base,
            "moto_cpu_seconds": {"ours": ours_cpu, "baseline": base_cpu}}),
        );
    }
    report.notes.push(format!(
        "moto: both drains go through the same loopback proxy, which adds {ms} ms to every call \
         (the per-call latency AWS documents for SQS) and counts calls by X-Amz-Target. Both \
         drain until an empty receive (1 s long poll). Stock moto computes all of a queue's \
         attributes for every message it receives or sends, reading its clock (a 6 us datetime \
         subtraction) once per message in the queue each time: CPU in proportion to the \
         queue's depth, per message, the same for both drains, which bounds ours. 'Fast clock' \
         is moto with that clock read through time.time() (tests/moto_launcher.py \
         --fast-clock); SQS behaves the same (tests/tests/harness.rs checks delays, visibility \
         and the redrive policy on it)."
    ));
    merge_raw(report, "moto", Value::Array(raw));
}

/// Side by side with AWS's own redrive: StartMessageMoveTask and the re-driver move the same
/// DLQ on LocalStack, in one run (see `redrive_bench::move_task`).
pub(crate) async fn localstack_section(o: &Options, report: &mut Report) {
    let (n, poison, base) = (
        o.localstack_messages,
        o.localstack_poison,
        o.localstack_backoff_base,
    );
    let ms = o.latency.as_millis();
    let started = std::time::Instant::now();
    let ls = redrive_tests::localstack();
    let startup = started.elapsed().as_secs_f64();
    let direct = ls.sqs().await;
    let proxy = Proxy::start(redrive_bench::endpoint_addr(&ls.endpoint()), o.latency)
        .await
        .expect("starting the proxy");
    eprintln!(
        "bench: LocalStack ready in {startup:.1} s; StartMessageMoveTask and redrive, {n} + {poison} poison messages..."
    );
    let out = side_by_side(&direct, &proxy, n, poison, o.pipelines, base).await;
    let (ours, aws) = (&out.redrive, &out.move_task);
    let section = format!(
        "Side by side with AWS's own redrive (baseline: StartMessageMoveTask) on LocalStack behind a {ms} ms/call proxy, {n} messages + {poison} poison"
    );
    // Counts side by side: no ratio.
    let count = |figure: &str, ours: u64, aws: u64, note: String| {
        let mut row = Row::new(&section, figure, ours as f64, aws as f64, "").note(note);
        row.ratio = f64::NAN;
        row
    };
    report.rows.push(
        Row::new(&section, "Time to an empty DLQ", ours.seconds, aws.seconds, "s")
            .fraction()
            .note(format!(
                "the move task polled with ListMessageMoveTasks every {} ms; LocalStack moves it in memory, one message at a time, with no API call or network: a floor, not AWS's rate",
                POLL_INTERVAL.as_millis()
            )),
    );
    report.rows.push(
        count(
            "API calls by the caller",
            ours.total_calls(),
            aws.total_calls(),
            format!(
                "counted at the proxy: ours {}; move task {} (its own moves are not API calls the caller sees)",
                calls_text(&ours.calls),
                calls_text(&aws.calls)
            ),
        )
        .fraction(),
    );
    report.rows.push(count(
        "Copies carrying their redrive history (x-redrive: attempt 1, the chain's originalMessageId)",
        ours.with_history,
        aws.with_history,
        format!("of {} and {} copies on the source", ours.on_source, aws.on_source),
    ));
    report.rows.push(count(
        "Copies delayed on arrival (backoff)",
        ours.delayed,
        aws.delayed,
        format!(
            "ApproximateNumberOfMessagesDelayed as the DLQ emptied, {:.1} s in: a copy whose delay had already passed counts as visible; all visible after {:.0} s vs {:.0} s (BACKOFF_BASE_SECONDS {base}, full jitter)",
            ours.seconds, ours.visible_after_seconds, aws.visible_after_seconds
        ),
    ));
    report.rows.push(count(
        "Copies with both attributes byte for byte",
        ours.attributes_kept,
        aws.attributes_kept,
        String::new(),
    ));
    report.rows.push(count(
        "Poison messages isolated on the poison queue",
        ours.poison_isolated,
        aws.poison_isolated,
        format!(
            "sent back to the source, to fail again: {} vs {}",
            ours.poison_on_source, aws.poison_on_source
        ),
    ));
    report.rows.push(count(
        "Messages lost / repeated",
        ours.lost + ours.repeated,
        aws.lost + aws.repeated,
        format!(
            "ours lost {} repeated {}; move task lost {} repeated {}",
            ours.lost, ours.repeated, aws.lost, aws.repeated
        ),
    ));
    report.notes.push(format!(
        "side by side: LocalStack 2026.3.0 (localstack-core, tests/localstack_launcher.py, ready in {startup:.1} s), both legs on fresh queues seeded with the same {n} messages of about 300 bytes and two attributes plus {poison} poison messages (x-redrive at the last attempt, or a permanent lastError); StartMessageMoveTask from the DLQ to the source, the re-driver's engine with its defaults but BACKOFF_BASE_SECONDS {base}. Read back off the clock and uncounted."
    ));
    merge_raw(
        report,
        "localstack",
        serde_json::to_value(&out).unwrap_or_default(),
    );
}
