//! SDK adapters for the ports (SQS, CloudWatch alarms and metrics), and the clients every front
//! end builds once ([`Clients::from_sdk`]).

use aws_sdk_cloudwatch::types::{AlarmType, Dimension, MetricDatum, StandardUnit, StateValue};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use redrive_shared::archive::SystemAttributes;
use redrive_shared::config::RedriverConfig;
use redrive_shared::sdk::{
    attributes_from_sdk, attributes_to_sdk, trace_header_from_sdk, trace_header_to_sdk,
};

use crate::Engine;
use crate::circuit::DynamoDbCircuitStore;
use crate::ports::{
    AlarmInfo, AlarmState, Alarms, BatchOutcome, Depth, EntryFailure, HandleEntry, MetricUnit,
    MetricValue, Metrics, PortError, Queue, ReceiveRequest, Received, SendEntry,
};

/// Maps an error of any SDK client to a [`PortError`] that keeps it as its source, classifying
/// what is worth retrying.
pub fn port_error<E, R>(
    operation: &'static str,
    err: aws_sdk_sqs::error::SdkError<E, R>,
) -> PortError
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_sqs::error::SdkError;
    let (code, retryable) = match &err {
        SdkError::TimeoutError(_) => ("Timeout".to_string(), true),
        SdkError::DispatchFailure(_) => ("DispatchFailure".to_string(), true),
        SdkError::ResponseError(_) => ("ResponseError".to_string(), true),
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("ServiceError").to_string();
            let retryable = is_retryable_code(&code);
            (code, retryable)
        }
        _ => ("ConstructionFailure".to_string(), false),
    };
    let message = aws_sdk_sqs::error::DisplayErrorContext(&err).to_string();
    PortError::new(operation, code, message, retryable).with_source(err)
}

fn is_retryable_code(code: &str) -> bool {
    let c = code.to_ascii_lowercase();
    c.contains("throttl")
        || c.contains("requestlimitexceeded")
        || c.contains("toomanyrequests")
        || c.contains("internalerror")
        || c.contains("internalfailure")
        || c.contains("serviceunavailable")
        || c == "kms.throttlingexception"
}

/// The entries of an SQS batch call, each built by `build`.
fn entries<E, T>(
    operation: &'static str,
    items: &[E],
    build: impl Fn(&E) -> Result<T, aws_sdk_sqs::error::BuildError>,
) -> Result<Vec<T>, PortError> {
    items
        .iter()
        .map(|e| {
            build(e).map_err(|b| {
                PortError::new(operation, "Build", b.to_string(), false).with_source(b)
            })
        })
        .collect()
}

/// One SQS batch call: its entries built by `$build` (an entry the SDK's builder refuses fails
/// the call before it is sent), the call, and its per-entry results.
macro_rules! batch_call {
    ($operation:literal, $request:expr, $entries:expr, $build:expr) => {{
        let out = $request
            .set_entries(Some(entries($operation, $entries, $build)?))
            .send()
            .await
            .map_err(|e| port_error($operation, e))?;
        Ok(batch_outcome(
            out.successful.into_iter().map(|s| s.id),
            out.failed,
        ))
    }};
}

/// Per-entry results of any SQS batch call.
fn batch_outcome(
    succeeded: impl Iterator<Item = String>,
    failed: Vec<BatchResultErrorEntry>,
) -> BatchOutcome {
    BatchOutcome {
        succeeded: succeeded.collect(),
        failed: failed
            .into_iter()
            .map(|f| EntryFailure {
                id: f.id,
                code: f.code,
                message: f.message.unwrap_or_default(),
                sender_fault: f.sender_fault,
            })
            .collect(),
    }
}

/// SQS through the SDK (AWS, or moto via `AWS_ENDPOINT_URL`).
#[derive(Clone)]
pub struct SqsQueue {
    pub client: aws_sdk_sqs::Client,
}

