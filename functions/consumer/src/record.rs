//! What a processor may read about the record it handles, besides its parsed body.

use std::sync::Arc;

use redrive_shared::key::IdempotencyKey;
use redrive_shared::{Attributes, MessageAttribute};

use crate::message::{Message, QueueArn};

/// One received message with its idempotency key and redrive history: read-only, cheap to
/// clone (shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record(Arc<Inner>);

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    message: Message,
    key: IdempotencyKey,
    original_message_id: String,
    attempt: u32,
}

impl Record {
    /// A record as the engine hands it to a processor; for tests of your own processor.
    /// `original_message_id` is the MessageId and the redrive attempt 0, as for a message the
    /// re-driver never moved.
    pub fn new(message: Message, key: IdempotencyKey) -> Self {
        let original_message_id = message.message_id.clone();
        Self::with_history(message, key, original_message_id, 0)
    }

    pub(crate) fn with_history(
        message: Message,
        key: IdempotencyKey,
        original_message_id: String,
        attempt: u32,
    ) -> Self {
        Self(Arc::new(Inner {
            message,
            key,
            original_message_id,
            attempt,
        }))
    }

    /// The SQS MessageId of this delivery.
    pub fn message_id(&self) -> &str {
        &self.0.message.message_id
    }

    /// The idempotency key: pass it on to a downstream that can drop repeats itself.
    pub fn key(&self) -> &IdempotencyKey {
        &self.0.key
    }

    /// The body as SQS delivered it.
    pub fn body(&self) -> &str {
        &self.0.message.body
    }

    /// The message attributes, byte for byte (`x-redrive` included when present).
    pub fn attributes(&self) -> &Attributes {
        &self.0.message.attributes
    }

    pub fn attribute(&self, name: &str) -> Option<&MessageAttribute> {
        self.0.message.attributes.get(name)
    }

    /// `ApproximateReceiveCount`: 1 on the first delivery from this queue.
    pub fn receive_count(&self) -> u32 {
        self.0.message.receive_count
    }

    /// `MessageGroupId` (FIFO queues).
    pub fn group_id(&self) -> Option<&str> {
        self.0.message.group_id.as_deref()
    }

    /// The queue the message came from (`eventSourceARN`).
    pub fn source_queue(&self) -> Option<&QueueArn> {
        self.0.message.source.as_ref()
    }

    /// The id of the first message of the redrive chain (`x-redrive`'s `originalMessageId`,
    /// else the MessageId): the same for every redriven copy.
    pub fn original_message_id(&self) -> &str {
        &self.0.original_message_id
    }

    /// How many times the re-driver moved this message back from the DLQ (0: never).
    pub fn redrive_attempt(&self) -> u32 {
        self.0.attempt
    }

    /// The whole received message.
    pub fn message(&self) -> &Message {
        &self.0.message
    }
}
