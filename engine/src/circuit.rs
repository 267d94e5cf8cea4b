//! The durable record of the adaptive circuit: the [`CircuitStore`] port, its
//! DynamoDB adapter and (with the `fake` feature) an in-memory fake. The rule itself is pure, in
//! [`redrive_shared::circuit`].
//!
//! One item per DLQ in the table `CIRCUIT_TABLE`:
//!
//! | attribute   | type | meaning                                                     |
//! |-------------|------|-------------------------------------------------------------|
//! | `queue`     | S    | partition key: the DLQ's ARN ([`record_key`])               |
//! | `version`   | N    | bumped by every write; each write is conditional on it      |
//! | `state`     | S    | `closed`, `open`, `half-open` (a copy, for people and alarms) |
//! | `operator`  | S    | `auto`, `open`, `closed` (a copy)                           |
//! | `record`    | S    | the whole [`CircuitRecord`] as JSON (the truth)             |
//! | `updatedAt` | S    | RFC 3339 time of the write                                  |
//!
//! One DLQ has one record however it is named: the alarm's drain (which knows the queue's
//! name), a manual drain (its configured URL, in whatever host form), the CLI (a name, an ARN or
//! a URL) and the workflow all reach it under the queue's ARN, rebuilt from the URL
//! ([`record_key`]). A record written under the URL as given (the key before) is found there
//! when the ARN has none, and copied under the ARN at that first read, its version kept: no
//! circuit closes on an upgrade. The old item is left as it was and read no more.
//!
//! The record also holds the DLQ's lease ([`redrive_shared::circuit::Lease`]): the one
//! workflow execution that may drain it, taken and renewed by [`acquire_lease`], dropped by
//! [`release_lease`], both writes on the version read like every other.
//!
//! Callers (the engine, the CLI, the workflow's CheckCircuitBreaker task) go through
//! [`update`]: load, apply [`Event`]s, save on the version read, and on a conflict load again and
//! apply the same events to what another writer left. Reading only: [`load_or_new`].
//!
//! A conditional write can commit and lose its answer: the SDK's retry of it then fails its
//! condition (the version moved, by the write itself), and a caller that timed out cannot tell.
//! So every update carries a token ([`write_token`], one per update and all its tries), which the
//! record keeps among its last writes' ([`CircuitRecord::apply_once`]): a try that finds its
//! token in the record it loads applies nothing again ([`update_once`]).
//!
//! ```ignore
//! // The operator flag (workflow, CLI):
//! let (record, transitions) =
//!     circuit::set_override(&store, dlq_url, &settings, Override::Open, now_ms).await?;
//! // Whether a run may redrive, and how much:
//! let (_, mut record) = circuit::load_or_new(&store, dlq_url, &settings, now_ms).await?;
//! record.tick(&settings, now_ms);
//! let plan = record.plan(&settings); // Plan::Hold => nothing may be redriven
//! ```

use std::future::Future;

use redrive_shared::circuit::{CircuitRecord, CircuitSettings, Event, Lease, Override, Transition};

use crate::ports::PortError;

/// Attribute names of a circuit item.
pub mod item {
    pub const QUEUE: &str = "queue";
    pub const VERSION: &str = "version";
    pub const STATE: &str = "state";
    pub const OPERATOR: &str = "operator";
    pub const RECORD: &str = "record";
    pub const UPDATED_AT: &str = "updatedAt";
}

/// A record as stored, with the version its next write must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub version: u64,
    pub record: CircuitRecord,
}

/// What a conditional save came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Written; the item's version is now this.
    Saved { version: u64 },
    /// Another writer wrote first (or created the item): load again.
    Conflict,
}

/// A write of `record` that lands only if the stored version is still `expected` (`None`: if
/// there is no item yet): the one rule of the circuit's and triage's stores.
#[derive(Debug)]
pub struct VersionedWrite<'a, T> {
    pub record: &'a T,
    pub expected: Option<u64>,
}

