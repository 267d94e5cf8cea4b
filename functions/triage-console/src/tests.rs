use std::collections::BTreeMap;

use redrive_console::{Contents, Depth, TimeRange, render};
use redrive_shared::config::{Env, QueueUrl};
use redrive_shared::triage::Action;
use redrive_shared::triage::state::Book;
use serde_json::{Value, json};

use super::*;

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";
const POISON: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-poison";
const T0: i64 = 1_764_000_000_000;

fn env(vars: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Env(move |k: &str| vars.get(k).cloned())
}

fn config() -> ConsoleConfig {
    ConsoleConfig::widget_from_env(&env(&[
        ("TRIAGE_TABLE", "redrive-circuit"),
        ("TRIAGE_QUEUE_URLS", &format!("{DLQ}, {POISON}")),
        ("TRIAGE_ACTION_FUNCTION", "redrive-triage-action:live"),
    ]))
    .expect("valid")
}

#[test]
fn the_configuration_fails_at_init_naming_the_variable() {
    let cfg = config();
    assert_eq!(cfg.queues.len(), 2);
    assert!(!cfg.show_bodies);
    assert_eq!(cfg.queue("orders-dlq").map(QueueUrl::as_str), Some(DLQ));
    assert_eq!(cfg.queue(POISON).map(QueueUrl::name), Some("orders-poison"));
    assert_eq!(cfg.queue("payments-dlq"), None);

    type Vars<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Vars, &str, &str); 5] = [
        (&[("TRIAGE_QUEUE_URLS", DLQ)], "TRIAGE_TABLE", "required"),
        (&[("TRIAGE_TABLE", "t-1")], "TRIAGE_QUEUE_URLS", "required"),
        (
            &[("TRIAGE_TABLE", "t-1"), ("TRIAGE_QUEUE_URLS", "orders-dlq")],
            "TRIAGE_QUEUE_URLS",
            "SQS queue URL",
        ),
        (
            &[
                ("TRIAGE_TABLE", "t-1"),
                (
                    "TRIAGE_QUEUE_URLS",
                    "https://sqs.us-east-1.amazonaws.com/123456789012/a,https://sqs.eu-west-1.amazonaws.com/123456789012/a",
                ),
            ],
            "TRIAGE_QUEUE_URLS",
            "two queues are named",
        ),
        (
            &[("TRIAGE_TABLE", "t-1"), ("TRIAGE_QUEUE_URLS", DLQ)],
            "TRIAGE_ACTION_FUNCTION",
            "required",
        ),
    ];
    for (vars, variable, problem) in cases {
        let e = ConsoleConfig::widget_from_env(&env(vars)).unwrap_err();
        assert_eq!(e.variable, variable, "{e}");
        assert!(e.to_string().contains(problem), "{e}");
    }
    // The action function needs no action function to call; a bad flag is refused.
    let action = ConsoleConfig::action_from_env(&env(&[
        ("TRIAGE_TABLE", "t-1"),
        ("TRIAGE_QUEUE_URLS", DLQ),
        ("TRIAGE_SHOW_BODIES", "true"),
        ("ARCHIVE_BUCKET", "redrive-archive"),
    ]))
    .unwrap();
    assert!(action.show_bodies);
    let e = ConsoleConfig::action_from_env(&env(&[
        ("TRIAGE_TABLE", "t-1"),
        ("TRIAGE_QUEUE_URLS", DLQ),
        ("TRIAGE_SHOW_BODIES", "maybe"),
        ("ARCHIVE_BUCKET", "redrive-archive"),
    ]))
    .unwrap_err();
    assert_eq!(e.variable, "TRIAGE_SHOW_BODIES");
}