impl SqsQueue {
    /// One attribute of a queue (GetQueueAttributes); `None` when the answer lacks it.
    async fn attribute(
        &self,
        queue_url: &str,
        name: QueueAttributeName,
    ) -> Result<Option<String>, PortError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(name.clone())
            .send()
            .await
            .map_err(|e| port_error("GetQueueAttributes", e))?;
        Ok(out.attributes.and_then(|mut a| a.remove(&name)))
    }
}

impl Queue for SqsQueue {
    async fn receive_with_system(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<(Received, SystemAttributes)>, PortError> {
        let out = self
            .client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(request.max_messages.clamp(1, 10))
            .wait_time_seconds(request.wait_seconds)
            .visibility_timeout(request.visibility_seconds)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| port_error("ReceiveMessage", e))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let sys = m.attributes.as_ref();
                let get = |k: MessageSystemAttributeName| sys.and_then(|a| a.get(&k)).cloned();
                let system = SystemAttributes::from_pairs(
                    sys.into_iter()
                        .flatten()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                );
                let received = Received {
                    attributes: attributes_from_sdk(m.message_attributes.as_ref()),
                    group_id: get(MessageSystemAttributeName::MessageGroupId),
                    receive_count: get(MessageSystemAttributeName::ApproximateReceiveCount)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    sent_timestamp_ms: get(MessageSystemAttributeName::SentTimestamp)
                        .and_then(|v| v.parse().ok()),
                    dead_letter_source_arn: get(
                        MessageSystemAttributeName::DeadLetterQueueSourceArn,
                    ),
                    trace_header: trace_header_from_sdk(
                        sys,
                        m.message_id.as_deref().unwrap_or_default(),
                    ),
                    message_id: m.message_id.unwrap_or_default(),
                    receipt_handle: m.receipt_handle.unwrap_or_default(),
                    body: m.body.unwrap_or_default(),
                };
                (received, system)
            })
            .collect())
    }

    async fn receive(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<Received>, PortError> {
        let got = Queue::receive_with_system(self, queue_url, request).await?;
        Ok(got.into_iter().map(|(m, _)| m).collect())
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        let request = self.client.send_message_batch().queue_url(queue_url);
        batch_call!("SendMessageBatch", request, entries, |e: &SendEntry| {
            SendMessageBatchRequestEntry::builder()
                .id(&e.id)
                .message_body(&e.message.body)
                .set_message_attributes(
                    (!e.message.attributes.is_empty())
                        .then(|| attributes_to_sdk(&e.message.attributes)),
                )
                .set_delay_seconds(e.message.delay_seconds.map(|d| d as i32))
                .set_message_group_id(e.message.group_id.clone())
                .set_message_deduplication_id(e.message.dedup_id.clone())
                .set_message_system_attributes(trace_header_to_sdk(e.message.trace_header.as_ref()))
                .build()
        })
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        let request = self.client.delete_message_batch().queue_url(queue_url);
        batch_call!("DeleteMessageBatch", request, entries, |e: &HandleEntry| {
            DeleteMessageBatchRequestEntry::builder()
                .id(&e.id)
                .receipt_handle(&e.receipt_handle)
                .build()
        })
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        let request = self
            .client
            .change_message_visibility_batch()
            .queue_url(queue_url);
        batch_call!(
            "ChangeMessageVisibilityBatch",
            request,
            entries,
            |e: &HandleEntry| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(&e.id)
                    .receipt_handle(&e.receipt_handle)
                    .visibility_timeout(visibility_seconds)
                    .build()
            }
        )
    }

    async fn depth(&self, queue_url: &str) -> Result<Depth, PortError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| port_error("GetQueueAttributes", e))?;
        let attrs = out.attributes.unwrap_or_default();
        let get = |k: QueueAttributeName| {
            attrs
                .get(&k)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Depth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    async fn max_message_size(&self, queue_url: &str) -> Result<Option<usize>, PortError> {
        Ok(self
            .attribute(queue_url, QueueAttributeName::MaximumMessageSize)
            .await?
            .and_then(|v| v.parse::<usize>().ok()))
    }

    async fn tags(
        &self,
        queue_url: &str,
    ) -> Result<std::collections::HashMap<String, String>, PortError> {
        let out = self
            .client
            .list_queue_tags()
            .queue_url(queue_url)
            .send()
            .await
            .map_err(|e| port_error("ListQueueTags", e))?;
        Ok(out.tags.unwrap_or_default())
    }

    async fn dead_letter_sources(&self, dlq_url: &str) -> Result<Vec<String>, PortError> {
        let mut urls = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .client
                .list_dead_letter_source_queues()
                .queue_url(dlq_url)
                .max_results(1000)
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| port_error("ListDeadLetterSourceQueues", e))?;
            urls.extend(out.queue_urls);
            match out.next_token {
                Some(t) if !t.is_empty() => next = Some(t),
                _ => return Ok(urls),
            }
        }
    }

    async fn retention_seconds(&self, queue_url: &str) -> Result<u64, PortError> {
        self.attribute(queue_url, QueueAttributeName::MessageRetentionPeriod)
            .await?
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                PortError::new(
                    "GetQueueAttributes",
                    "MissingAttribute",
                    "the answer holds no MessageRetentionPeriod",
                    false,
                )
            })
    }
}

