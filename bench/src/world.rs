//! The world of the port-fake soak: the re-driver's in-memory SQS ([`FakeSqs`]) and the
//! consumer's idempotency table on tokio's clock, behind a fault layer that behaves like the
//! AWS SDK over a flaky network.
//!
//! - Standard queues with a RedrivePolicy ([`FakeSqs::set_redrive_policy`]). Visibility
//!   timeouts and delays run on tokio's clock, so the soak can run on the paused clock.
//! - Each call of the functions' ports is up to [`World::max_attempts`] attempts (the SDK's
//!   standard retry mode, with its jittered exponential backoff); each attempt fails by the
//!   [`FaultPlan`]: throttling and 500s (nothing applied), resets before or after the service
//!   applied it, timeouts (applied, but the answer is lost), failed batch entries.
//! - The harness's own calls (producer, event source mapping, reconciliation) bypass faults,
//!   as AWS's own pollers do not go through the functions' network.
//! - [`World::arm_kill`] kills the re-driver at its n-th call of chosen operations (its first
//!   DeleteMessageBatch: between send and delete): the call never returns and the harness
//!   drops the drain there.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_consumer::fake::FakeStore;
use redrive_consumer::ports::{Claim, ClaimOutcome, IdempotencyStore, QueueOps};
use redrive_engine::fake::{FakeMessage, FakeSqs};
use redrive_engine::ports::{
    BatchOutcome, Depth, EntryFailure, HandleEntry, PortError, Queue, ReceiveRequest, Received,
    SendEntry,
};
use redrive_shared::Attributes;
use redrive_shared::backoff::{JitterRng, RandomSource, seeded_rng};
use redrive_shared::limits::Outgoing;
use redrive_shared::sync::lock;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::faults::{FaultKind, FaultLayer, FaultPlan, FaultStats, KillSwitch, failing_entries};

/// An injected failure as the caller sees it.
#[derive(Debug, Clone)]
struct Injected {
    operation: &'static str,
    code: &'static str,
}

impl From<Injected> for PortError {
    fn from(e: Injected) -> Self {
        PortError {
            operation: e.operation,
            code: e.code.into(),
            message: "injected by the soak's fault layer".into(),
            retryable: true,
            source: None,
        }
    }
}

impl From<Injected> for redrive_consumer::ports::PortError {
    fn from(e: Injected) -> Self {
        redrive_consumer::ports::PortError {
            operation: e.operation,
            code: e.code.into(),
            message: "injected by the soak's fault layer".into(),
        }
    }
}

fn code_of(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Throttle => "ThrottlingException",
        FaultKind::ServerError => "InternalError",
        FaultKind::ResetBefore | FaultKind::ResetAfter => "DispatchFailure",
        FaultKind::Timeout => "Timeout",
        FaultKind::BatchEntries => "InternalError",
    }
}

/// The in-memory SQS and its fault layer.
pub struct World {
    sqs: Arc<FakeSqs>,
    plan: Mutex<Option<FaultPlan>>,
    rng: Mutex<JitterRng>,
    stats: Mutex<FaultStats>,
    kill: KillSwitch,
    /// Share of the re-driver's sent entries acknowledged but never stored: a deliberately
    /// broken service, to prove that the soak's reconciliation catches a loss.
    lossy_sends: Mutex<f64>,
    /// Attempts per call, as the SDK's standard retry mode.
    pub max_attempts: u32,
    /// How long a timed-out attempt keeps the caller waiting.
    pub attempt_timeout: Duration,
    /// Where tokio's clock stood at the wall-clock instant `epoch_ms`.
    epoch: (Instant, i64),
}

impl World {
    pub fn new(seed: u64) -> Arc<Self> {
        let wall_ms = redrive_shared::clock::now_ms();
        Arc::new(Self {
            sqs: FakeSqs::seeded(seed),
            plan: Mutex::new(None),
            rng: Mutex::new(seeded_rng(seed)),
            stats: Mutex::new(FaultStats::default()),
            kill: KillSwitch::default(),
            lossy_sends: Mutex::new(0.0),
            max_attempts: 3,
            attempt_timeout: Duration::from_secs(3),
            epoch: (Instant::now(), wall_ms),
        })
    }

    pub fn set_faults(&self, plan: Option<FaultPlan>) {
        *lock(&self.plan) = plan;
    }

