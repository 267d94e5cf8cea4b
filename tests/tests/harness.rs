//! The harness tests itself: against the real moto server, a real downstream socket and a
//! real `cargo lambda watch`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use redrive_tests::{
    Downstream, LambdaWatch, Mode, QueueSet, WatchOptions, attr_binary, attr_custom, attr_number,
    attr_string, create_idempotency_table, drain_all, localstack, moto, moto_fast_clock,
    queue_attributes, queue_depth, receive_raw, send_fifo, send_raw,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// moto + SQS

/// IAM is enforced: a role's policy from infra/templates/ allows its own queues and nothing
/// else (AccessDenied, as on AWS); the harness's own calls are unrestricted.
#[tokio::test]
async fn moto_refuses_what_a_role_does_not_allow() {
    let admin = moto().sqs().await;
    let ours = QueueSet::create(&admin, false, 3).await;
    let other = QueueSet::create(&admin, false, 3).await;
    let mut env = moto().env();
    env.extend(ours.redriver_env());
    let resources = redrive_tests::iam::resources_from_env(&env);
    let role = redrive_tests::iam::role_of_binary("redriver").unwrap();
    let sqs = aws_sdk_sqs::Client::new(&moto().sdk_config_as(role, &resources).await);

    send_raw(&sqs, &ours.source_url, "allowed", &[]).await;
    let refused = sqs
        .send_message()
        .queue_url(&other.source_url)
        .message_body("refused")
        .send()
        .await
        .unwrap_err();
    let code = refused
        .into_service_error()
        .meta()
        .code()
        .map(str::to_string);
    assert!(code.unwrap_or_default().starts_with("AccessDenied"));
    // Receiving from the source queue is no part of the re-driver's role either.
    assert!(
        sqs.receive_message()
            .queue_url(&ours.source_url)
            .send()
            .await
            .is_err()
    );
    assert_eq!(queue_depth(&admin, &ours.source_url).await, 1);
    assert_eq!(queue_depth(&admin, &other.source_url).await, 0);
    // The function's environment carries the role's key, not the harness's.
    let function_env = redrive_tests::iam::env_for_binary(&env, "redriver");
    let key = |env: &[(String, String)]| {
        env.iter()
            .find(|(k, _)| k == "AWS_ACCESS_KEY_ID")
            .map(|(_, v)| v.clone())
    };
    assert_ne!(key(&function_env), key(&env));
}

#[tokio::test]
async fn a_message_received_past_max_receive_count_lands_in_the_dlq_intact() {
    // GIVEN a standard queue set with maxReceiveCount 2 and a message with three attribute types
    let sqs = moto().sqs().await;
    let queues = QueueSet::create(&sqs, false, 2).await;
    let binary = [0u8, 159, 146, 150, 255];
    let sent_id = send_raw(
        &sqs,
        &queues.source_url,
        "not json \u{1F4E6}",
        &[
            ("tenant", attr_string("acme")),
            ("amount", attr_number("42.50")),
            ("blob", attr_binary(&binary)),
            ("count", attr_custom("Number.int", "7")),
        ],
    )
    .await;

    // WHEN it is received three times without being deleted
    let mut returned = Vec::new();
    for _ in 0..3 {
        returned.push(receive_raw(&sqs, &queues.source_url, 0).await.len());
    }

    // THEN the first two receives got it, the third found it moved to the DLQ
    assert_eq!(returned, vec![1, 1, 0]);
    assert_eq!(queue_depth(&sqs, &queues.source_url).await, 0);
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 1);
    let dlq = drain_all(&sqs, &queues.dlq_url).await;
    assert_eq!(dlq.len(), 1);
    let message = &dlq[0];
    assert_eq!(message.message_id(), Some(sent_id.as_str()));
    assert_eq!(message.body(), Some("not json \u{1F4E6}"));
    let attributes = message.message_attributes().expect("attributes came back");
    assert_eq!(attributes.len(), 4);
    assert_eq!(attributes["tenant"].data_type(), "String");
    assert_eq!(attributes["tenant"].string_value(), Some("acme"));
    assert_eq!(attributes["amount"].data_type(), "Number");
    assert_eq!(attributes["amount"].string_value(), Some("42.50"));
    assert_eq!(attributes["blob"].data_type(), "Binary");
    assert_eq!(
        attributes["blob"].binary_value().map(|b| b.as_ref()),
        Some(&binary[..])
    );
    assert_eq!(attributes["count"].data_type(), "Number.int");
    assert_eq!(attributes["count"].string_value(), Some("7"));
    let system = message.attributes().expect("system attributes came back");
    assert!(system.contains_key(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp));
    // drained means deleted
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 0);
}

