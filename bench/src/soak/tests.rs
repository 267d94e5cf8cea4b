use super::*;

fn parked(place: Place, key: &str) -> Parked {
    Parked {
        place,
        key: key.into(),
        reason: Some("max-attempts".into()),
    }
}

#[test]
fn reconciliation_finds_losses_and_double_placements() {
    let produced: HashMap<String, Kind> = ["a", "b", "c", "d", "e"]
        .into_iter()
        .map(|k| (k.to_string(), Kind::Normal))
        .collect();
    let effects: HashMap<String, u32> = [("a".to_string(), 1), ("e".to_string(), 2)].into();
    let inventory = vec![
        parked(Place::Poison, "b"),
        parked(Place::Poison, "b"),
        parked(Place::Dlq, "c"),
        parked(Place::Poison, "c"),
    ];
    let r = reconcile(&produced, &inventory, &effects, LayerStats::default());
    assert_eq!(r.delivered_once, 1);
    assert_eq!(r.lost, vec!["d".to_string()]);
    assert_eq!(r.duplicate_copies, 2);
    assert_eq!(r.parked["poison:max-attempts"], 1);
    assert_eq!(r.parked["dlq:max-attempts"], 1);
    // c sits in two queues; e was delivered twice with no failed completion to explain it.
    assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
    assert_eq!(r.delivered_repeatedly, 1);
    assert_eq!(r.repeats_explained, 0);
}

#[test]
fn a_repeat_after_a_failed_completion_is_explained() {
    let produced: HashMap<String, Kind> = [("a".to_string(), Kind::Normal)].into();
    let effects: HashMap<String, u32> = [("a".to_string(), 2)].into();
    let layer = LayerStats {
        completion_faulted: ["a".to_string()].into(),
        ..LayerStats::default()
    };
    let mut r = reconcile(&produced, &[], &effects, layer);
    r.quiesced = true;
    assert!(r.violations.is_empty());
    assert_eq!((r.delivered_repeatedly, r.repeats_explained), (1, 1));
    assert!(r.passed());
}

#[test]
fn failed_idempotency_writes_explain_by_chain_not_by_record_key() {
    // The layers see DynamoDB keys (`<originalMessageId>:<body digest>`);
    // the soak reconciles by originalMessageId.
    let produced: HashMap<String, Kind> = [
        ("a".to_string(), Kind::Normal),
        ("b".to_string(), Kind::Normal),
    ]
    .into();
    let effects: HashMap<String, u32> = [("a".to_string(), 2), ("b".to_string(), 1)].into();
    let digest = "0123456789abcdef0123456789abcdef";
    let layer = LayerStats {
        completion_faulted: [format!("a:{digest}")].into(),
        claim_lost: [format!("b:{digest}")].into(),
        ..LayerStats::default()
    };
    let mut r = reconcile(&produced, &[parked(Place::Poison, "b")], &effects, layer);
    r.quiesced = true;
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.repeats_explained, r.leftovers_explained), (1, 1));
    assert!(r.passed());
}

#[test]
fn failed_writes_seen_by_record_id_are_mapped_back_to_their_chain() {
    // GIVEN a layer that saw the record ids (hashes) of two messages' keys
    let chains: HashMap<String, String> = [
        (record_id_of("a", "{}"), "a".to_string()),
        (record_id_of("b", "{}"), "b".to_string()),
    ]
    .into();
    let layer = LayerStats {
        completion_faulted: [record_id_of("a", "{}")].into(),
        claim_lost: [record_id_of("b", "{}")].into(),
        ..LayerStats::default()
    };
    // WHEN they are mapped back
    let layer = by_chain(layer, &chains);
    // THEN the soak sees the chains
    assert_eq!(layer.completion_faulted, ["a".to_string()].into());
    assert_eq!(layer.claim_lost, ["b".to_string()].into());
    assert_eq!(record_id_of("a", "{}").len(), 64);
}

#[test]
fn a_delivered_key_with_a_leftover_copy_is_a_violation() {
    let produced: HashMap<String, Kind> = [("a".to_string(), Kind::Normal)].into();
    let effects: HashMap<String, u32> = [("a".to_string(), 1)].into();
    let r = reconcile(
        &produced,
        &[parked(Place::Source, "a")],
        &effects,
        LayerStats::default(),
    );
    assert_eq!(r.violations.len(), 1);
    assert!(!r.passed());
}

#[test]
fn payload_kinds_carry_the_downstream_markers() {
    assert!(payload(1, Kind::Poison).contains(POISON_MARKER));
    assert!(payload(1, Kind::Doomed).contains(DOOMED_MARKER));
    let normal = payload(1, Kind::Normal);
    assert!(!normal.contains(POISON_MARKER) && !normal.contains(DOOMED_MARKER));
    assert!(serde_json::from_str::<serde_json::Value>(&normal).is_ok());
}
