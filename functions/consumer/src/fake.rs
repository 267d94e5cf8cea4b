//! In-memory fakes of the ports and a scriptable processing step, with fault injection: for the
//! faults an emulator cannot produce on demand (the store failing between claim and complete,
//! a send that is never acknowledged) and to count the calls the happy path costs.
//!
//! [`FakeStore`] evaluates the same claim condition as the DynamoDB adapter.
use redrive_shared::sync::lock;

use crate::ports::PortError;

pub fn unavailable(operation: &'static str) -> PortError {
    PortError {
        operation,
        code: "ServiceUnavailable".into(),
        message: "injected fault".into(),
    }
}

mod fixtures;
mod processor;
mod queue;
mod store;

pub use fixtures::{
    FIXTURE_DLQ_URL, FIXTURE_SOURCE_ARN, config, event, handle, in_a_minute, message, outcomes,
};
pub use processor::{ScriptedProcessor, Step};
pub use queue::{FAKE_QUEUE_HOST, FakeQueue, QueueCall};
pub use store::{FakeStore, Record, Status, StoreCalls, StoredCause};