#[tokio::test]
async fn the_fast_clock_moto_keeps_delays_visibility_and_the_redrive_policy() {
    // GIVEN the benchmarks' moto (SQS reads the clock through time.time()), a queue set with
    // maxReceiveCount 2, and one message sent with a 1 s delay
    let fast = moto_fast_clock();
    assert_ne!(fast.port(), moto().port(), "a server of its own");
    let sqs = fast.sqs().await;
    let queues = QueueSet::create(&sqs, false, 2).await;
    sqs.send_message()
        .queue_url(&queues.source_url)
        .message_body("later")
        .delay_seconds(1)
        .send()
        .await
        .unwrap();

    // THEN the delay holds it back, a receive hides it for its visibility timeout, and the
    // third receive moves it to the DLQ: every clock reading still behaves as in stock moto
    assert_eq!(receive_raw(&sqs, &queues.source_url, 1).await.len(), 0);
    let delayed = queue_attributes(&sqs, &queues.source_url).await;
    assert_eq!(
        delayed[&QueueAttributeName::ApproximateNumberOfMessagesDelayed],
        "1"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(receive_raw(&sqs, &queues.source_url, 1).await.len(), 1);
    assert_eq!(receive_raw(&sqs, &queues.source_url, 1).await.len(), 0);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(receive_raw(&sqs, &queues.source_url, 1).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(receive_raw(&sqs, &queues.source_url, 1).await.len(), 0);
    assert_eq!(queue_depth(&sqs, &queues.dlq_url).await, 1);
}

#[tokio::test]
async fn queue_sets_have_the_contract_shape() {
    let sqs = moto().sqs().await;
    for fifo in [false, true] {
        let queues = QueueSet::create(&sqs, fifo, 3).await;
        for name in [&queues.source_name, &queues.dlq_name, &queues.poison_name] {
            assert_eq!(name.ends_with(".fifo"), fifo, "{name}");
            assert!(name.len() <= 80, "{name}");
        }
        assert!(queues.dlq_url.ends_with(&queues.dlq_name));

        let source = queue_attributes(&sqs, &queues.source_url).await;
        let policy: Value =
            serde_json::from_str(&source[&QueueAttributeName::RedrivePolicy]).unwrap();
        assert_eq!(policy["deadLetterTargetArn"], json!(queues.dlq_arn));
        assert_eq!(policy["maxReceiveCount"].to_string().trim_matches('"'), "3");

        for terminal in [&queues.dlq_url, &queues.poison_url] {
            let attributes = queue_attributes(&sqs, terminal).await;
            assert!(
                !attributes.contains_key(&QueueAttributeName::RedrivePolicy),
                "{terminal} must be terminal"
            );
            assert_eq!(
                attributes[&QueueAttributeName::MessageRetentionPeriod],
                "1209600"
            );
        }
        for url in [&queues.source_url, &queues.dlq_url, &queues.poison_url] {
            let attributes = queue_attributes(&sqs, url).await;
            let is_fifo = attributes
                .get(&QueueAttributeName::FifoQueue)
                .map(String::as_str);
            let content_dedup = attributes
                .get(&QueueAttributeName::ContentBasedDeduplication)
                .map(String::as_str);
            if fifo {
                assert_eq!(is_fifo, Some("true"), "{url}");
                assert_eq!(content_dedup, Some("false"), "{url}");
            } else {
                assert_ne!(is_fifo, Some("true"), "{url}");
            }
        }
        assert_eq!(
            queues.redriver_env(),
            vec![
                ("DLQ_URL".to_string(), queues.dlq_url.clone()),
                ("SOURCE_QUEUE_URL".to_string(), queues.source_url.clone()),
                ("POISON_QUEUE_URL".to_string(), queues.poison_url.clone()),
            ]
        );
    }
}

#[tokio::test]
async fn fifo_helpers_keep_group_order_and_depth_counts_delayed_and_in_flight() {
    let sqs = moto().sqs().await;
    let fifo = QueueSet::create(&sqs, true, 5).await;
    for (i, body) in ["first", "second", "third"].iter().enumerate() {
        send_fifo(&sqs, &fifo.source_url, body, "g1", &format!("d{i}"), &[]).await;
    }
    // send_raw on a .fifo url picks a group and a deduplication id itself
    send_raw(&sqs, &fifo.source_url, "fourth", &[]).await;
    let bodies: Vec<String> = drain_all(&sqs, &fifo.source_url)
        .await
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect();
    assert_eq!(bodies.len(), 4);
    let g1: Vec<&String> = bodies.iter().filter(|b| *b != "fourth").collect();
    assert_eq!(g1, ["first", "second", "third"]);

    // depth = visible + in flight + delayed
    let standard = QueueSet::create(&sqs, false, 5).await;
    send_raw(&sqs, &standard.source_url, "visible", &[]).await;
    send_raw(&sqs, &standard.source_url, "in flight", &[]).await;
    sqs.send_message()
        .queue_url(&standard.source_url)
        .message_body("delayed")
        .delay_seconds(600)
        .send()
        .await
        .unwrap();
    assert_eq!(receive_raw(&sqs, &standard.source_url, 600).await.len(), 2);
    send_raw(&sqs, &standard.source_url, "visible again", &[]).await;
    assert_eq!(queue_depth(&sqs, &standard.source_url).await, 4);
}

#[tokio::test]
async fn the_idempotency_table_has_the_contract_key_and_ttl() {
    let ddb = moto().dynamodb().await;
    let name = create_idempotency_table(&ddb).await;
    let table = ddb
        .describe_table()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let key = table.key_schema();
    assert_eq!(key.len(), 1);
    assert_eq!(key[0].attribute_name(), "id");
    assert_eq!(key[0].key_type().as_str(), "HASH");
    assert_eq!(
        table.attribute_definitions()[0].attribute_type().as_str(),
        "S"
    );
    assert_eq!(
        table
            .billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map(|m| m.as_str()),
        Some("PAY_PER_REQUEST")
    );
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    assert_eq!(ttl.attribute_name(), Some("expiration"));
    assert_eq!(
        ttl.time_to_live_status().map(|s| s.as_str()),
        Some("ENABLED")
    );
}

#[tokio::test]
async fn clients_and_child_environment_point_at_the_same_moto() {
    let m = moto();
    let env = m.env();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("AWS_ENDPOINT_URL"), Some(m.endpoint()));
    assert_eq!(get("AWS_REGION").as_deref(), Some("us-east-1"));
    assert_eq!(get("AWS_DEFAULT_REGION").as_deref(), Some("us-east-1"));
    assert_eq!(get("AWS_ACCESS_KEY_ID").as_deref(), Some("testing"));
    assert_eq!(get("AWS_SECRET_ACCESS_KEY").as_deref(), Some("testing"));
    // one server per process
    assert!(std::ptr::eq(m, moto()));
    assert!(m.endpoint().starts_with("http://127.0.0.1:"));

    // the CloudWatch client (pinned to a version moto answers) works against it
    let cw = m.cloudwatch().await;
    let alarm = redrive_tests::unique_name("alarm");
    cw.put_metric_alarm()
        .alarm_name(&alarm)
        .namespace("AWS/SQS")
        .metric_name("ApproximateNumberOfMessagesVisible")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Maximum)
        .period(60)
        .evaluation_periods(1)
        .threshold(0.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    let found = cw
        .describe_alarms()
        .alarm_names(&alarm)
        .send()
        .await
        .unwrap();
    assert_eq!(found.metric_alarms().len(), 1);
}

// LocalStack: the second, stricter SQS emulator

/// Whether a socket listens on 127.0.0.1:`port` and on no other IPv4 address (`/proc/net/tcp`:
/// local address in little-endian hex, state 0A = LISTEN).
fn listens_on_loopback_only(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let listeners: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (address, local_port) = fields.get(1)?.split_once(':')?;
            (fields.get(3) == Some(&"0A") && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| address.to_string())
        })
        .collect();
    !listeners.is_empty() && listeners.iter().all(|a| a == "0100007F")
}

