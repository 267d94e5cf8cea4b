//! Ports: the narrow capabilities the consumer needs from AWS. The engine takes them as
//! generics, so the same code runs against the SDK (AWS, or moto in tests) and against the
//! fault-injecting in-memory fakes of [`crate::fake`].

use std::future::Future;

use redrive_shared::limits::Outgoing;

use crate::cause::FailureCause;

/// A whole call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} failed ({code}): {message}")]
pub struct PortError {
    pub operation: &'static str,
    pub code: String,
    pub message: String,
}

/// One attempt to own an idempotency key for the time of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The record's `id`: [`IdempotencyKey::record_id`], a hash of the idempotency key (never
    /// the key itself, which may be a business id).
    ///
    /// [`IdempotencyKey::record_id`]: redrive_shared::key::IdempotencyKey::record_id
    pub key: String,
    /// Unique per claim, stored with the IN_PROGRESS record, so that a release removes only
    /// the record this claim wrote (never one a later invocation reclaimed).
    pub token: String,
    /// The claimant's clock, epoch milliseconds; the condition compares against it.
    pub now_ms: i64,
    /// `expiration`, epoch seconds: the table's TTL attribute.
    pub expiration_s: i64,
    /// `inProgressExpiration`, epoch milliseconds: after this instant a crashed or timed-out
    /// claimant's record may be reclaimed.
    pub in_progress_expiration_ms: i64,
    /// `payloadHash`: the fingerprint of this message's payload when the payload check is on
    /// (`IDEMPOTENCY_PAYLOAD`), stored with the IN_PROGRESS and the COMPLETED record.
    pub payload_hash: Option<String>,
}

/// What is known of a COMPLETED record: what the duplicate path needs, and what the in-memory
/// cache of completed keys keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompletedRecord {
    /// `expiration`, epoch seconds (`i64::MAX` for a record without one: the table's TTL never
    /// deletes it and the claim's condition never takes it).
    pub expiration_s: i64,
    /// The processor's output stored with it (JSON text), if any.
    pub result: Option<String>,
    /// `payloadHash`: the fingerprint of the payload it was processed for, when the record has
    /// one (the payload check, `IDEMPOTENCY_PAYLOAD`).
    pub payload_hash: Option<String>,
}

impl CompletedRecord {
    pub fn new(expiration_s: i64) -> Self {
        Self {
            expiration_s,
            result: None,
            payload_hash: None,
        }
    }

    pub fn with_result(mut self, result: Option<String>) -> Self {
        self.result = result;
        self
    }

    pub fn with_payload_hash(mut self, payload_hash: Option<String>) -> Self {
        self.payload_hash = payload_hash;
        self
    }

    /// Expired by the claim's own rule (`expiration < now`, in epoch seconds): a claim at
    /// `now_ms` could take the key.
    pub fn is_expired_at(&self, now_ms: i64) -> bool {
        self.expiration_s < now_ms.div_euclid(1000)
    }
}

/// What a claim found.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The key is ours: an IN_PROGRESS record carrying our token was written.
    Claimed,
    /// The side effect already happened (an unexpired COMPLETED record).
    Completed(CompletedRecord),
    /// Another invocation holds the key until `until_ms` (epoch ms, when known).
    InProgress { until_ms: Option<i64> },
}

/// The idempotency records (DynamoDB table `IDEMPOTENCY_TABLE`, partition key `id`).
pub trait IdempotencyStore: Sync {
    /// One conditional write: succeeds on a new key, an expired record, or an IN_PROGRESS
    /// record whose `inProgressExpiration` passed; otherwise reports what holds the key.
    fn claim(&self, claim: &Claim) -> impl Future<Output = Result<ClaimOutcome, PortError>> + Send;

    /// Marks the key COMPLETED (expiring at `expiration_s`), whoever holds it now: the side
    /// effect happened. `result` (the processor's output as JSON text, at most
    /// [`crate::MAX_STORED_RESULT_BYTES`]) is stored with it, for later claims of the key.
    fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> impl Future<Output = Result<(), PortError>> + Send;

    /// Deletes the record if it is still this claim's IN_PROGRESS record; a record that is
    /// no longer ours is left alone (and is not an error).
    fn release(&self, claim: &Claim) -> impl Future<Output = Result<(), PortError>> + Send;

    /// Records the cause of a failed attempt in its cause item (`cause#<record id>`, see
    /// [`crate::cause`]): the last failure's class, code, normalised text and time, the first
    /// failure's time kept, one more failed attempt counted. Never reads or changes the key's
    /// idempotency record. The default records nothing: a store of your own that keeps no
    /// causes leaves triage to group its messages by what they carry.
    fn record_cause(
        &self,
        cause: &FailureCause,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        let _ = cause;
        async { Ok(()) }
    }
}

/// The SQS calls of the failure paths. The happy path makes none of them.
pub trait QueueOps: Sync {
    /// GetQueueUrl (QueueName, QueueOwnerAWSAccountId): the source queue of a record, from
    /// its `eventSourceARN`.
    fn queue_url(
        &self,
        name: &str,
        owner_account: &str,
    ) -> impl Future<Output = Result<String, PortError>> + Send;

    /// ChangeMessageVisibility of one received message.
    fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        visibility_seconds: u32,
    ) -> impl Future<Output = Result<(), PortError>> + Send;

    /// SendMessage; returns the new MessageId once SQS acknowledged it.
    fn send(
        &self,
        queue_url: &str,
        message: &Outgoing,
    ) -> impl Future<Output = Result<String, PortError>> + Send;

    /// DeleteMessage of one received message.
    fn delete(
        &self,
        queue_url: &str,
        receipt_handle: &str,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
}

impl<T: IdempotencyStore + Send> IdempotencyStore for &T {
    fn claim(&self, claim: &Claim) -> impl Future<Output = Result<ClaimOutcome, PortError>> + Send {
        (**self).claim(claim)
    }
    fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).complete(claim, expiration_s, result)
    }
    fn release(&self, claim: &Claim) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).release(claim)
    }
    fn record_cause(
        &self,
        cause: &FailureCause,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).record_cause(cause)
    }
}

impl<T: QueueOps + Send> QueueOps for &T {
    fn queue_url(
        &self,
        name: &str,
        owner_account: &str,
    ) -> impl Future<Output = Result<String, PortError>> + Send {
        (**self).queue_url(name, owner_account)
    }
    fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        visibility_seconds: u32,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).change_visibility(queue_url, receipt_handle, visibility_seconds)
    }
    fn send(
        &self,
        queue_url: &str,
        message: &Outgoing,
    ) -> impl Future<Output = Result<String, PortError>> + Send {
        (**self).send(queue_url, message)
    }
    fn delete(
        &self,
        queue_url: &str,
        receipt_handle: &str,
    ) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).delete(queue_url, receipt_handle)
    }
}
