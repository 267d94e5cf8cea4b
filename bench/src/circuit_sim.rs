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
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_cloudwatch::types::{ComparisonOperator, Dimension, StateValue, Statistic};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use futures_util::future::join_all;
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::message::{QueueArn, record_to_event_json};
use redrive_consumer::{Consumer, FailedIds, HttpProcessor};
use redrive_engine::Engine;
use redrive_engine::aws::{CloudWatch, SqsQueue};
use redrive_engine::circuit::{CircuitStore, DynamoDbCircuitStore, NoCircuit};
use redrive_shared::config::{DownstreamConfig, Env, RedriverConfig};
use redrive_shared::sdk::attributes_from_sdk;
use redrive_tests::{Downstream, Mode, QueueSet, create_idempotency_table, drain_all};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::soak::{Parked, Place};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The region of the simulation's events.
const REGION: &str = "us-east-1";
/// The consumer invocation's deadline (a 15 s Lambda timeout).
const CONSUMER_TIMEOUT_MS: u64 = 15_000;
/// The re-driver invocation's deadline (a 30 s Lambda timeout).
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(30);

/// The simulation's knobs. Durations in whole seconds where the shipped configuration takes
/// whole seconds.
#[derive(Debug, Clone, Serialize)]
pub struct SimSettings {
    /// Messages produced at the start of the outage, per side.
    pub messages: u64,
    /// The source queue's RedrivePolicy.
    pub max_receive_count: i32,
    /// `MAX_REDRIVE_ATTEMPTS`.
    pub max_redrive_attempts: u32,
    /// `BACKOFF_BASE_SECONDS`, `BACKOFF_MULTIPLIER`, `BACKOFF_MAX_SECONDS` (no jitter, so that
    /// the schedule is exact).
    pub backoff_base_seconds: u32,
    pub backoff_multiplier: u32,
    pub backoff_max_seconds: u32,
    /// The consumer's retry delay (`RETRY_BASE_SECONDS` = `RETRY_MAX_SECONDS`).
    pub consumer_retry_seconds: u32,
    /// CloudWatch's evaluation of the DLQ alarm (60 s in AWS), compressed.
    pub alarm_period: Duration,
    /// The safety-net schedule (5 minutes in the stack), compressed.
    pub schedule_period: Duration,
    /// The outage lasts this many times the whole backoff schedule.
    pub outage_factor: u32,
    /// Event source mapping pollers per side.
    pub pollers: usize,
    /// Give up waiting for the DLQ to empty after the recovery after this long.
    pub max_recovery: Duration,
    /// The circuit's tuning, as re-driver environment variables (besides `CIRCUIT_TABLE`,
    /// which the simulation sets): window, cool-down, canary size, thresholds.
    pub circuit_env: Vec<(String, String)>,
}

impl SimSettings {
    /// `make soak`: the issue's production schedule (5 attempts at 60 s doubling, about 31
    /// minutes) at 1/60 scale: 1 s doubling, 31 s; 50 messages per side (moto delivers a few
    /// dozen failing deliveries a second on a shared machine: more messages would queue in the
    /// source for longer than the schedule itself).
    pub fn full() -> Self {
        Self {
            messages: 50,
            max_receive_count: 2,
            max_redrive_attempts: 5,
            backoff_base_seconds: 1,
            backoff_multiplier: 2,
            backoff_max_seconds: 16,
            consumer_retry_seconds: 1,
            alarm_period: Duration::from_secs(1),
            schedule_period: Duration::from_secs(5),
            outage_factor: 3,
            // One event source mapping poller per side: concurrent receives that both move the
            // same message to the DLQ make moto answer 500 (a race in its RedrivePolicy).
            pollers: 1,
            max_recovery: Duration::from_secs(180),
            // The production defaults at the same 1/60 scale (900 s, 300 s, 3600 s); the
            // canary's size and the threshold at their defaults.
            circuit_env: env_pairs(&[
                ("CIRCUIT_WINDOW_SECONDS", "15"),
                ("CIRCUIT_COOLDOWN_SECONDS", "5"),
                ("CIRCUIT_MAX_COOLDOWN_SECONDS", "60"),
            ]),
        }
    }

