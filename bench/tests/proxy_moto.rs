//! The fault proxy in front of moto, through the real SDK and the re-driver's adapters: it
//! counts what the service would bill, adds latency, and each fault reaches the client as the
//! client would meet it from AWS.

use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use redrive_bench::faults::{FaultKind, FaultPlan};
use redrive_bench::proxy::Proxy;
use redrive_engine::aws::SqsQueue;
use redrive_engine::ports::{HandleEntry, Queue, ReceiveRequest, SendEntry};
use redrive_shared::Attributes;
use redrive_shared::limits::Outgoing;
use redrive_tests::{QueueSet, moto, queue_depth, receive_raw, send_raw};

async fn setup(latency: Duration) -> (Client, Proxy, Client, QueueSet) {
    let direct = moto().sqs().await;
    let queues = QueueSet::create(&direct, false, 3).await;
    let proxy = Proxy::start(redrive_bench::endpoint_addr(&moto().endpoint()), latency)
        .await
        .unwrap();
    let sdk = redrive_bench::sdk_config(&proxy.endpoint(), Some(Duration::from_secs(2))).await;
    (direct, proxy, Client::new(&sdk), queues)
}

fn only(kind: FaultKind) -> Option<FaultPlan> {
    Some(FaultPlan {
        rate: 1.0,
        weights: vec![(kind, 1)],
        timeout_hold: Duration::from_secs(3),
    })
}

fn entries(n: usize) -> Vec<SendEntry> {
    (0..n)
        .map(|i| SendEntry {
            id: i.to_string(),
            message: Outgoing {
                body: format!("body-{i}"),
                attributes: Attributes::new(),
                delay_seconds: None,
                group_id: None,
                dedup_id: None,
                trace_header: None,
            },
        })
        .collect()
}

#[tokio::test]
async fn calls_are_counted_by_operation_and_delayed_by_the_latency() {
    let (_direct, proxy, client, queues) = setup(Duration::from_millis(50)).await;
    let q = SqsQueue { client };
    proxy.take_stats();
    let started = Instant::now();
    let out = q.send_batch(&queues.dlq_url, &entries(10)).await.unwrap();
    assert_eq!(out.succeeded.len(), 10);
    assert!(started.elapsed() >= Duration::from_millis(50));
    let got = q
        .receive(&queues.dlq_url, ReceiveRequest::new(10, 0, 30))
        .await
        .unwrap();
    assert_eq!(got.len(), 10);
    assert!(
        q.receive(&queues.source_url, ReceiveRequest::new(10, 0, 30))
            .await
            .unwrap()
            .is_empty()
    );
    let stats = proxy.take_stats();
    assert_eq!(stats.calls_of("SendMessageBatch"), 1);
    assert_eq!(stats.calls_of("ReceiveMessage"), 2);
    assert_eq!(stats.empty_receives, 1);
    assert_eq!(stats.layer.sdk_retries, 0);
    assert_eq!(stats.total_calls(), 3);
    // the callers waited at least the latency on each call, and not longer than they ran
    assert!(stats.held_seconds >= 3.0 * 0.050, "{}", stats.held_seconds);
    assert!(stats.held_seconds <= started.elapsed().as_secs_f64());
    // Concurrent calls wait together: their waiting counts once, as the caller's wall time.
    let started = Instant::now();
    let receives = (0..4).map(|_| q.receive(&queues.source_url, ReceiveRequest::new(10, 0, 30)));
    for got in futures_util::future::join_all(receives).await {
        assert!(got.unwrap().is_empty());
    }
    let stats = proxy.take_stats();
    assert_eq!(stats.calls_of("ReceiveMessage"), 4);
    assert!(stats.held_seconds >= 0.050, "{}", stats.held_seconds);
    assert!(
        stats.held_seconds <= started.elapsed().as_secs_f64(),
        "{} summed, not the union, over {:?}",
        stats.held_seconds,
        started.elapsed()
    );
}