impl<'a, T> VersionedWrite<'a, T> {
    pub fn new(record: &'a T, expected: Option<u64>) -> Self {
        Self { record, expected }
    }

    /// The version the write gives the item: `expected + 1`, 1 for a new item.
    pub fn next_version(&self) -> u64 {
        self.expected.map_or(1, |v| v + 1)
    }
}

/// The durable record of each DLQ's circuit.
pub trait CircuitStore: Sync {
    /// False for [`NoCircuit`] (and `None`): the engine then never calls the store.
    fn enabled(&self) -> bool {
        true
    }

    /// The record of `queue_url`, `None` when there is none yet.
    fn load(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<Option<Stored>, PortError>> + Send;

    /// Writes the record if the stored version is still the one expected; the new version is
    /// [`VersionedWrite::next_version`].
    fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> impl Future<Output = Result<SaveOutcome, PortError>> + Send;
}

/// No circuit: the engine's default (`CIRCUIT_TABLE` unset).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCircuit;

fn disabled() -> PortError {
    PortError::new(
        "Circuit",
        "CircuitOff",
        "the adaptive circuit is off: set CIRCUIT_TABLE",
        false,
    )
}

impl CircuitStore for NoCircuit {
    fn enabled(&self) -> bool {
        false
    }

    async fn load(&self, _queue_url: &str) -> Result<Option<Stored>, PortError> {
        Err(disabled())
    }

    async fn save(
        &self,
        _queue_url: &str,
        _write: VersionedWrite<'_, CircuitRecord>,
    ) -> Result<SaveOutcome, PortError> {
        Err(disabled())
    }
}

/// `Some(store)` when the circuit is configured, `None` when not: one engine type for both.
impl<S: CircuitStore + Send> CircuitStore for Option<S> {
    fn enabled(&self) -> bool {
        self.as_ref().is_some_and(S::enabled)
    }

    async fn load(&self, queue_url: &str) -> Result<Option<Stored>, PortError> {
        match self {
            Some(s) => s.load(queue_url).await,
            None => Err(disabled()),
        }
    }

    async fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> Result<SaveOutcome, PortError> {
        match self {
            Some(s) => s.save(queue_url, write).await,
            None => Err(disabled()),
        }
    }
}

impl<S: CircuitStore + Send> CircuitStore for std::sync::Arc<S> {
    fn enabled(&self) -> bool {
        (**self).enabled()
    }

    fn load(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<Option<Stored>, PortError>> + Send {
        (**self).load(queue_url)
    }

    fn save(
        &self,
        queue_url: &str,
        write: VersionedWrite<'_, CircuitRecord>,
    ) -> impl Future<Output = Result<SaveOutcome, PortError>> + Send {
        (**self).save(queue_url, write)
    }
}

/// Why an update did not land.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CircuitError {
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("the circuit record of {queue} kept changing under {tries} writes; try again")]
    Contended { queue: String, tries: u32 },
}

/// Loads before an update gives up on a record others keep writing.
pub const UPDATE_TRIES: u32 = 5;

/// The stored version (`None`: no item yet) and the record, a new closed one when there is none.
pub async fn load_or_new<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    settings: &CircuitSettings,
    now_ms: i64,
) -> Result<(Option<u64>, CircuitRecord), PortError> {
    Ok(or_new(store.load(queue_url).await?, settings, now_ms))
}

/// A token unique to one update and all its tries (see [`update_once`]).
pub fn write_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Applies `events` to the stored record and saves it on the version read; on a conflict,
/// loads again and applies the same events to what is there now, once (see [`update_once`]).
/// Returns the record written and the transitions the events made on it.
pub async fn update<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    settings: &CircuitSettings,
    now_ms: i64,
    events: &[Event],
) -> Result<(CircuitRecord, Vec<Transition>), CircuitError> {
    update_once(
        store,
        queue_url,
        settings,
        now_ms,
        &write_token(),
        events,
        Vec::new(),
    )
    .await
}

