//! The triage console's two functions as Lambdas under `cargo lambda watch`, called with the
//! documented custom widget event, on moto (DynamoDB for the book, SQS for the depth), each
//! under its role of `infra/templates/resources.yaml` (`TriageWidgetRole`, `TriageActionRole`),
//! which moto enforces. The book is written first by the library calls a `redrive triage
//! --table` pass makes.

use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageStore};
use redrive_shared::config::Env;
use redrive_shared::triage::state::{Book, PassFacts, State};
use redrive_tests::{LambdaWatch, QueueSet, iam, moto, send_raw};
use redrive_triage_console::{Console, ConsoleConfig};
use serde_json::{Value, json};

const T0: i64 = 1_764_000_000_000;
const HOSTILE: &str =
    r#"<script>alert(1)</script> "><img src=x onerror=alert(2)> order 123 failed"#;
const LONG: &str = "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const A: &str = "g2-00000000000000aa";
const B: &str = "g2-00000000000000bb";
const C: &str = "g2-00000000000000cc";

fn widget_event() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/widget-event.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn facts(action: &str, n: usize) -> PassFacts {
    PassFacts {
        action: action.into(),
        advice: String::new(),
        first_failure: Some("2025-11-24T16:10:00Z".into()),
        last_failure: Some("2025-11-24T20:00:00Z".into()),
        class: Some("permanent".into()),
        code: Some(format!("Http400{LONG}")),
        attempts_min: 5,
        attempts_max: 5,
        failure_times: (0..n as i64).map(|i| T0 + 600_000 + i * 60_000).collect(),
        failure_times_every: 1,
    }
}

/// The book a pass of three groups records: A (12 messages, to fix then replay, hostile
/// title), B (3, the re-driver will retry), C (seen once, since resolved).
async fn write_book(store: &DynamoDbTriageStore, dlq: &str) {
    triage_store::update(store, dlq, |b| {
        b.observe(A, HOSTILE, Some("orders<b>"), 12, Some(("plan-a1", 12)), T0);
        b.keep_pass_facts(A, facts("fix-then-replay-canary", 12), T0)?;
        b.observe(
            B,
            "timeout after <n> ms",
            Some("orders"),
            3,
            Some(("plan-b1", 3)),
            T0,
        );
        b.keep_pass_facts(B, facts("redriver-will-retry", 3), T0)?;
        b.observe(C, "old cause", None, 1, Some(("plan-c1", 1)), T0);
        b.absent([A, B], T0);
        Ok(())
    })
    .await
    .expect("the pass's book");
}

/// The environment `make deploy` gives both functions, for `q`'s DLQ and poison queue.
fn console_env(q: &QueueSet, table: &str) -> Vec<(String, String)> {
    let mut env = moto().env();
    env.extend([
        ("TRIAGE_TABLE".to_string(), table.to_string()),
        (
            "TRIAGE_QUEUE_URLS".to_string(),
            format!("{},{}", q.dlq_url, q.poison_url),
        ),
        (
            "TRIAGE_ACTION_FUNCTION".to_string(),
            "triage-action".to_string(),
        ),
    ]);
    env
}

async fn book(store: &DynamoDbTriageStore, dlq: &str) -> (u64, Book) {
    store.load(dlq).await.expect("load").expect("a book")
}

fn html(answer: &Value) -> &str {
    answer
        .as_str()
        .unwrap_or_else(|| panic!("not HTML: {answer}"))
}

/// The button event the dashboard sends: the `<cwdb-action>` parameters and the context.
fn press(params: Value) -> Value {
    let mut e = params;
    e["widgetContext"] = widget_event()["widgetContext"].clone();
    e
}

