use super::*;
use crate::MessageAttribute;
use proptest::prelude::*;

fn none() -> Attributes {
    Attributes::new()
}

#[test]
fn message_key_is_the_original_id_bound_to_the_body_digest() {
    let key = derive(&KeySource::Message, "orig-1", "not json", &none()).unwrap();
    assert_eq!(key.as_str(), format!("orig-1:{}", body_digest("not json")));
    assert_eq!(body_digest("not json").len(), 32);
}

#[test]
fn pointer_keys() {
    let p = KeySource::parse("/payment/id").unwrap();
    let derive = |p: &KeySource, id: &str, body: &str| derive(p, id, body, &none());
    assert_eq!(
        derive(&p, "x", r#"{"payment":{"id":"p-9"}}"#)
            .unwrap()
            .as_str(),
        "p-9"
    );
    assert_eq!(
        derive(&p, "x", r#"{"payment":{"id":42}}"#)
            .unwrap()
            .as_str(),
        "42"
    );
    assert_eq!(
        derive(&p, "x", "{oops").unwrap_err(),
        KeyError::BodyNotJson {
            pointer: "/payment/id".into()
        }
    );
    assert_eq!(
        derive(&p, "x", r#"{"payment":{}}"#).unwrap_err(),
        KeyError::Missing {
            pointer: "/payment/id".into()
        }
    );
    assert_eq!(
        derive(&p, "x", r#"{"payment":{"id":null}}"#)
            .unwrap_err()
            .code(),
        "KEY_MISSING"
    );
    assert_eq!(
        derive(&p, "x", r#"{"payment":{"id":{}}}"#)
            .unwrap_err()
            .code(),
        "KEY_NOT_SCALAR"
    );
    assert_eq!(
        derive(&p, "x", r#"{"payment":{"id":""}}"#).unwrap_err(),
        KeyError::EmptyField {
            field: "/payment/id".into()
        }
    );
    let long = format!(
        r#"{{"payment":{{"id":"{}"}}}}"#,
        "k".repeat(MAX_KEY_BYTES + 1)
    );
    assert_eq!(
        derive(&p, "x", &long).unwrap_err(),
        KeyError::TooLong(MAX_KEY_BYTES + 1)
    );
}

fn key_at(pointer: &str, body: &str) -> Result<String, KeyError> {
    derive(&KeySource::pointer(pointer).unwrap(), "x", body, &none())
        .map(|k| k.as_str().to_string())
}

#[test]
fn numeric_pointer_keys_keep_exact_text() {
    let a = key_at("/id", r#"{"id":123456789012345678901234}"#).unwrap();
    let b = key_at("/id", r#"{"id":123456789012345678901235}"#).unwrap();
    assert_eq!(a, "123456789012345678901234");
    assert_eq!(b, "123456789012345678901235");
    assert_ne!(a, b, "two payments must not share a key");
    // Beyond u64 and beyond f64's 53-bit mantissa.
    assert_eq!(
        key_at("/id", r#"{"id": 18446744073709551617 }"#).unwrap(),
        "18446744073709551617"
    );
    assert_eq!(
        key_at("/id", r#"{"id":9007199254740993}"#).unwrap(),
        "9007199254740993"
    );
}

#[test]
fn numbers_are_keyed_as_written_not_by_value() {
    // Documented: the key is the number's text, so different spellings are different keys.
    for (body, want) in [
        (r#"{"id":1}"#, "1"),
        (r#"{"id":1.0}"#, "1.0"),
        (r#"{"id":1e3}"#, "1e3"),
        (r#"{"id":-0}"#, "-0"),
        (
            r#"{"id":0.1000000000000000055511151231257827}"#,
            "0.1000000000000000055511151231257827",
        ),
    ] {
        assert_eq!(key_at("/id", body).unwrap(), want, "{body}");
    }
    assert_ne!(
        key_at("/id", r#"{"id":1}"#).unwrap(),
        key_at("/id", r#"{"id":1.0}"#).unwrap()
    );
}

#[test]
fn pointer_walks_objects_arrays_and_escapes() {
    let body = r#"{"a/b":{"m~n":[10, {"id" : 7.50}]}, "dup":1, "dup":2, "s":"\u00e9\"x"}"#;
    assert_eq!(key_at("/a~1b/m~0n/1/id", body).unwrap(), "7.50");
    assert_eq!(key_at("/a~1b/m~0n/0", body).unwrap(), "10");
    assert_eq!(
        key_at("/dup", body).unwrap(),
        "2",
        "the last duplicate wins, as in serde_json"
    );
    assert_eq!(
        key_at("/s", body).unwrap(),
        "é\"x",
        "strings are keyed by their value"
    );
    for missing in [
        "/a~1b/m~0n/2",
        "/a~1b/m~0n/01",
        "/a~1b/m~0n/-",
        "/nope",
        "/s/0",
    ] {
        assert_eq!(
            key_at(missing, body).unwrap_err().code(),
            "KEY_MISSING",
            "{missing}"
        );
    }
    assert_eq!(key_at("/a~1b", body).unwrap_err().code(), "KEY_NOT_SCALAR");
    assert_eq!(
        key_at("/id", r#"{"id":1} trailing"#).unwrap_err().code(),
        "KEY_BODY_NOT_JSON"
    );
    assert_eq!(
        key_at("/id", r#"{"id":01}"#).unwrap_err().code(),
        "KEY_BODY_NOT_JSON"
    );
}

#[test]
fn key_source_parsing() {
    assert_eq!(KeySource::parse("message"), Ok(KeySource::Message));
    assert_eq!(KeySource::parse(""), Ok(KeySource::Message));
    assert_eq!(
        KeySource::parse("/id"),
        Ok(KeySource::Fields(Fields(vec![Field::Pointer(
            "/id".into()
        )])))
    );
    assert!(KeySource::parse("paymentId").is_err());
}

/// The key the consumer derives for a message with these attributes and body.
fn message_key(attributes: &crate::Attributes, message_id: &str, body: &str) -> String {
    let (meta, _) = crate::RedriveMeta::read(attributes, message_id);
    derive(
        &KeySource::Message,
        &meta.original_message_id,
        body,
        attributes,
    )
    .unwrap()
    .as_str()
    .to_string()
}

fn stamped(meta: &crate::RedriveMeta) -> crate::Attributes {
    let mut a = crate::Attributes::new();
    meta.write_into(&mut a);
    a
}

fn arb_stamp(original: String) -> impl Strategy<Value = crate::RedriveMeta> {
    (
        any::<u32>(),
        proptest::option::of("[0-9T:Z-]{0,20}"),
        proptest::option::of("[0-9T:Z-]{0,20}"),
        proptest::option::of(proptest::sample::select(
            crate::IsolationReason::ALL.to_vec(),
        )),
    )
        .prop_map(move |(attempt, first, last, reason)| crate::RedriveMeta {
            attempt,
            first_redriven_at: first,
            last_redriven_at: last,
            reason,
            ..crate::RedriveMeta::fresh(&original)
        })
}

proptest! {
    /// Byte-identical copies of a chain (any attempt, any stamp
    /// fields, any current MessageId) share the key.
    #[test]
    fn redriven_copies_share_the_key(
        (a, b) in "[A-Za-z0-9-]{1,40}".prop_flat_map(|id| (arb_stamp(id.clone()), arb_stamp(id))),
        body in "\\PC{0,200}",
        first_id in "[a-z0-9-]{1,36}",
        second_id in "[a-z0-9-]{1,36}",
    ) {
        prop_assert_eq!(
            message_key(&stamped(&a), &first_id, &body),
            message_key(&stamped(&b), &second_id, &body)
        );
    }

    /// One stamp copied onto different payloads (a producer
    /// that copies every attribute of what it received) gives different keys.
    #[test]
    fn a_copied_stamp_on_other_payloads_gives_other_keys(
        stamp in "[A-Za-z0-9-]{1,40}".prop_flat_map(arb_stamp),
        body_a in "\\PC{0,200}",
        body_b in "\\PC{0,200}",
    ) {
        prop_assume!(body_a != body_b);
        let attributes = stamped(&stamp);
        prop_assert_ne!(
            message_key(&attributes, "m-a", &body_a),
            message_key(&attributes, "m-b", &body_b)
        );
    }

    #[test]
    fn derive_never_panics(body in "\\PC{0,80}", pointer in "/[a-z/~0-9]{0,10}") {
        let source = KeySource::Fields(Fields(vec![Field::Pointer(pointer)]));
        let _ = derive(&source, "id", &body, &none());
    }
}

fn attributes(pairs: &[(&str, MessageAttribute)]) -> Attributes {
    pairs
        .iter()
        .map(|(n, a)| (n.to_string(), a.clone()))
        .collect()
}

fn key_of(source: &str, body: &str, attrs: &Attributes) -> Result<String, KeyError> {
    let source = KeySource::parse(source).unwrap();
    derive(&source, "m-1", body, attrs).map(|k| k.as_str().to_string())
}

#[test]
fn idempotency_key_values_parse_once_or_name_what_is_wrong() {
    // GIVEN the values IDEMPOTENCY_KEY may take
    let pointer = |p: &str| Field::Pointer(p.into());
    let attribute = |n: &str| Field::Attribute(n.into());
    for (text, want) in [
        ("message", KeySource::Message),
        ("  ", KeySource::Message),
        ("body", KeySource::Body),
        (
            "/customerId,/orderId",
            KeySource::Fields(Fields(vec![pointer("/customerId"), pointer("/orderId")])),
        ),
        (
            " attribute:OrderId , /line/0 ",
            KeySource::Fields(Fields(vec![attribute("OrderId"), pointer("/line/0")])),
        ),
        (
            "attribute:Tenant.Id",
            KeySource::Fields(Fields(vec![attribute("Tenant.Id")])),
        ),
        (
            "/a~1b~0c",
            KeySource::Fields(Fields(vec![pointer("/a~1b~0c")])),
        ),
    ] {
        // THEN each parses to its source and prints back canonically
        let source = KeySource::parse(text).unwrap();
        assert_eq!(source, want, "{text:?}");
        assert_eq!(KeySource::parse(&source.to_string()).unwrap(), source);
    }
    // AND a bad value says what is wrong, and what the variable takes
    for (bad, says) in [
        ("paymentId", "neither a JSON pointer"),
        ("/a,message", "stands alone"),
        ("body,/a", "stands alone"),
        ("/a,,/b", "empty field"),
        ("/a,", "empty field"),
        ("/a, /a", "named twice"),
        ("/a~", "not `~0`"),
        ("attribute:", "does not name"),
        ("attribute:a b", "does not name"),
        ("attribute:AWS.Trace", "does not name"),
        ("attribute:.x", "does not name"),
        ("attribute:x-redrive", "changes on every redrive"),
        ("/1,/2,/3,/4,/5,/6,/7,/8,/9", "at most 8"),
    ] {
        let err = KeySource::parse(bad).unwrap_err();
        assert!(err.contains(says), "{bad:?}: {err}");
        assert!(
            err.contains("`message`, `body`, or fields"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn compound_keys_join_their_values_as_a_json_array() {
    let none = none();
    for (source, body, want) in [
        (
            "/customerId,/orderId",
            r#"{"orderId":"o-9","customerId":"c-1"}"#,
            r#"["c-1","o-9"]"#,
        ),
        ("/c,/o", r#"{"c":42,"o":1.50}"#, r#"["42","1.50"]"#),
        (
            "/c,/o",
            r#"{"c":"say \"hi\"","o":"é"}"#,
            r#"["say \"hi\"","é"]"#,
        ),
        // One field is its value, as a single pointer always was.
        ("/c", r#"{"c":"c-1"}"#, "c-1"),
    ] {
        assert_eq!(
            key_of(source, body, &none).unwrap(),
            want,
            "{source} {body}"
        );
    }
    // The commas inside values cannot make two tuples one key.
    assert_ne!(
        key_of("/a,/b", r#"{"a":"a,b","b":"c"}"#, &none).unwrap(),
        key_of("/a,/b", r#"{"a":"a","b":"b,c"}"#, &none).unwrap()
    );
    // The order of the fields is the configured one.
    assert_ne!(
        key_of("/a,/b", r#"{"a":"1","b":"2"}"#, &none).unwrap(),
        key_of("/b,/a", r#"{"a":"1","b":"2"}"#, &none).unwrap()
    );
}

#[test]
fn a_compound_key_needs_every_field() {
    let none = none();
    for (body, want) in [
        (
            r#"{"customerId":"c-1"}"#,
            KeyError::Missing {
                pointer: "/orderId".into(),
            },
        ),
        (
            r#"{"customerId":"c-1","orderId":null}"#,
            KeyError::Missing {
                pointer: "/orderId".into(),
            },
        ),
        (
            r#"{"customerId":"","orderId":"o-1"}"#,
            KeyError::EmptyField {
                field: "/customerId".into(),
            },
        ),
        (
            r#"{"customerId":"c-1","orderId":[1]}"#,
            KeyError::NotScalar {
                pointer: "/orderId".into(),
                kind: "an array",
            },
        ),
        (
            "<order/>",
            KeyError::BodyNotJson {
                pointer: "/customerId".into(),
            },
        ),
    ] {
        assert_eq!(
            key_of("/customerId,/orderId", body, &none).unwrap_err(),
            want,
            "{body}"
        );
    }
    assert_eq!(
        key_of("/c,/o", r#"{"c":"","o":"x"}"#, &none)
            .unwrap_err()
            .code(),
        "KEY_EMPTY"
    );
}

#[test]
fn attribute_keys_read_string_and_number_attributes() {
    // GIVEN messages with String, Number, custom Number.int and Binary attributes
    let custom = MessageAttribute {
        data_type: "Number.int".into(),
        value: crate::AttributeValue::String("0042".into()),
    };
    let attrs = attributes(&[
        ("OrderId", MessageAttribute::string("o-77")),
        ("Amount", MessageAttribute::number("12.50")),
        ("Seq", custom),
        ("Blob", MessageAttribute::binary(vec![1, 2, 3])),
        ("Blank", MessageAttribute::string("")),
    ]);
    // THEN String and Number values are keys as written, with no need for a JSON body
    assert_eq!(
        key_of("attribute:OrderId", "not json", &attrs).unwrap(),
        "o-77"
    );
    assert_eq!(key_of("attribute:Amount", "", &attrs).unwrap(), "12.50");
    assert_eq!(key_of("attribute:Seq", "", &attrs).unwrap(), "0042");
    assert_eq!(
        key_of("attribute:OrderId,/line", r#"{"line":3}"#, &attrs).unwrap(),
        r#"["o-77","3"]"#
    );
    // AND a missing or binary attribute is a key failure of its own
    let missing = key_of("attribute:TraceId", "{}", &attrs).unwrap_err();
    assert_eq!(
        missing,
        KeyError::AttributeMissing {
            name: "TraceId".into()
        }
    );
    assert_eq!(missing.code(), "KEY_ATTRIBUTE_MISSING");
    let binary = key_of("attribute:Blob", "{}", &attrs).unwrap_err();
    assert_eq!(binary.code(), "KEY_ATTRIBUTE_BINARY");
    assert!(binary.to_string().contains("Blob"), "{binary}");
    assert_eq!(
        key_of("attribute:Blank", "{}", &attrs).unwrap_err().code(),
        "KEY_EMPTY"
    );
}

#[test]
fn a_body_key_is_the_bodys_digest_whatever_the_message_id() {
    let body = r#"{"order":1}"#;
    let a = derive(&KeySource::Body, "m-1", body, &none()).unwrap();
    let b = derive(&KeySource::Body, "m-2", body, &none()).unwrap();
    assert_eq!(a, b, "two sends of one body are one key");
    assert_eq!(a.as_str(), sha256_hex(body.as_bytes(), 64));
    assert_ne!(
        derive(&KeySource::Message, "m-1", body, &none()).unwrap(),
        derive(&KeySource::Message, "m-2", body, &none()).unwrap(),
        "`message` keys two sends of one body apart"
    );
    assert_ne!(
        a,
        derive(&KeySource::Body, "m-1", r#"{"order": 1}"#, &none()).unwrap(),
        "the digest is of the bytes"
    );
}

#[test]
fn record_ids_are_the_documented_hash_of_the_key() {
    let key = IdempotencyKey::try_from(r#"["c-1","o-9"]"#.to_string()).unwrap();
    // The documented formula, checked against an independent SHA-256 (of "abc").
    assert_eq!(
        IdempotencyKey::try_from("abc".to_string())
            .unwrap()
            .record_id(None),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(key.record_id(None), sha256_hex(key.as_str().as_bytes(), 64));
    assert_eq!(
        key.record_id(Some("orders-consumer")),
        format!("orders-consumer#{}", key.record_id(None))
    );
    assert_ne!(key.record_id(Some("a")), key.record_id(Some("b")));
    assert!(!key.record_id(None).contains("c-1"));
}

#[test]
fn namespaces_are_checked() {
    assert_eq!(
        parse_namespace("orders-consumer"),
        Ok("orders-consumer".into())
    );
    assert_eq!(
        parse_namespace("prod:orders_v2.1"),
        Ok("prod:orders_v2.1".into())
    );
    for bad in ["", "a#b", "a b", &"x".repeat(129)] {
        assert!(parse_namespace(bad).is_err(), "{bad}");
    }
}

proptest! {
    /// Compound keys are injective: two tuples of values share a key only when they are
    /// the same tuple, whatever commas, quotes or brackets the values hold.
    #[test]
    fn compound_keys_never_merge_distinct_tuples(
        a in "[a-z,\"\\[\\]\\\\ ]{1,6}", b in "[a-z,\"\\[\\]\\\\ ]{1,6}",
        c in "[a-z,\"\\[\\]\\\\ ]{1,6}", d in "[a-z,\"\\[\\]\\\\ ]{1,6}",
    ) {
        let body = |x: &str, y: &str| serde_json::json!({"x": x, "y": y}).to_string();
        let first = key_of("/x,/y", &body(&a, &b), &none()).unwrap();
        let second = key_of("/x,/y", &body(&c, &d), &none()).unwrap();
        prop_assert_eq!(first == second, (a, b) == (c, d));
    }

    /// A record id is 64 hex digits (after the namespace): no key text with a character
    /// outside 0-9 a-f can be in it.
    #[test]
    fn record_ids_never_carry_the_key(key in "[ -~]{1,40}", ns in proptest::option::of("[a-z0-9-]{1,12}")) {
        let key = IdempotencyKey::try_from(key).unwrap();
        let id = key.record_id(ns.as_deref());
        let hash = id.rsplit('#').next().unwrap();
        prop_assert_eq!(hash.len(), 64);
        prop_assert!(hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if key.as_str().bytes().any(|b| !(b.is_ascii_digit() || (b'a'..=b'f').contains(&b))) {
            prop_assert!(!hash.contains(key.as_str()));
        }
    }

    #[test]
    fn every_key_source_derives_without_panicking(
        body in "\\PC{0,80}",
        source in proptest::sample::select(vec!["message", "body", "/a,/b", "attribute:A", "/a/0,attribute:A"]),
        value in proptest::option::of("\\PC{0,8}"),
    ) {
        let attrs = match value {
            Some(v) => attributes(&[("A", MessageAttribute::string(v))]),
            None => none(),
        };
        let _ = key_of(source, &body, &attrs);
    }
}