/// [`update`] as the write carrying `token`, which may have been tried before (`earlier`: the
/// transitions that try made). A conflict, or a retryable error, may mean that a try committed
/// and lost its answer: the record is loaded again, and one that holds `token` already has the
/// events; it is returned as it is, with the transitions of the try that wrote it.
pub async fn update_once<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    settings: &CircuitSettings,
    now_ms: i64,
    token: &str,
    events: &[Event],
    earlier: Vec<Transition>,
) -> Result<(CircuitRecord, Vec<Transition>), CircuitError> {
    let mut made = earlier;
    write_loop(store, queue_url, "update", |stored| {
        let (version, mut record) = or_new(stored, settings, now_ms);
        match record.apply_once(settings, token, events) {
            Some(transitions) => {
                made.clone_from(&transitions);
                Step::Write {
                    version,
                    record: Box::new(record.clone()),
                    then: (record, transitions),
                }
            }
            None => {
                tracing::info!(
                    queue = queue_url,
                    "circuit record already holds this write (its answer was lost); not applied again"
                );
                Step::Done((record, made.clone()))
            }
        }
    })
    .await
}

/// What a write makes of the record it loaded.
enum Step<T> {
    /// Save `record` on `version` (`None`: no item yet); `then` is the answer once saved.
    Write {
        version: Option<u64>,
        record: Box<CircuitRecord>,
        then: T,
    },
    /// Nothing to write: the answer.
    Done(T),
}

/// The stored version and record, a new closed record when there is none.
fn or_new(
    stored: Option<Stored>,
    settings: &CircuitSettings,
    now_ms: i64,
) -> (Option<u64>, CircuitRecord) {
    match stored {
        Some(s) => (Some(s.version), s.record),
        None => (None, CircuitRecord::new(settings, now_ms)),
    }
}

/// Every write of the record: load, `change` what was loaded, save on the version read; on a
/// conflict (another writer, or this write landed and lost its answer) or a retryable error,
/// load again and change what is there now, up to [`UPDATE_TRIES`] times.
async fn write_loop<S: CircuitStore, T>(
    store: &S,
    queue_url: &str,
    write: &'static str,
    mut change: impl FnMut(Option<Stored>) -> Step<T>,
) -> Result<T, CircuitError> {
    for _ in 0..UPDATE_TRIES {
        let (version, record, then) = match change(store.load(queue_url).await?) {
            Step::Done(answer) => return Ok(answer),
            Step::Write {
                version,
                record,
                then,
            } => (version, record, then),
        };
        match store
            .save(queue_url, VersionedWrite::new(&record, version))
            .await
        {
            Ok(SaveOutcome::Saved { .. }) => return Ok(then),
            Ok(SaveOutcome::Conflict) => tracing::info!(
                queue = queue_url,
                write,
                "circuit record changed meanwhile (another writer, or this write landed and lost its answer); loading again"
            ),
            Err(e) if e.retryable => tracing::warn!(
                queue = queue_url,
                write,
                error = %e,
                "saving the circuit record failed; it may have landed: loading again"
            ),
            Err(e) => return Err(e.into()),
        }
    }
    Err(CircuitError::Contended {
        queue: queue_url.to_string(),
        tries: UPDATE_TRIES,
    })
}

/// The operator's override (`redrive circuit open|close|auto`, the workflow's flag).
pub async fn set_override<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    settings: &CircuitSettings,
    mode: Override,
    now_ms: i64,
) -> Result<(CircuitRecord, Vec<Transition>), CircuitError> {
    let events = [
        Event::Tick { now: now_ms },
        Event::Override { now: now_ms, mode },
    ];
    update(store, queue_url, settings, now_ms, &events).await
}