    /// `make test`: three attempts 1 s apart, 20 messages per side; an outage of 33 s, the
    /// whole run under a minute.
    pub fn short() -> Self {
        Self {
            messages: 20,
            max_redrive_attempts: 3,
            backoff_base_seconds: 1,
            backoff_multiplier: 1,
            backoff_max_seconds: 1,
            max_recovery: Duration::from_secs(45),
            // A window well beyond a copy's round trip (about 4 s here), a canary of 4.
            circuit_env: env_pairs(&[
                ("CIRCUIT_WINDOW_SECONDS", "10"),
                ("CIRCUIT_COOLDOWN_SECONDS", "2"),
                ("CIRCUIT_MAX_COOLDOWN_SECONDS", "8"),
                ("CIRCUIT_CANARY_SIZE", "4"),
            ]),
            ..Self::full()
        }
    }

    /// The re-driver's delay before attempt `n` (1-based), as the shipped backoff computes it
    /// without jitter: `min(max, base * multiplier^(n-1))`.
    pub fn redrive_delay(&self, attempt: u32) -> u64 {
        let d = u64::from(self.backoff_base_seconds)
            .saturating_mul(u64::from(self.backoff_multiplier).saturating_pow(attempt - 1));
        d.min(u64::from(self.backoff_max_seconds))
    }

    /// The re-driver's whole backoff schedule: the sum of its delays over every attempt.
    pub fn backoff_schedule(&self) -> Duration {
        Duration::from_secs(
            (1..=self.max_redrive_attempts)
                .map(|a| self.redrive_delay(a))
                .sum(),
        )
    }

    /// The consumer's retries along the way: each pass through the source queue (the first
    /// and one per attempt) waits its retry delay before each receive but the first.
    pub fn consumer_schedule(&self) -> Duration {
        let passes = u64::from(self.max_redrive_attempts) + 1;
        let retries = (self.max_receive_count.max(1) - 1) as u64;
        Duration::from_secs(passes * retries * u64::from(self.consumer_retry_seconds))
    }

    /// The alarm's part: each arrival on the DLQ waits up to one evaluation of the alarm.
    pub fn alarm_schedule(&self) -> Duration {
        self.alarm_period * (self.max_redrive_attempts + 1)
    }

    /// The whole schedule of one message, from its first failure to the poison queue: the
    /// re-driver's backoff, the consumer's retries and the alarm's evaluations.
    pub fn whole_schedule(&self) -> Duration {
        self.backoff_schedule() + self.consumer_schedule() + self.alarm_schedule()
    }

    /// The outage: `outage_factor` times the whole schedule, so that without a circuit every
    /// message exhausts its attempts during the outage.
    pub fn outage(&self) -> Duration {
        self.whole_schedule() * self.outage_factor
    }

