//! The port fake on the modelled clock: ours against the script, the scale-out of K drains,
//! the sweep of MAX_CONCURRENT_BATCHES.

use redrive_bench::bench::{
    ScaleOut, fake_baseline, fake_invocations, fake_ours, fake_scale_out, on_modelled_clock,
};
use redrive_bench::report::{Report, Row};
use serde_json::json;

use crate::options::Options;
use crate::{calls_note, merge_raw};

pub(crate) fn fake_section(o: &Options, rt: &tokio::runtime::Runtime, report: &mut Report) {
    let n = o.fake_messages;
    let ms = o.latency.as_millis();
    eprintln!("bench: port fake, {n} messages, modelled clock...");
    let ours_model = on_modelled_clock(fake_ours(n, o.latency, o.pipelines));
    let base_model = on_modelled_clock(fake_baseline(n, o.latency));
    eprintln!("bench: port fake, {n} messages, ours on the wall clock...");
    let ours_wall = rt.block_on(fake_ours(n, o.latency, o.pipelines));
    let section = format!("Drain on the in-memory port fake, {ms} ms/call, {n} messages");
    let ratio = ours_wall.per_second() / base_model.per_second();
    report.rows.push(
        Row::new(
            &section,
            "Drain throughput",
            ours_wall.per_second(),
            base_model.per_second(),
            "msg/s",
        )
        .speedup()
        .target("≥ 20× faster", ratio >= 20.0)
        .note(format!(
            "ours on the wall clock ({:.1} s; {:.0} msg/s on the modelled clock); the baseline's {} sequential calls on the modelled clock ({:.0} s, which it would take to wait out)",
            ours_wall.seconds,
            ours_model.per_second(),
            base_model.total_calls(),
            base_model.seconds
        )),
    );
    report.rows.push(
        Row::new(
            &section,
            "API calls per redriven message",
            ours_wall.calls_per_message(),
            base_model.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "ours {}; baseline {}",
            calls_note(&ours_wall),
            calls_note(&base_model)
        )),
    );
    let per_invocation = on_modelled_clock(fake_invocations(1000, 100, o.pipelines));
    report.rows.push(
        Row::new(
            &section,
            "API calls per redriven message, as the Lambda runs (100 per invocation)",
            per_invocation.calls_per_message(),
            base_model.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "1,000 messages in invocations of MAX_MESSAGES_PER_INVOCATION=100: {}",
            calls_note(&per_invocation)
        )),
    );
    report.notes.push(format!(
        "port fake: redrive_engine::fake::FakeSqs::with_latency({ms} ms) adds the latency to every call \
         and costs nothing else, as SQS would; the baseline script runs over the same port (a \
         single send or delete is a batch call of one entry, one call of latency). The \
         modelled clock is tokio's paused clock: sleeps (the latency) advance it, CPU does not."
    ));
    merge_raw(
        report,
        "fake",
        json!({"ours_wall": ours_wall, "ours_modelled": ours_model, "baseline_modelled": base_model, "per_invocation": per_invocation}),
    );
}

/// Scale-out: K bounded drains of the same engine at once over one DLQ (what the
/// Step Functions Map of K drain tasks runs), each at the global velocity cap divided by K,
/// against one invocation at the whole cap, in the same run.
pub(crate) fn scale_section(o: &Options, rt: &tokio::runtime::Runtime, report: &mut Report) {
    let (n, k, cap) = (o.fake_messages, o.scale_drains, o.scale_cap as f64);
    let ms = o.latency.as_millis();
    eprintln!("bench: scale-out, {k} drains and 1, {n} messages, wall clock...");
    let many = rt.block_on(fake_scale_out(n, o.latency, o.pipelines, k, cap));
    let one = rt.block_on(fake_scale_out(n, o.latency, o.pipelines, 1, cap));
    let many_model = on_modelled_clock(fake_scale_out(n, o.latency, o.pipelines, k, cap));
    let one_model = on_modelled_clock(fake_scale_out(n, o.latency, o.pipelines, 1, cap));
    let lost: u64 = [&many, &one, &many_model, &one_model]
        .iter()
        .map(|r| r.lost)
        .sum();
    let section = format!(
        "Scale-out on the in-memory port fake, {ms} ms/call, {n} messages, MAX_MESSAGES_PER_SECOND {cap:.0} split over K = {k} drains"
    );
    let calls = many.run.calls_per_message();
    let met = many.run.per_second() >= 5_000.0 && calls <= 0.32 && lost == 0;
    report.rows.push(
        Row::new(
            &section,
            &format!("Aggregate drain throughput, {k} drains vs one invocation"),
            many.run.per_second(),
            one.run.per_second(),
            "msg/s",
        )
        .speedup()
        .target("≥ 5,000 msg/s at ≈ 0.30 calls/msg, lost 0", met)
        .note(format!(
            "wall clock: {k} drains of {p} pipelines at {:.0} msg/s each took {:.1} s ({}), one invocation {:.1} s; modelled clock {:.0} vs {:.0} msg/s; lost {lost}, repeated {}",
            many.per_drain_cap,
            many.run.seconds,
            scale_note(&many),
            one.run.seconds,
            many_model.run.per_second(),
            one_model.run.per_second(),
            many.repeated + one.repeated,
            p = o.pipelines,
        )),
    );
    report.rows.push(
        Row::new(
            &section,
            &format!("API calls per redriven message, {k} drains vs one invocation"),
            calls,
            one.run.calls_per_message(),
            "",
        )
        .fraction()
        .note(format!(
            "{k} drains {}; one {}",
            calls_note(&many.run),
            calls_note(&one.run)
        )),
    );
    merge_raw(
        report,
        "scale",
        json!({"drains": many, "one": one, "drains_modelled": many_model, "one_modelled": one_model}),
    );
}

pub(crate) fn scale_note(run: &ScaleOut) -> String {
    let min = run.redriven.iter().min().copied().unwrap_or(0);
    let max = run.redriven.iter().max().copied().unwrap_or(0);
    format!(
        "{min}-{max} messages per drain, limit {}",
        run.per_drain_limit
    )
}

pub(crate) fn sweep_section(o: &Options, report: &mut Report) {
    let n = o.fake_messages;
    let base = on_modelled_clock(fake_baseline(n, o.latency));
    let mut table = format!(
        "MAX_CONCURRENT_BATCHES on the port fake ({} ms/call, {n} messages, modelled clock; baseline {:.1} msg/s):\n\n\
         | pipelines | msg/s | × baseline | API calls per message |\n|---:|---:|---:|---:|\n",
        o.latency.as_millis(),
        base.per_second()
    );
    let mut raw = Vec::new();
    for p in [1u32, 2, 4, 8, 16, 32] {
        eprintln!("bench: sweep, {p} pipelines...");
        let run = on_modelled_clock(fake_ours(n, o.latency, p));
        table.push_str(&format!(
            "| {p} | {:.0} | {:.1} | {:.3} |\n",
            run.per_second(),
            run.per_second() / base.per_second(),
            run.calls_per_message()
        ));
        raw.push(run);
    }
    report.extra.push(table);
    merge_raw(
        report,
        "sweep",
        serde_json::to_value(raw).unwrap_or_default(),
    );
}
