//! The velocity cap (`MAX_MESSAGES_PER_SECOND`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::lock;

/// Spreads receives so that the invocation never exceeds `rate` messages per second.
pub(super) struct Pacer {
    start: Instant,
    per_message: Duration,
    granted: Mutex<u64>,
}

impl Pacer {
    pub(super) fn new(rate: f64) -> Option<Self> {
        (rate > 0.0).then(|| Self {
            start: Instant::now(),
            per_message: Duration::from_secs_f64(1.0 / rate),
            granted: Mutex::new(0),
        })
    }

    /// The instant at which `n` more messages may be received.
    pub(super) fn grant(&self, n: u32) -> Instant {
        let mut g = lock(&self.granted);
        let at = self.start + self.per_message.mul_f64(*g as f64);
        *g += u64::from(n);
        at
    }
}
