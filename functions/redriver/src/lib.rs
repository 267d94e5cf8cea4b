//! The re-driver Lambda's own part: the events it answers and the protected DLQs it serves. Each
//! event is recognised once ([`redrive_shared::event::recognize`]) and handed to the fleet
//! ([`fleet::Fleet`]), which picks the DLQs it names and runs each one's drain on the engine
//! ([`redrive_engine::Engine`]), the library every front end uses.

pub mod fleet;
mod invoke;

pub use fleet::{Fleet, FleetSummary, QueueSummary};
pub use invoke::{InvocationError, handle, handle_trigger};