#[tokio::test]
async fn localstack_listens_on_loopback_only_and_writes_inside_target() {
    let started = Instant::now();
    let ls = localstack();
    eprintln!(
        "LocalStack ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(std::ptr::eq(ls, localstack()), "one LocalStack per process");
    assert!(ls.endpoint().starts_with("http://127.0.0.1:"));
    assert!(
        listens_on_loopback_only(ls.port()),
        "LocalStack must listen on 127.0.0.1 only (port {})",
        ls.port()
    );
    let target = redrive_tests::workspace_root().join("target");
    assert!(
        ls.log_path().starts_with(&target),
        "{}",
        ls.log_path().display()
    );
    assert!(ls.log_path().exists());
    let env = ls.service_endpoints();
    for name in [
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_CLOUDWATCH",
        "AWS_ENDPOINT_URL_STS",
    ] {
        assert!(env.contains(&(name.to_string(), ls.endpoint())), "{env:?}");
    }
}

/// What LocalStack is here for: where moto is kind, it does what SQS does.
#[tokio::test]
async fn localstack_keeps_fifo_dedup_ids_counts_attributes_and_moves_messages() {
    let sqs = localstack().sqs().await;

    // A deduplication id is remembered for five minutes, deleted message or not: the second
    // send is acknowledged and dropped.
    let fifo = QueueSet::create(&sqs, true, 3).await;
    send_fifo(&sqs, &fifo.source_url, "one", "g", "same-id", &[]).await;
    let got = drain_all(&sqs, &fifo.source_url).await;
    assert_eq!(got.len(), 1);
    send_fifo(&sqs, &fifo.source_url, "two", "g", "same-id", &[]).await;
    assert!(receive_raw(&sqs, &fifo.source_url, 0).await.is_empty());

    // MaximumMessageSize counts the attributes: a body that fits alone is refused with them.
    let small = sqs
        .create_queue()
        .queue_name(redrive_tests::unique_name("small"))
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let body = "b".repeat(1000);
    let refused = sqs
        .send_message()
        .queue_url(&small)
        .message_body(&body)
        .message_attributes("pad", attr_string(&"p".repeat(100)))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "LocalStack took {} bytes and an attribute on a 1024-byte queue",
        body.len()
    );

    // A message moved by the RedrivePolicy names its source queue, and the DLQ can be moved
    // back with StartMessageMoveTask.
    let set = QueueSet::create(&sqs, false, 1).await;
    send_raw(&sqs, &set.source_url, "moved", &[]).await;
    assert_eq!(receive_raw(&sqs, &set.source_url, 0).await.len(), 1);
    assert!(receive_raw(&sqs, &set.source_url, 0).await.is_empty());
    let moved = receive_raw(&sqs, &set.dlq_url, 0).await;
    assert_eq!(moved.len(), 1);
    let system = moved[0].attributes().cloned().unwrap_or_default();
    assert_eq!(
        system.get(&aws_sdk_sqs::types::MessageSystemAttributeName::DeadLetterQueueSourceArn),
        Some(&set.source_arn)
    );
    let task = sqs
        .start_message_move_task()
        .source_arn(&set.dlq_arn)
        .send()
        .await
        .unwrap();
    assert!(task.task_handle().is_some());
}

