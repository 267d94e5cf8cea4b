//! A [`Queue`] in front of another that shows each call's result to a [`Tap`], and lets the
//! tap refuse a delete before it is made: the CLI's progress counters and the tests' crash
//! points are taps, so none of them forwards the whole port by hand.

use std::collections::HashMap;
use std::future::Future;

use redrive_shared::archive::SystemAttributes;

use crate::ports::{
    BatchOutcome, Depth, HandleEntry, PortError, Queue, ReceiveRequest, Received, SendEntry,
};

/// What a [`Tapped`] queue tells of the calls that go through it. Each hook does nothing by
/// default.
pub trait Tap: Sync {
    /// `count` messages were received from `queue_url`.
    fn received(&self, _queue_url: &str, _count: usize) {}

    /// A SendMessageBatch to `queue_url` answered `outcome`.
    fn sent(&self, _queue_url: &str, _outcome: &BatchOutcome) {}

    /// A DeleteMessageBatch of `entries` on `queue_url` is about to be made: an error fails
    /// the call and nothing is deleted.
    fn deleting(&self, _queue_url: &str, _entries: &[HandleEntry]) -> Result<(), PortError> {
        Ok(())
    }

    /// A DeleteMessageBatch on `queue_url` answered `outcome`.
    fn deleted(&self, _queue_url: &str, _outcome: &BatchOutcome) {}
}

/// `inner`, with `tap` told of each call; every call the tap does not refuse is `inner`'s.
#[derive(Debug, Clone)]
pub struct Tapped<Q, T> {
    pub inner: Q,
    pub tap: T,
}

impl<Q: Queue, T: Tap> Queue for Tapped<Q, T> {
    async fn receive(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<Received>, PortError> {
        let got = self.inner.receive(queue_url, request).await?;
        self.tap.received(queue_url, got.len());
        Ok(got)
    }

    async fn receive_with_system(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<(Received, SystemAttributes)>, PortError> {
        let got = self.inner.receive_with_system(queue_url, request).await?;
        self.tap.received(queue_url, got.len());
        Ok(got)
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        let outcome = self.inner.send_batch(queue_url, entries).await?;
        self.tap.sent(queue_url, &outcome);
        Ok(outcome)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.tap.deleting(queue_url, entries)?;
        let outcome = self.inner.delete_batch(queue_url, entries).await?;
        self.tap.deleted(queue_url, &outcome);
        Ok(outcome)
    }

    fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> impl Future<Output = Result<BatchOutcome, PortError>> + Send {
        self.inner
            .change_visibility_batch(queue_url, entries, visibility_seconds)
    }

    fn depth(&self, queue_url: &str) -> impl Future<Output = Result<Depth, PortError>> + Send {
        self.inner.depth(queue_url)
    }

    fn max_message_size(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<Option<usize>, PortError>> + Send {
        self.inner.max_message_size(queue_url)
    }

    fn tags(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<HashMap<String, String>, PortError>> + Send {
        self.inner.tags(queue_url)
    }

    fn dead_letter_sources(
        &self,
        dlq_url: &str,
    ) -> impl Future<Output = Result<Vec<String>, PortError>> + Send {
        self.inner.dead_letter_sources(dlq_url)
    }

    fn retention_seconds(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<u64, PortError>> + Send {
        self.inner.retention_seconds(queue_url)
    }
}
