//! `redrive triage --causes-table`: messages SQS moved to the DLQ after `maxReceiveCount`
//! failed receives carry no cause; the consumer recorded one for each failed attempt in its
//! idempotency table, and triage groups them by it.

use std::time::{Duration, Instant};

use redrive_tests::{
    Downstream, LambdaWatch, QueueSet, create_idempotency_table, moto, queue_counts, receive_raw,
    send_raw, sqs_event, wait_for_depth,
};
use serde_json::Value;

use super::{by_code, redrive, show_json, uuid};

/// The shipped consumer, the `consumer` binary under `cargo lambda watch` as on AWS (its records
/// namespaced by its function name, `consumer`), fed the source queue's messages as the event
/// source mapping feeds it, until SQS moves every one of them to the DLQ: its downstream answers
/// 503 to every order and 400 to a body that names an amount as text.
async fn consume_until_sqs_moves_them(
    sqs: &aws_sdk_sqs::Client,
    q: &QueueSet,
    table: &str,
    moved: u64,
) {
    let downstream = Downstream::start().await;
    downstream.set_mode(redrive_tests::Mode::Status(503));
    downstream.reject_bodies_containing("\"amountCents\":\"", 400);
    let mut env = moto().env();
    for (k, v) in [
        ("IDEMPOTENCY_TABLE", table.to_string()),
        ("DOWNSTREAM_URL", downstream.url()),
        // Not read by the consumer (its event names the queue): its role is rendered for it.
        ("SOURCE_QUEUE_URL", q.source_url.clone()),
        ("RETRY_BASE_SECONDS", "1".to_string()),
        ("RETRY_JITTER", "none".to_string()),
    ] {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v));
    }
    let watch = LambdaWatch::start(&["consumer"], &env).await;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "SQS did not move the failing messages to the DLQ\n{}",
            watch.log()
        );
        // Received for 1 s: a permanent failure (no DLQ_URL: reported failed) comes back then,
        // a transient one after the consumer's 1 s backoff.
        let received = receive_raw(sqs, &q.source_url, 1).await;
        if received.is_empty() {
            let (visible, in_flight, delayed) = queue_counts(sqs, &q.source_url).await.unwrap();
            if visible + in_flight + delayed == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        let response = watch
            .invoke("consumer", &sqs_event(&received, &q.source_arn))
            .await
            .unwrap();
        // Every record failed: the event source mapping deletes none of them.
        let failed = response["batchItemFailures"].as_array().map(Vec::len);
        assert_eq!(failed, Some(received.len()), "{response}\n{}", watch.log());
    }
    // SQS moved every one of them after its second failed receive.
    wait_for_depth(sqs, &q.dlq_url, moved, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn messages_sqs_moved_to_the_dlq_are_grouped_by_the_causes_the_consumer_recorded() {
    // GIVEN a source queue that SQS moves to its DLQ after 2 receives, and the consumer's table
    let sqs = moto().sqs().await;
    let ddb = moto().dynamodb().await;
    let q = QueueSet::create(&sqs, false, 2).await;
    let table = create_idempotency_table(&ddb).await;
    // ... orders whose downstream is unavailable, and orders it refuses (an amount as text)
    for i in 0..6 {
        let body = format!(
            "{{\"orderId\":\"{}\",\"amountCents\":{}}}",
            uuid(300 + i),
            100 + i
        );
        send_raw(&sqs, &q.source_url, &body, &[]).await;
    }
    for i in 0..3 {
        let body = format!("{{\"orderId\":\"o-{i}\",\"amountCents\":\"12,{i}0\"}}");
        send_raw(&sqs, &q.source_url, &body, &[]).await;
    }

    // WHEN the consumer fails them until SQS moves them (the emulator does, by maxReceiveCount)
    consume_until_sqs_moves_them(&sqs, &q, &table, 9).await;
    // ... and messages are sent to the DLQ by hand
    for i in 0..4 {
        send_raw(&sqs, &q.dlq_url, &format!("{{\"note\":\"hand-{i}\"}}"), &[]).await;
    }

    // THEN without the consumer's records, the moved messages carry no cause: body shapes
    let run = redrive(&["triage", &q.dlq_url, "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(out["coverage"]["grouped"], 13, "{out}");
    let groups = out["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3, "{out:#}");
    for g in groups {
        assert_eq!(g["recorded"], false, "{g:#}");
        assert_eq!(g["causeOrigin"], Value::Null);
        assert!(
            g["title"]
                .as_str()
                .unwrap()
                .starts_with("no recorded cause")
        );
    }
    assert!(out["coverage"].get("records").is_none());

    // WHEN triage reads the consumer's records
    let causes = ["--causes-table", &table, "--causes-namespace", "consumer"];
    let run = redrive(&[&["triage", &q.dlq_url, "--json"][..], &causes].concat());

    // THEN exactly three groups: the two recorded causes, and the hand-sent messages
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(out["coverage"]["grouped"], 13, "{out}");
    assert_eq!(out["coverage"]["records"]["lookedUp"], 13);
    assert_eq!(out["coverage"]["records"]["found"], 9);
    let groups = out["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3, "{out:#}");
    let g = by_code(groups);
    let outage = &g["HTTP_503"];
    assert_eq!(outage["count"], 6);
    assert_eq!(
        (
            &outage["class"],
            &outage["recorded"],
            &outage["causeOrigin"]
        ),
        (&"transient".into(), &true.into(), &"record".into())
    );
    assert_eq!(
        outage["title"], "downstream answered <num>",
        "the shipped consumer's message, the status normalised"
    );
    // moto does not stamp DeadLetterQueueSourceArn on the messages it moves; LocalStack does,
    // as SQS does, and the re-driver will retry a transient cause from a known source
    match outage["source"].as_str() {
        Some(source) => {
            assert_eq!(source, q.source_name);
            assert_eq!(outage["action"], "redriver-will-retry");
        }
        None => assert_eq!(outage["action"], "replay-to-named-queue"),
    }
    assert!(outage["firstFailure"].is_string());
    let schema = &g["HTTP_400"];
    assert_eq!(schema["count"], 3);
    assert_eq!(
        (&schema["class"], &schema["causeOrigin"]),
        (&"permanent".into(), &"record".into())
    );
    assert_eq!(schema["title"], "downstream answered <num>");
    assert_eq!(schema["action"], "fix-then-replay-canary");
    let hand = &g["none"];
    assert_eq!(hand["count"], 4);
    assert_eq!(hand["causeOrigin"], Value::Null);
    assert!(
        hand["title"]
            .as_str()
            .unwrap()
            .starts_with("no recorded cause: body {note:string}"),
        "{hand:#}"
    );

    // AND the text output says where the causes were read
    let text = redrive(&[&["triage", &q.dlq_url][..], &causes].concat());
    text.assert_stdout_has(
        0,
        "13 message(s) carried no cause: 9 found in the consumer's records",
    );
    assert!(
        text.stdout
            .contains("transient HTTP_503 (recorded by the consumer, read from --causes-table)"),
        "{}",
        text.stdout
    );

    // AND a namespace other than the consumer's finds no record, and says so
    let other = redrive(&[
        "triage",
        &q.dlq_url,
        "--causes-table",
        &table,
        "--causes-namespace",
        "another-consumer",
    ]);
    assert_eq!(other.code, 0, "{}", other.stderr);
    assert!(
        other
            .stdout
            .contains("13 message(s) carried no cause: 0 found in the consumer's records"),
        "{}",
        other.stdout
    );
    assert!(
        other.stdout.contains("no cause record matched"),
        "{}",
        other.stdout
    );
    assert!(!other.stdout.contains("HTTP_503"), "{}", other.stdout);

    // AND `triage show` of a recorded cause's group finds its messages with the same table
    let id = outage["id"].as_str().unwrap();
    let show = show_json(id, &q.dlq_url, &causes);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert_eq!(show.json()["found"], 6);

    // AND the archiver's sweep (the shipped Lambda), given the consumer's table, records
    // exactly the same three groups in the DLQ's triage book: the live index
    let ids: Vec<&str> = groups.iter().map(|g| g["id"].as_str().unwrap()).collect();
    let (book, books, response) = sweep_into_book(&q, &table).await;
    assert_eq!(response["queues"][1]["groups"], 3, "{response}");
    let mut indexed: Vec<&str> = book.groups.keys().map(String::as_str).collect();
    let mut listed = ids.clone();
    indexed.sort_unstable();
    listed.sort_unstable();
    assert_eq!(indexed, listed);
    assert_eq!(book.groups[id].last_count, 6);
    assert_eq!(book.groups[schema["id"].as_str().unwrap()].last_count, 3);

    // AND `triage --index` reads those groups back from the book, receiving no message
    let before = queue_counts(&sqs, &q.dlq_url).await.unwrap();
    let run = redrive(&["triage", &q.dlq_url, "--table", &books, "--index", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    let mut read: Vec<&str> = out["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap())
        .collect();
    read.sort_unstable();
    assert_eq!(read, listed);
    assert_eq!(out["groups"][0]["id"], id, "the largest first: {out:#}");
    assert_eq!(out["groups"][0]["lastCount"], 6);
    assert!(out["indexedAt"].is_string() && out["ageSeconds"].is_number());
    let text = redrive(&["triage", &q.dlq_url, "--table", &books, "--index"]);
    text.assert_stdout_has(0, "3 group(s) not resolved, indexed at");
    assert_eq!(queue_counts(&sqs, &q.dlq_url).await.unwrap(), before);
    // ... and a queue with no book yet says so, with exit code 3
    let none = redrive(&["triage", &q.source_url, "--table", &books, "--index"]);
    assert_eq!(none.code, 3, "{}", none.stderr);
    assert!(none.stderr.contains("no index of"), "{}", none.stderr);
}

/// The archiver Lambda (`cargo lambda watch`) run once over `q`'s DLQ, archiving nothing, with
/// a books' table and the consumer's records (`CAUSES_TABLE`, namespace `consumer`): the DLQ's
/// book as the sweep left it, the books' table, and the run's answer.
async fn sweep_into_book(
    q: &QueueSet,
    causes_table: &str,
) -> (redrive_shared::triage::state::Book, String, Value) {
    let sdk = moto().sdk_config().await;
    let books = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
    let s3 = redrive_engine::s3::client(&sdk);
    let bucket = redrive_tests::unique_name("archive").to_ascii_lowercase();
    s3.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("CreateBucket");
    let mut env = moto().env();
    env.extend(
        [
            ("ARCHIVE_BUCKET", bucket.as_str()),
            ("POISON_QUEUE_URL", &q.poison_url),
            ("DLQ_URL", &q.dlq_url),
            ("ARCHIVE_AFTER_SECONDS", "3600"),
            ("TRIAGE_TABLE", &books),
            ("CAUSES_TABLE", causes_table),
            ("CAUSES_NAMESPACE", "consumer"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let watch = LambdaWatch::start(&["archiver"], &env).await;
    let response = watch
        .invoke(
            "archiver",
            &redrive_tests::fixture("eventbridge-scheduled.json"),
        )
        .await
        .expect("the archiver runs");
    let store = redrive_engine::triage_store::DynamoDbTriageStore::new(&sdk, &books);
    let book = store
        .read(&q.dlq_url)
        .await
        .expect("the book reads")
        .unwrap_or_else(|| panic!("the sweep wrote no book: {response}\n{}", watch.log()));
    (book, books, response)
}