/// INSUFFICIENT_DATA (and any state this SDK does not know) is not ALARM.
fn alarm_state(state: Option<&StateValue>) -> AlarmState {
    match state {
        Some(StateValue::Alarm) => AlarmState::Alarm,
        Some(StateValue::Ok) => AlarmState::Ok,
        _ => AlarmState::InsufficientData,
    }
}

/// CloudWatch alarms and metrics through the SDK.
#[derive(Clone)]
pub struct CloudWatch {
    pub client: aws_sdk_cloudwatch::Client,
}

impl Alarms for CloudWatch {
    async fn describe(&self, names: &[String]) -> Result<Vec<AlarmInfo>, PortError> {
        let mut found = Vec::new();
        // DescribeAlarms takes at most 100 names per call. Without `AlarmTypes` it answers with
        // metric alarms only; and it pages with `NextToken`.
        for chunk in names.chunks(100) {
            let mut next_token: Option<String> = None;
            loop {
                let out = self
                    .client
                    .describe_alarms()
                    .set_alarm_names(Some(chunk.to_vec()))
                    .alarm_types(AlarmType::MetricAlarm)
                    .alarm_types(AlarmType::CompositeAlarm)
                    .set_next_token(next_token.take())
                    .send()
                    .await
                    .map_err(|e| port_error("DescribeAlarms", e))?;
                for a in out.metric_alarms() {
                    let period = match (a.period(), a.evaluation_periods()) {
                        (Some(p), Some(n)) if p > 0 && n > 0 => Some(p as u64 * n as u64),
                        (Some(p), _) if p > 0 => Some(p as u64),
                        _ => None,
                    };
                    found.push(AlarmInfo {
                        name: a.alarm_name().unwrap_or_default().to_string(),
                        state: alarm_state(a.state_value()),
                        period_seconds: period,
                    });
                }
                for a in out.composite_alarms() {
                    found.push(AlarmInfo {
                        name: a.alarm_name().unwrap_or_default().to_string(),
                        state: alarm_state(a.state_value()),
                        period_seconds: None,
                    });
                }
                match out.next_token() {
                    Some(t) if !t.is_empty() => next_token = Some(t.to_string()),
                    _ => break,
                }
            }
        }
        Ok(found)
    }

    async fn set_ok(&self, name: &str, reason: &str) -> Result<(), PortError> {
        self.client
            .set_alarm_state()
            .alarm_name(name)
            .state_value(StateValue::Ok)
            .state_reason(reason.chars().take(1023).collect::<String>())
            .send()
            .await
            .map_err(|e| port_error("SetAlarmState", e))?;
        Ok(())
    }
}