/// Takes or renews the DLQ's [`Lease`] for `holder` until `now_ms + ttl_ms`: it succeeds when
/// there is no lease, when it expired, or when `holder` holds it (a retried `start`, a renewal).
/// `Ok(Err(lease))`: another holder's live lease, nothing written. The write is conditional on
/// the version read, so of two holders that take a free lease together exactly one wins; the
/// other loads again and finds the winner's lease. A write that committed and lost its answer
/// is found on the next load as this holder's own lease, and renewed.
pub async fn acquire_lease<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    settings: &CircuitSettings,
    holder: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<Result<Lease, Lease>, CircuitError> {
    write_loop(store, queue_url, "lease", |stored| {
        let (version, mut record) = or_new(stored, settings, now_ms);
        if let Err(other) = record.take_lease(holder, now_ms, ttl_ms) {
            return Step::Done(Err(other));
        }
        let lease = record.lease.clone().unwrap_or_else(|| Lease {
            holder: holder.to_string(),
            expires_at: now_ms.saturating_add(ttl_ms),
        });
        Step::Write {
            version,
            record: Box::new(record),
            then: Ok(lease),
        }
    })
    .await
}

/// Drops the DLQ's lease if `holder` holds it (conditional on the version read, like every
/// write of the record). Whether this call dropped it: false when there was none or another
/// holder has it (the caller's expired and was taken), which is left alone.
pub async fn release_lease<S: CircuitStore>(
    store: &S,
    queue_url: &str,
    holder: &str,
) -> Result<bool, CircuitError> {
    write_loop(store, queue_url, "lease release", |stored| {
        let Some(Stored {
            version,
            mut record,
        }) = stored
        else {
            return Step::Done(false);
        };
        if !record.release_lease(holder) {
            return Step::Done(false);
        }
        Step::Write {
            version: Some(version),
            record: Box::new(record),
            then: true,
        }
    })
    .await
}

#[cfg(any(test, feature = "fake"))]
mod memory;
#[cfg(any(test, feature = "fake"))]
pub use memory::MemoryCircuitStore;