/// `route_services`: the SQS client of a config built for moto reaches LocalStack, its
/// DynamoDB client still reaches moto.
#[tokio::test]
async fn routed_configs_send_sqs_to_localstack_and_dynamodb_to_moto() {
    let ls = localstack();
    let routed = ls.route_services(moto().sdk_config().await);
    let sqs = aws_sdk_sqs::Client::new(&routed);
    let name = redrive_tests::unique_name("routed");
    sqs.create_queue().queue_name(&name).send().await.unwrap();
    let on = |client: aws_sdk_sqs::Client| {
        let name = name.clone();
        async move {
            let listed = client
                .list_queues()
                .queue_name_prefix(&name)
                .send()
                .await
                .unwrap();
            listed.queue_urls().len()
        }
    };
    assert_eq!(on(ls.sqs().await).await, 1, "the queue is on LocalStack");
    assert_eq!(on(moto().sqs().await).await, 0, "and not on moto");
    let table = create_idempotency_table(&moto().dynamodb().await).await;
    let tables = aws_sdk_dynamodb::Client::new(&routed)
        .describe_table()
        .table_name(&table)
        .send()
        .await;
    assert!(tables.is_ok(), "DynamoDB stays on moto: {tables:?}");
}

// downstream

/// Sends raw HTTP/1.1 POSTs on one connection and returns (status, headers, body) for each.
async fn post_all(
    url_addr: std::net::SocketAddr,
    requests: &[(Option<&str>, &str)],
    close_last: bool,
) -> Vec<(u16, String, String)> {
    let mut stream = TcpStream::connect(url_addr).await.unwrap();
    let mut answers = Vec::new();
    for (i, (key, body)) in requests.iter().enumerate() {
        let mut head = format!(
            "POST /deliver HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(key) = key {
            head.push_str(&format!("Idempotency-Key: {key}\r\n"));
        }
        if close_last && i + 1 == requests.len() {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        answers.push(read_answer(&mut stream).await);
    }
    if close_last {
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .expect("the server closes after Connection: close")
            .unwrap();
        assert_eq!(n, 0, "nothing after the last answer");
    }
    answers
}

async fn read_answer(stream: &mut TcpStream) -> (u16, String, String) {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.unwrap();
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw).unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    (status, head, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn downstream_answers_by_mode_and_counts_per_key() {
    let downstream = Downstream::start().await;
    assert!(downstream.url().starts_with("http://127.0.0.1:"));
    let addr = downstream.addr();

    // Healthy: 200, counted as a delivery; keep-alive carries several requests
    let answers = post_all(
        addr,
        &[
            (Some("k1"), "{\"order\":1}"),
            (Some("k2"), "{}"),
            (Some("k1"), "{}"),
        ],
        false,
    )
    .await;
    assert!(answers.iter().all(|(s, _, _)| *s == 200));
    assert_eq!(downstream.deliveries("k1"), 2);
    assert_eq!(downstream.deliveries("k2"), 1);
    assert_eq!(downstream.total(), 3);

    // Status(503): answered, attempted, not delivered
    downstream.set_mode(Mode::Status(503));
    assert_eq!(downstream.mode(), Mode::Status(503));
    let answers = post_all(addr, &[(Some("k3"), "{}")], true).await;
    assert_eq!(answers[0].0, 503);
    assert_eq!(downstream.deliveries("k3"), 0);
    assert_eq!(downstream.attempts("k3"), 1);

    // 429 with Retry-After
    downstream.set_mode(Mode::TooManyRequests {
        retry_after_secs: 7,
    });
    let answers = post_all(addr, &[(Some("k3"), "{}")], true).await;
    assert_eq!(answers[0].0, 429);
    assert!(
        // Header names are case-insensitive (hyper writes them in lower case).
        answers[0]
            .1
            .to_ascii_lowercase()
            .contains("retry-after: 7\r\n"),
        "{}",
        answers[0].1
    );

    // Slow: waits, then 200
    downstream.set_mode(Mode::Slow(Duration::from_millis(400)));
    let started = Instant::now();
    let answers = post_all(addr, &[(Some("k3"), "{}")], true).await;
    assert_eq!(answers[0].0, 200);
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(downstream.deliveries("k3"), 1);
    assert_eq!(downstream.attempts("k3"), 3);

    // A body rule beats the mode; a request without key counts in the totals only
    downstream.set_mode(Mode::Healthy);
    downstream.reject_bodies_containing("MALFORMED", 400);
    let answers = post_all(
        addr,
        &[(Some("bad"), "{\"order\":\"MALFORMED\"}"), (None, "{}")],
        true,
    )
    .await;
    assert_eq!(answers[0].0, 400);
    assert_eq!(answers[1].0, 200);
    assert_eq!(downstream.deliveries("bad"), 0);
    assert_eq!(downstream.attempts("bad"), 1);
    assert_eq!(downstream.keys(), vec!["k1", "k2", "k3"]);
    assert_eq!(downstream.total(), 5);
    assert_eq!(downstream.total_attempts(), 8);

    let log = downstream.requests();
    assert_eq!(log[0].body_text(), "{\"order\":1}");
    assert_eq!(log[0].header("Idempotency-Key"), Some("k1"));
    assert_eq!(log[0].method, "POST");
    assert_eq!(log[0].path, "/deliver");
}

#[tokio::test]
async fn downstream_serves_concurrent_connections() {
    let downstream = Downstream::start().await;
    downstream.set_mode(Mode::Slow(Duration::from_millis(500)));
    let addr = downstream.addr();
    let started = Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(async move {
                let key = format!("c{i}");
                post_all(addr, &[(Some(&key), "{}")], true).await[0].0
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), 200);
    }
    // in parallel, not one after the other
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(downstream.total(), 8);
    assert_eq!(downstream.keys().len(), 8);
}

// cargo lambda watch

#[tokio::test]
async fn lambda_watch_invokes_a_function_with_the_given_environment() {
    let mut env = moto().env();
    env.push(("GUARD_ALARM_NAMES".into(), "a,b=c".into()));
    let watch = LambdaWatch::start(&["echo_lambda"], &env).await;

    let event = json!({
        "env": ["AWS_ENDPOINT_URL", "AWS_REGION", "GUARD_ALARM_NAMES", "AWS_LAMBDA_FUNCTION_NAME"],
        "order": {"id": 1}
    });
    let answer = watch.invoke("echo_lambda", &event).await.unwrap();
    assert_eq!(answer["echo"], event);
    assert_eq!(answer["env"]["AWS_ENDPOINT_URL"], json!(moto().endpoint()));
    assert_eq!(answer["env"]["AWS_REGION"], json!("us-east-1"));
    // a value with commas arrives whole (no `--env-var` splitting)
    assert_eq!(answer["env"]["GUARD_ALARM_NAMES"], json!("a,b=c"));
    assert_eq!(
        answer["env"]["AWS_LAMBDA_FUNCTION_NAME"],
        json!("echo_lambda")
    );
    // cargo-lambda's fixed deadline: 600000 ms after the epoch. If this fails, cargo-lambda
    // started sending real deadlines: update the note in lambda_watch.rs.
    assert_eq!(answer["deadlineMs"], json!(600000));
    let function_pid = answer["pid"].as_u64().unwrap();

    // a function error comes back as the runtime's error document
    let err = watch
        .invoke("echo_lambda", &json!({"fail": "boom"}))
        .await
        .unwrap_err();
    let document: Value = serde_json::from_str(&err).unwrap();
    assert_eq!(document["errorMessage"], json!("boom"));
    // a panic too, and the instance lives on
    let err = watch
        .invoke("echo_lambda", &json!({"panic": "kaboom"}))
        .await
        .unwrap_err();
    assert!(err.contains("Lambda panicked: kaboom"), "{err}");
    let again = watch.invoke("echo_lambda", &json!({})).await.unwrap();
    assert_eq!(again["pid"].as_u64(), Some(function_pid));

    // an unknown function is a clear error, not a hang
    let err = watch
        .invoke("no_such_function", &json!({}))
        .await
        .unwrap_err();
    assert!(
        err.starts_with("invoke no_such_function: HTTP 404"),
        "{err}"
    );
    assert!(watch.log().contains("echo_lambda"));

    // dropping the runner stops cargo lambda watch and the function it started
    drop(watch);
    assert!(
        wait_until_dead(function_pid as u32, Duration::from_secs(10)),
        "the function process {function_pid} survived the runner"
    );
}

/// cargo-lambda's emulator hands every invocation a request id and an X-Ray trace id
/// (`Lambda-Runtime-Trace-Id`, a fresh `Root=1-…` per invoke whatever the caller sends), and
/// each line a function logs during it carries exactly those.
#[tokio::test]
async fn each_invocation_gets_a_request_id_and_a_trace_id_that_its_log_lines_carry() {
    // GIVEN a function that logs as the project's Lambdas do, under cargo lambda watch
    let watch = LambdaWatch::start(&["echo_lambda"], &moto().env()).await;

    // WHEN it is invoked twice
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (answer, lines) = watch.invoke_logged("echo_lambda", &json!({})).await;
        let answer = answer.unwrap();
        // THEN the runtime got both ids from the emulator
        let request = answer["requestId"].as_str().unwrap().to_string();
        let trace = answer["xrayTraceId"].as_str().unwrap_or_else(|| {
            panic!("cargo-lambda sent no Lambda-Runtime-Trace-Id header: {answer}")
        });
        assert!(trace.starts_with("Root=1-"), "{trace}");
        // AND the invocation's log lines carry exactly those, at the top level
        let ids = redrive_tests::invocation_ids(&lines).unwrap();
        assert_eq!(ids, (request.clone(), trace.to_string()), "{lines:?}");
        seen.push(ids);
    }
    // AND each invocation has its own
    assert_ne!(seen[0].0, seen[1].0);
    assert_ne!(seen[0].1, seen[1].1);
}

