use super::*;
use crate::meta::RedriveMeta;
use crate::timefmt::rfc3339_from_millis;

const T0: i64 = 1_800_000_000_000;
const MIN: i64 = 60_000;

fn settings() -> CircuitSettings {
    CircuitSettings {
        threshold: 0.5,
        min_bounces: 3,
        window_ms: 10 * MIN,
        cooldown_ms: 5 * MIN,
        max_cooldown_ms: 15 * MIN,
        canary_size: 4,
    }
}

fn bounce(id: &str, at: i64) -> Bounce {
    Bounce {
        original_message_id: id.into(),
        last_redriven_at: at,
    }
}

fn bounces(n: usize, at: i64) -> Vec<Bounce> {
    (0..n).map(|i| bounce(&format!("m{i}"), at)).collect()
}

/// A closed circuit that redrove 10 copies at T0 and saw `n` of them back.
fn closed_after(n: usize) -> (CircuitRecord, Vec<Transition>) {
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    r.record_redriven(&s, T0, 10);
    let t = r.observe_bounces(&s, T0 + MIN, &bounces(n, T0));
    (r, t)
}

fn opened() -> CircuitRecord {
    let (r, t) = closed_after(6);
    assert_eq!(t.len(), 1);
    r
}

fn half_open() -> CircuitRecord {
    let mut r = opened();
    let t = r.tick(&settings(), T0 + MIN + 5 * MIN);
    assert_eq!(t[0].to, State::HalfOpen);
    r
}

#[test]
fn closed_drains_without_a_budget() {
    let s = settings();
    let r = CircuitRecord::new(&s, T0);
    assert_eq!(r.state, State::Closed);
    assert_eq!(r.plan(&s), Plan::Drain { budget: None });
}

#[test]
fn closed_opens_when_the_bounce_rate_reaches_the_threshold() {
    let (r, t) = closed_after(5);
    assert_eq!(r.state, State::Open);
    assert_eq!(
        (t[0].from, t[0].to, t[0].at),
        (State::Closed, State::Open, T0 + MIN)
    );
    assert!(t[0].reason.contains("5 of 10"), "{}", t[0].reason);
    assert_eq!(r.plan(&settings()), Plan::Hold);
    assert_eq!(r.history, t);
    assert!(r.bounced.is_empty(), "counts before the open are forgotten");
}

#[test]
fn closed_stays_closed_below_the_threshold_or_the_minimum() {
    let (r, t) = closed_after(4);
    assert!(t.is_empty());
    assert_eq!(r.state, State::Closed);
    assert_eq!(r.counts(), (10, 4));
    // 2 of 2: rate 1, but fewer than min_bounces.
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    r.record_redriven(&s, T0, 2);
    assert!(r.observe_bounces(&s, T0, &bounces(2, T0)).is_empty());
    assert_eq!(r.state, State::Closed);
}

#[test]
fn only_copies_redriven_within_the_window_count() {
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    r.record_redriven(&s, T0, 3);
    // Bounced copies redriven 11 minutes ago are old news.
    let old = bounces(3, T0 - 11 * MIN);
    assert!(r.observe_bounces(&s, T0, &old).is_empty());
    assert_eq!(r.counts(), (3, 0));
    // And samples age out of the window.
    r.tick(&s, T0 + 12 * MIN);
    assert_eq!(r.counts(), (0, 0));
}

#[test]
fn bounced_copies_with_none_known_redriven_count_as_rate_one() {
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    let t = r.observe_bounces(&s, T0, &bounces(3, T0 - MIN));
    assert_eq!(t.len(), 1);
    assert_eq!(r.state, State::Open);
}

#[test]
fn open_goes_half_open_after_the_cool_down_only() {
    let s = settings();
    let mut r = opened();
    assert!(r.tick(&s, T0 + MIN + 5 * MIN - 1).is_empty());
    assert_eq!(r.state, State::Open);
    let t = r.tick(&s, T0 + MIN + 5 * MIN);
    assert_eq!((t[0].from, t[0].to), (State::Open, State::HalfOpen));
    assert!(t[0].reason.contains("300 s"), "{}", t[0].reason);
    assert_eq!(r.plan(&s), Plan::Canary { size: 4 });
}