impl Metrics for CloudWatch {
    /// The one PutMetricData builder: every value with the dimension `QueueName`.
    async fn put(
        &self,
        namespace: &str,
        queue_name: &str,
        values: &[MetricValue],
    ) -> Result<(), PortError> {
        let dim = Dimension::builder()
            .name("QueueName")
            .value(queue_name)
            .build();
        let data = values
            .iter()
            .map(|v| {
                MetricDatum::builder()
                    .metric_name(v.name)
                    .unit(match v.unit {
                        MetricUnit::Count => StandardUnit::Count,
                        MetricUnit::Seconds => StandardUnit::Seconds,
                    })
                    .value(v.value as f64)
                    .dimensions(dim.clone())
                    .build()
            })
            .collect();
        self.client
            .put_metric_data()
            .namespace(namespace)
            .set_metric_data(Some(data))
            .send()
            .await
            .map_err(|e| port_error("PutMetricData", e))?;
        Ok(())
    }
}

/// The SDK clients a front end builds once at init and borrows into every invocation.
#[derive(Clone)]
pub struct Clients {
    pub sqs: SqsQueue,
    pub cloudwatch: CloudWatch,
    pub dynamodb: aws_sdk_dynamodb::Client,
}

/// The engine as every Lambda and the CLI run it: SQS, CloudWatch alarms and metrics, and the
/// adaptive circuit's DynamoDB record when `CIRCUIT_TABLE` is set.
pub type SdkEngine = Engine<SqsQueue, CloudWatch, CloudWatch, Option<DynamoDbCircuitStore>>;

/// The one owner of whole-call retries: the SDK's standard mode, 3 attempts (throttling, 5xx,
/// timeouts and connection errors, with the SDK's backoff and retry quota). The engine
/// retries only the failed entries of a batch call, which the SDK sees as a success.
pub fn retry_config() -> aws_config::retry::RetryConfig {
    aws_config::retry::RetryConfig::standard().with_max_attempts(3)
}

impl Clients {
    /// One client per service, all from the same SDK configuration (its timeouts), each
    /// retrying whole calls by [`retry_config`] unless that configuration sets its own.
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        let sdk = &match sdk.retry_config() {
            Some(_) => sdk.clone(),
            None => sdk.to_builder().retry_config(retry_config()).build(),
        };
        Self {
            sqs: SqsQueue {
                client: aws_sdk_sqs::Client::new(sdk),
            },
            cloudwatch: CloudWatch {
                client: aws_sdk_cloudwatch::Client::new(sdk),
            },
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
        }
    }

    /// The adaptive circuit's record, when the configuration names its table.
    pub fn circuit_store(&self, config: &RedriverConfig) -> Option<DynamoDbCircuitStore> {
        config.circuit.as_ref().map(|c| DynamoDbCircuitStore {
            client: self.dynamodb.clone(),
            table: c.table.clone(),
        })
    }

    /// Triage's book, whose holds every drain keeps, in the table the configuration names
    /// (`TRIAGE_TABLE`, else the circuit table); `None` when it names none.
    pub fn triage_books(&self, config: &RedriverConfig) -> Option<crate::engine::TriageBooks> {
        config.triage_table.as_ref().map(|table| {
            crate::engine::TriageBooks::DynamoDb(crate::triage_store::DynamoDbTriageStore {
                client: self.dynamodb.clone(),
                table: table.clone(),
            })
        })
    }

    /// The engine over these clients.
    pub fn engine(&self, config: RedriverConfig) -> SdkEngine {
        let circuit = self.circuit_store(&config);
        let triage = self.triage_books(&config);
        Engine::over_sdk(
            self.sqs.client.clone(),
            self.cloudwatch.client.clone(),
            config,
        )
        .with_circuit(circuit)
        .with_triage(triage)
    }
}

impl Engine<SqsQueue, CloudWatch, CloudWatch> {
    /// The engine over an SQS and a CloudWatch client (CloudWatch serves the alarms and the
    /// metrics), with no circuit store and no triage book until they are added.
    pub fn over_sdk(
        sqs: aws_sdk_sqs::Client,
        cloudwatch: aws_sdk_cloudwatch::Client,
        config: RedriverConfig,
    ) -> Self {
        let cloudwatch = CloudWatch { client: cloudwatch };
        Engine::new(
            SqsQueue { client: sqs },
            cloudwatch.clone(),
            cloudwatch,
            config,
        )
    }
}
