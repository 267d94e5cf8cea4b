//! [`FakeStore`]: the idempotency store in memory, with the DynamoDB adapter's claim condition,
//! its calls counted and faults injected per operation.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redrive_shared::key::IdempotencyKey;

use crate::cause::{ErrorClass, FailureCause};
use crate::ports::{Claim, ClaimOutcome, CompletedRecord, IdempotencyStore, PortError};

use super::{lock, unavailable};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
}

/// One stored idempotency record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub status: Status,
    pub expiration_s: i64,
    pub in_progress_expiration_ms: i64,
    pub token: Option<String>,
    /// `payloadHash`, when the payload check is on.
    pub payload_hash: Option<String>,
    /// (COMPLETED) the processor's output, JSON text.
    pub result: Option<String>,
}

impl Record {
    /// A COMPLETED record kept until `expiration_s`, without a result or a payload hash.
    pub fn completed(expiration_s: i64) -> Self {
        Self {
            status: Status::Completed,
            expiration_s,
            in_progress_expiration_ms: 0,
            token: None,
            payload_hash: None,
            result: None,
        }
    }
}

/// One stored cause item, as the DynamoDB adapter's update leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCause {
    pub class: ErrorClass,
    pub code: String,
    pub message: String,
    /// The first failure's time (kept by later writes), epoch milliseconds.
    pub first_failed_ms: i64,
    /// The last failure's time, epoch milliseconds.
    pub last_failed_ms: i64,
    /// Failed attempts recorded.
    pub attempts: u32,
    pub expiration_s: i64,
}

/// Calls per operation.
#[derive(Debug, Default)]
pub struct StoreCalls {
    pub claim: AtomicU64,
    pub complete: AtomicU64,
    pub release: AtomicU64,
    /// Reads: the fake never needs one, so this stays 0 (the happy path costs no read).
    pub read: AtomicU64,
    /// Cause writes (one per failed attempt); not counted in [`StoreCalls::writes`].
    pub cause: AtomicU64,
}

impl StoreCalls {
    pub fn writes(&self) -> u64 {
        self.claim.load(Ordering::SeqCst)
            + self.complete.load(Ordering::SeqCst)
            + self.release.load(Ordering::SeqCst)
    }
}

/// An in-memory idempotency table.
#[derive(Debug, Default)]
pub struct FakeStore {
    records: Mutex<HashMap<String, Record>>,
    causes: Mutex<HashMap<String, StoredCause>>,
    faults: Mutex<HashMap<&'static str, VecDeque<PortError>>>,
    /// Claims that are applied and then answered with an error (the reply was lost).
    lost_claim_replies: Mutex<u32>,
    down: Mutex<bool>,
    pub calls: StoreCalls,
}

