//! `redrive triage` against the emulator: a DLQ holding three real-looking causes is grouped
//! into exactly those three groups, each with its facts and action; `triage show` lists one
//! group's messages; an export of the same DLQ gives the same group ids.

use std::collections::HashMap;

mod act;
mod causes;

use redrive_shared::meta::{ErrorClass, LastError, RedriveMeta};
use redrive_tests::{QueueSet, moto, send_raw, unique_name};
use serde_json::Value;

use crate::common::{Run, run_redrive, send_with_meta, visible};

fn redrive(args: &[&str]) -> Run {
    run_redrive(args, &[], None)
}

/// `redrive triage show GROUP DLQ ... --json`, with the flags `extra` between.
fn show_json(group: &str, dlq: &str, extra: &[&str]) -> Run {
    let mut args = vec!["triage", "show", group, dlq];
    args.extend_from_slice(extra);
    args.push("--json");
    redrive(&args)
}

/// A UUID-shaped id, different for each `n`.
fn uuid(n: u64) -> String {
    let h = format!(
        "{:032x}",
        u128::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
    );
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Sends `body` to `q`'s DLQ stamped by a consumer that recorded `error`, on `attempt`, with
/// `q`'s source queue recorded; the `n`th original message id.
async fn send_stamped(
    sqs: &aws_sdk_sqs::Client,
    q: &QueueSet,
    body: &str,
    (n, attempt): (u64, u32),
    error: LastError,
) {
    let mut meta = RedriveMeta {
        attempt,
        last_error: Some(error),
        ..RedriveMeta::fresh(&uuid(n))
    };
    meta.set_source(&q.source_arn);
    send_with_meta(sqs, &q.dlq_url, body, &meta).await;
}

/// The DLQ of a fresh queue set, holding: twelve 503s of the orders API over ten minutes (ids,
/// hosts and latencies in their messages), five schema errors, and four messages sent by hand.
async fn dlq_with_three_causes(sqs: &aws_sdk_sqs::Client) -> QueueSet {
    let q = QueueSet::create(sqs, false, 3).await;
    for i in 0..12u64 {
        let order = uuid(100 + i);
        let text = format!(
            "POST https://orders-{}.internal:8443/v1/orders/{order} returned 503 Service Unavailable (request id {}) after {}ms",
            i % 3,
            uuid(200 + i),
            900 + 37 * i
        );
        let at = format!("2026-11-21T10:{:02}:{:02}Z", (i * 50) / 60, (i * 50) % 60);
        let error = LastError::new(ErrorClass::Transient, "HTTP_503", &text, at);
        let body = format!("{{\"orderId\":\"{order}\"}}");
        send_stamped(sqs, &q, &body, (i, (i % 3) as u32 + 1), error).await;
    }
    let fields = [
        ("amount", "12,50"),
        ("amount", "n/a"),
        ("currency", "42"),
        ("amount", ""),
        ("quantity", "-"),
    ];
    for (i, (field, got)) in fields.iter().enumerate() {
        let text = format!(
            "order {}: field '{field}' expected number, got string \"{got}\"",
            81_700 + i
        );
        let at = format!("2026-11-21T11:0{i}:00Z");
        let error = LastError::new(ErrorClass::Permanent, "SCHEMA_INVALID", &text, at);
        let body = "{\"orderId\":\"x\",\"amount\":\"12,50\"}";
        send_stamped(sqs, &q, body, (50 + i as u64, 0), error).await;
    }
    for i in 0..4 {
        send_raw(
            sqs,
            &q.dlq_url,
            &format!("{{\"orderId\":\"hand-{i}\",\"amount\":{i}}}"),
            &[],
        )
        .await;
    }
    q
}

fn by_code(groups: &[Value]) -> HashMap<String, Value> {
    groups
        .iter()
        .map(|g| (g["code"].as_str().unwrap_or("none").to_string(), g.clone()))
        .collect()
}

#[tokio::test]
async fn a_dlq_of_three_causes_is_grouped_into_exactly_those_three() {
    // GIVEN a DLQ holding three causes
    let sqs = moto().sqs().await;
    let q = dlq_with_three_causes(&sqs).await;

    // WHEN triage reads it
    let run = redrive(&["triage", &q.dlq_url, "--json"]);

    // THEN every message is grouped, in exactly three groups
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(out["coverage"]["grouped"], 21, "{out}");
    assert_eq!(out["coverage"]["about"], 21);
    assert_eq!(out["coverage"]["status"], "complete");
    assert_eq!(out["normaliserVersion"], 2);
    let groups = out["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3, "{out:#}");
    let g = by_code(groups);

    // AND the downstream 503s are one group, retried by the re-driver
    let outage = &g["HTTP_503"];
    assert_eq!(outage["count"], 12);
    assert_eq!(outage["class"], "transient");
    assert_eq!(outage["source"], q.source_name.as_str());
    assert_eq!(
        outage["title"],
        "POST <url> returned <num> Service Unavailable (request id <uuid>) after <duration>"
    );
    assert_eq!(outage["firstFailure"], "2026-11-21T10:00:00Z");
    assert_eq!(outage["lastFailure"], "2026-11-21T10:09:10Z");
    assert_eq!(
        (
            outage["attempts"]["min"].clone(),
            outage["attempts"]["max"].clone()
        ),
        (1.into(), 3.into())
    );
    assert_eq!(outage["action"], "redriver-will-retry");
    assert_eq!(outage["messageIds"].as_array().unwrap().len(), 12);
    let top: HashMap<&str, &Value> = outage["topValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["kind"].as_str().unwrap(), t))
        .collect();
    assert_eq!(top["num"]["top"][0]["value"], "503");
    assert_eq!(top["num"]["top"][0]["count"], 12);
    assert_eq!(top["uuid"]["distinct"], 12);
    assert_eq!(top["url"]["distinct"], 12);

    // AND the schema errors are one group, to fix and replay with a canary
    let schema = &g["SCHEMA_INVALID"];
    assert_eq!(schema["count"], 5);
    assert_eq!(
        schema["title"],
        "order <num>: field <quoted> expected number, got string <quoted>"
    );
    assert_eq!(schema["action"], "fix-then-replay-canary");

    // AND the hand-sent messages are grouped by what they carry, with no invented cause
    let hand = &g["none"];
    assert_eq!(hand["count"], 4);
    assert_eq!(hand["recorded"], false);
    assert_eq!(hand["class"], Value::Null);
    assert_eq!(hand["source"], Value::Null);
    assert_eq!(
        hand["title"],
        "no recorded cause: body {amount:number,orderId:string} from an unknown source"
    );
    assert_eq!(hand["action"], "replay-to-named-queue");

    // AND nothing was consumed: every message is visible again at once
    assert_eq!(visible(&sqs, &q.dlq_url).await, 21);

    // WHEN it runs again, as text
    let text = redrive(&["triage", &q.dlq_url]);
    // THEN the same ids, with the coverage stated
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout
            .contains("grouped 21 of about 21 message(s) in one pass (complete); 3 group(s)"),
        "{}",
        text.stdout
    );
    for group in groups {
        assert!(
            text.stdout.contains(group["id"].as_str().unwrap()),
            "{}",
            text.stdout
        );
    }
    assert!(!text.stdout.contains("hand-0"), "no body in the output");

    // WHEN the DLQ is exported and the file triaged
    let dir = redrive_tests::ScratchDir::new("redrive-triage");
    let file = dir.join("dlq.jsonl");
    let export = redrive(&[
        "export",
        "--queue",
        &q.dlq_url,
        "--to",
        file.to_str().unwrap(),
    ]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    let from_file = redrive(&["triage", "--file", file.to_str().unwrap(), "--json"]).json();
    // THEN it finds the same groups under the same ids
    let ids = |v: &Value| {
        let mut ids: Vec<(String, u64)> = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["id"].as_str().unwrap().to_string(),
                    g["count"].as_u64().unwrap(),
                )
            })
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&from_file), ids(&out));
    assert_eq!(from_file["coverage"]["status"], "complete");

    // WHEN it is exported to an S3 prefix (as an archive is kept) and the prefix triaged
    let s3 = redrive_engine::s3::client(&moto().sdk_config().await);
    let bucket = unique_name("triage").to_ascii_lowercase();
    s3.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("CreateBucket");
    let prefix = format!("s3://{bucket}/kept/");
    let export = run_redrive(
        &["export", "--queue", &q.dlq_url, "--to", &prefix],
        &[],
        Some(&bucket),
    );
    assert_eq!(export.code, 0, "{}", export.stderr);
    let from_s3 = run_redrive(&["triage", "--file", &prefix, "--json"], &[], Some(&bucket));
    // THEN the same groups again, read from the objects under it
    assert_eq!(from_s3.code, 0, "{}", from_s3.stderr);
    let from_s3 = from_s3.json();
    assert_eq!(ids(&from_s3), ids(&out));
    assert_eq!(from_s3["input"], prefix.as_str());
    // ... and an empty prefix is a clear error
    let empty = format!("s3://{bucket}/nothing-here/");
    let none = run_redrive(&["triage", "--file", &empty], &[], Some(&bucket));
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(
        none.stderr.contains("no .jsonl objects under")
            && none.stderr.contains("nothing was grouped"),
        "{}",
        none.stderr
    );
}