#[tokio::test]
async fn lambda_watch_runs_concurrent_invokes_on_separate_instances() {
    let watch = LambdaWatch::start_with(WatchOptions {
        bins: vec!["echo_lambda".into()],
        env: moto().env(),
        concurrency: 2,
        ..WatchOptions::default()
    })
    .await;
    // Two invokes in flight need two instances: the second is started while the first
    // one is busy (slow enough that starting the second, a `cargo run`, fits in it).
    let busy = json!({"sleepMs": 5000});
    let (a, b) = tokio::join!(
        watch.invoke("echo_lambda", &busy),
        watch.invoke("echo_lambda", &busy)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a["pid"], b["pid"]);
    // Now both are warm: two slow invokes run side by side, not one after the other.
    let slow = json!({"sleepMs": 1500});
    let started = Instant::now();
    let (a, b) = tokio::join!(
        watch.invoke("echo_lambda", &slow),
        watch.invoke("echo_lambda", &slow)
    );
    assert!(a.is_ok() && b.is_ok());
    assert!(
        started.elapsed() < Duration::from_millis(2900),
        "ran one after the other: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn lambda_watch_reports_a_function_that_dies_in_init_instead_of_hanging() {
    let mut env = moto().env();
    env.push(("ECHO_FAIL_INIT".into(), "DLQ_URL is missing".into()));
    let watch = LambdaWatch::start(&["echo_lambda"], &env).await;
    let started = Instant::now();
    let err = watch.invoke("echo_lambda", &json!({})).await.unwrap_err();
    assert!(err.contains("the function process ended"), "{err}");
    // the log tail carries the function's own message
    assert!(err.contains("DLQ_URL is missing"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

// nothing outlives the test process

fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}

fn wait_until_dead(pid: u32, timeout: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Runs one ignored helper test of this binary in a child process, reads `KEY=VALUE` words
/// from its first line that has them, then kills the child with SIGKILL.
fn run_helper_and_kill(helper: &str) -> Vec<(String, String)> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            helper,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REDRIVE_HELPER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // libtest prints "test <name> ... " before the test's own output, on the same line.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("HELPER ") {
                let pairs: Vec<(String, String)> = rest
                    .split_whitespace()
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let _ = tx.send(pairs);
                return;
            }
        }
    });
    let report = rx.recv_timeout(Duration::from_secs(900)).ok();
    let status = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = child.wait();
    report.unwrap_or_else(|| panic!("helper {helper} reported nothing"))
}