#[test]
fn half_open_sends_a_canary_then_watches() {
    let s = settings();
    let mut r = half_open();
    let at = T0 + 7 * MIN;
    r.record_redriven(&s, at, 4);
    assert_eq!(
        r.canary,
        Some(Canary {
            sent_at: at,
            sent: 4,
            bounced: vec![]
        })
    );
    assert_eq!(r.plan(&s), Plan::Watch);
    assert_eq!(Plan::Watch.budget(), Some(0));
    // A canary of 0 (an empty DLQ) is no canary: the next run tries again.
    let mut empty = half_open();
    empty.record_redriven(&s, at, 0);
    assert_eq!(empty.plan(&s), Plan::Canary { size: 4 });
}

#[test]
fn half_open_reopens_with_a_doubled_cool_down_when_the_canary_bounces() {
    let s = settings();
    let mut r = half_open();
    let sent = T0 + 7 * MIN + 500;
    r.record_redriven(&s, sent, 4);
    // A copy redriven before the canary is not a canary copy.
    assert!(
        r.observe_bounces(&s, sent + MIN, &[bounce("old", T0)])
            .is_empty()
    );
    // One canary copy back (seen twice): 1 of 4 < 0.5.
    let stamp = sent - 500; // lastRedrivenAt is whole seconds
    let one = [bounce("c1", stamp), bounce("c1", stamp)];
    assert!(r.observe_bounces(&s, sent + MIN, &one).is_empty());
    assert_eq!(r.canary.as_ref().map(|c| c.bounced.len()), Some(1));
    let t = r.observe_bounces(&s, sent + 2 * MIN, &[bounce("c2", stamp)]);
    assert_eq!((t[0].from, t[0].to), (State::HalfOpen, State::Open));
    assert!(t[0].reason.contains("2 of 4"), "{}", t[0].reason);
    assert_eq!(r.cooldown_ms, 10 * MIN);
    assert_eq!(r.canary, None);
    // The longer cool-down applies, and doubling stops at the maximum.
    let reopened = sent + 2 * MIN;
    assert!(r.tick(&s, reopened + 5 * MIN).is_empty());
    assert_eq!(r.tick(&s, reopened + 10 * MIN)[0].to, State::HalfOpen);
    r.record_redriven(&s, reopened + 10 * MIN, 4);
    let at = reopened + 10 * MIN;
    r.observe_bounces(&s, at + MIN, &bounces(4, at));
    assert_eq!(r.state, State::Open);
    assert_eq!(r.cooldown_ms, 15 * MIN, "capped at the maximum");
}

#[test]
fn half_open_closes_and_ramps_up_when_the_canary_stays_away() {
    let s = settings();
    let mut r = half_open();
    let sent = T0 + 7 * MIN;
    r.record_redriven(&s, sent, 4);
    assert!(r.tick(&s, sent + 10 * MIN - 1).is_empty());
    let t = r.tick(&s, sent + 10 * MIN);
    assert_eq!((t[0].from, t[0].to), (State::HalfOpen, State::Closed));
    assert!(t[0].reason.contains("canary held"), "{}", t[0].reason);
    assert_eq!(r.cooldown_ms, s.cooldown_ms);
    // Ramp: 8, 16, 32, 64, then no budget of its own at 100 per run.
    let mut budgets = vec![];
    while let Plan::Drain { budget: Some(b) } = r.plan(&s) {
        budgets.push(b);
        r.end_run(r.plan(&s), 100);
    }
    assert_eq!(budgets, [8, 16, 32, 64]);
    assert_eq!(r.plan(&s), Plan::Drain { budget: None });
}

#[test]
fn operator_open_holds_whatever_the_measurements_say() {
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    let t = r.set_override(T0, Override::Open);
    assert_eq!((t[0].from, t[0].to), (State::Closed, State::Open));
    assert!(t[0].reason.starts_with("operator: open"));
    assert_eq!(r.plan(&s), Plan::Hold);
    // No cool-down ends it.
    assert!(r.tick(&s, T0 + 100 * MIN).is_empty());
    assert_eq!(r.plan(&s), Plan::Hold);
    // Back to auto: the cool-down is over, so a canary first.
    assert!(r.set_override(T0 + 100 * MIN, Override::Auto).is_empty());
    assert_eq!(r.tick(&s, T0 + 100 * MIN)[0].to, State::HalfOpen);
    assert_eq!(r.plan(&s), Plan::Canary { size: 4 });
}