impl FakeStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The record whose `id` is `id` ([`IdempotencyKey::record_id`] of a key).
    pub fn record(&self, id: &str) -> Option<Record> {
        lock(&self.records).get(id).cloned()
    }

    /// The record of an idempotency key, for a consumer without a namespace (the table holds
    /// [`IdempotencyKey::record_id`], the key's hash).
    pub fn record_of_key(&self, key: &str) -> Option<Record> {
        let id = IdempotencyKey::try_from(key.to_string())
            .ok()?
            .record_id(None);
        self.record(&id)
    }

    /// The cause item whose `id` is `id` ([`crate::cause::item_id`] of a key).
    pub fn cause(&self, id: &str) -> Option<StoredCause> {
        lock(&self.causes).get(id).cloned()
    }

    /// The cause item of an idempotency key, for a consumer without a namespace.
    pub fn cause_of_key(&self, key: &str) -> Option<StoredCause> {
        let key = IdempotencyKey::try_from(key.to_string()).ok()?;
        self.cause(&crate::cause::item_id(&key, None))
    }

    /// Every record id in the table.
    pub fn ids(&self) -> Vec<String> {
        lock(&self.records).keys().cloned().collect()
    }

    pub fn insert(&self, key: &str, record: Record) {
        lock(&self.records).insert(key.to_string(), record);
    }

    pub fn len(&self) -> usize {
        lock(&self.records).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next call of `operation` (`"claim"`, `"complete"`, `"release"`, `"cause"`) fails.
    pub fn fail_next(&self, operation: &'static str) {
        lock(&self.faults)
            .entry(operation)
            .or_default()
            .push_back(unavailable(operation));
    }

    /// The next claim is applied, but its caller gets an error: the answer was lost (a
    /// timeout or a reset after DynamoDB wrote it) and every retry failed too.
    pub fn lose_next_claim_reply(&self) {
        *lock(&self.lost_claim_replies) += 1;
    }

    /// Every call fails while down.
    pub fn set_down(&self, down: bool) {
        *lock(&self.down) = down;
    }

    fn fault(&self, operation: &'static str) -> Result<(), PortError> {
        if *lock(&self.down) {
            return Err(unavailable(operation));
        }
        match lock(&self.faults)
            .get_mut(operation)
            .and_then(VecDeque::pop_front)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl IdempotencyStore for FakeStore {
    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, PortError> {
        self.calls.claim.fetch_add(1, Ordering::SeqCst);
        self.fault("claim")?;
        let mut records = lock(&self.records);
        let claimable = match records.get(&claim.key) {
            None => true,
            Some(r) => {
                r.expiration_s < claim.now_ms.div_euclid(1000)
                    || (r.status == Status::InProgress
                        && r.in_progress_expiration_ms < claim.now_ms)
            }
        };
        if !claimable {
            let r = &records[&claim.key];
            return Ok(match r.status {
                Status::Completed => ClaimOutcome::Completed(
                    CompletedRecord::new(r.expiration_s)
                        .with_result(r.result.clone())
                        .with_payload_hash(r.payload_hash.clone()),
                ),
                // The same claim again (its first reply was lost): it is ours.
                Status::InProgress if r.token.as_deref() == Some(claim.token.as_str()) => {
                    ClaimOutcome::Claimed
                }
                Status::InProgress => ClaimOutcome::InProgress {
                    until_ms: Some(r.in_progress_expiration_ms),
                },
            });
        }
        records.insert(
            claim.key.clone(),
            Record {
                status: Status::InProgress,
                expiration_s: claim.expiration_s,
                in_progress_expiration_ms: claim.in_progress_expiration_ms,
                token: Some(claim.token.clone()),
                payload_hash: claim.payload_hash.clone(),
                result: None,
            },
        );
        let mut lost = lock(&self.lost_claim_replies);
        if *lost > 0 {
            *lost -= 1;
            return Err(unavailable("claim"));
        }
        Ok(ClaimOutcome::Claimed)
    }

    async fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> Result<(), PortError> {
        self.calls.complete.fetch_add(1, Ordering::SeqCst);
        self.fault("complete")?;
        lock(&self.records).insert(
            claim.key.clone(),
            Record {
                status: Status::Completed,
                expiration_s,
                in_progress_expiration_ms: claim.in_progress_expiration_ms,
                token: None,
                payload_hash: claim.payload_hash.clone(),
                result: result.map(str::to_string),
            },
        );
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), PortError> {
        self.calls.release.fetch_add(1, Ordering::SeqCst);
        self.fault("release")?;
        let mut records = lock(&self.records);
        if records.get(&claim.key).and_then(|r| r.token.as_deref()) == Some(claim.token.as_str()) {
            records.remove(&claim.key);
        }
        Ok(())
    }

    async fn record_cause(&self, cause: &FailureCause) -> Result<(), PortError> {
        self.calls.cause.fetch_add(1, Ordering::SeqCst);
        self.fault("cause")?;
        let mut causes = lock(&self.causes);
        let first_failed_ms = causes
            .get(&cause.item_id)
            .map_or(cause.at_ms, |c| c.first_failed_ms);
        let attempts = causes.get(&cause.item_id).map_or(0, |c| c.attempts) + 1;
        causes.insert(
            cause.item_id.clone(),
            StoredCause {
                class: cause.class.clone(),
                code: cause.code.clone(),
                message: cause.message.clone(),
                first_failed_ms,
                last_failed_ms: cause.at_ms,
                attempts,
                expiration_s: cause.expiration_s,
            },
        );
        Ok(())
    }
}
