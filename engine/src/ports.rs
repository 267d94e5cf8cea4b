//! Ports: the narrow capabilities the re-driver needs from AWS. The engine takes them as
//! generics, so the same code runs against the SDK (AWS, or moto in tests) and against the
//! fault-injecting in-memory fake.

use std::future::Future;
use std::sync::Arc;

use redrive_shared::archive::SystemAttributes;
use redrive_shared::limits::Outgoing;
use redrive_shared::{Attributes, TraceHeader};

/// A message as received from a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub attributes: Attributes,
    /// `MessageGroupId` (FIFO).
    pub group_id: Option<String>,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `SentTimestamp`, epoch milliseconds.
    pub sent_timestamp_ms: Option<i64>,
    /// `AWSTraceHeader`: carried onto every copy of the message.
    pub trace_header: Option<TraceHeader>,
    /// `DeadLetterQueueSourceArn`: the queue SQS moved the message from, when it did.
    pub dead_letter_source_arn: Option<String>,
}

/// One entry of a SendMessageBatch: a message (its `trace_header` sent as the
/// `AWSTraceHeader` message system attribute) and its id within the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendEntry {
    /// Unique within its batch.
    pub id: String,
    pub message: Outgoing,
}

/// One entry of a DeleteMessageBatch / ChangeMessageVisibilityBatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleEntry {
    pub id: String,
    pub receipt_handle: String,
}

impl HandleEntry {
    /// Receipt handles as batch entries, numbered from 0 in the order given: an entry's id is
    /// its index, so a caller finds what became of its `i`th message under `i.to_string()`.
    pub fn numbered(handles: impl IntoIterator<Item = String>) -> Vec<HandleEntry> {
        handles
            .into_iter()
            .enumerate()
            .map(|(i, receipt_handle)| HandleEntry {
                id: i.to_string(),
                receipt_handle,
            })
            .collect()
    }
}

/// Per-entry result of a batch call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub succeeded: Vec<String>,
    pub failed: Vec<EntryFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFailure {
    pub id: String,
    pub code: String,
    pub message: String,
    pub sender_fault: bool,
}