#[test]
fn operator_closed_drains_whatever_the_measurements_say() {
    let s = settings();
    let mut r = opened();
    let t = r.set_override(T0 + 2 * MIN, Override::Closed);
    assert_eq!((t[0].from, t[0].to), (State::Open, State::Closed));
    r.record_redriven(&s, T0 + 2 * MIN, 10);
    assert!(
        r.observe_bounces(&s, T0 + 3 * MIN, &bounces(10, T0 + 2 * MIN))
            .is_empty()
    );
    assert_eq!(r.plan(&s), Plan::Drain { budget: None });
    // Auto again: the measurements decide at the next observation.
    r.set_override(T0 + 3 * MIN, Override::Auto);
    let t = r.observe_bounces(&s, T0 + 3 * MIN, &[]);
    assert_eq!(t[0].to, State::Open);
}

#[test]
fn history_keeps_the_last_transitions() {
    let mut r = CircuitRecord::new(&settings(), T0);
    for i in 0..30 {
        let mode = if i % 2 == 0 {
            Override::Open
        } else {
            Override::Closed
        };
        r.set_override(T0 + i, mode);
    }
    assert_eq!(r.history.len(), HISTORY_LEN);
    assert_eq!(r.history.last().map(|t| t.at), Some(T0 + 29));
    assert_eq!(r.history[0].at, T0 + 10);
}

#[test]
fn a_bounce_is_a_redriven_copy_back_within_the_window() {
    let s = settings();
    let meta = |attempt: u32, last: Option<i64>| RedriveMeta {
        attempt,
        last_redriven_at: last.map(rfc3339_from_millis),
        ..RedriveMeta::fresh("orig")
    };
    let now = T0 + 30 * MIN;
    assert_eq!(
        bounce_of(&meta(2, Some(now - 5 * MIN)), now, &s),
        Some(bounce("orig", now - 5 * MIN))
    );
    assert_eq!(bounce_of(&meta(0, Some(now - MIN)), now, &s), None);
    assert_eq!(bounce_of(&meta(1, None), now, &s), None);
    assert_eq!(bounce_of(&meta(1, Some(now - 11 * MIN)), now, &s), None);
    assert_eq!(bounce_of(&meta(1, Some(now + 5 * MIN)), now, &s), None);
    let mut garbled = meta(1, None);
    garbled.last_redriven_at = Some("yesterday".into());
    assert_eq!(bounce_of(&garbled, now, &s), None);
}

#[test]
fn samples_are_bucketed_so_the_record_stays_small() {
    let s = settings();
    let mut r = CircuitRecord::new(&s, T0);
    for i in 0..1000 {
        r.record_redriven(&s, T0 + i * 600, 1);
    }
    assert!(r.redriven.len() <= 21, "{}", r.redriven.len());
    assert_eq!(r.counts().0, 1000);
}

