//! The in-memory circuit store with fault injection: for the engine's tests on the port fakes,
//! the workflow's and the CLI's tests, the bench and the soak. No Lambda ships it.

use std::collections::HashMap;
use std::sync::Mutex;

use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Event};

use super::{CircuitStore, SaveOutcome, Stored, VersionedWrite};
use crate::lock;
use crate::ports::PortError;

/// In-memory store with fault injection: for engine tests on the port fakes.
#[derive(Debug, Default)]
pub struct MemoryCircuitStore {
    items: Mutex<HashMap<String, Stored>>,
    /// Errors the next calls return, in order.
    fail: Mutex<Vec<PortError>>,
    /// Writes another writer makes just before the next saves (to provoke conflicts).
    interfere: Mutex<Vec<Event>>,
    /// What the next saves answer after committing, in order (their own answer was lost).
    lost_answers: Mutex<Vec<Result<SaveOutcome, PortError>>>,
    saves: std::sync::atomic::AtomicU64,
}

impl MemoryCircuitStore {
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// The stored record, if any.
    pub fn get(&self, queue_url: &str) -> Option<Stored> {
        self.lock().get(queue_url).cloned()
    }

    /// Writes a record as another writer would (the version goes up by one).
    pub fn put(&self, queue_url: &str, record: CircuitRecord) {
        let mut items = self.lock();
        let version = items.get(queue_url).map_or(1, |s| s.version + 1);
        items.insert(queue_url.to_string(), Stored { version, record });
    }

    /// The next call (load or save) fails with `error`.
    pub fn fail_next(&self, error: PortError) {
        lock(&self.fail).push(error);
    }

    /// Just before the next save, another writer applies `event` to the stored record.
    pub fn interfere_once(&self, event: Event) {
        lock(&self.interfere).push(event);
    }

    /// The next save commits, and its caller gets `reply` instead of the answer, which was lost
    /// on the way back: `Ok(SaveOutcome::Conflict)` is what the SDK's retry of the same
    /// conditional write gets (the version moved, by the write itself), an error what a caller
    /// gets whose retries ran out.
    pub fn lose_next_answer(&self, reply: Result<SaveOutcome, PortError>) {
        lock(&self.lost_answers).push(reply);
    }

    /// Successful saves so far.
    pub fn saves(&self) -> u64 {
        self.saves.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Stored>> {
        lock(&self.items)
    }

    fn take_fault(&self) -> Result<(), PortError> {
        let mut fail = lock(&self.fail);
        if fail.is_empty() {
            Ok(())
        } else {
            Err(fail.remove(0))
        }
    }
}

impl CircuitStore for MemoryCircuitStore {
    async fn load(&self, queue_url: &str) -> Result<Option<Stored>, PortError> {
        self.take_fault()?;
        Ok(self.get(queue_url))
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> Result<SaveOutcome, PortError> {
        self.take_fault()?;
        let interference: Vec<Event> = std::mem::take(&mut *lock(&self.interfere));
        if !interference.is_empty() {
            let settings = CircuitSettings::default();
            let mut other = self
                .get(queue_url)
                .map_or_else(|| CircuitRecord::new(&settings, 0), |s| s.record);
            for e in &interference {
                other.apply(&settings, e);
            }
            self.put(queue_url, other);
        }
        let mut items = self.lock();
        let current = items.get(queue_url).map(|s| s.version);
        if current != write.expected {
            return Ok(SaveOutcome::Conflict);
        }
        let version = write.next_version();
        items.insert(
            queue_url.to_string(),
            Stored {
                version,
                record: write.record.clone(),
            },
        );
        self.saves.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut lost = lock(&self.lost_answers);
        if !lost.is_empty() {
            return lost.remove(0);
        }
        Ok(SaveOutcome::Saved { version })
    }
}
