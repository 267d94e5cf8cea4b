//! The soak on moto: the functions' SDK clients reach moto through the fault proxy; the
//! harness's producer, event source mapping and inventory talk to moto directly.

use crate::quiet_consumer;
use std::time::Duration;

use aws_sdk_sqs::Client;
use futures_util::future::join_all;
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::message::QueueArn;
use redrive_consumer::{Consumer, HttpProcessor};
use redrive_engine::Engine;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_shared::config::DownstreamConfig;
use redrive_shared::sdk::attributes_from_sdk;
use redrive_tests::{QueueSet, create_idempotency_table, drain_all, queue_depth, send_batch};
use tokio::time::Instant;

use super::{Depths, Emulator, Parked, Place, Reconciliation, SoakSettings};
use crate::downstream::{Flaky, FlakyServer};
use crate::event_source::SqsRecords;
use crate::faults::FaultPlan;
use crate::proxy::Proxy;

/// Per-attempt timeout of the functions' SDK clients in the soak.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the proxy holds a timed-out call (past the attempt timeout) before applying it.
pub const TIMEOUT_HOLD: Duration = Duration::from_secs(3);

pub struct MotoEmulator<'a> {
    direct: Client,
    queues: QueueSet,
    proxy: &'a Proxy,
    source_arn: QueueArn,
}

impl Emulator for MotoEmulator<'_> {
    type Source = SqsRecords;

    async fn produce(&self, bodies: Vec<String>) -> Vec<String> {
        let (sqs, url) = (&self.direct, &self.queues.source_url);
        let sends = bodies.chunks(10).map(|chunk| send_batch(sqs, url, chunk));
        join_all(sends).await.into_iter().flatten().collect()
    }

    fn source(&self, visibility: Duration) -> SqsRecords {
        // The poll itself long-polls for a second.
        let idle = Duration::from_millis(50);
        let arn = self.source_arn.clone();
        SqsRecords::new(
            self.direct.clone(),
            &self.queues.source_url,
            arn,
            visibility,
            idle,
        )
    }

    async fn source_depth(&self) -> u64 {
        queue_depth(&self.direct, &self.queues.source_url).await
    }

    async fn depths(&self) -> Depths {
        let q = &self.queues;
        Depths {
            source: queue_depth(&self.direct, &q.source_url).await,
            dlq: queue_depth(&self.direct, &q.dlq_url).await,
            poison: queue_depth(&self.direct, &q.poison_url).await,
        }
    }

    async fn inventory(&self) -> Vec<Parked> {
        // In-flight and delayed messages come back within the soak's timeouts.
        inventory(&self.direct, &self.queues, Duration::from_secs(60)).await
    }

    type Layer = Proxy;

    fn layer(&self) -> &Proxy {
        self.proxy
    }
}

/// Every message left in the three queues, each read as parked where it was; a queue that
/// still holds messages in flight or delayed is read again each second for up to `wait`.
pub async fn inventory(sqs: &Client, queues: &QueueSet, wait: Duration) -> Vec<Parked> {
    let mut parked = Vec::new();
    for (place, url) in [
        (Place::Source, &queues.source_url),
        (Place::Dlq, &queues.dlq_url),
        (Place::Poison, &queues.poison_url),
    ] {
        let started = Instant::now();
        loop {
            for m in drain_all(sqs, url).await {
                let attributes = attributes_from_sdk(m.message_attributes.as_ref());
                let message_id = m.message_id().unwrap_or("");
                parked.push(Parked::read(place, message_id, &attributes));
            }
            if started.elapsed() >= wait || queue_depth(sqs, url).await == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    parked
}

/// The soak on the test process's moto server, the one with the fast clock (the same SQS
/// behaviour without the CPU per message in the queue that would make thousands of messages
/// take many minutes; see `tests/moto_launcher.py --fast-clock`).
pub async fn run(settings: &SoakSettings) -> Reconciliation {
    let moto = redrive_tests::moto_fast_clock();
    let direct = moto.sqs().await;
    let ddb_direct = moto.dynamodb().await;
    let queues = QueueSet::create(&direct, false, 2).await;
    let table = create_idempotency_table(&ddb_direct).await;
    let proxy = Proxy::start(crate::endpoint_addr(&moto.endpoint()), Duration::ZERO)
        .await
        .expect("starting the fault proxy");
    proxy.set_faults(
        Some(FaultPlan::soak(settings.fault_rate, TIMEOUT_HOLD)),
        settings.seed,
    );
    let sdk = crate::sdk_config(&proxy.endpoint(), Some(ATTEMPT_TIMEOUT)).await;

    let flaky = Flaky::new(settings.downstream_failure_rate, settings.seed ^ 0xf1a);
    let server = FlakyServer::start(flaky.clone())
        .await
        .expect("starting the downstream");
    let processor = HttpProcessor::new(&DownstreamConfig {
        url: server.url(),
        timeout: Duration::from_secs(5),
    })
    .expect("a valid downstream URL");
    let consumer = Consumer::with_settings(
        DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), table.clone()),
        SqsOps {
            client: Client::new(&sdk),
        },
        processor,
        super::consumer_config(&table, &queues.dlq_url),
        quiet_consumer(),
    );
    let cloudwatch = CloudWatch {
        client: aws_sdk_cloudwatch::Client::new(&sdk),
    };
    let engine = Engine::new(
        SqsQueue {
            client: Client::new(&sdk),
        },
        cloudwatch.clone(),
        cloudwatch,
        super::redriver_config(&queues.dlq_url, &queues.source_url, &queues.poison_url),
    )
    .with_settings(super::redriver_settings())
    .with_seed(settings.seed);

    let env = MotoEmulator {
        source_arn: QueueArn::parse(&queues.source_arn).expect("moto gives a valid ARN"),
        direct: direct.clone(),
        queues: queues.clone(),
        proxy: &proxy,
    };
    let report = super::run("moto", &env, &consumer, &engine, &flaky, settings).await;
    // SOAK_PROFILE=1: where moto's time went, by operation (the proxy's view).
    if std::env::var_os("SOAK_PROFILE").is_some() {
        let s = proxy.stats();
        eprintln!(
            "calls {:?}\nupstream seconds {:?}",
            s.layer.calls, s.upstream_seconds
        );
    }

    for url in [&queues.source_url, &queues.dlq_url, &queues.poison_url] {
        let _ = direct.delete_queue().queue_url(url).send().await;
    }
    let _ = ddb_direct.delete_table().table_name(&table).send().await;
    report
}