mod dynamodb;
pub use dynamodb::{DynamoDbCircuitStore, record_key, stored_from_item};
pub(crate) use dynamodb::{client_record_key, put_if_version, s, unreadable_item};

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_shared::circuit::State;

    const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";

    #[tokio::test]
    async fn update_creates_then_bumps_the_version() {
        let store = MemoryCircuitStore::new();
        let s = CircuitSettings::default();
        let (r, t) = set_override(&store, Q, &s, Override::Open, 1000)
            .await
            .unwrap();
        assert_eq!((r.state, t.len()), (State::Open, 1));
        assert_eq!(store.get(Q).map(|s| s.version), Some(1));
        set_override(&store, Q, &s, Override::Auto, 2000)
            .await
            .unwrap();
        let stored = store.get(Q).unwrap();
        assert_eq!(
            (stored.version, stored.record.operator),
            (2, Override::Auto)
        );
    }

    #[tokio::test]
    async fn a_conflicting_write_is_kept_and_the_events_applied_on_top() {
        let store = MemoryCircuitStore::new();
        let s = CircuitSettings::default();
        store.put(Q, CircuitRecord::new(&s, 0));
        // Another writer (the operator) holds it open between our load and our save.
        store.interfere_once(Event::Override {
            now: 500,
            mode: Override::Open,
        });
        let events = [Event::Redriven { now: 1000, n: 7 }];
        let (r, _) = update(&*store, Q, &s, 1000, &events).await.unwrap();
        assert_eq!(r.operator, Override::Open, "the operator's write survives");
        assert_eq!(r.counts().0, 7, "and our run's count is on top of it");
        assert_eq!(store.get(Q).unwrap().version, 3);
    }

    #[tokio::test]
    async fn an_update_whose_write_committed_but_lost_its_answer_is_applied_once() {
        let store = MemoryCircuitStore::new();
        let s = CircuitSettings::default();
        store.put(Q, CircuitRecord::new(&s, 0));
        store.lose_next_answer(Ok(SaveOutcome::Conflict));
        let events = [Event::Redriven { now: 1000, n: 7 }];
        let (r, _) = update(&*store, Q, &s, 1000, &events).await.unwrap();
        assert_eq!(r.counts().0, 7, "applied once");
        let stored = store.get(Q).unwrap();
        assert_eq!((stored.version, stored.record.counts().0), (2, 7));
        // The operator's override: its transition is reported, and made once.
        store.lose_next_answer(Ok(SaveOutcome::Conflict));
        let (r, t) = set_override(&*store, Q, &s, Override::Open, 2000)
            .await
            .unwrap();
        assert_eq!((r.state, t.len()), (State::Open, 1));
        assert_eq!(store.get(Q).unwrap().record.history.len(), 1);
    }

    #[tokio::test]
    async fn a_live_lease_of_another_holder_is_not_overwritten_and_only_its_holder_drops_it() {
        let store = MemoryCircuitStore::new();
        let s = CircuitSettings::default();
        let mut theirs = CircuitRecord::new(&s, 0);
        theirs.take_lease("e1", 1000, 60_000).unwrap();
        store.put(Q, theirs);
        let got = acquire_lease(&*store, Q, &s, "e2", 1000, 60_000)
            .await
            .unwrap();
        assert_eq!(got.unwrap_err().holder, "e1");
        assert_eq!(store.get(Q).unwrap().version, 1, "nothing written");
        // Another writer (a drain's counts) between load and save: loaded again, renewed.
        store.interfere_once(Event::Redriven { now: 1500, n: 2 });
        let got = acquire_lease(&*store, Q, &s, "e1", 2000, 60_000)
            .await
            .unwrap();
        assert_eq!(got.unwrap().expires_at, 62_000);
        let stored = store.get(Q).unwrap();
        assert_eq!((stored.version, stored.record.counts().0), (3, 2));
        // Its answer lost, a renewal is found as its own on the next load, and renewed again.
        store.lose_next_answer(Ok(SaveOutcome::Conflict));
        let got = acquire_lease(&*store, Q, &s, "e1", 3000, 60_000)
            .await
            .unwrap();
        assert_eq!(got.unwrap().expires_at, 63_000);
        assert!(!release_lease(&*store, Q, "e2").await.unwrap());
        assert!(release_lease(&*store, Q, "e1").await.unwrap());
        assert_eq!(store.get(Q).unwrap().record.lease, None);
        assert!(
            !release_lease(&*store, Q, "e1").await.unwrap(),
            "released once"
        );
    }

    #[test]
    fn every_form_of_one_queue_has_one_key_and_other_queues_another() {
        let arn = "arn:aws:sqs:us-east-1:123456789012:orders-dlq";
        for form in [
            arn,
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
            "https://us-east-1.queue.amazonaws.com/123456789012/orders-dlq",
            "https://queue.amazonaws.com/123456789012/orders-dlq",
            "https://sqs.us-east-1.api.aws/123456789012/orders-dlq",
            "http://127.0.0.1:5000/123456789012/orders-dlq",
            "http://localhost:4566/123456789012/orders-dlq",
        ] {
            assert_eq!(record_key(form, "us-east-1"), arn, "{form}");
        }
        for (form, key) in [
            (
                "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq",
                "arn:aws:sqs:eu-west-1:123456789012:orders-dlq",
            ),
            (
                "http://127.0.0.1:5000/123456789012/orders-dlq",
                "arn:aws:sqs:eu-west-1:123456789012:orders-dlq",
            ),
            (
                "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders-dlq.fifo",
                "arn:aws-cn:sqs:cn-north-1:123456789012:orders-dlq.fifo",
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/210987654321/orders-dlq",
                "arn:aws:sqs:us-east-1:210987654321:orders-dlq",
            ),
            ("orders-dlq", "orders-dlq"),
        ] {
            assert_eq!(record_key(form, "eu-west-1"), key, "{form}");
        }
    }

    #[tokio::test]
    async fn off_is_an_error_naming_the_setting() {
        let e = NoCircuit.load(Q).await.unwrap_err();
        assert!(e.message.contains("CIRCUIT_TABLE"), "{e}");
        assert!(!NoCircuit.enabled());
        assert!(!None::<NoCircuit>.enabled());
        assert!(Some(MemoryCircuitStore::default()).enabled());
    }
}