/// A whole call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{operation} failed ({code}): {message}")]
pub struct PortError {
    pub operation: &'static str,
    pub code: String,
    pub message: String,
    /// Throttling, 5xx, timeouts, connection errors: worth another try.
    pub retryable: bool,
    /// The error underneath (the SDK's, with its own chain of causes), when there is one.
    #[source]
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PortError {
    /// A failure of `operation` with no error underneath.
    pub fn new(
        operation: &'static str,
        code: impl Into<String>,
        message: impl Into<String>,
        retryable: bool,
    ) -> Self {
        Self {
            operation,
            code: code.into(),
            message: message.into(),
            retryable,
            source: None,
        }
    }

    /// Keeps the error underneath as this failure's source.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }
}

/// Two failures are equal when they say the same; their sources are not compared.
impl PartialEq for PortError {
    fn eq(&self, other: &Self) -> bool {
        (self.operation, &self.code, &self.message, self.retryable)
            == (
                other.operation,
                &other.code,
                &other.message,
                other.retryable,
            )
    }
}

impl Eq for PortError {}

/// Counts of messages on a queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

impl Depth {
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// One ReceiveMessage: at most `max_messages` (SQS takes 1 to 10), long-polling up to
/// `wait_seconds`, each message then hidden for `visibility_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveRequest {
    pub max_messages: i32,
    pub wait_seconds: i32,
    pub visibility_seconds: i32,
}

impl ReceiveRequest {
    pub fn new(max_messages: i32, wait_seconds: i32, visibility_seconds: i32) -> Self {
        Self {
            max_messages,
            wait_seconds,
            visibility_seconds,
        }
    }
}

pub trait Queue: Sync {
    fn receive(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> impl Future<Output = Result<Vec<Received>, PortError>> + Send;

    fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> impl Future<Output = Result<BatchOutcome, PortError>> + Send;

    fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> impl Future<Output = Result<BatchOutcome, PortError>> + Send;

    fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> impl Future<Output = Result<BatchOutcome, PortError>> + Send;

    fn depth(&self, queue_url: &str) -> impl Future<Output = Result<Depth, PortError>> + Send;

    /// The queue's `MaximumMessageSize` in bytes (GetQueueAttributes). `None` when the queue
    /// does not say; the engine then assumes SQS's largest, 1 MiB, and relies on the
    /// send-rejected rule for a queue that is smaller.
    fn max_message_size(
        &self,
        _queue_url: &str,
    ) -> impl Future<Output = Result<Option<usize>, PortError>> + Send {
        async { Ok(None) }
    }

    /// ReceiveMessage, each message with the system attributes an archive keeps
    /// (MessageGroupId, MessageDeduplicationId, SequenceNumber, ...), which [`Received`] does
    /// not carry. By default, what [`Received`] knows of them.
    fn receive_with_system(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> impl Future<Output = Result<Vec<(Received, SystemAttributes)>, PortError>> + Send {
        async move {
            let got = self.receive(queue_url, request).await?;
            Ok(got
                .into_iter()
                .map(|m| {
                    let system = SystemAttributes {
                        sent_timestamp: m.sent_timestamp_ms.map(|t| t.to_string()),
                        approximate_receive_count: Some(m.receive_count.to_string()),
                        message_group_id: m.group_id.clone(),
                        ..SystemAttributes::default()
                    };
                    (m, system)
                })
                .collect())
        }
    }

    /// ListQueueTags: the queue's tags. By default the port cannot tell, and says so.
    fn tags(
        &self,
        _queue_url: &str,
    ) -> impl Future<Output = Result<std::collections::HashMap<String, String>, PortError>> + Send
    {
        async {
            Err(PortError::new(
                "ListQueueTags",
                "Unsupported",
                "this queue port does not read tags",
                false,
            ))
        }
    }

    /// ListDeadLetterSourceQueues: the URLs of the queues whose RedrivePolicy names this DLQ
    /// (every page). By default the port cannot tell, and says so.
    fn dead_letter_sources(
        &self,
        _dlq_url: &str,
    ) -> impl Future<Output = Result<Vec<String>, PortError>> + Send {
        async {
            Err(PortError::new(
                "ListDeadLetterSourceQueues",
                "Unsupported",
                "this queue port does not list a DLQ's sources",
                false,
            ))
        }
    }

    /// The queue's `MessageRetentionPeriod` in seconds (GetQueueAttributes). By default the
    /// port cannot tell, and says so.
    fn retention_seconds(
        &self,
        _queue_url: &str,
    ) -> impl Future<Output = Result<u64, PortError>> + Send {
        async {
            Err(PortError::new(
                "GetQueueAttributes",
                "Unsupported",
                "this queue port does not read MessageRetentionPeriod",
                false,
            ))
        }
    }
}

/// The state of an alarm, as DescribeAlarms reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmState {
    Ok,
    Alarm,
    /// Not enough data to evaluate: treated as not in alarm.
    InsufficientData,
}

/// A metric or composite alarm, as DescribeAlarms reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmInfo {
    pub name: String,
    pub state: AlarmState,
    /// `Period` x `EvaluationPeriods` of a metric alarm, in seconds: the time one evaluation
    /// covers. `None` for composite alarms.
    pub period_seconds: Option<u64>,
}

pub trait Alarms: Sync {
    /// The metric and composite alarms among `names` (every page of DescribeAlarms). A name
    /// that does not exist is absent from the answer.
    fn describe(
        &self,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<AlarmInfo>, PortError>> + Send;

    /// Sets an alarm's state to OK (SetAlarmState), so that its next evaluation fires again.
    fn set_ok(
        &self,
        name: &str,
        reason: &str,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The metric of a DLQ left alone: its settings (tags) invalid or unreadable, or a source that
/// refuses the sends (`DlqLeftAlone`, 1 per run that finds it so).
pub const LEFT_ALONE_METRIC: &str = "DlqLeftAlone";

/// The counts published per invocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunMetrics {
    pub successful_redrives: u64,
    pub poison_pills_isolated: u64,
    pub redrive_failures: u64,
    /// Drains that could not read the DLQ at all (ReceiveMessage failed for good): 0 or 1.
    pub dlq_receive_failures: u64,
    /// Messages that neither the source nor the poison queue accepts: left on the DLQ.
    pub unplaceable_messages: u64,
    /// `DlqLeftAlone`: 1 when the run left messages on the DLQ because their source does not
    /// grant the re-driver (published only then, as the fleet publishes it for a DLQ it leaves
    /// alone: the `dlq-left-alone` alarm pages on it).
    pub dlq_left_alone: u64,
    /// The adaptive circuit's metrics; `None` when the circuit is off (nothing published).
    pub circuit: Option<CircuitMetrics>,
}

/// Published only while the adaptive circuit is on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CircuitMetrics {
    /// `CircuitOpen`: 1 while the circuit is open or half-open after the run, else 0.
    pub open: bool,
    /// `CircuitTransitions`: transitions the run made.
    pub transitions: u64,
    /// `BouncedCopies`: redriven copies the run saw back on the DLQ within the window.
    pub bounced: u64,
}

/// The unit of a published value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricUnit {
    Count,
    Seconds,
}

/// One value of a PutMetricData.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricValue {
    pub name: &'static str,
    pub unit: MetricUnit,
    pub value: u64,
}

impl MetricValue {
    pub fn count(name: &'static str, value: u64) -> Self {
        Self {
            name,
            unit: MetricUnit::Count,
            value,
        }
    }
}

impl RunMetrics {
    /// `SuccessfulRedrives`, `PoisonPillsIsolated`, `RedriveFailures`, `DlqReceiveFailures` and
    /// `UnplaceableMessages`, zeros included; with the circuit on, `CircuitOpen`,
    /// `CircuitTransitions` and `BouncedCopies` too.
    pub fn values(&self) -> Vec<MetricValue> {
        let mut values = vec![
            MetricValue::count("SuccessfulRedrives", self.successful_redrives),
            MetricValue::count("PoisonPillsIsolated", self.poison_pills_isolated),
            MetricValue::count("RedriveFailures", self.redrive_failures),
            MetricValue::count("DlqReceiveFailures", self.dlq_receive_failures),
            MetricValue::count("UnplaceableMessages", self.unplaceable_messages),
        ];
        if self.dlq_left_alone > 0 {
            values.push(MetricValue::count(LEFT_ALONE_METRIC, self.dlq_left_alone));
        }
        if let Some(c) = self.circuit {
            values.extend([
                MetricValue::count("CircuitOpen", u64::from(c.open)),
                MetricValue::count("CircuitTransitions", c.transitions),
                MetricValue::count("BouncedCopies", c.bounced),
            ]);
        }
        values
    }
}

pub trait Metrics: Sync {
    /// One PutMetricData of `values`, each with the dimension `QueueName`.
    fn put(
        &self,
        namespace: &str,
        queue_name: &str,
        values: &[MetricValue],
    ) -> impl Future<Output = Result<(), PortError>> + Send;

    /// A run's metrics in one PutMetricData ([`RunMetrics::values`]).
    fn publish(
        &self,
        namespace: &str,
        queue_name: &str,
        metrics: RunMetrics,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        async move { self.put(namespace, queue_name, &metrics.values()).await }
    }
}
