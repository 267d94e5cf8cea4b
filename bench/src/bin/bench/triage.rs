//! `redrive triage QUEUE`'s pass over a deep DLQ on the port fake: the concurrent walk on the
//! wall clock, against the one-by-one walk of the same run.

use redrive_bench::bench::on_modelled_clock;
use redrive_bench::report::{Report, Row};
use redrive_bench::triage_scan::{
    CALL_BUDGET_PER_100K, SECONDS_BUDGET_PER_100K, ScanRun, sequential_reach, triage_pass,
};
use serde_json::json;

use crate::calls_text;
use crate::merge_raw;
use crate::options::Options;

pub(crate) fn triage_section(o: &Options, rt: &tokio::runtime::Runtime, report: &mut Report) {
    let (n, base_n, k) = (
        o.triage_messages,
        o.triage_baseline_messages,
        o.triage_concurrency,
    );
    let ms = o.latency.as_millis();
    eprintln!("bench: triage pass, {n} messages, {k} receives at once, wall clock...");
    let ours = rt.block_on(triage_pass(n, o.latency, k));
    eprintln!("bench: triage pass, {n} messages, {k} receives at once, modelled clock...");
    let ours_model = on_modelled_clock(triage_pass(n, o.latency, k));
    eprintln!(
        "bench: triage pass, {base_n} messages, one receive after another, modelled clock..."
    );
    let base = on_modelled_clock(triage_pass(base_n, o.latency, 1));
    let section = format!(
        "`redrive triage` pass on the in-memory port fake, {ms} ms/call, {n} messages, --concurrency {k}"
    );
    // The budgets are per 100,000 messages: a smaller run is held to its share.
    let share = n as f64 / 100_000.0;
    let call_budget = (CALL_BUDGET_PER_100K as f64 * share).ceil();
    let time_budget = SECONDS_BUDGET_PER_100K * share;
    let met = ours.complete() && base.complete();
    let per_msg_ms = |r: &ScanRun| r.seconds_per_message() * 1000.0;
    let base_for_n = base.seconds_per_message() * n as f64;
    let reach = sequential_reach(o.latency);
    let hold = redrive_cli::scan::HOLD_SECONDS;
    report.rows.push(
        Row::new(
            &section,
            "Time per message grouped (the whole pass: receives, grouping, releases)",
            per_msg_ms(&ours),
            per_msg_ms(&base),
            "ms",
        )
        .fraction()
        .target(
            &format!("pass ≤ {time_budget:.0} s on the wall clock, complete"),
            met && ours.seconds <= time_budget,
        )
        .note(format!(
            "ours: {n} messages in {:.1} s on the wall clock ({:.1} s on the modelled clock), {}, {} groups; \
             baseline: the same walk one receive after another, {base_n} messages in {:.1} s on the modelled clock, \
             {}, {:.0} s for {n} at that rate{}; {:.1}× faster per message",
            ours.seconds,
            ours_model.seconds,
            ours.status,
            ours.groups,
            base.seconds,
            base.status,
            base_for_n,
            if n > reach {
                format!(
                    ", which its hold of {hold} s does not allow: one by one, a pass walks about {reach} messages before the first come back"
                )
            } else {
                String::new()
            },
            base.seconds_per_message() / ours.seconds_per_message(),
        )),
    );
    let per_msg_calls = |r: &ScanRun| r.total_calls() as f64 / r.messages.max(1) as f64;
    report.rows.push(
        Row::new(
            &section,
            "SQS calls per message grouped",
            per_msg_calls(&ours),
            per_msg_calls(&base),
            "",
        )
        .fraction()
        .target(
            &format!("≤ {call_budget:.0} calls for the pass"),
            ours.total_calls() as f64 <= call_budget,
        )
        .note(format!(
            "ours {} calls: {}; baseline {} calls for {base_n}: {}",
            ours.total_calls(),
            calls_text(&ours.calls),
            base.total_calls(),
            calls_text(&base.calls),
        )),
    );
    report.notes.push(format!(
        "triage pass: the CLI's own walk (redrive_cli::commands::triage::walk::group_queue) over \
         FakeSqs::with_latency({ms} ms): receives of 10, held {hold} s, grouped, then released 10 \
         per ChangeMessageVisibilityBatch. The one-by-one baseline runs on {base_n} messages on the \
         modelled clock (tokio's paused clock: the latency advances it, CPU does not), and the \
         figures are per message; ours runs on the wall clock, CPU included, so a loaded machine \
         slows it.",
    ));
    merge_raw(
        report,
        "triage",
        json!({"ours_wall": ours, "ours_modelled": ours_model, "baseline_modelled": base}),
    );
}
