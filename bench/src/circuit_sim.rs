//! The circuit simulation: a downstream outage three times longer
//! than the whole backoff schedule, on moto, run twice side by side in one process, once with
//! the re-driver as it was (no adaptive circuit) and once with the adaptive circuit.
//!
//! ```text
//! producer -> source --(event source mapping: poll, invoke the consumer)--> downstream: 503 for the outage, then 200
//!               | RedrivePolicy maxReceiveCount (the consumer retries after its backoff)
//!               v
//!              DLQ --(the test evaluates the DLQ alarm: visible > 0 and not in ALARM -> ALARM
//!               |     + the SNS notification to the re-driver engine, which re-arms it; plus the
//!               |     safety-net schedule)--> re-driver --> source (DelaySeconds = backoff) | poison
//! ```
//!
//! Time is compressed through configuration only: re-driver backoff of seconds instead of
//! minutes, the consumer's retry of one second, the alarm evaluated every second, and the
//! circuit's window and cool-down of a few seconds. Nothing is mocked: queues, the
//! RedrivePolicy, DelaySeconds, DynamoDB (idempotency records, the circuit record) and
//! CloudWatch alarms are moto's; the consumer and the re-driver are the shipped engines.
//!
//! Per side the report says: how many messages were parked in the poison queue during the
//! outage (target: all without the circuit, none with it), the time from the downstream's
//! recovery to the DLQ and the source being empty, and the reconciliation against the
//! downstream's own records by idempotency key: delivered exactly once, delivered twice (0),
//! lost (0).