#[tokio::test]
async fn triage_show_lists_a_groups_messages_with_their_x_redrive_and_bodies_on_request() {
    // GIVEN the three causes, and the id of the 503 group
    let sqs = moto().sqs().await;
    let q = dlq_with_three_causes(&sqs).await;
    let out = redrive(&["triage", &q.dlq_url, "--json"]).json();
    let g = by_code(out["groups"].as_array().unwrap());
    let outage = g["HTTP_503"]["id"].as_str().unwrap().to_string();

    // WHEN show lists it
    let run = show_json(&outage, &q.dlq_url, &["--samples", "3"]);

    // THEN all twelve are found, three shown with their x-redrive and without their bodies
    assert_eq!(run.code, 0, "{}", run.stderr);
    let shown = run.json();
    assert_eq!(shown["found"], 12);
    assert_eq!(shown["groups"].as_array().unwrap().len(), 1);
    assert_eq!(shown["groups"][0]["id"], outage.as_str());
    let samples = shown["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 3);
    for s in samples {
        assert_eq!(s["xRedrive"]["lastError"]["code"], "HTTP_503");
        assert!(s.get("body").is_none(), "{s}");
    }
    assert!(!run.stdout.contains("orderId"), "no body without --bodies");
    assert_eq!(visible(&sqs, &q.dlq_url).await, 21);

    // WHEN bodies are asked for
    let run = show_json(&outage, &q.dlq_url, &["--samples", "1", "--bodies"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.json()["samples"][0]["body"]
            .as_str()
            .unwrap()
            .contains("orderId")
    );

    // WHEN a group that is not there is asked for, THEN exit code 3
    let none = redrive(&["triage", "show", "g2-0000000000000000", &q.dlq_url]);
    assert_eq!(none.code, 3, "{}{}", none.stdout, none.stderr);
    assert!(none.stdout.contains("0 message(s)"), "{}", none.stdout);

    // WHEN a bad id or a bad rules file is given, THEN a usage error naming the fault
    let bad = redrive(&["triage", "show", "g2-nothex", &q.dlq_url]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("is not a group id"), "{}", bad.stderr);
    let dir = redrive_tests::ScratchDir::new("redrive-triage");
    let rules = dir.join("rules.json");
    std::fs::write(&rules, r#"{"version":1,"rules":[{"name":"x","match":{}}]}"#).unwrap();
    let bad = redrive(&["triage", &q.dlq_url, "--rules", rules.to_str().unwrap()]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr
            .contains("rule 1 (\"x\"): its match names no condition"),
        "{}",
        bad.stderr
    );

    // WHEN a rule names the 503s and the schema errors as one group
    std::fs::write(
        &rules,
        r#"{"version":1,"rules":[{"name":"orders-incident","match":{"recorded":true,"source":"SOURCE"}}]}"#
            .replace("SOURCE", &q.source_name),
    )
    .unwrap();
    let ruled = redrive(&[
        "triage",
        &q.dlq_url,
        "--rules",
        rules.to_str().unwrap(),
        "--json",
    ])
    .json();
    // THEN two groups: the rule's (merging two computed ids) and the hand-sent one
    let groups = ruled["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{ruled:#}");
    assert_eq!(groups[0]["id"], "r-orders-incident");
    assert_eq!(groups[0]["count"], 17);
    assert_eq!(groups[0]["computedIds"].as_array().unwrap().len(), 2);
    // AND the old computed id still finds its messages
    let again = show_json(&outage, &q.dlq_url, &["--rules", rules.to_str().unwrap()]).json();
    assert_eq!(again["found"], 12);
}

#[tokio::test]
async fn triage_html_writes_the_groups_as_a_standalone_page_with_markup_shown_as_text() {
    // GIVEN the three causes, and one more message whose recorded error text is markup
    let sqs = moto().sqs().await;
    let q = dlq_with_three_causes(&sqs).await;
    let hostile = r#"<script>document.title='x'</script> "><img src=x onerror=alert(1)>"#;
    let at = "2026-11-21T11:30:00Z".to_string();
    let error = LastError::new(ErrorClass::Permanent, "BAD_INPUT", hostile, at);
    send_stamped(&sqs, &q, "{\"orderId\":\"h\"}", (90, 1), error).await;
    let dir = redrive_tests::ScratchDir::new("redrive-triage-html");
    let page = dir.join("orders-dlq.html");

    // WHEN triage writes the page, in the dark theme, beside its JSON
    let run = redrive(&[
        "triage",
        &q.dlq_url,
        "--json",
        "--html",
        page.to_str().unwrap(),
        "--html-theme",
        "dark",
    ]);

    // THEN the JSON is as without --html, and the page holds the same groups
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    let groups = out["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4, "{out:#}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains(r#"<div class="rd rd-dark rd-wide">"#));
    let queue_name = q.dlq_url.rsplit('/').next().unwrap();
    assert!(html.contains(&format!("<title>redrive triage: {queue_name}</title>")));
    assert!(
        html.contains("<b>22</b> visible"),
        "the depth when the pass began"
    );
    assert!(html.contains("grouped 22 of about 22 (complete)"));
    for g in groups {
        // (every message has a failure time: its recorded one, else when it was sent)
        assert_eq!(
            g["failureTimes"].as_array().unwrap().len() as u64,
            g["count"].as_u64().unwrap(),
            "{g}"
        );
        assert_eq!(g["failureTimesEvery"], 1);
        assert!(html.contains(g["id"].as_str().unwrap()), "{}", g["id"]);
        assert!(html.contains(&format!("<span class=\"rd-count\">{}</span>", g["count"])));
    }
    assert!(html.contains("POST &lt;url&gt; returned &lt;num&gt; Service Unavailable"));
    assert!(html.contains("Re-driver will retry"));
    assert!(html.contains("Fix, then replay with a canary"));
    // AND the markup of the error text shows as text; the page runs and fetches nothing
    assert!(html.contains("&lt;script&gt;document.title="), "{html}");
    assert!(html.contains("onerror"), "the text is there");
    let lower = html.to_lowercase();
    for absent in [
        "<script",
        "<img",
        "<cwdb-action",
        "src=\"",
        "href=\"",
        "url(",
        "@import",
    ] {
        assert!(!lower.contains(absent), "{absent} in the page");
    }
    assert!(html.contains("default-src 'none'"));
    // AND nothing was consumed
    assert_eq!(visible(&sqs, &q.dlq_url).await, 22);

    // WHEN the DLQ is empty, THEN the page says so plainly
    let empty = QueueSet::create(&sqs, false, 3).await;
    let empty_page = dir.join("empty.html");
    let run = redrive(&[
        "triage",
        &empty.dlq_url,
        "--html",
        empty_page.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let html = std::fs::read_to_string(&empty_page).unwrap();
    assert!(html.contains("is empty: no message to triage."), "{html}");

    // WHEN the page cannot be written, THEN a usage error naming it, before the queue is read
    let run = redrive(&[
        "triage",
        &q.dlq_url,
        "--html",
        dir.join("no-such-dir/page.html").to_str().unwrap(),
    ]);
    run.assert_stderr_has(2, "cannot write the page");

    // WHEN the queue cannot be read, THEN the AWS error, and no page (not an empty one)
    let missing = dir.join("missing.html");
    let run = redrive(&[
        "triage",
        &unique_name("no-such-dlq"),
        "--html",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(!missing.exists(), "no page is left behind");
}