#[tokio::test]
async fn throttling_is_retried_by_the_sdk_then_reported_retryable() {
    let (direct, proxy, client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(only(FaultKind::Throttle), 1);
    let q = SqsQueue { client };
    let err = q
        .send_batch(&queues.dlq_url, &entries(1))
        .await
        .unwrap_err();
    assert_eq!(err.code, "ThrottlingException", "{err:?}");
    assert!(err.retryable);
    let stats = proxy.stats();
    assert_eq!(stats.calls_of("SendMessageBatch"), 3, "three SDK attempts");
    assert_eq!(stats.layer.sdk_retries, 2);
    assert_eq!(stats.layer.faults.get(FaultKind::Throttle), 3);
    assert_eq!(
        queue_depth(&direct, &queues.dlq_url).await,
        0,
        "nothing applied"
    );
}

#[tokio::test]
async fn server_errors_are_retryable_internal_errors() {
    let (_direct, proxy, client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(only(FaultKind::ServerError), 1);
    let err = SqsQueue { client }
        .receive(&queues.dlq_url, ReceiveRequest::new(10, 0, 30))
        .await
        .unwrap_err();
    assert_eq!(err.code, "InternalError", "{err:?}");
    assert!(err.retryable);
}

#[tokio::test]
async fn a_reset_after_the_call_applied_it_although_the_client_failed() {
    let (direct, proxy, client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(only(FaultKind::ResetAfter), 1);
    let err = SqsQueue { client }
        .send_batch(&queues.dlq_url, &entries(1))
        .await
        .unwrap_err();
    assert!(err.retryable, "{err:?}");
    // Each of the SDK's three attempts reached moto: three copies of one message.
    assert_eq!(queue_depth(&direct, &queues.dlq_url).await, 3);
}

#[tokio::test]
async fn a_reset_before_the_call_applied_nothing() {
    let (direct, proxy, client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(only(FaultKind::ResetBefore), 1);
    let err = SqsQueue { client }
        .send_batch(&queues.dlq_url, &entries(1))
        .await
        .unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert_eq!(queue_depth(&direct, &queues.dlq_url).await, 0);
}

#[tokio::test]
async fn a_timeout_fails_the_attempt_and_lands_late() {
    let (direct, proxy, _client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(
        Some(FaultPlan {
            rate: 1.0,
            weights: vec![(FaultKind::Timeout, 1)],
            timeout_hold: Duration::from_millis(2500),
        }),
        1,
    );
    // A client that gives up after 1 s, before the proxy answers at 2.5 s.
    let sdk = redrive_bench::sdk_config(&proxy.endpoint(), Some(Duration::from_secs(1))).await;
    let err = SqsQueue {
        client: Client::new(&sdk),
    }
    .send_batch(&queues.dlq_url, &entries(1))
    .await
    .unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert_eq!(err.code, "Timeout", "{err:?}");
    proxy.set_faults(None, 1);
    // The three timed-out attempts are applied once the proxy lets them through.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(queue_depth(&direct, &queues.dlq_url).await, 3);
}

#[tokio::test]
async fn failed_batch_entries_were_not_applied() {
    let (direct, proxy, client, queues) = setup(Duration::ZERO).await;
    proxy.set_faults(only(FaultKind::BatchEntries), 3);
    let q = SqsQueue { client };
    let out = q.send_batch(&queues.dlq_url, &entries(10)).await.unwrap();
    assert!(!out.failed.is_empty());
    assert_eq!(out.succeeded.len() + out.failed.len(), 10);
    for f in &out.failed {
        assert_eq!(f.code, "InternalError");
        assert!(!f.sender_fault);
    }
    assert_eq!(
        queue_depth(&direct, &queues.dlq_url).await,
        out.succeeded.len() as u64
    );

    // Deletes too: the failed ones stay.
    proxy.set_faults(None, 3);
    let got = q
        .receive(&queues.dlq_url, ReceiveRequest::new(10, 0, 60))
        .await
        .unwrap();
    proxy.set_faults(only(FaultKind::BatchEntries), 4);
    let handles = HandleEntry::numbered(got.iter().map(|m| m.receipt_handle.clone()));
    let deleted = q.delete_batch(&queues.dlq_url, &handles).await.unwrap();
    assert!(!deleted.failed.is_empty());
    assert_eq!(
        queue_depth(&direct, &queues.dlq_url).await,
        deleted.failed.len() as u64
    );
}

#[tokio::test]
async fn an_armed_kill_holds_the_call_and_never_forwards_it() {
    let (direct, proxy, client, queues) = setup(Duration::ZERO).await;
    send_raw(&direct, &queues.dlq_url, "b", &[]).await;
    let q = SqsQueue { client };
    let got = q
        .receive(&queues.dlq_url, ReceiveRequest::new(10, 0, 60))
        .await
        .unwrap();
    let fired = proxy.arm_kill(&["DeleteMessageBatch"], 1);
    let handles = vec![HandleEntry {
        id: "0".into(),
        receipt_handle: got[0].receipt_handle.clone(),
    }];
    tokio::select! {
        r = q.delete_batch(&queues.dlq_url, &handles) => panic!("the held call returned: {r:?}"),
        _ = fired => {}
    }
    assert_eq!(proxy.stats().layer.kills["DeleteMessageBatch"], 1);
    assert_eq!(
        queue_depth(&direct, &queues.dlq_url).await,
        1,
        "not deleted"
    );
    assert!(
        receive_raw(&direct, &queues.dlq_url, 0).await.is_empty(),
        "still in flight"
    );
}