fn value(report: &[(String, String)], key: &str) -> u32 {
    report
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("{key} missing from {report:?}"))
        .1
        .parse()
        .unwrap()
}

#[test]
fn moto_dies_with_its_test_process_even_on_sigkill() {
    let report = run_helper_and_kill("helper_holds_moto");
    let pid = value(&report, "moto_pid");
    let port = value(&report, "port");
    assert!(port > 0);
    // (the port itself is no evidence: another process may bind it as soon as it is free)
    assert!(
        wait_until_dead(pid, Duration::from_secs(15)),
        "moto launcher {pid} outlived its SIGKILLed test process"
    );
}

#[test]
fn lambda_watch_dies_with_its_test_process_even_on_sigkill() {
    let report = run_helper_and_kill("helper_holds_lambda_watch");
    let function_pid = value(&report, "function_pid");
    let guard_pid = value(&report, "guard_pid");
    // The guard exits only after cargo lambda watch has ended.
    assert!(
        wait_until_dead(guard_pid, Duration::from_secs(30)),
        "cargo lambda watch (guard {guard_pid}) outlived its SIGKILLed test process"
    );
    assert!(
        wait_until_dead(function_pid, Duration::from_secs(30)),
        "function {function_pid} outlived its SIGKILLed test process"
    );
    // the killed helper could not remove its log itself
    if let Some((_, log)) = report.iter().find(|(k, _)| k == "log") {
        let _ = std::fs::remove_file(log);
    }
}

