//! The adaptive circuit's measured claim in its short form, on moto: a downstream
//! outage three times longer than the whole backoff schedule, 20 messages, once with the
//! re-driver as it was and once with the adaptive circuit, side by side (about 50 s).
//!
//! The side without the circuit is the control: if the outage did not park every message
//! there, the scenario would prove nothing about the circuit. The side with it must park none,
//! empty the DLQ after the recovery, and deliver every message exactly once by the
//! downstream's own records.

use redrive_bench::circuit_sim::{self, SimSettings};

/// The simulation's future (two re-drivers, a downstream, a poller and the world's checks)
/// is deep in a debug build: it runs boxed, on a thread with room for it, not on the 2 MiB
/// stack of a test thread.
fn run_simulation(settings: &SimSettings) -> circuit_sim::SimReport {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("circuit-sim".into())
            .stack_size(32 * 1024 * 1024)
            .spawn_scoped(scope, || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(Box::pin(circuit_sim::run(settings)))
            })
            .expect("the simulation thread starts")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[test]
fn the_circuit_parks_nothing_in_an_outage_that_parks_everything_without_it() {
    let settings = SimSettings::short();
    let report = run_simulation(&settings);
    println!("{report}");
    let all = settings.messages;

    // The control counts messages, not copies: on a loaded CI machine the re-driver without the
    // circuit has parked one message twice (a duplicate on the poison queue, nothing lost),
    // which says nothing about the circuit. Every message parked, none lost or delivered
    // twice, and no other violation is what makes the control.
    let without = &report.without;
    assert!(
        without.parked_during_outage >= all && without.parked_total() == all,
        "the control: without the circuit the outage must park every message\n{report}"
    );
    let other_violations: Vec<&String> = without
        .violations
        .iter()
        .filter(|v| !v.contains(" is parked in "))
        .collect();
    assert!(
        without.lost.is_empty() && without.delivered_twice == 0 && other_violations.is_empty(),
        "without the circuit: lost {:?}, delivered twice {}, violations {:?}",
        without.lost,
        without.delivered_twice,
        other_violations
    );

    let with = report
        .with
        .as_ref()
        .unwrap_or_else(|| panic!("the side with the circuit did not run\n{report}"));
    assert_eq!(
        with.parked_during_outage, 0,
        "with the circuit nothing is parked during the outage\n{report}"
    );
    assert!(
        with.stopped_because
            .get("circuit-open")
            .copied()
            .unwrap_or(0)
            > 0,
        "the circuit never held a run open\n{report}"
    );
    assert!(
        with.recovery_to_empty_seconds.is_some(),
        "with the circuit the DLQ must empty after the recovery\n{report}"
    );
    assert_eq!(with.parked_total(), 0, "parked at the end\n{report}");
    assert!(with.lost.is_empty(), "lost: {:?}\n{report}", with.lost);
    assert_eq!(with.delivered_twice, 0, "delivered twice\n{report}");
    assert!(
        with.violations.is_empty(),
        "violations: {:?}\n{report}",
        with.violations
    );
    assert_eq!(with.delivered_once, all, "delivered once\n{report}");
    assert!(report.passed(), "{report}");
}