#[test]
fn the_action_function_moves_messages_only_where_its_configuration_says() {
    let base = [
        ("TRIAGE_TABLE", "t-1"),
        (
            "TRIAGE_QUEUE_URLS",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq,https://sqs.us-east-1.amazonaws.com/123456789012/orders-poison",
        ),
        ("ARCHIVE_BUCKET", "redrive-archive"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut vars = base.to_vec();
        vars.extend_from_slice(extra);
        ConsoleConfig::action_from_env(&env(&vars))
    };
    // The archive as the archiver's (prefix `archive` by default); no source, no poison queue.
    let moves = with(&[]).unwrap().moves.expect("the action function moves");
    assert_eq!(
        (moves.archive.bucket.as_str(), moves.archive.prefix.as_str()),
        ("redrive-archive", "archive")
    );
    assert_eq!(
        (moves.source, moves.poison, moves.canary_window),
        (None, None, None)
    );
    let source = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
    let moves = with(&[
        ("SOURCE_QUEUE_URL", source),
        ("POISON_QUEUE_URL", POISON),
        ("ARCHIVE_PREFIX", "discarded/console"),
        ("TRIAGE_CANARY_WINDOW_SECONDS", "45"),
    ])
    .unwrap()
    .moves
    .unwrap();
    assert_eq!(moves.source.as_ref().map(QueueUrl::as_str), Some(source));
    assert_eq!(
        moves.poison.as_ref().map(QueueUrl::name),
        Some("orders-poison")
    );
    assert_eq!(moves.archive.prefix, "discarded/console");
    assert_eq!(
        moves.canary_window,
        Some(std::time::Duration::from_secs(45))
    );
    // The widget's configuration has none, and needs no bucket.
    assert_eq!(config().moves, None);

    type Vars<'a> = &'a [(&'static str, &'static str)];
    let cases: [(Vars, &str, &str); 7] = [
        (&[("ARCHIVE_BUCKET", "")], "ARCHIVE_BUCKET", "required"),
        (
            &[("ARCHIVE_BUCKET", "Not_A_Bucket")],
            "ARCHIVE_BUCKET",
            "S3 bucket name",
        ),
        (
            &[("ARCHIVE_PREFIX", "/a//b")],
            "ARCHIVE_PREFIX",
            "key prefix",
        ),
        (
            &[("SOURCE_QUEUE_URL", DLQ)],
            "SOURCE_QUEUE_URL",
            "not one of the console's DLQs",
        ),
        (
            &[("SOURCE_QUEUE_URL", "orders")],
            "SOURCE_QUEUE_URL",
            "SQS queue URL",
        ),
        (
            &[(
                "POISON_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/123456789012/other-poison",
            )],
            "POISON_QUEUE_URL",
            "one of the console's queues",
        ),
        (
            &[("TRIAGE_CANARY_WINDOW_SECONDS", "901")],
            "TRIAGE_CANARY_WINDOW_SECONDS",
            "1..=900",
        ),
    ];
    for (extra, variable, problem) in cases {
        let e = with(extra).unwrap_err();
        assert_eq!(e.variable, variable, "{e}");
        assert!(e.to_string().contains(problem), "{e}");
    }
}

#[test]
fn in_attach_mode_the_listed_dlqs_come_before_the_poison_queue_and_names_stay_unique() {
    // DLQ_URLS is what lambda_init_fleet reads from DLQ_LIST_TABLE at init.
    let other = "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq";
    let listed = format!("{DLQ},{other}");
    let vars = [
        ("TRIAGE_TABLE", "t-1"),
        ("TRIAGE_QUEUE_URLS", POISON),
        ("DLQ_URLS", listed.as_str()),
        ("TRIAGE_ACTION_FUNCTION", "redrive-triage-action:live"),
    ];
    let cfg = ConsoleConfig::widget_from_env(&env(&vars)).expect("valid");
    let names: Vec<&str> = cfg.queues.iter().map(QueueUrl::name).collect();
    assert_eq!(names, ["orders-dlq", "payments-dlq", "orders-poison"]);
    let twice = [("TRIAGE_QUEUE_URLS", DLQ), ("DLQ_URLS", listed.as_str())];
    let e = ConsoleConfig::action_from_env(&env(&[("TRIAGE_TABLE", "t-1"), twice[0], twice[1]]))
        .unwrap_err();
    assert_eq!(e.variable, "TRIAGE_QUEUE_URLS");
    assert!(e.to_string().contains("two queues are named"), "{e}");
}

fn button(extra: Value) -> Value {
    let mut e = json!({
        "action": "acknowledge",
        "queue": "orders-dlq",
        "group": "g2-0123456789abcdef",
        "planId": "p-0123456789abcdef",
        "count": 3,
        "widgetContext": {"dashboardName": "redrive-fleet"}
    });
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

#[test]
fn a_button_is_accepted_only_with_a_known_action_a_configured_queue_and_well_formed_ids() {
    let cfg = config();
    let ok = ActionRequest::parse(&cfg, &button(json!({}))).unwrap();
    assert_eq!(ok.kind, Kind::Acknowledge);
    assert_eq!(ok.queue.as_str(), DLQ);
    let hold = ActionRequest::parse(&cfg, &button(json!({"action": "hold", "hours": 24}))).unwrap();
    assert_eq!(hold.kind, Kind::Hold { hours: 24 });

    let refused = |extra: Value| ActionRequest::parse(&cfg, &button(extra)).unwrap_err();
    let r = refused(json!({"queue": "https://sqs.us-east-1.amazonaws.com/123456789012/other"}));
    assert!(r.reason.contains("not one this console shows"), "{r:?}");
    assert_eq!(
        r.queue, None,
        "no widget of an unconfigured queue is rendered"
    );
    for (extra, says) in [
        (json!({"action": "purge"}), "not an action of this console"),
        (json!({"group": "g2-xyz"}), "is not a group id"),
        (json!({"group": 7}), "group must be a non-empty string"),
        (json!({"planId": "p/../x"}), "is not a plan id"),
        (json!({"action": "hold"}), "a hold needs hours"),
        (json!({"action": "hold", "hours": 169}), "1..=168"),
        (json!({"action": "hold", "hours": 0}), "1..=168"),
        (json!({"count": -1}), "count must be a whole number"),
        (json!({"action": "note", "text": " "}), "a note is 1 to"),
    ] {
        let r = refused(extra.clone());
        assert!(r.reason.contains(says), "{extra}: {r:?}");
        assert_eq!(r.queue.as_ref().map(QueueUrl::as_str), Some(DLQ));
    }
    // Replay and discard name the plan's size their confirmation showed.
    for action in ["replay-canary", "discard"] {
        let mut e = button(json!({"action": action}));
        e.as_object_mut().unwrap().remove("count");
        let r = ActionRequest::parse(&cfg, &e).unwrap_err();
        assert!(r.reason.contains(&format!("{action} needs count")), "{r:?}");
        let ok = ActionRequest::parse(&cfg, &button(json!({"action": action}))).unwrap();
        assert_eq!(ok.count, Some(3));
    }
}

fn book() -> Book {
    let mut b = Book::new(DLQ);
    b.observe(
        "g2-00000000000000aa",
        "<script>alert(1)</script> timed out",
        Some("orders"),
        12,
        Some(("plan-a", 12)),
        T0,
    );
    b.keep_pass_facts(
        "g2-00000000000000aa",
        redrive_shared::triage::state::PassFacts {
            action: "fix-then-replay-canary".into(),
            advice: "x".into(),
            first_failure: Some("2025-11-24T15:00:00Z".into()),
            last_failure: Some("2025-11-24T15:59:00Z".into()),
            class: Some("permanent".into()),
            code: Some("Http400".into()),
            attempts_min: 5,
            attempts_max: 5,
            failure_times: vec![T0 - 3_600_000, T0 - 60_000],
            failure_times_every: 6,
        },
        T0,
    )
    .unwrap();
    b.observe(
        "g2-00000000000000bb",
        "gone",
        None,
        2,
        Some(("plan-b", 2)),
        T0,
    );
    b.absent(["g2-00000000000000aa"], T0);
    b
}

#[test]
fn the_view_of_a_book_shows_its_open_groups_and_says_when_there_is_nothing() {
    let q = QueueUrl::parse(DLQ).unwrap();
    let d = Depth {
        visible: 12,
        in_flight: 0,
    };
    let v = view_of(&q, Some(&book()), Ok(d));
    assert_eq!(v.queue, "orders-dlq");
    assert_eq!(v.made_at_ms, Some(T0));
    let Contents::Groups(groups) = &v.contents else {
        panic!("{:?}", v.contents)
    };
    assert_eq!(groups.len(), 1, "the resolved group is not shown");
    let g = &groups[0];
    assert_eq!(g.state.as_deref(), Some("new"));
    assert_eq!(g.group.action, Action::FixThenReplayCanary);
    assert_eq!(g.group.plan_id, "plan-a");
    assert_eq!((g.failure_times.len(), g.times_weight), (2, 6));

    let empty = Depth {
        visible: 0,
        in_flight: 0,
    };
    assert!(matches!(
        view_of(&q, None, Ok(empty)).contents,
        Contents::Empty
    ));
    assert!(matches!(
        view_of(&q, None, Ok(d)).contents,
        Contents::NoIndex
    ));
    assert!(matches!(
        view_of(&q, Some(&book()), Err("AccessDenied".into())).contents,
        Contents::Unreadable(_)
    ));

    // Rendered for a narrow dark widget: escaped, with buttons on the configured function.
    let ctx = WidgetContext::of(&json!({"widgetContext": {"theme": "dark", "width": 400,
        "timeRange": {"mode": "relative", "start": T0 - 7_200_000, "end": T0, "zoom": {}}}}));
    assert_eq!(ctx.range(), TimeRange::new(T0 - 7_200_000, T0));
    let html = render(&v, &ctx.options(Some("redrive-triage-action:live")));
    assert!(html.contains("rd-dark") && html.contains("rd-narrow"));
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("&lt;script&gt;"));
    assert!(html.contains(r#"endpoint="redrive-triage-action:live""#));
    assert_eq!(ctx.who(), "console");
    let ctx = WidgetContext::of(&json!({"widgetContext": {"dashboardName": "ops"}}));
    assert_eq!(ctx.who(), "console (dashboard ops)");
}
