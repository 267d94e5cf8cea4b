//! The soak on the port fakes: the consumer's and the re-driver's ports on the in-memory
//! [`World`], on tokio's paused clock (see [`crate::bench::on_modelled_clock`]), so that
//! tens of thousands of messages and their seconds-long backoffs run in seconds.

use crate::quiet_consumer;
use std::sync::Arc;
use std::time::Duration;

use redrive_consumer::message::QueueArn;
use redrive_consumer::{Consumer, Message};
use redrive_engine::Engine;
use redrive_engine::fake::FakeCloudWatch;
use redrive_shared::Attributes;
use redrive_tests::event_source::Source;

use super::{Depths, Emulator, Parked, Place, Reconciliation, SoakSettings};
use crate::downstream::{Flaky, FlakyProcessor};
use crate::faults::FaultPlan;
use crate::world::{World, WorldOps, WorldQueue, WorldStore, world_url};

const ACCOUNT: &str = "000000000000";

fn url(name: &str) -> String {
    world_url(ACCOUNT, name)
}

/// The in-memory world as the soak's emulator.
pub struct FakeEmulator {
    pub world: Arc<World>,
    source: String,
    dlq: String,
    poison: String,
    source_arn: QueueArn,
}

impl FakeEmulator {
    pub fn new(world: Arc<World>) -> Self {
        let source_arn = QueueArn::parse(&format!(
            "arn:aws:sqs:{}:{ACCOUNT}:soak-source",
            crate::event_source::REGION
        ))
        .expect("a valid ARN");
        Self {
            world,
            source: url("soak-source"),
            dlq: url("soak-dlq"),
            poison: url("soak-poison"),
            source_arn,
        }
    }
}

impl Emulator for FakeEmulator {
    type Source = FakeSource;

    async fn produce(&self, bodies: Vec<String>) -> Vec<String> {
        bodies
            .iter()
            .map(|b| self.world.push(&self.source, b, Attributes::new()))
            .collect()
    }

    fn source(&self, visibility: Duration) -> FakeSource {
        FakeSource {
            world: self.world.clone(),
            url: self.source.clone(),
            arn: self.source_arn.clone(),
            visibility,
        }
    }

    async fn source_depth(&self) -> u64 {
        self.world.depth(&self.source)
    }

    async fn depths(&self) -> Depths {
        Depths {
            source: self.world.depth(&self.source),
            dlq: self.world.depth(&self.dlq),
            poison: self.world.depth(&self.poison),
        }
    }

    async fn inventory(&self) -> Vec<Parked> {
        [
            (Place::Source, &self.source),
            (Place::Dlq, &self.dlq),
            (Place::Poison, &self.poison),
        ]
        .into_iter()
        .flat_map(|(place, url)| {
            self.world
                .messages(url)
                .into_iter()
                .map(move |m| Parked::read(place, &m.message_id, &m.attributes))
        })
        .collect()
    }

    type Layer = World;

    fn layer(&self) -> &World {
        &self.world
    }
}

/// The in-memory source queue, as the event source mapping polls it.
pub struct FakeSource {
    world: Arc<World>,
    url: String,
    arn: QueueArn,
    visibility: Duration,
}

impl Source for FakeSource {
    type Message = Message;

    async fn receive(&self) -> Result<Vec<Message>, String> {
        Ok(self
            .world
            .receive_direct(&self.url, 10, self.visibility)
            .into_iter()
            .map(|m| Message {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle,
                body: m.body,
                attributes: m.attributes,
                receive_count: m.receive_count,
                group_id: None,
                source: Some(self.arn.clone()),
                trace_header: None,
            })
            .collect())
    }

    async fn delete(&self, settled: &[&Message]) -> Result<(), String> {
        for m in settled {
            self.world.delete_direct(&self.url, &m.receipt_handle);
        }
        Ok(())
    }

    fn message_id(message: &Message) -> &str {
        &message.message_id
    }

    fn idle(&self) -> Duration {
        Duration::from_millis(200)
    }
}

/// The soak on the port fakes. Run it on the paused clock.
pub async fn run(settings: &SoakSettings) -> Reconciliation {
    run_in(World::new(settings.seed), settings).await
}

/// The soak on a given world (a test may break it on purpose first).
pub async fn run_in(world: Arc<World>, settings: &SoakSettings) -> Reconciliation {
    let env = FakeEmulator::new(world.clone());
    world.create_queue(&env.dlq, None);
    world.create_queue(&env.poison, None);
    world.create_queue(&env.source, Some((&env.dlq, 2)));
    world.set_faults(Some(FaultPlan::soak(
        settings.fault_rate,
        world.attempt_timeout,
    )));

    let flaky = Flaky::new(settings.downstream_failure_rate, settings.seed ^ 0xf1a);
    let consumer = Consumer::with_settings(
        WorldStore::new(world.clone()),
        WorldOps(world.clone()),
        FlakyProcessor(flaky.clone()),
        super::consumer_config("soak-idempotency", &env.dlq),
        quiet_consumer(),
    )
    .with_rng(redrive_shared::backoff::seeded_rng(settings.seed ^ 0xc0));
    let cloudwatch = FakeCloudWatch::new();
    let engine = Engine::new(
        WorldQueue(world.clone()),
        cloudwatch.clone(),
        cloudwatch,
        super::redriver_config(&env.dlq, &env.source, &env.poison),
    )
    .with_settings(super::redriver_settings())
    .with_seed(settings.seed);
    super::run("port fakes", &env, &consumer, &engine, &flaky, settings).await
}
