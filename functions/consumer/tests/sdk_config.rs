//! The user's own AWS configuration: `Runner::sdk_config` and `Runner::clients` on moto, in a
//! region that neither the environment nor the SDK's defaults name, so that only the user's
//! configuration can reach the table and the queues.

use crate::common;

use std::sync::Mutex;

use common::*;
use redrive_consumer::aws_config::Region;
use redrive_consumer::{
    BODY_NOT_PARSED, Outcome, ProcessError, Record, Runner, SdkConfig, aws_sdk_dynamodb,
    aws_sdk_sqs,
};
use redrive_tests::{QueueSet, create_idempotency_table, moto, send_raw, sqs_event};

const REGION: &str = "eu-west-3";

#[derive(Debug, serde::Deserialize)]
struct Order {
    order_id: String,
}

async fn sdk_in_another_region() -> SdkConfig {
    moto()
        .sdk_config()
        .await
        .into_builder()
        .region(Region::new(REGION))
        .build()
}

#[tokio::test]
async fn the_consumer_uses_the_users_own_sdk_config_or_clients() {
    // GIVEN a table and queues that exist only in a region of the user's own configuration
    let sdk = sdk_in_another_region().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let table = create_idempotency_table(&ddb).await;
    let queues = QueueSet::create(&sqs, false, 5).await;
    assert!(queues.source_arn.contains(REGION), "{}", queues.source_arn);
    let default_region = moto().dynamodb().await;
    assert!(
        default_region
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .is_err(),
        "the table must not be reachable without the user's configuration"
    );

    let charged = Mutex::new(Vec::new());
    let charged_ref = &charged;
    let charge = move |order: Order, _record: Record| async move {
        charged_ref.lock().unwrap().push(order.order_id);
        Ok::<(), ProcessError>(())
    };

    for (round, with_clients) in [(1, false), (2, true)] {
        // WHEN the runner is given the configuration (round 1) or clients built from it
        // (round 2), and handles a good order and a body that is no order
        let runner = Runner::new(charge).table(&table).dlq_url(&queues.dlq_url);
        let runner = if with_clients {
            runner.clients(ddb.clone(), sqs.clone())
        } else {
            runner.sdk_config(sdk.clone())
        };
        let consumer = runner.build().await.unwrap();
        let good = send_raw(
            &sqs,
            &queues.source_url,
            &format!(r#"{{"order_id":"o-{round}"}}"#),
            &[],
        )
        .await;
        let bad = send_raw(&sqs, &queues.source_url, "not an order", &[]).await;
        let received = receive_n(&sqs, &queues.source_url, 2).await;
        let handled = consumer
            .handle(&sqs_event(&received, &queues.source_arn), deadline_in(60))
            .await
            .unwrap();

        // THEN the order was charged and recorded in that region's table
        assert_eq!(handled.outcome_of(&good), Some(&Outcome::Processed));
        assert_eq!(
            charged.lock().unwrap().last().map(String::as_str),
            Some(format!("o-{round}").as_str())
        );
        let items = ddb
            .scan()
            .table_name(&table)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .items
            .unwrap_or_default();
        // (The bad body's failure left a cause item beside the records: it has no status.)
        let completed = items
            .iter()
            .filter(|item| {
                item.get("status")
                    .and_then(|s| s.as_s().ok())
                    .map(String::as_str)
                    == Some("COMPLETED")
            })
            .count();
        assert_eq!(completed, round, "{items:?}");
        // AND the failure path's SQS calls went to that region's queues: the bad body's copy
        // is on its DLQ and the original is deleted
        assert_eq!(
            handled.outcome_of(&bad),
            Some(&Outcome::DeadLettered {
                code: BODY_NOT_PARSED.into(),
                stamped: true
            })
        );
        let dead = drain(&sqs, &queues.dlq_url).await;
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].body(), Some("not an order"));
        // (the event source mapping's part for the good one)
        sqs.delete_message()
            .queue_url(&queues.source_url)
            .receipt_handle(
                received
                    .iter()
                    .find(|m| m.message_id() == Some(good.as_str()))
                    .and_then(|m| m.receipt_handle())
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            redrive_tests::queue_depth(&sqs, &queues.source_url).await,
            0
        );
    }
    assert_eq!(charged.into_inner().unwrap(), ["o-1", "o-2"]);
}
