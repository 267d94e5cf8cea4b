//! The triage console's two functions as Lambdas under `cargo lambda watch`, called with the
//! documented custom widget event, on moto (DynamoDB for the book, SQS for the depth), each
//! under its role of `infra/templates/resources.yaml` (`TriageWidgetRole`, `TriageActionRole`),
//! which moto enforces. The book is written first by the library calls a `redrive triage
//! --table` pass makes.

use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageStore};
use redrive_shared::config::Env;
use redrive_shared::triage::state::{Book, PassFacts, State};
use redrive_tests::{LambdaWatch, QueueSet, iam, moto, queue_depth, send_raw, unique_name};
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
    let ids: Vec<String> = (0..12).map(|n| format!("gone-{n}")).collect();
    store.save_plan("plan-a1", &ids).await.expect("plan");
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

/// The environment `make deploy` gives both functions, for `q`'s DLQ and poison queue, the
/// archive bucket `bucket` (prefix `archive`) and `q`'s source.
fn console_env(q: &QueueSet, table: &str) -> Vec<(String, String)> {
    console_env_with(q, table, "no-bucket")
}

fn console_env_with(q: &QueueSet, table: &str, bucket: &str) -> Vec<(String, String)> {
    let mut env = moto().env();
    env.extend([
        ("ARCHIVE_BUCKET".to_string(), bucket.to_string()),
        ("ARCHIVE_PREFIX".to_string(), "archive".to_string()),
        ("POISON_QUEUE_URL".to_string(), q.poison_url.clone()),
        ("SOURCE_QUEUE_URL".to_string(), q.source_url.clone()),
        // The canary's verdict window, short for the test (default: the source's retries).
        ("TRIAGE_CANARY_WINDOW_SECONDS".to_string(), "2".to_string()),
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
        (
            json!({"action": "discard", "count": null}),
            "the parameter count must be a whole number",
        ),
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

    // WHEN replay is pressed with a count that is not the stored plan's size: THEN it is
    // refused, and nothing changed
    let mut replay = button_params(html(&next), A, "replay-canary").expect("replay button");
    assert_eq!(replay["count"], 12);
    replay["count"] = json!(13);
    let answer = watch
        .invoke("triage-action", &press(replay))
        .await
        .expect("action");
    assert!(html(&answer).contains("which holds 12"), "{answer}");
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
        s3: redrive_engine::s3::client(&sdk),
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

    // THEN the book records it; the action's role may not drain the source nor send to the
    // DLQ (its replay sends to the source only)
    assert!(html(&answer).contains("Acknowledged group"), "{answer}");
    let (_, b) = book(&store, &q.dlq_url).await;
    assert_eq!(b.get(A).unwrap().state, State::Acknowledged);
    let received = action
        .sqs
        .receive_message()
        .queue_url(&q.source_url)
        .send()
        .await;
    assert!(
        received.is_err(),
        "the action's role received from the source: {received:?}"
    );
    let sent = action
        .sqs
        .send_message()
        .queue_url(&q.dlq_url)
        .message_body("{}")
        .send()
        .await;
    assert!(sent.is_err(), "the action's role sent to the DLQ: {sent:?}");
}

/// A book of two groups whose plans are messages on the DLQ: R (3 messages, to fix then replay
/// with a canary, from `q`'s source) and D (2 messages, to discard).
const R: &str = "g2-00000000000000a1";
const D: &str = "g2-00000000000000d1";

async fn write_movable_book(
    store: &DynamoDbTriageStore,
    q: &QueueSet,
    r_ids: &[String],
    d_ids: &[String],
) {
    store.save_plan("plan-r1", r_ids).await.expect("plan");
    store.save_plan("plan-d1", d_ids).await.expect("plan");
    let source = q.source_name.clone();
    triage_store::update(store, &q.dlq_url, |b| {
        b.observe(
            R,
            "order <id> rejected",
            Some(&source),
            3,
            Some(("plan-r1", 3)),
            T0,
        );
        b.keep_pass_facts(R, facts("fix-then-replay-canary", 3), T0)?;
        b.observe(
            D,
            "cancelled order",
            Some(&source),
            2,
            Some(("plan-d1", 2)),
            T0,
        );
        b.keep_pass_facts(D, facts("export-or-discard", 2), T0)?;
        Ok(())
    })
    .await
    .expect("the pass's book");
}

fn confirmation_of(h: &str, group: &str, action: &str) -> String {
    h.split("<cwdb-action ")
        .skip(1)
        .find_map(|part| {
            let (attributes, rest) = part.split_once('>')?;
            let body = rest.split_once("</cwdb-action>")?.0;
            let v: Value = serde_json::from_str(body).ok()?;
            (v["group"] == group && v["action"] == action).then_some(attributes)
        })
        .and_then(|a| a.split_once(" confirmation=\"")?.1.split_once('"'))
        .map(|(c, _)| c.to_string())
        .unwrap_or_default()
}

fn audit_of(b: &Book, group: &str) -> Vec<String> {
    b.get(group)
        .unwrap()
        .audit
        .iter()
        .map(|e| e.action.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledge_hold_canary_replay_and_discard_round_trip_through_the_action_function() {
    // GIVEN a DLQ with two groups' messages (R: 3 to replay, D: 2 to discard), their book as a
    // pass recorded it, the archive bucket, and both functions under their template roles
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let sdk = moto().sdk_config().await;
    let store = DynamoDbTriageStore::new(&sdk, &table);
    let s3 = redrive_engine::s3::client(&sdk);
    let bucket = unique_name("console-archive")
        .to_lowercase()
        .replace('_', "-");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let mut r_ids = Vec::new();
    let hostile = aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(HOSTILE)
        .build()
        .unwrap();
    for n in 0..3 {
        let body = format!("secret-replay-{n} <b>bold</b>");
        r_ids.push(send_raw(&sqs, &q.dlq_url, &body, &[("customer", hostile.clone())]).await);
    }
    let mut d_ids = Vec::new();
    for n in 0..2 {
        d_ids.push(send_raw(&sqs, &q.dlq_url, &format!("secret-discard-{n}"), &[]).await);
    }
    write_movable_book(&store, &q, &r_ids, &d_ids).await;
    let env = console_env_with(&q, &table, &bucket);
    let watch = LambdaWatch::start(&["triage-widget", "triage-action"], &env).await;
    let mut event = widget_event();
    event["widgetContext"]["params"]["queue"] = json!(q.dlq_name);
    let render = || async {
        html(&watch.invoke("triage-widget", &event).await.expect("widget")).to_string()
    };
    let h = render().await;
    assert_eq!(rows(&h), 2, "{h}");
    assert!(h.contains("<b>5</b> visible"), "{h}");

    // WHEN R's samples are asked for: THEN a popup of its three messages, their ids and
    // attributes escaped, no body (TRIAGE_SHOW_BODIES is off), and they stay on the DLQ
    let samples = button_params(&h, R, "samples").expect("samples R");
    let p = watch
        .invoke("triage-action", &press(samples.clone()))
        .await
        .expect("samples");
    let p = html(&p).to_string();
    assert!(p.contains("3 of its 3 message(s)"), "{p}");
    for id in &r_ids {
        assert!(p.contains(id.as_str()), "{p}");
    }
    assert!(p.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{p}");
    assert!(!p.contains("<script") && !p.contains("<img"), "{p}");
    assert!(!p.contains("secret-replay"), "no body: {p}");
    assert!(p.contains("TRIAGE_SHOW_BODIES is off"), "{p}");
    assert_eq!(
        redrive_tests::queue_counts(&sqs, &q.dlq_url).await,
        Some((5, 0, 0))
    );
    // AND with TRIAGE_SHOW_BODIES=true the bodies too, escaped
    let mut shown = env.clone();
    shown.push(("TRIAGE_SHOW_BODIES".to_string(), "true".to_string()));
    let action = console_as("TriageActionRole", &shown, &table).await;
    let p = action.action(&press(samples), T0).await;
    let p = html(&p).to_string();
    assert!(p.contains("secret-replay-0 &lt;b&gt;bold&lt;/b&gt;"), "{p}");
    assert!(!p.contains("<b>bold"), "{p}");

    // WHEN R is acknowledged, then held, with its rendered buttons
    let ack = button_params(&h, R, "acknowledge").expect("acknowledge R");
    let a = watch
        .invoke("triage-action", &press(ack))
        .await
        .expect("action");
    assert!(html(&a).contains("Acknowledged group"), "{a}");
    let h = render().await;
    assert!(
        h.contains(r#"<span class="rd-tag rd-s-ack">acknowledged</span>"#),
        "{h}"
    );
    let hold = button_params(&h, R, "hold").expect("hold R");
    let a = watch
        .invoke("triage-action", &press(hold))
        .await
        .expect("action");
    assert!(html(&a).contains("Held group"), "{a}");
    let h = render().await;
    assert!(
        h.contains(r#"<span class="rd-tag rd-s-held">held</span>"#),
        "{h}"
    );

    // THEN each is in the book's audit
    let (_, b) = book(&store, &q.dlq_url).await;
    assert_eq!(audit_of(&b, R), ["acknowledge", "hold"]);

    // WHEN its canary replay is pressed (its confirmation names the plan's size), with a queue
    // URL slipped into the parameters
    let confirmation = confirmation_of(&h, R, "replay-canary");
    assert!(
        confirmation.contains("Replay a canary of the 3 message(s)"),
        "{confirmation}"
    );
    let mut replay = button_params(&h, R, "replay-canary").expect("replay R");
    assert_eq!(replay["count"], 3);
    replay["to"] = json!(q.dlq_url);
    replay["queueUrl"] = json!(q.poison_url);
    let a = watch
        .invoke("triage-action", &press(replay))
        .await
        .expect("action");

    // THEN one message of the plan (the canary) is on the source, the DLQ holds one fewer, the
    // replay is audited with the plan and its size, and the answer and the next render show it
    let a = html(&a).to_string();
    assert!(
        a.contains("Replayed a canary of 1 of the 3 message(s) of plan plan-r1"),
        "{a}"
    );
    assert_eq!(queue_depth(&sqs, &q.source_url).await, 1);
    assert_eq!(queue_depth(&sqs, &q.dlq_url).await, 4);
    assert_eq!(queue_depth(&sqs, &q.poison_url).await, 0);
    let canary = redrive_tests::receive_raw(&sqs, &q.source_url, 30).await;
    assert_eq!(canary.len(), 1);
    assert!(
        canary[0]
            .body()
            .unwrap_or_default()
            .starts_with("secret-replay-")
    );
    let (_, b) = book(&store, &q.dlq_url).await;
    let rec = b.get(R).unwrap();
    assert_eq!(
        audit_of(&b, R),
        ["acknowledge", "hold", "replay", "replay-finished"]
    );
    let begun = &rec.audit[2];
    assert_eq!(
        (begun.plan_id.as_deref(), begun.count),
        (Some("plan-r1"), Some(3))
    );
    assert_eq!(begun.who, "console (dashboard redrive-fleet)");
    let tally = rec.replay.as_ref().expect("the replay's tally");
    assert_eq!(
        (tally.sent, tally.deleted, tally.back, &tally.stages),
        (1, 1, 0, &vec![1])
    );
    assert_eq!(
        rec.state,
        State::Acknowledged,
        "2 messages of the plan are left"
    );
    assert!(
        a.contains(r#"<span class="rd-tag rd-s-ack">acknowledged</span>"#),
        "{a}"
    );
    assert!(a.contains("<b>4</b> visible"), "{a}");
    let h = render().await;
    assert!(
        h.contains(r#"<span class="rd-tag rd-s-ack">acknowledged</span>"#),
        "{h}"
    );
    assert!(h.contains("<b>4</b> visible"), "{h}");

    // WHEN D's discard is pressed (its confirmation names the plan's size)
    let confirmation = confirmation_of(&h, D, "discard");
    assert!(
        confirmation.contains("Discard the 2 message(s)"),
        "{confirmation}"
    );
    let discard = button_params(&h, D, "discard").expect("discard D");
    let a = watch
        .invoke("triage-action", &press(discard))
        .await
        .expect("action");

    // THEN its two messages are in S3 under the archive prefix, bodies and ids, and gone from
    // the DLQ; the book says resolved, audited; the next render no longer shows D
    let a = html(&a).to_string();
    assert!(
        a.contains("Discarded 2 of the 2 message(s) of plan plan-d1"),
        "{a}"
    );
    let keys = redrive_engine::s3::list_keys(&s3, &bucket, "archive", ".jsonl")
        .await
        .expect("list");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].starts_with(&format!("archive/{}/", q.dlq_name)),
        "{keys:?}"
    );
    let object = s3
        .get_object()
        .bucket(&bucket)
        .key(&keys[0])
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    let text = String::from_utf8(object.to_vec()).unwrap();
    for id in &d_ids {
        assert!(text.contains(id.as_str()), "{text}");
    }
    assert!(text.contains("secret-discard-0") && text.contains("secret-discard-1"));
    assert!(!text.contains("secret-replay"), "only the plan is archived");
    assert_eq!(queue_depth(&sqs, &q.dlq_url).await, 2);
    let (_, b) = book(&store, &q.dlq_url).await;
    assert_eq!(audit_of(&b, D), ["discard", "discard-finished"]);
    assert_eq!(b.get(D).unwrap().audit[0].count, Some(2));
    assert_eq!(b.get(D).unwrap().state, State::Resolved);
    let h = render().await;
    assert_eq!(rows(&h), 1, "{h}");
    assert!(!h.contains(D), "{h}");
    assert!(h.contains("<b>2</b> visible"), "{h}");

    // AND no body in the functions' logs
    let log = watch.log();
    assert!(!log.contains("secret-"), "a body was logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_fails_again_stops_the_replay_and_marks_the_group() {
    // GIVEN R's three messages on the DLQ, and a consumer that fails every message of the
    // source back to the DLQ (as SQS's redrive policy would, x-redrive kept)
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let store = DynamoDbTriageStore::new(&moto().sdk_config().await, &table);
    let mut r_ids = Vec::new();
    for n in 0..3 {
        r_ids.push(send_raw(&sqs, &q.dlq_url, &format!("secret-replay-{n}"), &[]).await);
    }
    write_movable_book(&store, &q, &r_ids, &[]).await;
    let env = console_env_with(&q, &table, "no-bucket");
    let watch = LambdaWatch::start(&["triage-action"], &env).await;
    let failing = {
        let (sqs, source, dlq) = (sqs.clone(), q.source_url.clone(), q.dlq_url.clone());
        tokio::spawn(async move {
            loop {
                for m in redrive_tests::receive_raw(&sqs, &source, 30).await {
                    let mut send = sqs
                        .send_message()
                        .queue_url(&dlq)
                        .message_body(m.body().unwrap_or_default());
                    for (k, v) in m.message_attributes().cloned().unwrap_or_default() {
                        send = send.message_attributes(k, v);
                    }
                    send.send().await.unwrap();
                    sqs.delete_message()
                        .queue_url(&source)
                        .receipt_handle(m.receipt_handle().unwrap_or_default())
                        .send()
                        .await
                        .unwrap();
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
    };

    // WHEN the canary replay is pressed
    let params = json!({"action": "replay-canary", "queue": q.dlq_name, "group": R,
        "planId": "plan-r1", "count": 3});
    let a = watch
        .invoke("triage-action", &press(params))
        .await
        .expect("action");
    failing.abort();

    // THEN the replay stopped by itself after the canary: the group is marked replay-failed,
    // the stop audited, and the rest of the plan never left the DLQ
    let a = html(&a).to_string();
    assert!(
        a.contains("Canary failed: 1 of 1 came back to the DLQ"),
        "{a}"
    );
    assert!(a.contains("replay-failed"), "{a}");
    let (_, b) = book(&store, &q.dlq_url).await;
    let rec = b.get(R).unwrap();
    assert_eq!(rec.state, State::ReplayFailed);
    assert_eq!(audit_of(&b, R), ["replay", "replay-stopped"]);
    assert_eq!(rec.replay.as_ref().unwrap().stages, vec![1]);
    assert_eq!(
        queue_depth(&sqs, &q.dlq_url).await,
        3,
        "2 of the plan and the canary's copy"
    );
}