use crate::quiet_consumer;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, StateValue, Statistic};
use aws_sdk_sqs::Client;
use futures_util::future::join_all;
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::message::QueueArn;
use redrive_consumer::{Consumer, HttpProcessor};
use redrive_engine::Engine;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::circuit::{CircuitStore, DynamoDbCircuitStore, NoCircuit};
use redrive_shared::config::DownstreamConfig;
use redrive_shared::sync::lock;
use redrive_tests::event_source;
use redrive_tests::{
    Downstream, Mode, QueueSet, create_circuit_table, create_idempotency_table, queue_counts,
    send_batch,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::event_source::{InProcess, SqsRecords};

mod report;
mod settings;
use report::reconcile;
pub use report::{Side, SideReport, SimReport};
pub use settings::SimSettings;

/// The re-driver invocation's deadline (a 30 s Lambda timeout).
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(30);

/// One side's resources and functions; `C` is the engine's circuit store ([`NoCircuit`] without
/// the circuit).
struct Rig<C> {
    side: Side,
    sqs: Client,
    cloudwatch: aws_sdk_cloudwatch::Client,
    queues: QueueSet,
    source_arn: QueueArn,
    tables: Vec<String>,
    alarm: String,
    downstream: Downstream,
    consumer: Consumer<DynamoDbStore, SqsOps, HttpProcessor>,
    engine: Engine<SqsQueue, CloudWatch, CloudWatch, C>,
    /// One re-driver invocation at a time (reserved concurrency 1).
    invoking: tokio::sync::Mutex<()>,
    stop: AtomicBool,
    tally: Mutex<SideReport>,
}

impl Rig<NoCircuit> {
    /// The re-driver as it was: `CIRCUIT_TABLE` unset.
    async fn without(settings: &SimSettings, moto: &redrive_tests::Moto) -> Result<Self, String> {
        Self::create(Side::Without, settings, moto, None, NoCircuit).await
    }
}

impl Rig<DynamoDbCircuitStore> {
    /// The re-driver with the adaptive circuit: `CIRCUIT_TABLE` and the circuit's tuning set,
    /// its record in a DynamoDB table of moto.
    async fn with(settings: &SimSettings, moto: &redrive_tests::Moto) -> Result<Self, String> {
        let ddb = moto.dynamodb().await;
        let table = create_circuit_table(&ddb).await;
        let store = DynamoDbCircuitStore {
            client: ddb,
            table: table.clone(),
        };
        Self::create(Side::With, settings, moto, Some(table), store).await
    }
}

impl<C: CircuitStore> Rig<C> {
    async fn create(
        side: Side,
        settings: &SimSettings,
        moto: &redrive_tests::Moto,
        circuit_table: Option<String>,
        circuit: C,
    ) -> Result<Self, String> {
        let sdk = moto.sdk_config().await;
        let sqs = Client::new(&sdk);
        let ddb = aws_sdk_dynamodb::Client::new(&sdk);
        let cloudwatch = aws_sdk_cloudwatch::Client::new(&sdk);
        let queues = QueueSet::create(&sqs, false, settings.max_receive_count).await;
        let table = create_idempotency_table(&ddb).await;
        let tables: Vec<String> = std::iter::once(table.clone())
            .chain(circuit_table.clone())
            .collect();
        let downstream = Downstream::start().await;
        downstream.set_mode(Mode::Status(503));
        let processor = HttpProcessor::new(&DownstreamConfig {
            url: downstream.url(),
            timeout: Duration::from_secs(5),
        })
        .map_err(|e| format!("the downstream URL: {e}"))?;
        let consumer = Consumer::with_settings(
            DynamoDbStore::new(ddb.clone(), table.clone()),
            SqsOps {
                client: sqs.clone(),
            },
            processor,
            settings.consumer_config(&table, &queues.dlq_url),
            quiet_consumer(),
        );
        let config = settings.redriver_config(&queues, circuit_table.as_deref());

        let cw = CloudWatch {
            client: cloudwatch.clone(),
        };
        let engine = Engine::new(
            SqsQueue {
                client: sqs.clone(),
            },
            cw.clone(),
            cw,
            config,
        )
        .with_settings(redrive_engine::Settings {
            deadline_margin: Duration::from_secs(2),
            receive_wait_seconds: 0,
            ..redrive_engine::Settings::default()
        })
        .with_circuit(circuit);
        if engine.config.circuit.is_some() != (side == Side::With) {
            return Err(format!(
                "the {} side's configuration has the circuit {}",
                side.label(),
                if engine.config.circuit.is_some() {
                    "on"
                } else {
                    "off"
                }
            ));
        }
        let alarm = format!("{}-not-empty", queues.dlq_name);
        cloudwatch
            .put_metric_alarm()
            .alarm_name(&alarm)
            .namespace("AWS/SQS")
            .metric_name("ApproximateNumberOfMessagesVisible")
            .dimensions(
                Dimension::builder()
                    .name("QueueName")
                    .value(&queues.dlq_name)
                    .build(),
            )
            .statistic(Statistic::Maximum)
            .period(settings.alarm_period.as_secs().max(1) as i32)
            .evaluation_periods(1)
            .threshold(0.0)
            .comparison_operator(ComparisonOperator::GreaterThanThreshold)
            .send()
            .await
            .map_err(|e| format!("PutMetricAlarm {alarm}: {e:?}"))?;
        set_alarm(&cloudwatch, &alarm, StateValue::Ok, "created").await;
        let source_arn = QueueArn::parse(&queues.source_arn)
            .ok_or_else(|| format!("moto gave an invalid ARN {}", queues.source_arn))?;
        Ok(Self {
            side,
            sqs,
            cloudwatch,
            queues,
            source_arn,
            tables,
            alarm,
            downstream,
            consumer,
            engine,
            invoking: tokio::sync::Mutex::new(()),
            stop: AtomicBool::new(false),
            tally: Mutex::new(SideReport {
                side: Some(side),
                messages: settings.messages,
                ..SideReport::default()
            }),
        })
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    async fn produce(&self, n: u64) -> Vec<String> {
        let side = self.side.label();
        let bodies: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"n":{i},"side":"{side}","amountCents":{}}}"#, 100 + i))
            .collect();
        let mut ids = Vec::new();
        for chunk in bodies.chunks(10) {
            ids.extend(send_batch(&self.sqs, &self.queues.source_url, chunk).await);
        }
        ids
    }

    /// The event source mapping: receive, invoke the consumer, delete what it did not report.
    async fn poller(&self) {
        let source = SqsRecords::new(
            self.sqs.clone(),
            &self.queues.source_url,
            self.source_arn.clone(),
            Duration::from_secs(30),
            Duration::from_millis(100),
        );
        let consumer = InProcess {
            consumer: &self.consumer,
            outcomes: None,
        };
        event_source::poll(&source, &consumer, || self.stopped()).await;
    }

    /// CloudWatch's evaluation of the DLQ alarm: visible messages and not in ALARM -> ALARM
    /// and the SNS notification to the re-driver; an empty DLQ -> OK. A notification happens
    /// only on a change of state: the re-driver re-arms the alarm after each drain.
    async fn alarm_evaluator(&self, period: Duration) {
        while !self.stopped() {
            tokio::time::sleep(period).await;
            let Some((visible, _, _)) = queue_counts(&self.sqs, &self.queues.dlq_url).await else {
                continue;
            };
            let state = alarm_state(&self.cloudwatch, &self.alarm).await;
            if visible > 0 && state != StateValue::Alarm {
                set_alarm(
                    &self.cloudwatch,
                    &self.alarm,
                    StateValue::Alarm,
                    "Threshold Crossed",
                )
                .await;
                let event = self.alarm_notification(state.as_str(), period);
                self.invoke(&event).await;
            } else if visible == 0 && state == StateValue::Alarm {
                set_alarm(&self.cloudwatch, &self.alarm, StateValue::Ok, "DLQ empty").await;
            }
        }
    }

    /// The safety-net schedule: a drain whenever the DLQ holds anything.
    async fn schedule(&self, period: Duration) {
        while !self.stopped() {
            tokio::time::sleep(period).await;
            let total = queue_counts(&self.sqs, &self.queues.dlq_url)
                .await
                .map_or(0, |(v, i, d)| v + i + d);
            if total > 0 && !self.stopped() {
                self.invoke(&redrive_tests::fixture("eventbridge-scheduled.json"))
                    .await;
            }
        }
    }

    async fn invoke(&self, event: &Value) {
        let _one = self.invoking.lock().await;
        let result =
            redrive_redriver::handle(&self.engine, event, Some(Instant::now() + REDRIVER_TIMEOUT))
                .await;
        let mut t = lock(&self.tally);
        t.redriver_invocations += 1;
        match result {
            Ok(s) => {
                t.redriven += s.redriven;
                t.isolated += s.isolated;
                *t.stopped_because
                    .entry(s.stopped_because.as_str().to_string())
                    .or_default() += 1;
            }
            Err(_) => t.redriver_errors += 1,
        }
    }

    /// The SNS delivery of this side's alarm notification.
    fn alarm_notification(&self, old_state: &str, period: Duration) -> Value {
        let q = &self.queues;
        let mut event = q.alarm_notification(&self.alarm, "ALARM", &q.dlq_name);
        let sns = &mut event["Records"][0]["Sns"];
        let mut message: Value = serde_json::from_str(sns["Message"].as_str().unwrap_or("{}"))
            .expect("the notification's Message is JSON");
        message["OldStateValue"] = json!(old_state);
        message["Trigger"]["Period"] = json!(period.as_secs().max(1));
        sns["Message"] = json!(message.to_string());
        event
    }

    async fn cleanup(&self, moto: &redrive_tests::Moto) {
        let q = &self.queues;
        for url in [&q.source_url, &q.dlq_url, &q.poison_url] {
            let _ = self.sqs.delete_queue().queue_url(url).send().await;
        }
        let ddb = moto.dynamodb().await;
        for t in &self.tables {
            let _ = ddb.delete_table().table_name(t).send().await;
        }
        let _ = self
            .cloudwatch
            .delete_alarms()
            .alarm_names(&self.alarm)
            .send()
            .await;
    }
}

