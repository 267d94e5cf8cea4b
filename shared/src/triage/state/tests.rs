//! The book's transitions, holds and operations.

use super::*;

const T0: i64 = 1_764_000_000_000;

fn book() -> Book {
    let mut b = Book::new("orders-dlq");
    assert!(
        b.observe("g2-a", "timeout", None, 3, Some(("p1", 3)), T0)
            .is_some()
    );
    b
}

#[test]
fn a_group_alerts_new_once_then_regressed_once_after_it_was_resolved() {
    let mut b = book();
    assert_eq!(b.get("g2-a").unwrap().state, State::New);
    for n in 4..100 {
        assert_eq!(
            b.observe("g2-a", "timeout", None, n, None, T0 + n as i64),
            None
        );
    }
    b.absent(["g2-other"], T0 + 1000);
    assert_eq!(b.get("g2-a").unwrap().state, State::Resolved);
    let a = b
        .observe("g2-a", "timeout", None, 1, None, T0 + 2000)
        .unwrap();
    assert_eq!((a.kind.as_str(), a.count), ("regressed", 1));
    assert_eq!(b.get("g2-a").unwrap().state, State::Regressed);
    assert_eq!(b.observe("g2-a", "timeout", None, 2, None, T0 + 3000), None);
}

#[test]
fn a_hold_ends_by_time_or_by_distinct_messages_left() {
    let mut b = book();
    b.hold("g2-a", "ops", Some(T0 + 60_000), None, T0).unwrap();
    assert!(b.held(T0 + 59_999).contains("g2-a"));
    assert!(!b.held(T0 + 60_000).contains("g2-a"));
    assert_eq!(b.expire(T0 + 60_000), vec!["g2-a".to_string()]);
    assert_eq!(b.get("g2-a").unwrap().state, State::Acknowledged);

    b.hold("g2-a", "ops", None, Some(2), T0).unwrap();
    assert!(!b.left("g2-a", &["m1".into(), "m1".into()], T0));
    assert!(
        b.held(T0).contains("g2-a"),
        "one distinct message left of two"
    );
    assert!(b.left("g2-a", &["m2".into()], T0));
    assert!(b.held(T0).is_empty());
    let last = b.get("g2-a").unwrap().audit.last().unwrap().clone();
    assert_eq!(last.action, "hold-ended");
    b.stamp_last_audit("g2-a", "p1", 3);
    let last = b.get("g2-a").unwrap().audit.last().unwrap().clone();
    assert_eq!((last.plan_id.as_deref(), last.count), (Some("p1"), Some(3)));
}

#[test]
fn bad_holds_and_unknown_groups_are_refused_with_the_reason() {
    let mut b = book();
    let e = b.hold("g2-a", "ops", None, None, T0).unwrap_err();
    assert!(e.to_string().contains("needs an end"), "{e}");
    let e = b.hold("g2-a", "ops", Some(T0 - 1), None, T0).unwrap_err();
    assert!(e.to_string().contains("not in the future"), "{e}");
    let e = b.hold("g2-a", "ops", None, Some(0), T0).unwrap_err();
    assert!(e.to_string().contains("--count 0"), "{e}");
    let e = b.acknowledge("g2-zz", "ops", T0).unwrap_err();
    assert!(e.to_string().contains("run `redrive triage`"), "{e}");
    let e = b.release("g2-a", "ops", T0).unwrap_err();
    assert!(e.to_string().contains("not held"), "{e}");
}

#[test]
fn one_operation_per_group_and_a_failed_canary_alerts_once() {
    let mut b = book();
    b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
    let e = b.begin("g2-a", "discard", "ops", "p1", 3, T0).unwrap_err();
    assert!(matches!(e, Refused::Busy { .. }), "{e}");
    // The same operation again is a resumption, audited as such.
    b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
    b.replay_stage("g2-a", 1, 1);
    b.replay_verdict("g2-a", 1, 0);
    let a = b
        .finish(
            "g2-a",
            "ops",
            Finish::CanaryFailed("1 of 1 back".into()),
            T0,
        )
        .unwrap();
    assert_eq!(a.kind, "canary-failed");
    let r = b.get("g2-a").unwrap();
    assert_eq!(r.state, State::ReplayFailed);
    assert_eq!(r.operation, None);
    let actions: Vec<&str> = r.audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["replay", "replay-resumed", "replay-stopped"]);
    assert_eq!(r.replay.as_ref().unwrap().back, 1);
}

#[test]
fn a_finished_replay_that_left_nothing_resolves_the_group() {
    let mut b = book();
    b.begin("g2-a", "replay", "ops", "p1", 3, T0).unwrap();
    assert_eq!(b.finish("g2-a", "ops", Finish::Done { left: 0 }, T0), None);
    assert_eq!(b.get("g2-a").unwrap().state, State::Resolved);
    assert!(b.get("g2-a").unwrap().replay.as_ref().unwrap().finished);
}

#[test]
fn a_pass_keeps_its_facts_with_the_trend_thinned_and_an_old_book_still_loads() {
    let mut b = book();
    let times: Vec<i64> = (0..1000).map(|n| T0 + n).collect();
    let facts = PassFacts {
        action: "fix-then-replay-canary".into(),
        advice: "fix it".into(),
        first_failure: Some("2025-11-24T16:00:00Z".into()),
        last_failure: Some("2025-11-24T17:00:00Z".into()),
        failure_times: times.clone(),
        failure_times_every: 3,
        ..PassFacts::default()
    };
    let (kept, every) = thin(&facts.failure_times, facts.failure_times_every);
    assert_eq!(
        (kept.len(), every),
        (200, 15),
        "every 5th of 1000, each for 3 x 5"
    );
    assert_eq!(
        (kept[0], kept[199]),
        (T0, T0 + 995),
        "evenly over the whole range"
    );
    assert_eq!(thin(&times[..200], 1), (times[..200].to_vec(), 1));
    assert_eq!(thin(&times[..201], 2).0.len(), 101);
    b.keep_pass_facts("g2-a", facts.clone(), T0 + 5).unwrap();
    assert_eq!(b.get("g2-a").unwrap().pass.as_ref(), Some(&facts));
    assert_eq!(b.passed_at.as_deref(), Some("2025-11-24T16:00:00Z"));
    assert!(b.keep_pass_facts("g2-zz", facts, T0).is_err());
    let json = serde_json::to_string(&b).unwrap();
    assert_eq!(serde_json::from_str::<Book>(&json).unwrap(), b);

    // A book written before passes kept their facts loads, without them.
    let old = r#"{"queue":"q","groups":{"g2-a":{"state":"held","title":"t","firstSeen":"a","lastSeen":"b","lastCount":3,"notes":[],"audit":[]}}}"#;
    let old: Book = serde_json::from_str(old).unwrap();
    assert_eq!(old.get("g2-a").unwrap().pass, None);
    assert_eq!(old.passed_at, None);
}

#[test]
fn stages_start_with_the_canary_and_widen() {
    assert_eq!(stages(1, 1), vec![1]);
    assert_eq!(stages(5, 1), vec![1, 4]);
    assert_eq!(stages(500, 1), vec![1, 10, 100, 389]);
    assert_eq!(stages(500, 3), vec![3, 10, 100, 387]);
    assert_eq!(stages(20, 50), vec![20]);
    assert_eq!(stages(0, 1), Vec::<u64>::new());
}
