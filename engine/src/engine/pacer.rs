//! The velocity cap (`MAX_MESSAGES_PER_SECOND`): the drain's sends paced over the run.

use std::sync::Mutex;
use std::time::Duration;

use redrive_shared::limits::MAX_RECEIVE;
use tokio::time::Instant;

use crate::lock;

/// Paces the messages a drain sends: the run's k-th message (counting from 0) may go
/// `k / rate` seconds after the run started, and a batch of n goes whole when its last message
/// may. Each receive takes at most [`Pacer::batch`] messages (`rate`, rounded down, between 1
/// and 10), so in any one second the drain sends at most `rate` messages plus one batch's
/// rounding: `batch - 1` more (none at a rate of 1 or less; 9 at most).
pub(super) struct Pacer {
    start: Instant,
    per_message: Duration,
    batch: u32,
    granted: Mutex<u64>,
}

impl Pacer {
    pub(super) fn new(rate: f64) -> Option<Self> {
        (rate > 0.0).then(|| Self {
            start: Instant::now(),
            per_message: Duration::from_secs_f64(1.0 / rate),
            batch: (rate.floor() as u32).clamp(1, MAX_RECEIVE as u32),
            granted: Mutex::new(0),
        })
    }

    /// The most messages a receive takes.
    pub(super) fn batch(&self) -> u32 {
        self.batch
    }

    /// The instant at which `n` more messages (n > 0) may be sent.
    pub(super) fn grant(&self, n: u32) -> Instant {
        let mut g = lock(&self.granted);
        let last = *g + u64::from(n.max(1)) - 1;
        *g += u64::from(n);
        self.start + self.per_message.mul_f64(last as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_batch_goes_when_its_last_message_may() {
        let p = Pacer::new(4.0).unwrap();
        assert_eq!(p.batch(), 4);
        let t0 = Instant::now();
        assert_eq!(p.grant(4) - t0, Duration::from_millis(750));
        assert_eq!(p.grant(1) - t0, Duration::from_secs(1));
        assert_eq!(p.grant(4) - t0, Duration::from_secs(2));
        let slow = Pacer::new(0.5).unwrap();
        assert_eq!(slow.batch(), 1);
        assert_eq!(slow.grant(1) - t0, Duration::ZERO);
        assert_eq!(slow.grant(1) - t0, Duration::from_secs(2));
        assert!(Pacer::new(0.0).is_none());
    }
}
