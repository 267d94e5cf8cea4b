//! The Lambda SQS event source mapping, played by a test: poll the source queue, invoke the
//! function with the batch, delete what it did not report in `batchItemFailures`
//! (ReportBatchItemFailures). The demo, the circuit simulation and the soak all poll with
//! [`poll`]; what differs is the queue ([`Source`]: SQS through [`SqsSource`], or an in-memory
//! one) and the function ([`Function`]: a Lambda under `cargo lambda watch`, or the consumer
//! engine in process).

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};

/// The queue side of the event source.
pub trait Source: Sync {
    type Message: Send + Sync;
    /// One poll: up to ten messages, or why the call failed.
    fn receive(&self) -> impl Future<Output = Result<Vec<Self::Message>, String>> + Send;
    /// Deletes these messages from the source; a failed call leaves them to come back after
    /// their visibility timeout, as the event source does.
    fn delete(&self, settled: &[&Self::Message])
    -> impl Future<Output = Result<(), String>> + Send;
    /// The MessageId, as `batchItemFailures` names a message.
    fn message_id(message: &Self::Message) -> &str;
    /// The pause after an empty poll (none where the poll itself long-polls).
    fn idle(&self) -> Duration {
        Duration::ZERO
    }
}

/// The function the event source invokes.
pub trait Function<M: Sync>: Sync {
    /// Invokes the function with one batch: the MessageIds it reported failed, or `None` when
    /// the invocation itself failed (the whole batch comes back after its visibility timeout).
    fn invoke(&self, batch: &[M]) -> impl Future<Output = Option<HashSet<String>>> + Send;
    /// Called with the messages the function settled, before they are deleted.
    fn settled(&self, _settled: &[&M]) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// A call to the source failed (a poll, or a delete).
    fn source_failed(&self, _error: &str) {}
}

/// One poller of the event source mapping, until `stopped` says so. A failed poll pauses for a
/// second; an empty one for [`Source::idle`].
pub async fn poll<S, F>(source: &S, function: &F, stopped: impl Fn() -> bool)
where
    S: Source,
    F: Function<S::Message>,
{
    while !stopped() {
        let batch = match source.receive().await {
            Ok(batch) => batch,
            Err(e) => {
                function.source_failed(&e);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if batch.is_empty() {
            tokio::time::sleep(source.idle()).await;
            continue;
        }
        let Some(failed) = function.invoke(&batch).await else {
            continue;
        };
        let settled: Vec<&S::Message> = batch
            .iter()
            .filter(|m| !failed.contains(S::message_id(m)))
            .collect();
        function.settled(&settled).await;
        if !settled.is_empty()
            && let Err(e) = source.delete(&settled).await
        {
            function.source_failed(&e);
        }
    }
}

/// An SQS source queue: ReceiveMessage of up to ten with every attribute, DeleteMessageBatch
/// by ten. Entries already deleted (the consumer fast-tracks permanent failures to the DLQ)
/// succeed, as they do on SQS.
pub struct SqsSource {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
    /// The ReceiveMessage visibility timeout, in seconds (`None`: the queue's own).
    pub visibility_timeout: Option<i32>,
    /// The pause after an empty poll.
    pub idle: Duration,
    /// One ReceiveMessage or DeleteMessageBatch at a time, for emulators that are not safe
    /// under concurrent calls on one queue.
    pub one_call_at_a_time: Option<tokio::sync::Mutex<()>>,
}

impl SqsSource {
    /// Polls `queue_url` with the queue's visibility timeout, no pause after an empty poll
    /// (the poll long-polls for a second), calls concurrent.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            visibility_timeout: None,
            idle: Duration::ZERO,
            one_call_at_a_time: None,
        }
    }

    /// One ReceiveMessage: up to ten messages, long-polling for a second.
    pub async fn receive_messages(&self) -> Result<Vec<Message>, String> {
        let _turn = self.turn().await;
        self.client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .set_visibility_timeout(self.visibility_timeout)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map(|out| out.messages.unwrap_or_default())
            .map_err(|e| format!("ReceiveMessage failed: {e:?}"))
    }

    /// DeleteMessageBatch of these receipt handles, by ten; the last failure, if any.
    pub async fn delete_receipts(&self, receipts: &[&str]) -> Result<(), String> {
        let mut failed = None;
        for chunk in receipts.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(*receipt)
                        .build()
                        .expect("id and handle are set")
                })
                .collect();
            let _turn = self.turn().await;
            if let Err(e) = self
                .client
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                failed = Some(format!("DeleteMessageBatch failed: {e:?}"));
            }
        }
        failed.map_or(Ok(()), Err)
    }

    async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.one_call_at_a_time {
            Some(m) => Some(m.lock().await),
            None => None,
        }
    }
}

impl Source for SqsSource {
    type Message = Message;

    async fn receive(&self) -> Result<Vec<Message>, String> {
        self.receive_messages().await
    }

    async fn delete(&self, settled: &[&Message]) -> Result<(), String> {
        let receipts: Vec<&str> = settled
            .iter()
            .map(|m| m.receipt_handle().unwrap_or_default())
            .collect();
        self.delete_receipts(&receipts).await
    }

    fn message_id(message: &Message) -> &str {
        message.message_id().unwrap_or_default()
    }

    fn idle(&self) -> Duration {
        self.idle
    }
}

/// The ApproximateReceiveCount of a message received with every system attribute (1 when
/// absent).
pub fn receive_count(message: &Message) -> u32 {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}