    /// Breaks the world on purpose (see `lossy_sends`): only for tests of the soak itself.
    pub fn set_lossy_sends(&self, share: f64) {
        *lock(&self.lossy_sends) = share;
    }

    pub fn stats(&self) -> FaultStats {
        lock(&self.stats).clone()
    }

    /// Epoch milliseconds on the world's clock (tokio's, which may be paused).
    pub fn now_ms(&self) -> i64 {
        self.epoch.1 + self.epoch.0.elapsed().as_millis() as i64
    }

    /// Kills the re-driver at its `nth` next call of one of `operations` (see the module
    /// docs): that call never returns.
    pub fn arm_kill(&self, operations: &[&str], nth: u32) -> oneshot::Receiver<()> {
        self.kill.arm(operations, nth)
    }

    /// Never returns when an armed kill lands on this call.
    async fn kill_point(&self, operation: &str) {
        if self.kill.lands(operation) {
            *lock(&self.stats)
                .kills
                .entry(operation.to_string())
                .or_default() += 1;
            std::future::pending::<()>().await;
        }
    }

    pub fn disarm_kill(&self) {
        self.kill.disarm();
    }
}

impl FaultLayer for World {
    fn kill_switch(&self) -> &KillSwitch {
        &self.kill
    }

    fn fault_stats(&self) -> FaultStats {
        self.stats()
    }
}

impl World {
    pub fn create_queue(&self, url: &str, redrive: Option<(&str, u32)>) {
        self.sqs.create_queue(url);
        if let Some((dlq, max_receives)) = redrive {
            self.sqs.set_redrive_policy(url, dlq, max_receives);
        }
    }

    /// Sends a message as a producer does (no faults); returns its MessageId.
    pub fn push(&self, url: &str, body: &str, attributes: Attributes) -> String {
        self.sqs.push(url, body, attributes, None)
    }

    /// Every message of a queue (visible, in flight, delayed).
    pub fn messages(&self, url: &str) -> Vec<FakeMessage> {
        self.sqs.messages(url)
    }

    pub fn depth(&self, url: &str) -> u64 {
        self.sqs.len(url) as u64
    }

    /// ReceiveMessage without faults (the event source mapping's poller).
    pub fn receive_direct(&self, url: &str, max: usize, visibility: Duration) -> Vec<Received> {
        let max = max.clamp(1, 10) as i32;
        self.sqs
            .receive_now(url, max, visibility.as_secs() as i32)
            .unwrap_or_else(|e| panic!("the harness's poller: {e}"))
    }

    /// DeleteMessage without faults; a stale receipt handle is a no-op, as in SQS.
    pub fn delete_direct(&self, url: &str, receipt_handle: &str) {
        let _ = self.sqs.delete_now(url, &[handle(receipt_handle)]);
    }

    /// Runs one port call as the SDK would: attempts, backoff, faults. `apply` performs the
    /// call against the state; for batch calls it gets the entry positions that fail.
    async fn call<T>(
        &self,
        operation: &'static str,
        batch_len: Option<usize>,
        apply: impl FnMut(&FakeSqs, &[usize]) -> T,
    ) -> Result<T, Injected> {
        self.call_counting(operation, batch_len, &mut Vec::new(), apply)
            .await
    }

