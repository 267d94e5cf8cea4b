//! The baseline: a DLQ redrive written the way the common scripts do it. Receive up to 10,
//! then for each message send it to the source queue and delete it from the DLQ, one call
//! each; stop at the first empty receive. No backoff, no metadata, no batching.

use std::future::Future;
use std::sync::Arc;

use aws_sdk_sqs::Client;
use redrive_engine::fake::FakeSqs;
use redrive_engine::ports::{HandleEntry, Queue, ReceiveRequest, SendEntry};
use redrive_shared::Attributes;
use redrive_shared::limits::Outgoing;
use redrive_shared::sdk::{attributes_from_sdk, attributes_to_sdk};

/// A message as the script holds it between its calls.
#[derive(Debug, Clone)]
pub struct ScriptMessage {
    pub body: String,
    pub attributes: Attributes,
    pub receipt_handle: String,
}

/// The three calls the script makes.
pub trait ScriptQueue: Sync {
    fn receive(&self, url: &str)
    -> impl Future<Output = Result<Vec<ScriptMessage>, String>> + Send;
    fn send_one(
        &self,
        url: &str,
        message: &ScriptMessage,
    ) -> impl Future<Output = Result<(), String>> + Send;
    fn delete_one(
        &self,
        url: &str,
        receipt_handle: &str,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// Long-poll wait of the script's receives: the same as the re-driver's default, so that the
/// final empty receive costs both the same.
pub const WAIT_SECONDS: i32 = 1;
/// The visibility timeout scripts leave at the queue default.
pub const VISIBILITY_SECONDS: i32 = 30;

/// Moves up to `max` messages from `dlq` to `source`; returns how many it moved.
pub async fn redrive<Q: ScriptQueue>(
    queue: &Q,
    dlq: &str,
    source: &str,
    max: u64,
) -> Result<u64, String> {
    let mut moved = 0;
    while moved < max {
        let batch = queue.receive(dlq).await?;
        if batch.is_empty() {
            break;
        }
        for message in batch {
            queue.send_one(source, &message).await?;
            queue.delete_one(dlq, &message.receipt_handle).await?;
            moved += 1;
        }
    }
    Ok(moved)
}

/// The script over the SDK: ReceiveMessage, SendMessage, DeleteMessage.
pub struct SdkScript(pub Client);

impl ScriptQueue for SdkScript {
    async fn receive(&self, url: &str) -> Result<Vec<ScriptMessage>, String> {
        let out = self
            .0
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(WAIT_SECONDS)
            .visibility_timeout(VISIBILITY_SECONDS)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| format!("ReceiveMessage: {e:?}"))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| ScriptMessage {
                attributes: attributes_from_sdk(m.message_attributes.as_ref()),
                body: m.body.unwrap_or_default(),
                receipt_handle: m.receipt_handle.unwrap_or_default(),
            })
            .collect())
    }

    async fn send_one(&self, url: &str, message: &ScriptMessage) -> Result<(), String> {
        self.0
            .send_message()
            .queue_url(url)
            .message_body(&message.body)
            .set_message_attributes(
                (!message.attributes.is_empty()).then(|| attributes_to_sdk(&message.attributes)),
            )
            .send()
            .await
            .map_err(|e| format!("SendMessage: {e:?}"))?;
        Ok(())
    }

    async fn delete_one(&self, url: &str, receipt_handle: &str) -> Result<(), String> {
        self.0
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| format!("DeleteMessage: {e:?}"))?;
        Ok(())
    }
}

/// The script over the in-memory port fake: a single send or delete is a batch call of one
/// entry there, which costs one call of the fake's latency model, as the real single call does.
pub struct FakeScript(pub Arc<FakeSqs>);

impl ScriptQueue for FakeScript {
    async fn receive(&self, url: &str) -> Result<Vec<ScriptMessage>, String> {
        let got = self
            .0
            .receive(
                url,
                ReceiveRequest::new(10, WAIT_SECONDS, VISIBILITY_SECONDS),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(got
            .into_iter()
            .map(|m| ScriptMessage {
                body: m.body,
                attributes: m.attributes,
                receipt_handle: m.receipt_handle,
            })
            .collect())
    }

    async fn send_one(&self, url: &str, message: &ScriptMessage) -> Result<(), String> {
        let entry = SendEntry {
            id: "0".into(),
            message: Outgoing {
                body: message.body.clone(),
                attributes: message.attributes.clone(),
                delay_seconds: None,
                group_id: None,
                dedup_id: None,
                trace_header: None,
            },
        };
        let out = self
            .0
            .send_batch(url, &[entry])
            .await
            .map_err(|e| e.to_string())?;
        match out.failed.first() {
            Some(f) => Err(format!("send failed: {}", f.code)),
            None => Ok(()),
        }
    }

    async fn delete_one(&self, url: &str, receipt_handle: &str) -> Result<(), String> {
        let entry = HandleEntry {
            id: "0".into(),
            receipt_handle: receipt_handle.to_string(),
        };
        let out = self
            .0
            .delete_batch(url, &[entry])
            .await
            .map_err(|e| e.to_string())?;
        match out.failed.first() {
            Some(f) => Err(format!("delete failed: {}", f.code)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/b-dlq";
    const SRC: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/b-src";

    #[tokio::test]
    async fn the_script_moves_everything_with_two_calls_per_message() {
        let sqs = FakeSqs::new();
        sqs.create_queue(DLQ);
        sqs.create_queue(SRC);
        for i in 0..25 {
            sqs.push(DLQ, &format!("m{i}"), Attributes::new(), None);
        }
        let moved = redrive(&FakeScript(sqs.clone()), DLQ, SRC, u64::MAX)
            .await
            .unwrap();
        assert_eq!(moved, 25);
        assert_eq!((sqs.len(DLQ), sqs.len(SRC)), (0, 25));
        let c = &sqs.calls;
        use std::sync::atomic::Ordering::SeqCst;
        // 3 receives with messages and one empty; one send and one delete per message.
        assert_eq!(c.receive.load(SeqCst), 4);
        assert_eq!(c.send_batch.load(SeqCst), 25);
        assert_eq!(c.delete_batch.load(SeqCst), 25);
    }
}