#[test]
fn localstack_dies_with_its_test_process_even_on_sigkill() {
    let report = run_helper_and_kill("helper_holds_localstack");
    for key in ["launcher_pid", "localstack_pid"] {
        let pid = value(&report, key);
        assert!(
            wait_until_dead(pid, Duration::from_secs(30)),
            "{key} {pid} outlived its SIGKILLed test process"
        );
    }
}

#[test]
#[ignore = "helper: run by localstack_dies_with_its_test_process_even_on_sigkill"]
fn helper_holds_localstack() {
    assert_eq!(std::env::var("REDRIVE_HELPER").as_deref(), Ok("1"));
    let ls = localstack();
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", ls.pid()))
        .unwrap_or_default();
    let child = children.split_whitespace().next().unwrap_or("0");
    println!("HELPER launcher_pid={} localstack_pid={child}", ls.pid());
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
#[ignore = "helper: run by moto_dies_with_its_test_process_even_on_sigkill"]
fn helper_holds_moto() {
    assert_eq!(std::env::var("REDRIVE_HELPER").as_deref(), Ok("1"));
    let m = moto();
    println!("HELPER moto_pid={} port={}", m.pid(), m.port());
    std::thread::sleep(Duration::from_secs(600));
}

#[tokio::test]
#[ignore = "helper: run by lambda_watch_dies_with_its_test_process_even_on_sigkill"]
async fn helper_holds_lambda_watch() {
    assert_eq!(std::env::var("REDRIVE_HELPER").as_deref(), Ok("1"));
    let watch = LambdaWatch::start(&["echo_lambda"], &[]).await;
    let answer = watch.invoke("echo_lambda", &json!({})).await.unwrap();
    println!(
        "HELPER function_pid={} guard_pid={} log={}",
        answer["pid"],
        watch.pid(),
        watch.log_path().display()
    );
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// Runs the ignored helper test `helper` in a child process of this test binary with
/// `python_variable` naming a Python that does not exist; asserts that it failed and returns
/// what it printed.
fn failing_helper_output(helper: &str, python_variable: &str) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", helper, "--ignored", "--nocapture"])
        .env("REDRIVE_HELPER", "1")
        .env(python_variable, "/nonexistent/python")
        .output()
        .unwrap();
    assert!(!output.status.success());
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_missing_python_fails_with_a_pointer_to_make_setup() {
    // GIVEN REDRIVE_PYTHON naming no Python; WHEN a test starts moto
    let text = failing_helper_output("helper_starts_moto", "REDRIVE_PYTHON");
    // THEN it fails naming the Python and `make setup`
    assert!(text.contains("/nonexistent/python"), "{text}");
    assert!(text.contains("run `make setup`"), "{text}");
}

#[test]
#[ignore = "helper: run by a_missing_python_fails_with_a_pointer_to_make_setup"]
fn helper_starts_moto() {
    assert_eq!(std::env::var("REDRIVE_HELPER").as_deref(), Ok("1"));
    moto();
}

#[test]
fn a_missing_localstack_python_fails_with_a_pointer_to_make_setup() {
    // GIVEN REDRIVE_LOCALSTACK_PYTHON naming no Python; WHEN a test starts LocalStack
    let text = failing_helper_output("helper_starts_localstack", "REDRIVE_LOCALSTACK_PYTHON");
    // THEN it fails naming the Python, `make setup` and the version it needs
    assert!(text.contains("/nonexistent/python"), "{text}");
    assert!(text.contains("run `make setup`"), "{text}");
    assert!(text.contains("Python >= 3.13"), "{text}");
}

#[test]
#[ignore = "helper: run by a_missing_localstack_python_fails_with_a_pointer_to_make_setup"]
fn helper_starts_localstack() {
    assert_eq!(std::env::var("REDRIVE_HELPER").as_deref(), Ok("1"));
    localstack();
}