    /// [`Self::call`], adding the faults its attempts met to `faults`.
    async fn call_counting<T>(
        &self,
        operation: &'static str,
        batch_len: Option<usize>,
        faults: &mut Vec<FaultKind>,
        mut apply: impl FnMut(&FakeSqs, &[usize]) -> T,
    ) -> Result<T, Injected> {
        let mut last = Injected {
            operation,
            code: "InternalError",
        };
        for attempt in 1..=self.max_attempts.max(1) {
            if attempt > 1 {
                lock(&self.stats).sdk_retries += 1;
                // The SDK's standard mode: jittered exponential backoff from 1 s.
                let cap = 2f64.powi(attempt as i32 - 2);
                let wait = lock(&self.rng).next_unit() * cap;
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            let fault = {
                let plan = lock(&self.plan);
                plan.as_ref()
                    .and_then(|p| p.draw(&mut *lock(&self.rng), batch_len.is_some()))
            };
            {
                let mut stats = lock(&self.stats);
                *stats.calls.entry(operation.to_string()).or_default() += 1;
                if let Some(kind) = fault {
                    stats.faults.add(kind);
                    faults.push(kind);
                }
            }
            match fault {
                None => return Ok(apply(&self.sqs, &[])),
                Some(FaultKind::BatchEntries) => {
                    let n = batch_len.unwrap_or(0);
                    let failing = failing_entries(n, &mut lock(&self.rng));
                    lock(&self.stats).failed_entries += failing.len() as u64;
                    return Ok(apply(&self.sqs, &failing));
                }
                Some(kind) => {
                    if kind == FaultKind::Timeout {
                        tokio::time::sleep(self.attempt_timeout).await;
                    }
                    if kind.applies() {
                        let _ = apply(&self.sqs, &[]);
                    }
                    last = Injected {
                        operation,
                        code: code_of(kind),
                    };
                }
            }
        }
        Err(last)
    }
}

/// The fake's error (a request the service rejects) as the consumer's port reports it.
fn consumer_error(
    operation: &'static str,
) -> impl Fn(PortError) -> redrive_consumer::ports::PortError {
    move |e| redrive_consumer::ports::PortError {
        operation,
        code: e.code,
        message: e.message,
    }
}

fn handle(receipt_handle: &str) -> HandleEntry {
    HandleEntry {
        id: "0".into(),
        receipt_handle: receipt_handle.to_string(),
    }
}

fn entry_failure(id: &str) -> EntryFailure {
    EntryFailure {
        id: id.to_string(),
        code: "InternalError".into(),
        message: "injected by the soak's fault layer".into(),
        sender_fault: false,
    }
}

/// The re-driver's [`Queue`] port on the world.
#[derive(Clone)]
pub struct WorldQueue(pub Arc<World>);

impl Queue for WorldQueue {
    async fn receive(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<Received>, PortError> {
        self.0.kill_point("ReceiveMessage").await;
        self.0
            .call("ReceiveMessage", None, |sqs, _| {
                sqs.receive_now(queue_url, request.max_messages, request.visibility_seconds)
            })
            .await?
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.0.kill_point("SendMessageBatch").await;
        let lossy = *lock(&self.0.lossy_sends);
        self.0
            .call("SendMessageBatch", Some(entries.len()), |sqs, failing| {
                let mut outcome = BatchOutcome::default();
                let mut stored = Vec::new();
                for (i, e) in entries.iter().enumerate() {
                    if failing.contains(&i) {
                        outcome.failed.push(entry_failure(&e.id));
                    } else if lossy > 0.0 && lock(&self.0.rng).next_unit() < lossy {
                        outcome.succeeded.push(e.id.clone());
                    } else {
                        stored.push(e.clone());
                    }
                }
                if !stored.is_empty() {
                    let sent = sqs.send_now(queue_url, &stored)?;
                    outcome.succeeded.extend(sent.succeeded);
                    outcome.failed.extend(sent.failed);
                }
                Ok(outcome)
            })
            .await?
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        self.0.kill_point("DeleteMessageBatch").await;
        self.0
            .call("DeleteMessageBatch", Some(entries.len()), |sqs, failing| {
                let mut outcome = BatchOutcome::default();
                let mut applied = Vec::new();
                for (i, e) in entries.iter().enumerate() {
                    if failing.contains(&i) {
                        outcome.failed.push(entry_failure(&e.id));
                    } else {
                        applied.push(e.clone());
                    }
                }
                if !applied.is_empty() {
                    // SQS answers a stale receipt handle with success (and deletes nothing).
                    sqs.delete_now(queue_url, &applied)?;
                    outcome.succeeded.extend(applied.into_iter().map(|e| e.id));
                }
                Ok(outcome)
            })
            .await?
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        self.0
            .call("ChangeMessageVisibilityBatch", None, |sqs, _| {
                sqs.change_visibility_now(queue_url, entries, visibility_seconds)
            })
            .await?
    }

    async fn depth(&self, queue_url: &str) -> Result<Depth, PortError> {
        self.0.kill_point("GetQueueAttributes").await;
        self.0
            .call("GetQueueAttributes", None, |sqs, _| {
                sqs.depth_now(queue_url)
            })
            .await?
    }
}

/// The consumer's [`QueueOps`] port on the world. Queue URLs are `https://sqs.world/<account>/<name>`.
#[derive(Clone)]
pub struct WorldOps(pub Arc<World>);

pub const WORLD_HOST: &str = "https://sqs.world";

pub fn world_url(account: &str, name: &str) -> String {
    format!("{WORLD_HOST}/{account}/{name}")
}

impl QueueOps for WorldOps {
    async fn queue_url(
        &self,
        name: &str,
        owner_account: &str,
    ) -> Result<String, redrive_consumer::ports::PortError> {
        let url = world_url(owner_account, name);
        Ok(self.0.call("GetQueueUrl", None, |_, _| url.clone()).await?)
    }

