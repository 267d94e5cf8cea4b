//! The fault-injection soak on the port fakes, as part of `cargo test`: 20,000 messages
//! through consumer and re-driver with 20% of calls failing and re-drivers killed between send
//! and delete, then reconciled by originalMessageId. On tokio's paused clock it takes seconds.

use redrive_bench::bench::on_modelled_clock;
use redrive_bench::faults::FaultKind;
use redrive_bench::soak::{self, Reconciliation, SoakSettings};
use redrive_bench::world::World;

fn assert_passed(r: &Reconciliation) {
    assert!(r.passed(), "the soak failed:\n{r}");
}

#[test]
fn twenty_thousand_messages_under_faults_and_kills_lose_nothing() {
    let settings = SoakSettings::fake(20_000, 7);
    let r = on_modelled_clock(soak::fake::run(&settings));
    assert_passed(&r);
    assert_eq!(r.messages, 20_000);
    // The faults really happened, at about the configured share, of every kind.
    let share = r.layer.faults.total() as f64 / r.layer.calls as f64;
    assert!((0.17..0.23).contains(&share), "fault share {share}\n{r}");
    for kind in FaultKind::ALL {
        assert!(r.layer.faults.get(kind) > 0, "no {kind:?} fault\n{r}");
    }
    assert!(r.layer.kills_between_send_and_delete > 10, "{r}");
    assert!(
        r.redriver_kills > r.layer.kills_between_send_and_delete,
        "{r}"
    );
    // Every path of the loop was taken: delivered, isolated for each reason, duplicates
    // absorbed by the idempotent consumer.
    assert!(r.delivered_once > 18_000, "{r}");
    assert!(
        r.parked
            .get("poison:permanent-failure")
            .copied()
            .unwrap_or(0)
            > 0,
        "{r}"
    );
    assert!(
        r.parked.get("poison:max-attempts").copied().unwrap_or(0) > 0,
        "{r}"
    );
    assert!(r.duplicates_suppressed > 0, "{r}");
    assert!(r.redriven > 0 && r.isolated > 0, "{r}");
    // Doomed and poison payloads never reach the downstream; everything else settles.
    assert_eq!(r.parked.get("source"), None, "{r}");
    assert_eq!(r.parked.get("dlq"), None, "{r}");
}

#[test]
fn other_seeds_lose_nothing_either() {
    for seed in [1, 2, 3, 13, 42] {
        let r = on_modelled_clock(soak::fake::run(&SoakSettings::fake(2_000, seed)));
        assert_passed(&r);
    }
}

#[test]
fn the_reconciliation_catches_a_service_that_loses_acknowledged_sends() {
    let settings = SoakSettings::fake(2_000, 5);
    let r = on_modelled_clock(async {
        let world = World::new(settings.seed);
        world.set_lossy_sends(0.05);
        soak::fake::run_in(world, &settings).await
    });
    assert!(!r.passed(), "a lossy service went unnoticed:\n{r}");
    assert!(!r.lost.is_empty(), "{r}");
}
