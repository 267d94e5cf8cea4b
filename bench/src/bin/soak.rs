//! The fault-injection soak, printed as its reconciliation.
//!
//! ```text
//! soak fake [--messages 20000] [--seed N] [--fault-rate 0.2]   # port fakes, paused clock
//! soak moto [--messages 2000]  [--seed N] [--fault-rate 0.2]   # moto behind the fault proxy
//!           [--kill-share 0.3] [--pollers N]                    # either
//! soak circuit [--messages 50] [--short]   # the adaptive circuit's outage simulation on moto
//! soak workflow [--messages 40] [--seed N] [--stops 3]   # the Step Functions orchestrator on moto
//! ```
//! Exits 1 when a message was lost or the reconciliation found a violation. The figures are
//! also written to `target/soak/<fake|moto>.json`.

use std::process::ExitCode;
use std::time::Instant;

use redrive_bench::bench::on_modelled_clock;
use redrive_bench::soak::{self, SoakSettings};

fn usage() -> ExitCode {
    eprintln!(
        "usage: soak <fake|moto> [--messages N] [--seed N] [--fault-rate R] [--kill-share R] [--pollers N]\n       soak circuit [--messages N] [--short]\n       soak workflow [--messages N] [--seed N] [--stops N]"
    );
    ExitCode::from(2)
}

/// `soak circuit`: the outage simulation, without and with the adaptive circuit side by side
/// (see `redrive_bench::circuit_sim`); its figures also go to `target/soak/circuit.json`.
fn circuit(args: &[String]) -> ExitCode {
    use redrive_bench::circuit_sim::{self, SimSettings};
    let mut settings = SimSettings::full();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--short" => settings = SimSettings::short(),
            "--messages" => match rest.next().and_then(|v| v.parse().ok()) {
                Some(n) => settings.messages = n,
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    let report = on_two_threads(circuit_sim::run(&settings));
    print!("{report}");
    keep("circuit", &report);
    exit_code(report.passed())
}

// The workflow soak
/// `soak workflow`: the Step Functions orchestrator on moto with injected task failures and
/// stopped executions (see `redrive_bench::soak::workflow`); figures also in
/// `target/soak/workflow.json`.
fn workflow(args: &[String]) -> ExitCode {
    use redrive_bench::soak::workflow::{self, WorkflowSoakSettings};
    let mut settings = WorkflowSoakSettings::new(40, 7);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next().and_then(|v| v.parse::<u64>().ok()) else {
            return usage();
        };
        match flag.as_str() {
            "--messages" => settings.messages = value,
            "--seed" => settings.seed = value,
            "--stops" => settings.stops = value as u32,
            _ => return usage(),
        }
    }
    let report = on_two_threads(workflow::run(&settings));
    print!("{report}");
    keep("workflow", &report);
    exit_code(report.passed())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(which) = args.first().cloned() else {
        return usage();
    };
    if which == "circuit" {
        return circuit(&args[1..]);
    }
    if which == "workflow" {
        return workflow(&args[1..]);
    }
    let mut settings = if which == "moto" {
        SoakSettings::moto(2000, 7)
    } else {
        SoakSettings::fake(20_000, 7)
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next() else {
            return usage();
        };
        match (flag.as_str(), value.parse::<f64>()) {
            ("--messages", Ok(v)) => settings.messages = v as u64,
            ("--seed", Ok(v)) => settings.seed = v as u64,
            ("--fault-rate", Ok(v)) => settings.fault_rate = v,
            ("--kill-share", Ok(v)) => settings.kill_share = v,
            ("--pollers", Ok(v)) if v >= 1.0 => settings.pollers = v as usize,
            _ => return usage(),
        }
    }
    // The functions' own JSON logs, when asked for (RUST_LOG=info): one line per action.
    if std::env::var_os("RUST_LOG").is_some() {
        redrive_engine::init_logging();
    }
    let wall = Instant::now();
    let report = match which.as_str() {
        "fake" => on_modelled_clock(soak::fake::run(&settings)),
        "moto" => on_two_threads(soak::moto::run(&settings)),
        _ => return usage(),
    };
    print!("{report}");
    if which == "fake" {
        println!(
            "  (modelled time on tokio's paused clock; wall time {:.1} s)",
            wall.elapsed().as_secs_f64()
        );
    }
    keep(&which, &report);
    exit_code(report.passed())
}

/// Runs a soak on a runtime of two worker threads (the Lambda-sized machine).
fn on_two_threads<F: std::future::Future>(soak: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(soak)
}

/// Keeps the figures of a soak in `target/soak/<name>.json`; a failed write only loses them.
fn keep(name: &str, report: &impl serde::Serialize) {
    let dir = redrive_tests::workspace_root().join("target").join("soak");
    if std::fs::create_dir_all(&dir).is_ok()
        && let Ok(json) = serde_json::to_string_pretty(report)
    {
        let _ = std::fs::write(dir.join(format!("{name}.json")), json);
    }
}

fn exit_code(passed: bool) -> ExitCode {
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