    async fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        visibility_seconds: u32,
    ) -> Result<(), redrive_consumer::ports::PortError> {
        let visibility = i32::try_from(visibility_seconds).unwrap_or(i32::MAX);
        let outcome = self
            .0
            .call("ChangeMessageVisibility", None, |sqs, _| {
                sqs.change_visibility_now(queue_url, &[handle(receipt_handle)], visibility)
            })
            .await?
            .map_err(consumer_error("ChangeMessageVisibility"))?;
        match outcome.failed.into_iter().next() {
            None => Ok(()),
            Some(f) => Err(redrive_consumer::ports::PortError {
                operation: "ChangeMessageVisibility",
                code: f.code,
                message: f.message,
            }),
        }
    }

    async fn send(
        &self,
        queue_url: &str,
        message: &Outgoing,
    ) -> Result<String, redrive_consumer::ports::PortError> {
        self.0
            .call("SendMessage", None, |sqs, _| {
                sqs.send_message_now(queue_url, message)
            })
            .await?
            .map_err(consumer_error("SendMessage"))
    }

    async fn delete(
        &self,
        queue_url: &str,
        receipt_handle: &str,
    ) -> Result<(), redrive_consumer::ports::PortError> {
        // A stale receipt handle deletes nothing and is no error, as in SQS.
        self.0
            .call("DeleteMessage", None, |sqs, _| {
                sqs.delete_now(queue_url, &[handle(receipt_handle)])
            })
            .await?
            .map_err(consumer_error("DeleteMessage"))?;
        Ok(())
    }
}

/// The consumer's idempotency table on the world: the consumer's own [`FakeStore`] (which
/// evaluates the DynamoDB adapter's claim condition) behind the fault layer, on the world's
/// clock. The consumer stamps claims with the wall clock; they are moved onto the world's
/// clock, keeping their durations, so that claims expire as the soak's time passes.
pub struct WorldStore {
    pub world: Arc<World>,
    pub table: FakeStore,
}

impl WorldStore {
    pub fn new(world: Arc<World>) -> Self {
        Self {
            world,
            table: FakeStore::new(),
        }
    }

    fn on_world_clock(&self, claim: &Claim) -> Claim {
        let now = self.world.now_ms();
        Claim {
            now_ms: now,
            expiration_s: now.div_euclid(1000)
                + (claim.expiration_s - claim.now_ms.div_euclid(1000)),
            in_progress_expiration_ms: now + (claim.in_progress_expiration_ms - claim.now_ms),
            ..claim.clone()
        }
    }
}

impl IdempotencyStore for WorldStore {
    async fn claim(
        &self,
        claim: &Claim,
    ) -> Result<ClaimOutcome, redrive_consumer::ports::PortError> {
        let claim = self.on_world_clock(claim);
        // The store's own call is synchronous underneath: run it inside the attempt.
        let table = &self.table;
        let mut faults = Vec::new();
        let outcome = self
            .world
            .call_counting("PutItem", None, &mut faults, |_, _| {
                futures_util::FutureExt::now_or_never(table.claim(&claim))
                    .expect("the in-memory table never waits")
            })
            .await;
        if faults.iter().any(|k| k.applies()) {
            lock(&self.world.stats).claim_lost.insert(claim.key.clone());
        }
        outcome?
    }

    async fn complete(
        &self,
        claim: &Claim,
        expiration_s: i64,
        result: Option<&str>,
    ) -> Result<(), redrive_consumer::ports::PortError> {
        let mapped = self.on_world_clock(claim);
        let expiration = mapped.expiration_s + (expiration_s - claim.expiration_s);
        let table = &self.table;
        let mut faults = Vec::new();
        let result = self
            .world
            .call_counting("PutItem", None, &mut faults, |_, _| {
                futures_util::FutureExt::now_or_never(table.complete(&mapped, expiration, result))
                    .expect("the in-memory table never waits")
            })
            .await;
        if !faults.is_empty() {
            lock(&self.world.stats)
                .completion_faulted
                .insert(claim.key.clone());
        }
        result?
    }

