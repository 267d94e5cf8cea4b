use super::*;
use proptest::prelude::*;

fn sample() -> ArchivedMessage {
    let mut attributes = Attributes::new();
    attributes.insert(
        "x-redrive".into(),
        MessageAttribute::string(r#"{"v":1,"attempt":2,"originalMessageId":"o-1"}"#),
    );
    attributes.insert(
        "n".into(),
        MessageAttribute {
            data_type: "Number.int".into(),
            value: AttributeValue::String("007".into()),
        },
    );
    attributes.insert(
        "blob".into(),
        MessageAttribute {
            data_type: "Binary.gz".into(),
            value: AttributeValue::Binary(vec![0, 1, 2, 255, b'\n']),
        },
    );
    ArchivedMessage {
        queue: "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq".into(),
        archived_at_ms: 1_795_255_200_000,
        message_id: "m-1".into(),
        body: "héllo\n\"wörld\"\u{1F600}\u{7f}\r\t".into(),
        attributes,
        system: SystemAttributes::from_pairs([
            ("SentTimestamp", "1795255100000"),
            ("ApproximateReceiveCount", "3"),
            ("MessageGroupId", "g1"),
            ("SenderId", "ignored"),
        ]),
    }
}

#[test]
fn each_system_attribute_is_written_under_its_sqs_name() {
    // GIVEN every kept system attribute, with a valid value
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let pairs =
        SystemAttributes::NAMES.map(|n| (n, if n == AWS_TRACE_HEADER { trace } else { "7" }));
    let system = SystemAttributes::from_pairs(pairs);

    // WHEN it is serialized
    let json = serde_json::to_value(&system).unwrap();

    // THEN each one is there under the name SQS gives it, and it reads back the same
    let mut names: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = SystemAttributes::NAMES.to_vec();
    names.sort();
    want.sort();
    assert_eq!(names, want);
    assert_eq!(
        serde_json::from_value::<SystemAttributes>(json).unwrap(),
        system
    );
}

#[test]
fn a_line_round_trips_every_attribute_type_and_the_system_attributes() {
    let m = sample();
    let line = to_line(&m);
    assert!(!line.contains('\n'), "one line whatever the body holds");
    assert!(line.starts_with(r#"{"format":"redrive.archive/1","#));
    assert!(line.contains(r#""binaryValue":"AAEC/wo=""#), "{line}");
    assert!(!line.contains("SenderId"));
    assert_eq!(parse_line(1, &line), Ok(m.clone()));
    assert_eq!(m.system.sent_timestamp_ms(), Some(1_795_255_100_000));
    let two = format!("{line}\n{line}\n");
    assert_eq!(parse_jsonl(&two).unwrap().len(), 2);
}

const TRACE: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

#[test]
fn a_traced_message_keeps_its_aws_trace_header_and_an_untraced_line_is_the_older_format() {
    // GIVEN a message SQS reported with an AWSTraceHeader
    let mut traced = sample();
    traced.system = SystemAttributes::from_pairs([
        ("SentTimestamp", "1795255100000"),
        ("AWSTraceHeader", TRACE),
    ]);
    // WHEN it is written and read back
    let line = to_line(&traced);
    // THEN the header is in `system`, and comes back as the trace header it is
    assert!(
        line.contains(&format!(r#""AWSTraceHeader":"{TRACE}""#)),
        "{line}"
    );
    let read = parse_line(1, &line).unwrap();
    assert_eq!(read, traced);
    assert_eq!(read.system.trace_header().unwrap().as_str(), TRACE);
    // AND an untraced message's line names no such field, exactly as before it existed,
    // and a line written before it reads as it always did
    let untraced = to_line(&sample());
    assert!(!untraced.contains("AWSTraceHeader"), "{untraced}");
    let older = r#"{"format":"redrive.archive/1","queue":"https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq","archivedAt":"2026-11-21T10:00:00Z","messageId":"5fea7756","attributes":{},"system":{"SentTimestamp":"1795255200000","ApproximateReceiveCount":"3"},"bodySha256":"2a5b4e5b3ac5b3f5e1b5d4ff3a09e0e4f1c6f5b3f0f1a6c5a0d3b6b5c8e2f9a1","body":"{}"}"#
        .replace(
            "2a5b4e5b3ac5b3f5e1b5d4ff3a09e0e4f1c6f5b3f0f1a6c5a0d3b6b5c8e2f9a1",
            &body_sha256("{}"),
        );
    assert_eq!(parse_line(1, &older).unwrap().system.trace_header(), None);
    // AND a value SQS would not hold is not archived (a reader would refuse the line)
    let garbled = SystemAttributes::from_pairs([("AWSTraceHeader", "not a header")]);
    assert_eq!(garbled, SystemAttributes::default());
}

fn edit(f: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&to_line(&sample())).unwrap();
    f(&mut v);
    v.to_string()
}

#[test]
fn errors_name_the_line_and_the_field() {
    let cases: Vec<(String, &str, &str)> = vec![
        ("not json".into(), "line", "not a JSON object"),
        ("[1]".into(), "line", "not a JSON object"),
        ("".into(), "line", "empty line"),
        (
            edit(|v| v["format"] = "redrive.archive/2".into()),
            "format",
            "is not",
        ),
        (
            edit(|v| {
                v.as_object_mut().unwrap().remove("format");
            }),
            "format",
            "missing",
        ),
        (
            edit(|v| {
                v.as_object_mut().unwrap().remove("body");
            }),
            "line",
            "missing field",
        ),
        (edit(|v| v["extra"] = 1.into()), "extra", "unknown value"),
        // A body of the wrong type is named by its field, never quoted.
        (
            edit(|v| v["body"] = 4111111111111111u64.into()),
            "body",
            "wrong type",
        ),
        (
            edit(|v| v["body"] = "tampered".into()),
            "bodySha256",
            "does not match",
        ),
        (
            edit(|v| v["archivedAt"] = "yesterday".into()),
            "archivedAt",
            "RFC 3339",
        ),
        (edit(|v| v["messageId"] = "".into()), "messageId", "empty"),
        (
            edit(|v| v["attributes"]["blob"]["binaryValue"] = "AAE".into()),
            "attributes.blob.binaryValue",
            "not base64",
        ),
        (
            edit(|v| v["attributes"]["blob"]["binaryValue"] = "AA!C".into()),
            "attributes.blob.binaryValue",
            "'!'",
        ),
        (
            edit(|v| v["attributes"]["n"]["stringValue"] = "seven".into()),
            "attributes.n.stringValue",
            "not a Number",
        ),
        (
            edit(|v| v["attributes"]["n"]["dataType"] = "Date".into()),
            "attributes.n.dataType",
            "not String, Number or Binary",
        ),
        (
            edit(|v| {
                v["attributes"]["blob"]
                    .as_object_mut()
                    .unwrap()
                    .remove("binaryValue");
            }),
            "attributes.blob.binaryValue",
            "needs binaryValue",
        ),
        (
            edit(|v| v["system"]["SentTimestamp"] = "soon".into()),
            "system.SentTimestamp",
            "not a number",
        ),
        (
            edit(|v| v["system"]["AWSTraceHeader"] = "Root=1-garbled".into()),
            "system.AWSTraceHeader",
            "not an X-Ray trace header",
        ),
    ];
    for (text, field, problem) in cases {
        let e = parse_line(7, &text).unwrap_err();
        assert_eq!(e.line, 7, "{text}");
        assert_eq!(e.field, field, "{text}: {e}");
        assert!(e.problem.contains(problem), "{text}: {e}");
        assert!(e.to_string().starts_with("line 7: "), "{e}");
        assert!(!e.to_string().contains("4111"), "{e}");
    }
}

#[test]
fn a_whole_file_fails_at_its_first_bad_line() {
    let good = to_line(&sample());
    let text = format!("{good}\n{good}\n\n{good}\n");
    let e = parse_jsonl(&text).unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (3, "line"));
    assert_eq!(parse_jsonl(""), Ok(vec![]));
    assert_eq!(parse_jsonl(&format!("{good}\r\n{good}")).unwrap().len(), 2);
}

#[test]
fn base64_is_the_standard_alphabet_with_padding_and_strict() {
    assert_eq!(base64_encode(b""), "");
    assert_eq!(base64_encode(b"f"), "Zg==");
    assert_eq!(base64_encode(b"fo"), "Zm8=");
    assert_eq!(base64_encode(b"foo"), "Zm9v");
    assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
    assert_eq!(base64_decode("Zm9vYg==").unwrap(), b"foob");
    assert!(base64_decode("Zh==").is_err(), "non-zero trailing bits");
    assert!(base64_decode("Zg=a").is_err());
    assert!(base64_decode("Zg==Zg==").is_err());
    assert!(base64_decode("Z===").is_err());
}

#[test]
fn s3_locations_and_keys() {
    assert_eq!(
        S3Location::parse("s3://my-bucket/a/b/"),
        Some(Ok(S3Location {
            bucket: "my-bucket".into(),
            prefix: "a/b".into()
        }))
    );
    assert_eq!(
        S3Location::parse("s3://my-bucket").unwrap().unwrap().prefix,
        ""
    );
    assert!(S3Location::parse("s3://UPPER/x").unwrap().is_err());
    assert_eq!(S3Location::parse("./file.jsonl"), None);
    assert_eq!(
        object_key("arch/", "orders-dlq", 1_795_255_201_000, "5fea-77", 12),
        "arch/orders-dlq/2026/11/21/100001Z-5fea-77-12.jsonl"
    );
    assert_eq!(
        object_key("", "q.fifo", 0, "a/b c", 1),
        "q.fifo/1970/01/01/000000Z-a_b_c-1.jsonl"
    );
}

fn attribute() -> impl Strategy<Value = MessageAttribute> {
    prop_oneof![
        ("(String|String\\.[a-z]{1,5})", "\\PC{0,20}").prop_map(|(t, v)| MessageAttribute {
            data_type: t,
            value: AttributeValue::String(v)
        }),
        ("(Number|Number\\.int)", -1_000_000i64..1_000_000).prop_map(|(t, v)| {
            MessageAttribute {
                data_type: t,
                value: AttributeValue::String(v.to_string()),
            }
        }),
        (
            "(Binary|Binary\\.gz)",
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(t, v)| MessageAttribute {
                data_type: t,
                value: AttributeValue::Binary(v)
            }),
    ]
}

proptest! {
    #[test]
    fn any_message_round_trips(
        body in "\\PC{0,200}|[\\u{0}-\\u{10FFFF}]{0,50}",
        attributes in proptest::collection::btree_map("[a-zA-Z0-9_.-]{1,12}", attribute(), 0..10),
        secs in 0i64..4_000_000_000,
    ) {
        let m = ArchivedMessage {
            body,
            attributes,
            archived_at_ms: secs * 1000,
            ..sample()
        };
        prop_assert_eq!(parse_line(1, &to_line(&m)), Ok(m));
    }

    #[test]
    fn base64_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        prop_assert_eq!(base64_decode(&base64_encode(&bytes)), Ok(bytes));
    }

    #[test]
    fn the_parser_never_panics(text in "\\PC{0,200}") {
        let _ = parse_line(1, &text);
    }
}