/// Runs one side: produce as the outage starts, recover after `outage`, wait for the DLQ to
/// empty, reconcile.
async fn run_side<C: CircuitStore>(
    rig: &Rig<C>,
    settings: &SimSettings,
    outage: Duration,
) -> SideReport {
    let produced = rig.produce(settings.messages).await;
    let started = Instant::now();
    let director = async {
        // During the outage: when the poison queue first held every message.
        let mut all_parked_after = None;
        while Instant::now() < started + outage {
            if all_parked_after.is_none()
                && total_depth(&rig.sqs, &rig.queues.poison_url).await == settings.messages
            {
                all_parked_after = Some(started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(
                Duration::from_millis(500)
                    .min((started + outage).saturating_duration_since(Instant::now())),
            )
            .await;
        }
        // The outage ends: what it parked, and what waits on the DLQ.
        let parked_during_outage = total_depth(&rig.sqs, &rig.queues.poison_url).await;
        let dlq_at_recovery = total_depth(&rig.sqs, &rig.queues.dlq_url).await;
        rig.downstream.set_mode(Mode::Healthy);
        let recovered = Instant::now();
        let mut empty_since: Option<Instant> = None;
        let recovery = loop {
            let empty = total_depth(&rig.sqs, &rig.queues.dlq_url).await == 0
                && total_depth(&rig.sqs, &rig.queues.source_url).await == 0;
            match (empty, empty_since) {
                (true, None) => empty_since = Some(Instant::now()),
                // Empty for a second: nothing in flight came back.
                (true, Some(t)) if t.elapsed() >= Duration::from_secs(1) => {
                    break Some(t.duration_since(recovered).as_secs_f64());
                }
                (true, Some(_)) => {}
                (false, _) => empty_since = None,
            }
            if recovered.elapsed() > settings.max_recovery {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        rig.stop.store(true, Ordering::SeqCst);
        (
            parked_during_outage,
            dlq_at_recovery,
            recovery,
            all_parked_after,
        )
    };
    let pollers = join_all((0..settings.pollers.max(1)).map(|_| rig.poller()));
    let ((parked_during_outage, dlq_at_recovery, recovery, all_parked_after), _, _, _) = tokio::join!(
        director,
        pollers,
        rig.alarm_evaluator(settings.alarm_period),
        rig.schedule(settings.schedule_period),
    );
    let inventory = crate::soak::moto::inventory(&rig.sqs, &rig.queues, Duration::ZERO).await;
    let mut report = std::mem::take(&mut *lock(&rig.tally));
    report.parked_during_outage = parked_during_outage;
    report.dlq_at_recovery = dlq_at_recovery;
    report.recovery_to_empty_seconds = recovery;
    report.all_parked_after_seconds = all_parked_after;
    reconcile(&mut report, &produced, &inventory, &rig.downstream);
    report
}

/// Runs both sides at once on the test process's moto (the fast-clock one: the same SQS
/// behaviour without moto's CPU per queued message) and reports them side by side.
pub async fn run(settings: &SimSettings) -> SimReport {
    let moto = redrive_tests::moto_fast_clock();
    let outage = settings.outage();
    let without = Rig::without(settings, moto)
        .await
        .unwrap_or_else(|e| panic!("setting up the side without circuit: {e}"));
    let with = match Rig::with(settings, moto).await {
        Ok(rig) => Some(rig),
        Err(e) => {
            eprintln!("circuit simulation: the side with the circuit cannot run: {e}");
            None
        }
    };
    let (without_report, with_report) = tokio::join!(run_side(&without, settings, outage), async {
        match &with {
            Some(rig) => Some(run_side(rig, settings, outage).await),
            None => None,
        }
    });
    without.cleanup(moto).await;
    if let Some(rig) = &with {
        rig.cleanup(moto).await;
    }
    SimReport {
        settings: settings.clone(),
        backoff_schedule_seconds: settings.backoff_schedule().as_secs(),
        consumer_schedule_seconds: settings.consumer_schedule().as_secs(),
        outage_seconds: outage.as_secs(),
        without: without_report,
        with: with_report,
    }
}

async fn set_alarm(cw: &aws_sdk_cloudwatch::Client, alarm: &str, state: StateValue, why: &str) {
    let _ = cw
        .set_alarm_state()
        .alarm_name(alarm)
        .state_value(state)
        .state_reason(why)
        .send()
        .await;
}

async fn alarm_state(cw: &aws_sdk_cloudwatch::Client, alarm: &str) -> StateValue {
    cw.describe_alarms()
        .alarm_names(alarm)
        .send()
        .await
        .ok()
        .and_then(|out| out.metric_alarms?.into_iter().next()?.state_value)
        .unwrap_or(StateValue::InsufficientData)
}

/// Visible, in flight and delayed; an unanswered query counts as not empty.
async fn total_depth(sqs: &Client, url: &str) -> u64 {
    queue_counts(sqs, url)
        .await
        .map_or(u64::MAX, |(v, i, d)| v + i + d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_is_three_times_the_whole_schedule() {
        // (The settings below are those of `make soak` and of bench/tests/circuit_sim.rs.)
        let s = SimSettings::full();
        // 1 s doubling, capped at 16: the issue's 60 s doubling at 1/60 scale.
        assert_eq!(
            s.backoff_schedule(),
            Duration::from_secs(1 + 2 + 4 + 8 + 16)
        );
        // Six passes through the source queue, one retry of 1 s each.
        assert_eq!(s.consumer_schedule(), Duration::from_secs(6));
        // Six arrivals on the DLQ, each waiting for the alarm's evaluation (1 s).
        assert_eq!(s.alarm_schedule(), Duration::from_secs(6));
        assert_eq!(s.outage(), Duration::from_secs(3 * (31 + 6 + 6)));
        let short = SimSettings::short();
        assert_eq!(short.backoff_schedule(), Duration::from_secs(3));
        assert_eq!(short.outage(), Duration::from_secs(3 * (3 + 4 + 4)));
    }

    #[test]
    fn the_report_passes_only_on_none_versus_all_without_loss() {
        let settings = SimSettings::short();
        let side = |side, parked: u64, delivered: u64| SideReport {
            side: Some(side),
            messages: 20,
            parked_during_outage: parked,
            recovery_to_empty_seconds: Some(1.0),
            delivered_once: delivered,
            parked: [("poison:max-attempts".to_string(), parked)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            ..SideReport::default()
        };
        let mut report = SimReport {
            settings,
            backoff_schedule_seconds: 3,
            consumer_schedule_seconds: 4,
            outage_seconds: 33,
            without: side(Side::Without, 20, 0),
            with: Some(side(Side::With, 0, 20)),
        };
        assert!(report.passed(), "{report}");
        report.with.as_mut().unwrap().parked_during_outage = 1;
        assert!(!report.passed());
        report.with = Some(side(Side::With, 0, 20));
        report.with.as_mut().unwrap().delivered_twice = 1;
        assert!(!report.passed());
        report.with = Some(side(Side::With, 0, 20));
        report.with.as_mut().unwrap().lost = vec!["m".into()];
        assert!(!report.passed());
        report.with = None;
        assert!(!report.passed(), "no circuit side: not a pass");
    }
}