    async fn release(&self, claim: &Claim) -> Result<(), redrive_consumer::ports::PortError> {
        let table = &self.table;
        self.world
            .call("DeleteItem", None, |_, _| {
                futures_util::FutureExt::now_or_never(table.release(claim))
                    .expect("the in-memory table never waits")
            })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "https://sqs.world/000000000000/src";
    const DLQ: &str = "https://sqs.world/000000000000/dlq";

    /// A world with the source queue where every call meets this fault, and its queue port.
    fn failing_with(kind: FaultKind) -> (Arc<World>, WorldQueue) {
        let world = World::new(5);
        world.create_queue(SRC, None);
        world.set_faults(Some(FaultPlan {
            rate: 1.0,
            weights: vec![(kind, 1)],
            timeout_hold: Duration::ZERO,
        }));
        (world.clone(), WorldQueue(world))
    }

    /// A send entry of body `b` with this id.
    fn entry(id: usize) -> SendEntry {
        SendEntry {
            id: id.to_string(),
            message: Outgoing {
                body: "b".into(),
                attributes: Attributes::new(),
                delay_seconds: None,
                group_id: None,
                dedup_id: None,
                trace_header: None,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_received_max_times_moves_to_the_dlq_keeping_its_id() {
        let world = World::new(1);
        world.create_queue(DLQ, None);
        world.create_queue(SRC, Some((DLQ, 2)));
        let id = world.push(SRC, "b", Attributes::new());
        for expected_count in 1..=2 {
            let got = world.receive_direct(SRC, 10, Duration::from_secs(1));
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].receive_count, expected_count);
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert!(
            world
                .receive_direct(SRC, 10, Duration::from_secs(1))
                .is_empty()
        );
        let dlq = world.messages(DLQ);
        assert_eq!(dlq.len(), 1);
        assert_eq!(dlq[0].message_id, id);
        assert_eq!(world.depth(SRC), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_receipt_deletes_nothing() {
        let world = World::new(1);
        world.create_queue(SRC, None);
        world.push(SRC, "b", Attributes::new());
        let first = world.receive_direct(SRC, 1, Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = world.receive_direct(SRC, 1, Duration::from_secs(30));
        world.delete_direct(SRC, &first[0].receipt_handle);
        assert_eq!(world.depth(SRC), 1);
        world.delete_direct(SRC, &second[0].receipt_handle);
        assert_eq!(world.depth(SRC), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn faults_fail_attempts_and_the_sdk_layer_retries_them() {
        let (world, q) = failing_with(FaultKind::ResetAfter);
        let err = q.send_batch(SRC, &[entry(0)]).await.unwrap_err();
        assert!(err.retryable);
        // Every attempt took effect although each one failed: three copies, no ack.
        assert_eq!(world.depth(SRC), 3);
        let stats = world.stats();
        assert_eq!(stats.calls["SendMessageBatch"], 3);
        assert_eq!(stats.sdk_retries, 2);
        assert_eq!(stats.faults.get(FaultKind::ResetAfter), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_entries_are_not_applied() {
        let (world, q) = failing_with(FaultKind::BatchEntries);
        let entries: Vec<SendEntry> = (0..10).map(entry).collect();
        let out = q.send_batch(SRC, &entries).await.unwrap();
        assert!(!out.failed.is_empty());
        assert_eq!(out.succeeded.len() + out.failed.len(), 10);
        assert_eq!(world.depth(SRC), out.succeeded.len() as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn claims_expire_on_the_world_clock() {
        let world = World::new(1);
        let store = WorldStore::new(world.clone());
        let wall = 1_000_000_000_000;
        let claim = Claim {
            key: "k".into(),
            token: "t1".into(),
            now_ms: wall,
            expiration_s: wall / 1000 + 86_400,
            in_progress_expiration_ms: wall + 10_000,
            payload_hash: None,
        };
        assert_eq!(store.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
        let again = Claim {
            token: "t2".into(),
            ..claim.clone()
        };
        assert!(matches!(
            store.claim(&again).await.unwrap(),
            ClaimOutcome::InProgress { .. }
        ));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(store.claim(&again).await.unwrap(), ClaimOutcome::Claimed);
    }
}