#[test]
fn the_record_round_trips_through_json() {
    let s = settings();
    let mut r = half_open();
    r.record_redriven(&s, T0 + 7 * MIN, 4);
    r.observe_bounces(&s, T0 + 8 * MIN, &[bounce("c1", T0 + 7 * MIN)]);
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains(r#""state":"half-open""#), "{json}");
    assert!(json.contains(r#""operator":"auto""#), "{json}");
    assert_eq!(serde_json::from_str::<CircuitRecord>(&json).unwrap(), r);
}

#[test]
fn events_replayed_on_another_record_give_the_same_result_as_the_calls() {
    let s = settings();
    let events = [
        Event::Tick { now: T0 },
        Event::Redriven { now: T0, n: 10 },
        Event::Bounces {
            now: T0 + MIN,
            bounces: bounces(6, T0),
        },
        Event::EndRun {
            plan: Plan::Drain { budget: None },
            max_per_run: 100,
        },
        Event::Override {
            now: T0 + 2 * MIN,
            mode: Override::Open,
        },
    ];
    let mut r = CircuitRecord::new(&s, T0);
    let made: Vec<Transition> = events.iter().flat_map(|e| r.apply(&s, e)).collect();
    assert_eq!(
        made.len(),
        1,
        "the operator's open on an open circuit is no transition"
    );
    assert_eq!(r.state, State::Open);
    assert_eq!(r.operator, Override::Open);
    let (direct, _) = closed_after(6);
    assert_eq!(r.history, direct.history);
}

#[test]
fn a_write_applies_its_events_once_whatever_the_retries() {
    let s = settings();
    let events = [
        Event::Redriven { now: T0, n: 10 },
        Event::Bounces {
            now: T0 + MIN,
            bounces: bounces(6, T0),
        },
    ];
    let mut r = CircuitRecord::new(&s, T0);
    let made = r.apply_once(&s, "write-1", &events).expect("first time");
    assert_eq!(made.len(), 1, "opened");
    let after = r.clone();
    // The same write again (its answer was lost): nothing changes, not even the tokens.
    assert_eq!(r.apply_once(&s, "write-1", &events), None);
    assert_eq!(r, after);
    // Another write applies; the record keeps the last APPLIED_WRITES tokens only.
    for i in 2..=(APPLIED_WRITES + 2) {
        assert!(r.apply_once(&s, &format!("write-{i}"), &[]).is_some());
    }
    assert_eq!(r.applied.len(), APPLIED_WRITES);
    assert!(!r.has_applied("write-2") && r.has_applied("write-3"));
    // Old records without tokens read as none; a record without any writes them not.
    let json = serde_json::to_string(&CircuitRecord::new(&s, T0)).unwrap();
    assert!(!json.contains("applied"), "{json}");
    let back: CircuitRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
}

#[test]
fn override_parses_its_names() {
    assert_eq!(Override::parse("open"), Ok(Override::Open));
    assert_eq!(Override::parse("Close"), Ok(Override::Closed));
    assert_eq!(Override::parse("closed"), Ok(Override::Closed));
    assert_eq!(Override::parse("auto"), Ok(Override::Auto));
    assert!(Override::parse("half").is_err());
}

#[test]
fn a_lease_goes_to_one_holder_until_it_expires_or_is_released() {
    let mut r = CircuitRecord::new(&settings(), T0);
    assert_eq!(r.take_lease("e1", T0, MIN), Ok(()));
    // Another holder is refused while it lives; the holder renews it.
    let held = r.take_lease("e2", T0 + 1, MIN).unwrap_err();
    assert_eq!((held.holder.as_str(), held.expires_at), ("e1", T0 + MIN));
    assert_eq!(r.take_lease("e1", T0 + 10, MIN), Ok(()));
    assert_eq!(r.lease.as_ref().map(|l| l.expires_at), Some(T0 + 10 + MIN));
    // Expired: anyone takes it.
    assert_eq!(r.take_lease("e2", T0 + 10 + MIN, MIN), Ok(()));
    // Only the holder releases it.
    assert!(!r.release_lease("e1"));
    assert!(r.release_lease("e2"));
    assert_eq!(r.lease, None);
    assert_eq!(r.take_lease("e3", T0 + 11 + MIN, MIN), Ok(()));
}

#[test]
fn a_record_without_a_lease_reads_and_writes_as_before() {
    let r = CircuitRecord::new(&settings(), T0);
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("lease"), "{text}");
    let mut leased = r.clone();
    leased.take_lease("e1", T0, MIN).unwrap();
    let back: CircuitRecord =
        serde_json::from_str(&serde_json::to_string(&leased).unwrap()).unwrap();
    assert_eq!(back, leased);
}

#[test]
fn bounces_landed_as_counts_judge_as_the_same_bounces_seen_one_by_one() {
    let s = settings();
    // A canary of 4 out since T0 + 6 min; 2 of its copies back, and 3 older copies.
    let mut seen = half_open();
    let sent = T0 + 6 * MIN;
    seen.record_redriven(&s, sent, 4);
    let mut landed = seen.clone();
    let copies = vec![bounce("c0", sent + 1000), bounce("c1", sent + 1000)];
    let mut all = bounces(3, T0 + 5 * MIN);
    all.extend(copies.clone());
    let now = sent + 2 * MIN;

    let one_by_one = seen.observe_bounces(&s, now, &all);
    let samples = [
        Sample {
            at: T0 + 5 * MIN,
            n: 3,
        },
        Sample {
            at: sent + 1000,
            n: 2,
        },
    ];
    let at_once = landed.observe_bounced(&s, now, &samples, &copies);

    assert_eq!(one_by_one, at_once);
    assert_eq!(seen, landed);
    assert_eq!(landed.state, State::Open, "2 of 4 canary copies back");
}
