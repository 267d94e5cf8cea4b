//! An interrupted command leaves nothing hidden: Ctrl-C (SIGINT) while `redrive` holds
//! messages makes them visible again at once and exits 130, instead of leaving them in flight
//! until their hold (120 s) runs out.

use std::time::{Duration, Instant};

use redrive_tests::{QueueSet, moto, send_batch};

use crate::common::{counts, redrive_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_messages_are_held_makes_them_visible_at_once_and_exits_130() {
    // GIVEN a DLQ of 200 messages
    let sqs = moto().sqs().await;
    let q = QueueSet::create(&sqs, false, 3).await;
    for chunk in 0..20 {
        let bodies: Vec<String> = (0..10)
            .map(|i| format!("{{\"n\":{}}}", chunk * 10 + i))
            .collect();
        send_batch(&sqs, &q.dlq_url, &bodies).await;
    }

    // WHEN a triage pass holds every one of them (it waits a second on the empty queue before
    // it releases them itself) and is interrupted then
    let args = ["triage", q.dlq_url.as_str()];
    let child = redrive_command(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while counts(&sqs, &q.dlq_url).await.1 < 200 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pass never held them all"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();

    // THEN it exits 130, saying so, and every message is visible again at once
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted; the messages it held are visible again"),
        "{stderr}"
    );
    assert_eq!(counts(&sqs, &q.dlq_url).await, (200, 0));
}