    /// The re-driver's configuration for one side.
    fn redriver_config(&self, queues: &QueueSet, circuit_table: Option<&str>) -> RedriverConfig {
        let mut map: HashMap<String, String> = [
            ("DLQ_URL", queues.dlq_url.clone()),
            ("SOURCE_QUEUE_URL", queues.source_url.clone()),
            ("POISON_QUEUE_URL", queues.poison_url.clone()),
            (
                "MAX_REDRIVE_ATTEMPTS",
                self.max_redrive_attempts.to_string(),
            ),
            (
                "BACKOFF_BASE_SECONDS",
                self.backoff_base_seconds.to_string(),
            ),
            ("BACKOFF_MULTIPLIER", self.backoff_multiplier.to_string()),
            ("BACKOFF_MAX_SECONDS", self.backoff_max_seconds.to_string()),
            ("BACKOFF_JITTER", "none".into()),
            ("METRIC_NAMESPACE", "RedriveCircuitSim".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(table) = circuit_table {
            map.insert("CIRCUIT_TABLE".into(), table.to_string());
            map.extend(self.circuit_env.iter().cloned());
        }
        RedriverConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .unwrap_or_else(|e| panic!("the simulation's re-driver configuration: {e}"))
    }

    fn consumer_config(&self, table: &str, dlq: &str) -> redrive_consumer::ConsumerConfig {
        let retry = self.consumer_retry_seconds.to_string();
        let map: HashMap<&str, String> = [
            ("IDEMPOTENCY_TABLE", table.to_string()),
            ("DLQ_URL", dlq.to_string()),
            ("RETRY_BASE_SECONDS", retry.clone()),
            ("RETRY_MULTIPLIER", "1".into()),
            ("RETRY_MAX_SECONDS", retry),
            ("RETRY_JITTER", "none".into()),
        ]
        .into();
        redrive_consumer::ConsumerConfig::from_env(&Env(move |k: &str| map.get(k).cloned()))
            .unwrap_or_else(|e| panic!("the simulation's consumer configuration: {e}"))
    }
}

fn env_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Which re-driver a side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The re-driver without `CIRCUIT_TABLE`: backoff only.
    Without,
    /// The re-driver with the adaptive circuit (`CIRCUIT_TABLE` set).
    With,
}

impl Side {
    pub fn label(self) -> &'static str {
        match self {
            Self::Without => "without circuit",
            Self::With => "with circuit",
        }
    }
}

/// What one side came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideReport {
    pub side: Option<Side>,
    pub messages: u64,
    /// Messages in the poison queue when the downstream recovered.
    pub parked_during_outage: u64,
    /// Seconds into the outage at which the poison queue held every message (`None`: never).
    pub all_parked_after_seconds: Option<f64>,
    /// Messages on the DLQ (visible, in flight, delayed) when the downstream recovered.
    pub dlq_at_recovery: u64,
    /// Seconds from the downstream's recovery to the DLQ and the source queue being empty
    /// (`None`: not within `max_recovery`).
    pub recovery_to_empty_seconds: Option<f64>,
    /// Keys the downstream applied exactly once.
    pub delivered_once: u64,
    /// Keys the downstream applied more than once.
    pub delivered_twice: u64,
    /// Keys neither delivered nor in any queue.
    pub lost: Vec<String>,
    /// Keys parked at the end, by `queue:reason`.
    pub parked: BTreeMap<String, u64>,
    /// Anything that breaks the contract: a key delivered and still parked, a copy that was
    /// never produced, more than one copy of a key.
    pub violations: Vec<String>,
    /// Requests the downstream answered with an error (the outage's load on it).
    pub downstream_failures: u64,
    pub redriver_invocations: u64,
    /// Re-driver responses by `stoppedBecause`.
    pub stopped_because: BTreeMap<String, u64>,
    pub redriven: u64,
    pub isolated: u64,
    pub redriver_errors: u64,
}

impl SideReport {
    pub fn parked_total(&self) -> u64 {
        self.parked.values().sum()
    }

    /// No loss, no double delivery, no violation, and the DLQ emptied after the recovery.
    pub fn sound(&self) -> bool {
        self.lost.is_empty()
            && self.delivered_twice == 0
            && self.violations.is_empty()
            && self.recovery_to_empty_seconds.is_some()
    }
}

/// Both sides of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub settings: SimSettings,
    pub backoff_schedule_seconds: u64,
    pub consumer_schedule_seconds: u64,
    pub outage_seconds: u64,
    pub without: SideReport,
    /// `None` when the adaptive circuit could not be configured.
    pub with: Option<SideReport>,
}

impl SimReport {
    /// Without the circuit every message is parked during the outage (the outage is long
    /// enough); with it none is; both sides lose nothing and deliver nothing twice.
    pub fn passed(&self) -> bool {
        let all = self.settings.messages;
        let with_ok = self
            .with
            .as_ref()
            .is_some_and(|w| w.sound() && w.parked_during_outage == 0 && w.parked_total() == 0);
        self.without.sound() && self.without.parked_during_outage == all && with_ok
    }
}

