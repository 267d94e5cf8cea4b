//! [`FakeQueue`]: the consumer's SQS calls in memory, recorded, with faults injected.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use redrive_shared::limits::Outgoing;

use crate::ports::{PortError, QueueOps};

use super::{lock, unavailable};

/// One SQS call the consumer made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCall {
    QueueUrl {
        name: String,
        account: String,
    },
    ChangeVisibility {
        queue_url: String,
        receipt_handle: String,
        seconds: u32,
    },
    Send {
        queue_url: String,
        message: Outgoing,
    },
    Delete {
        queue_url: String,
        receipt_handle: String,
    },
}

/// A recording SQS. `queue_url` answers `https://sqs.fake/<account>/<name>`.
#[derive(Debug, Default)]
pub struct FakeQueue {
    calls: Mutex<Vec<QueueCall>>,
    faults: Mutex<HashMap<&'static str, VecDeque<PortError>>>,
}

impl FakeQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn calls(&self) -> Vec<QueueCall> {
        lock(&self.calls).clone()
    }

    pub fn sends(&self) -> Vec<(String, Outgoing)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::Send { queue_url, message } => Some((queue_url, message)),
                _ => None,
            })
            .collect()
    }

    pub fn deletes(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::Delete { receipt_handle, .. } => Some(receipt_handle),
                _ => None,
            })
            .collect()
    }

    /// (receipt handle, seconds) of every ChangeMessageVisibility.
    pub fn visibility_changes(&self) -> Vec<(String, u32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                QueueCall::ChangeVisibility {
                    receipt_handle,
                    seconds,
                    ..
                } => Some((receipt_handle, seconds)),
                _ => None,
            })
            .collect()
    }

    /// The next call of `operation` (`"GetQueueUrl"`, `"ChangeMessageVisibility"`,
    /// `"SendMessage"`, `"DeleteMessage"`) fails (it is still recorded).
    pub fn fail_next(&self, operation: &'static str) {
        lock(&self.faults)
            .entry(operation)
            .or_default()
            .push_back(unavailable(operation));
    }

    fn record(&self, operation: &'static str, call: QueueCall) -> Result<(), PortError> {
        lock(&self.calls).push(call);
        match lock(&self.faults)
            .get_mut(operation)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub const FAKE_QUEUE_HOST: &str = "https://sqs.fake";

impl QueueOps for FakeQueue {
    async fn queue_url(&self, name: &str, owner_account: &str) -> Result<String, PortError> {
        self.record(
            "GetQueueUrl",
            QueueCall::QueueUrl {
                name: name.into(),
                account: owner_account.into(),
            },
        )?;
        Ok(format!("{FAKE_QUEUE_HOST}/{owner_account}/{name}"))
    }

    async fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        seconds: u32,
    ) -> Result<(), PortError> {
        self.record(
            "ChangeMessageVisibility",
            QueueCall::ChangeVisibility {
                queue_url: queue_url.into(),
                receipt_handle: receipt_handle.into(),
                seconds,
            },
        )
    }

    async fn send(&self, queue_url: &str, message: &Outgoing) -> Result<String, PortError> {
        self.record(
            "SendMessage",
            QueueCall::Send {
                queue_url: queue_url.into(),
                message: message.clone(),
            },
        )?;
        Ok(format!("copy-{}", lock(&self.calls).len()))
    }

    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), PortError> {
        self.record(
            "DeleteMessage",
            QueueCall::Delete {
                queue_url: queue_url.into(),
                receipt_handle: receipt_handle.into(),
            },
        )
    }
}