fn rows(h: &str) -> usize {
    h.matches(r#"class="rd-row""#).count() + h.matches(r#"class="rd-card rd-row""#).count()
}

/// The `<cwdb-action>` parameters of `group`'s `action` button as rendered.
fn button_params(h: &str, group: &str, action: &str) -> Option<Value> {
    h.split("<cwdb-action ").skip(1).find_map(|part| {
        let body = part.split_once('>')?.1.split_once("</cwdb-action>")?.0;
        let text = body.replace("&quot;", "\"").replace("&amp;", "&");
        let v: Value = serde_json::from_str(&text).ok()?;
        (v["group"] == group && v["action"] == action).then_some(v)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_widget_shows_the_book_and_the_action_function_acts_on_it_and_refuses_the_rest() {
    // GIVEN a DLQ with 3 messages and its book as a pass of three groups recorded it
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let store = DynamoDbTriageStore::new(&moto().sdk_config().await, &table);
    for n in 0..3 {
        send_raw(&sqs, &q.dlq_url, &format!("secret-body-{n}"), &[]).await;
    }
    write_book(&store, &q.dlq_url).await;
    let env = console_env(&q, &table);
    let watch = LambdaWatch::start(&["triage-widget", "triage-action"], &env).await;
    let mut event = widget_event();
    event["queue"] = json!(q.dlq_name);
    event["widgetContext"]["params"]["queue"] = json!(q.dlq_name);

    // WHEN the dashboard asks for the widget (dark, 1180 px wide)
    let answer = watch.invoke("triage-widget", &event).await.expect("widget");
    let h = html(&answer);

    // THEN it shows the two open groups (not the resolved one), their counts, states and
    // buttons, the queue's depth, in the dark wide layout, the hostile texts inert
    assert!(h.contains("rd-dark") && h.contains("rd-wide"), "{h}");
    assert_eq!(rows(h), 2, "{h}");
    assert!(!h.contains(C), "the resolved group is not shown");
    assert!(h.contains(r#"<span class="rd-count">12</span>"#));
    assert!(h.contains(r#"<span class="rd-count">3</span>"#));
    assert!(h.contains("<b>3</b> visible"), "the queue's depth: {h}");
    assert!(
        h.matches(r#"<span class="rd-tag rd-s-new">new</span>"#)
            .count()
            == 2
    );
    assert!(h.contains("Fix, then replay with a canary"));
    assert!(h.contains("Re-driver will retry"));
    assert!(h.contains("<svg"), "the trend");
    assert!(!h.contains("<script") && !h.contains("<img"), "{h}");
    assert!(h.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(h.contains("orders&lt;b&gt;"));
    let ack = button_params(h, A, "acknowledge").expect("acknowledge button of A");
    assert_eq!(ack["planId"], "plan-a1");
    assert_eq!(ack["count"], 12);
    assert!(button_params(h, A, "hold").is_some());
    assert!(button_params(h, A, "replay-canary").is_some());
    assert!(
        button_params(h, B, "discard").is_none(),
        "B is the re-driver's"
    );
    assert!(h.contains(r#"endpoint="triage-action""#));

    // AND narrow and light when the dashboard is
    let mut narrow = event.clone();
    narrow["widgetContext"]["width"] = json!(480);
    narrow["widgetContext"]["theme"] = json!("light");
    let n = watch
        .invoke("triage-widget", &narrow)
        .await
        .expect("widget");
    assert!(html(&n).contains("rd-light") && html(&n).contains("rd-narrow"));
    assert_eq!(rows(html(&n)), 2);

    // WHEN the acknowledge button of A is pressed
    let answer = watch
        .invoke("triage-action", &press(ack.clone()))
        .await
        .expect("action");
    let h = html(&answer);

    // THEN the book says acknowledged, audited as the console on that dashboard with the plan
    // and count, and the answer is the widget re-rendered with it
    let (_, b) = book(&store, &q.dlq_url).await;
    let r = b.get(A).unwrap();
    assert_eq!(r.state, State::Acknowledged);
    let last = r.audit.last().unwrap();
    assert_eq!(last.action, "acknowledge");
    assert_eq!(last.who, "console (dashboard redrive-fleet)");
    assert_eq!(last.plan_id.as_deref(), Some("plan-a1"));
    assert_eq!(last.count, Some(12));
    assert!(h.contains("Acknowledged group g2-00000000000000aa"), "{h}");
    assert!(h.contains(r#"<span class="rd-tag rd-s-ack">acknowledged</span>"#));
    assert!(
        button_params(h, A, "acknowledge").is_none(),
        "already acknowledged"
    );

    // WHEN its hold button (24 h) is pressed
    let hold = button_params(h, A, "hold").expect("hold button of A");
    assert_eq!(hold["hours"], 24);
    let answer = watch
        .invoke("triage-action", &press(hold))
        .await
        .expect("action");
    let h = html(&answer);

    // THEN the group is held for 24 h, audited, and the next render shows it held with a
    // release button
    let (version, b) = book(&store, &q.dlq_url).await;
    let r = b.get(A).unwrap();
    assert_eq!(r.state, State::Held);
    let until = r.hold.as_ref().unwrap().until_ms.unwrap();
    let day = until - r.hold.as_ref().unwrap().since_ms;
    assert_eq!(day, 24 * 3_600_000);
    let actions: Vec<&str> = r.audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["acknowledge", "hold"]);
    assert!(h.contains("Held group"), "{h}");
    let next = watch.invoke("triage-widget", &event).await.expect("widget");
    assert!(html(&next).contains(r#"<span class="rd-tag rd-s-held">held</span>"#));
    assert!(button_params(html(&next), A, "release").is_some());

    // WHEN requests the console must refuse are sent
    let unknown_queue = "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq";
    let refusals = [
        (
            json!({"queue": unknown_queue}),
            "not one this console shows",
        ),
        (json!({"group": "g2-<b>"}), "is not a group id"),
        (
            json!({"group": "g2-00000000000000ff"}),
            "no group g2-00000000000000ff",
        ),
        (
            json!({"planId": "plan-a0"}),
            "the book's current plan is plan-a1",
        ),
        (json!({"action": "purge"}), "not an action of this console"),
        (json!({"action": "hold", "hours": 1000}), "1..=168"),
        (
            json!({"action": "release", "planId": "plan-b1", "group": B}),
            "is not held",
        ),
    ];
    for (change, says) in refusals {
        let mut params = ack.clone();
        for (k, v) in change.as_object().unwrap() {
            params[k] = v.clone();
        }
        let answer = watch
            .invoke("triage-action", &press(params))
            .await
            .expect("action");
        let h = html(&answer);
        // THEN each says why in the widget, and the book is unchanged
        assert!(
            h.contains("Refused") && h.contains(&redrive_console::escape_html(says)),
            "{change}: {h}"
        );
        assert_eq!(
            book(&store, &q.dlq_url).await,
            (version, b.clone()),
            "{change}"
        );
        if change.get("queue").is_some() {
            assert_eq!(rows(h), 0, "no widget of a queue not configured");
        }
    }

    // WHEN replay is pressed: THEN the command line to run, and nothing changed
    let replay = button_params(html(&next), A, "replay-canary").expect("replay button");
    let answer = watch
        .invoke("triage-action", &press(replay))
        .await
        .expect("action");
    let expected = format!(
        "redrive triage replay {A} {} --plan plan-a1 --table {table}",
        q.dlq_url
    );
    assert!(
        html(&answer).contains(&redrive_console::escape_html(&expected)),
        "{answer}"
    );
    assert_eq!(book(&store, &q.dlq_url).await, (version, b.clone()));

    // AND a widget on a queue not configured is refused; describe answers the docs
    let mut other = event.clone();
    other["widgetContext"]["params"]["queue"] = json!("payments-dlq");
    let answer = watch.invoke("triage-widget", &other).await.expect("widget");
    assert!(html(&answer).contains("not one this console shows"));
    assert_eq!(rows(html(&answer)), 0);
    let docs = watch
        .invoke("triage-widget", &json!({"describe": true}))
        .await
        .expect("describe");
    assert!(html(&docs).starts_with("## redrive triage"));

    // AND no body in the functions' logs
    assert!(!watch.log().contains("secret-body"));
}

#[tokio::test]
async fn a_queue_without_a_book_says_so_and_an_empty_one_says_it_is_empty() {
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    send_raw(&sqs, &q.dlq_url, "{}", &[]).await;
    let env = console_env(&q, &table);
    let watch = LambdaWatch::start(&["triage-widget"], &env).await;
    let mut event = widget_event();
    event["widgetContext"]["params"]["queue"] = json!(q.dlq_url);
    let answer = watch.invoke("triage-widget", &event).await.expect("widget");
    assert!(html(&answer).contains("No triage of"), "{answer}");
    event["widgetContext"]["params"]["queue"] = json!(q.poison_name);
    let answer = watch.invoke("triage-widget", &event).await.expect("widget");
    assert!(html(&answer).contains("is empty"), "{answer}");
}

/// The console's code with the credentials of `role` (rendered from the template for the
/// resources `env` names), as its Lambda runs it.
async fn console_as(
    role: &str,
    env: &[(String, String)],
    table: &str,
) -> Console<DynamoDbTriageStore> {
    let sdk = moto()
        .sdk_config_as(role, &iam::resources_from_env(env))
        .await;
    let vars = env.to_vec();
    let config = ConsoleConfig::action_from_env(&Env(move |k: &str| {
        vars.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    }))
    .expect("the console's configuration");
    Console {
        store: DynamoDbTriageStore::new(&sdk, table),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        config,
    }
}

#[tokio::test]
async fn the_widget_role_reads_the_book_and_the_depth_and_cannot_act_or_touch_a_message() {
    // GIVEN a DLQ with a message and its book
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let store = DynamoDbTriageStore::new(&moto().sdk_config().await, &table);
    send_raw(&sqs, &q.dlq_url, "secret-body", &[]).await;
    write_book(&store, &q.dlq_url).await;
    let env = console_env(&q, &table);
    let before = book(&store, &q.dlq_url).await;
    let mut event = widget_event();
    event["widgetContext"]["params"]["queue"] = json!(q.dlq_name);

    // WHEN the console's code runs with the widget's role
    let widget = console_as("TriageWidgetRole", &env, &table).await;
    let h = widget.widget(&event).await;

    // THEN it renders the book and the depth (the role grants what the widget calls)
    let h = html(&h).to_string();
    assert_eq!(rows(&h), 2, "{h}");
    assert!(h.contains("<b>1</b> visible"), "the queue's depth: {h}");
    let ack = button_params(&h, A, "acknowledge").expect("acknowledge button of A");

    // AND an acknowledge with the widget's role is refused by IAM and changes nothing
    let answer = widget.action(&press(ack.clone()), T0).await;
    assert!(html(&answer).contains("Not done"), "{answer}");
    assert!(html(&answer).contains("AccessDenied"), "{answer}");
    assert_eq!(book(&store, &q.dlq_url).await, before);
    // AND it may not receive, send or delete a message of the DLQ
    let widget_sqs = &widget.sqs;
    let received = widget_sqs
        .receive_message()
        .queue_url(&q.dlq_url)
        .send()
        .await;
    assert!(
        received.is_err(),
        "the widget's role received: {received:?}"
    );
    let sent = widget_sqs
        .send_message()
        .queue_url(&q.dlq_url)
        .message_body("{}")
        .send()
        .await;
    assert!(sent.is_err(), "the widget's role sent: {sent:?}");

    // WHEN the same acknowledge runs with the action's role
    let action = console_as("TriageActionRole", &env, &table).await;
    let answer = action.action(&press(ack), T0).await;

    // THEN the book records it; the action's role may not touch a message either
    assert!(html(&answer).contains("Acknowledged group"), "{answer}");
    let (_, b) = book(&store, &q.dlq_url).await;
    assert_eq!(b.get(A).unwrap().state, State::Acknowledged);
    let received = action
        .sqs
        .receive_message()
        .queue_url(&q.dlq_url)
        .send()
        .await;
    assert!(
        received.is_err(),
        "the action's role received: {received:?}"
    );
}
