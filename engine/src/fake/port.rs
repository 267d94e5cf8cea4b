//! The [`Queue`] port of the fake: each call counted, delayed by the latency and any stall,
//! failed by an injected fault, then applied at once (`ops.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{DEFAULT_RETENTION, FakeSqs, invalid};
use crate::ports::{
    BatchOutcome, Depth, HandleEntry, PortError, Queue, ReceiveRequest, Received, SendEntry,
};

impl Queue for Arc<FakeSqs> {
    async fn receive(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<Received>, PortError> {
        self.calls.receive.fetch_add(1, Ordering::SeqCst);
        self.call("ReceiveMessage").await?;
        let out = self.receive_now(queue_url, request.max_messages, request.visibility_seconds)?;
        if out.is_empty() {
            self.calls.empty_receive.fetch_add(1, Ordering::SeqCst);
        }
        Ok(out)
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.calls.send_batch.fetch_add(1, Ordering::SeqCst);
        self.call("SendMessageBatch").await?;
        self.send_now(queue_url, entries)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.calls.delete_batch.fetch_add(1, Ordering::SeqCst);
        if *self.hang_deletes.lock().unwrap_or_else(|e| e.into_inner()) {
            std::future::pending::<()>().await;
        }
        self.call("DeleteMessageBatch").await?;
        self.delete_now(queue_url, entries)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        self.calls.change_visibility.fetch_add(1, Ordering::SeqCst);
        self.call("ChangeMessageVisibilityBatch").await?;
        self.change_visibility_now(queue_url, entries, visibility_seconds)
    }

    async fn depth(&self, queue_url: &str) -> Result<Depth, PortError> {
        self.calls.depth.fetch_add(1, Ordering::SeqCst);
        self.call("GetQueueAttributes").await?;
        self.depth_now(queue_url)
    }

    async fn max_message_size(&self, queue_url: &str) -> Result<Option<usize>, PortError> {
        self.calls.max_size.fetch_add(1, Ordering::SeqCst);
        self.call("GetQueueAttributes").await?;
        if !self.lock().queues.contains_key(queue_url) {
            return Err(invalid(
                "GetQueueAttributes",
                format!("no queue {queue_url}"),
            ));
        }
        Ok(Some(self.max_size_of(queue_url)))
    }

    async fn tags(&self, queue_url: &str) -> Result<HashMap<String, String>, PortError> {
        self.call("ListQueueTags").await?;
        let state = self.lock();
        if !state.queues.contains_key(queue_url) {
            return Err(invalid("ListQueueTags", format!("no queue {queue_url}")));
        }
        Ok(state.tags.get(queue_url).cloned().unwrap_or_default())
    }

    async fn dead_letter_sources(&self, dlq_url: &str) -> Result<Vec<String>, PortError> {
        self.call("ListDeadLetterSourceQueues").await?;
        let state = self.lock();
        if !state.queues.contains_key(dlq_url) {
            return Err(invalid(
                "ListDeadLetterSourceQueues",
                format!("no queue {dlq_url}"),
            ));
        }
        let mut sources: Vec<String> = state
            .redrive
            .iter()
            .filter(|(_, (dlq, _))| dlq == dlq_url)
            .map(|(source, _)| source.clone())
            .collect();
        sources.sort();
        Ok(sources)
    }

    async fn retention_seconds(&self, queue_url: &str) -> Result<u64, PortError> {
        self.call("GetQueueAttributes").await?;
        let state = self.lock();
        if !state.queues.contains_key(queue_url) {
            return Err(invalid(
                "GetQueueAttributes",
                format!("no queue {queue_url}"),
            ));
        }
        Ok(state
            .retention
            .get(queue_url)
            .copied()
            .unwrap_or(DEFAULT_RETENTION)
            .as_secs())
    }
}