impl std::fmt::Display for SimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.settings;
        writeln!(
            f,
            "circuit simulation (moto): {}",
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        let delays: Vec<String> = (1..=s.max_redrive_attempts)
            .map(|a| s.redrive_delay(a).to_string())
            .collect();
        writeln!(
            f,
            "  schedule           re-driver {} attempts, backoff {} s = {} s; consumer retries {} s (maxReceiveCount {}, {} s per retry); alarm evaluations {} s; whole {} s",
            s.max_redrive_attempts,
            delays.join("+"),
            self.backoff_schedule_seconds,
            self.consumer_schedule_seconds,
            s.max_receive_count,
            s.consumer_retry_seconds,
            s.alarm_schedule().as_secs(),
            s.whole_schedule().as_secs()
        )?;
        writeln!(
            f,
            "  outage             {} s of 503 ({}x the whole schedule), {} messages per side produced as it starts; DLQ alarm evaluated every {} s, safety net every {} s",
            self.outage_seconds,
            s.outage_factor,
            s.messages,
            s.alarm_period.as_secs_f64(),
            s.schedule_period.as_secs_f64()
        )?;
        if self.with.is_some() {
            let tuning: Vec<String> = s
                .circuit_env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            writeln!(
                f,
                "  circuit            {} (the rest at their defaults)",
                tuning.join(" ")
            )?;
        }
        let sides: Vec<&SideReport> = std::iter::once(&self.without)
            .chain(self.with.as_ref())
            .collect();
        write!(f, "  {:<40}", "")?;
        for side in &sides {
            write!(f, "{:>18}", side.side.map_or("?", Side::label))?;
        }
        writeln!(f)?;
        let row = |f: &mut std::fmt::Formatter<'_>,
                   name: &str,
                   cell: &dyn Fn(&SideReport) -> String|
         -> std::fmt::Result {
            write!(f, "  {name:<40}")?;
            for side in &sides {
                write!(f, "{:>18}", cell(side))?;
            }
            writeln!(f)
        };
        row(f, "parked in poison during the outage", &|r| {
            format!("{} of {}", r.parked_during_outage, r.messages)
        })?;
        row(f, "  all of them parked after", &|r| {
            r.all_parked_after_seconds
                .map_or("-".into(), |t| format!("{t:.1} s"))
        })?;
        row(f, "on the DLQ when the downstream recovers", &|r| {
            r.dlq_at_recovery.to_string()
        })?;
        row(f, "recovery -> DLQ and source empty", &|r| {
            r.recovery_to_empty_seconds
                .map_or("not within limit".into(), |t| format!("{t:.1} s"))
        })?;
        row(f, "delivered once", &|r| r.delivered_once.to_string())?;
        row(f, "parked at the end", &|r| r.parked_total().to_string())?;
        row(f, "delivered twice", &|r| r.delivered_twice.to_string())?;
        row(f, "lost", &|r| r.lost.len().to_string())?;
        row(f, "downstream calls that failed", &|r| {
            r.downstream_failures.to_string()
        })?;
        row(f, "re-driver invocations", &|r| {
            r.redriver_invocations.to_string()
        })?;
        row(f, "  stopped by circuit-open", &|r| {
            r.stopped_because
                .get("circuit-open")
                .copied()
                .unwrap_or(0)
                .to_string()
        })?;
        row(f, "redriven / isolated", &|r| {
            format!("{} / {}", r.redriven, r.isolated)
        })?;
        if self.with.is_none() {
            writeln!(
                f,
                "  with circuit: NOT RUN (the re-driver has no adaptive circuit to configure)"
            )?;
        }
        for side in &sides {
            let label = side.side.map_or("?", Side::label);
            for v in &side.violations {
                writeln!(f, "  VIOLATION ({label})  {v}")?;
            }
            for k in side.lost.iter().take(10) {
                writeln!(f, "  LOST ({label})       {k}")?;
            }
        }
        Ok(())
    }
}

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
        let table = create_circuit_table(&ddb).await?;
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
        let mut ids = Vec::new();
        let side = self.side.label();
        for start in (0..n).step_by(10) {
            let entries = (start..(start + 10).min(n))
                .map(|i| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(format!(
                            r#"{{"n":{i},"side":"{side}","amountCents":{}}}"#,
                            100 + i
                        ))
                        .build()
                        .expect("id and body are set")
                })
                .collect();
            let out = self
                .sqs
                .send_message_batch()
                .queue_url(&self.queues.source_url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap_or_else(|e| panic!("producing: {e:?}"));
            assert!(out.failed.is_empty(), "producing: {:?}", out.failed);
            ids.extend(out.successful.into_iter().map(|s| s.message_id));
        }
        ids
    }

    /// The event source mapping: receive, invoke the consumer, delete what it did not report.
    async fn poller(&self) {
        while !self.stopped() {
            let out = self
                .sqs
                .receive_message()
                .queue_url(&self.queues.source_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .visibility_timeout(30)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await;
            let messages: Vec<redrive_consumer::Message> = match out {
                Ok(out) => out
                    .messages
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| redrive_consumer::Message {
                        attributes: attributes_from_sdk(m.message_attributes.as_ref()),
                        receive_count: m
                            .attributes
                            .as_ref()
                            .and_then(|a| {
                                a.get(&MessageSystemAttributeName::ApproximateReceiveCount)
                            })
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1),
                        message_id: m.message_id.unwrap_or_default(),
                        receipt_handle: m.receipt_handle.unwrap_or_default(),
                        body: m.body.unwrap_or_default(),
                        group_id: None,
                        source: Some(self.source_arn.clone()),
                        trace_header: None,
                    })
                    .collect(),
                Err(_) => Vec::new(),
            };
            if messages.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let records: Vec<Value> = messages
                .iter()
                .map(|m| record_to_event_json(m, REGION))
                .collect();
            let handled = self
                .consumer
                .handle(
                    &json!({ "Records": records }),
                    wall_ms() + CONSUMER_TIMEOUT_MS,
                )
                .await
                .unwrap_or_else(|e| panic!("the consumer rejected an SQS event: {e}"));
            let failed: Vec<&str> = handled.response.failed_ids().into_iter().collect();
            let settled: Vec<&String> = messages
                .iter()
                .filter(|m| !failed.contains(&m.message_id.as_str()))
                .map(|m| &m.receipt_handle)
                .collect();
            for chunk in settled.chunks(10) {
                let entries = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .receipt_handle(*r)
                            .build()
                            .expect("id and handle are set")
                    })
                    .collect();
                let _ = self
                    .sqs
                    .delete_message_batch()
                    .queue_url(&self.queues.source_url)
                    .set_entries(Some(entries))
                    .send()
                    .await;
            }
        }
    }

    /// CloudWatch's evaluation of the DLQ alarm: visible messages and not in ALARM -> ALARM
    /// and the SNS notification to the re-driver; an empty DLQ -> OK. A notification happens
    /// only on a change of state: the re-driver re-arms the alarm after each drain.
    async fn alarm_evaluator(&self, period: Duration) {
        while !self.stopped() {
            tokio::time::sleep(period).await;
            let Some((visible, _, _)) = depths(&self.sqs, &self.queues.dlq_url).await else {
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
            let total = depths(&self.sqs, &self.queues.dlq_url)
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
        let result = self
            .engine
            .handle(event, Some(Instant::now() + REDRIVER_TIMEOUT))
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

    /// The SNS delivery of this side's alarm notification (the shape of
    /// tests/fixtures/sns-cloudwatch-alarm.json).
    fn alarm_notification(&self, old_state: &str, period: Duration) -> Value {
        // http://host:port/<account>/<name>
        let account = self
            .queues
            .dlq_url
            .rsplit('/')
            .nth(1)
            .unwrap_or("123456789012");
        let mut event = redrive_tests::fixture("sns-cloudwatch-alarm.json");
        let record = &mut event["Records"][0];
        let mut message: Value =
            serde_json::from_str(record["Sns"]["Message"].as_str().unwrap_or("{}"))
                .expect("the fixture's Message is JSON");
        message["AlarmName"] = json!(self.alarm);
        message["AWSAccountId"] = json!(account);
        message["AlarmArn"] = json!(format!(
            "arn:aws:cloudwatch:{REGION}:{account}:alarm:{}",
            self.alarm
        ));
        message["OldStateValue"] = json!(old_state);
        message["Trigger"]["Dimensions"] =
            json!([{"value": self.queues.dlq_name, "name": "QueueName"}]);
        message["Trigger"]["Period"] = json!(period.as_secs().max(1));
        record["Sns"]["Message"] = json!(message.to_string());
        event
    }

    /// Every message left in the three queues.
    async fn inventory(&self) -> Vec<Parked> {
        let q = &self.queues;
        let mut parked = Vec::new();
        for (place, url) in [
            (Place::Source, &q.source_url),
            (Place::Dlq, &q.dlq_url),
            (Place::Poison, &q.poison_url),
        ] {
            for m in drain_all(&self.sqs, url).await {
                let attributes = attributes_from_sdk(m.message_attributes.as_ref());
                parked.push(Parked::read(
                    place,
                    m.message_id().unwrap_or(""),
                    &attributes,
                ));
            }
        }
        parked
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
    let inventory = rig.inventory().await;
    let mut report = std::mem::take(&mut *lock(&rig.tally));
    report.parked_during_outage = parked_during_outage;
    report.dlq_at_recovery = dlq_at_recovery;
    report.recovery_to_empty_seconds = recovery;
    report.all_parked_after_seconds = all_parked_after;
    reconcile(&mut report, &produced, &inventory, &rig.downstream);
    report
}

/// Every produced message is delivered exactly once by the downstream's own records (by
/// idempotency key, whose chain is the original MessageId), or parked in exactly one copy.
fn reconcile(
    report: &mut SideReport,
    produced: &[String],
    inventory: &[Parked],
    downstream: &Downstream,
) {
    let mut copies: HashMap<&str, Vec<&Parked>> = HashMap::new();
    for p in inventory {
        copies.entry(p.key.as_str()).or_default().push(p);
        if !produced.contains(&p.key) {
            report
                .violations
                .push(format!("a queue holds {}, which was never produced", p.key));
        }
    }
    for id in produced {
        let delivered = downstream.deliveries(id);
        let found = copies.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        match (delivered, found.len()) {
            (0, 0) => report.lost.push(id.clone()),
            (0, n) => {
                let first = found[0];
                let label = match &first.reason {
                    Some(r) => format!("{}:{r}", first.place.as_str()),
                    None => first.place.as_str().to_string(),
                };
                *report.parked.entry(label).or_default() += 1;
                if n > 1 {
                    report
                        .violations
                        .push(format!("{id} is parked in {n} copies"));
                }
            }
            (d, n) => {
                if d == 1 {
                    report.delivered_once += 1;
                } else {
                    report.delivered_twice += 1;
                }
                if n > 0 {
                    report
                        .violations
                        .push(format!("{id} was delivered and still sits in a queue"));
                }
            }
        }
    }
    report.downstream_failures = downstream
        .requests()
        .iter()
        .filter(|r| !r.is_success())
        .count() as u64;
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

/// The adaptive circuit's durable record: a table keyed by `queue` (the DLQ URL).
async fn create_circuit_table(ddb: &aws_sdk_dynamodb::Client) -> Result<String, String> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let name = redrive_tests::unique_name("circuit");
    ddb.create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("queue")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("queue")
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| format!("CreateTable {name}: {e:?}"))?;
    Ok(name)
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

/// (visible, in flight, delayed)
async fn depths(sqs: &Client, url: &str) -> Option<(u64, u64, u64)> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .ok()?;
    let attrs = out.attributes.unwrap_or_default();
    let get = |name: QueueAttributeName| -> u64 {
        attrs.get(&name).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    Some((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// Visible, in flight and delayed; an unanswered query counts as not empty.
async fn total_depth(sqs: &Client, url: &str) -> u64 {
    depths(sqs, url)
        .await
        .map_or(u64::MAX, |(v, i, d)| v + i + d)
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
