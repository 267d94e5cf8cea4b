//! The side by side with StartMessageMoveTask (`make bench`, 1,000 messages) at smoke size on
//! LocalStack: what each leg leaves behind is what the bench reports.

use std::time::Duration;

use redrive_bench::move_task::side_by_side;
use redrive_bench::proxy::Proxy;
use redrive_tests::localstack;

#[tokio::test]
async fn the_move_task_moves_everything_back_bare_and_the_redriver_keeps_history_and_isolates_poison()
 {
    let (n, poison) = (20, 3);
    let ls = localstack();
    let direct = ls.sqs().await;
    let proxy = Proxy::start(redrive_bench::endpoint_addr(&ls.endpoint()), Duration::ZERO)
        .await
        .unwrap();
    let out = side_by_side(&direct, &proxy, n, poison, 4, 2).await;
    let (ours, aws) = (&out.redrive, &out.move_task);

    // Nothing lost or repeated by either.
    assert_eq!(
        (ours.lost, ours.repeated, aws.lost, aws.repeated),
        (0, 0, 0, 0),
        "{out:?}"
    );
    // SQS's move task: every message back on the source at once, as it was, poison included.
    assert_eq!(aws.on_source, n, "{aws:?}");
    assert_eq!((aws.with_history, aws.delayed), (0, 0), "{aws:?}");
    assert_eq!(
        (aws.poison_on_source, aws.poison_isolated),
        (poison, 0),
        "{aws:?}"
    );
    assert_eq!(aws.attributes_kept, n);
    assert_eq!(aws.calls_of("StartMessageMoveTask"), 1, "{:?}", aws.calls);
    // The re-driver: each copy carries its history and a backoff delay; poison is parked.
    assert_eq!(ours.on_source, n, "{ours:?}");
    assert_eq!(ours.with_history, n, "{ours:?}");
    assert!(ours.delayed > 0, "{ours:?}");
    assert_eq!(
        (ours.poison_on_source, ours.poison_isolated),
        (0, poison),
        "{ours:?}"
    );
    assert_eq!(ours.attributes_kept, n);
    assert_eq!(ours.calls_of("StartMessageMoveTask"), 0);
    assert!(ours.calls_of("SendMessageBatch") >= 2, "{:?}", ours.calls);
}
