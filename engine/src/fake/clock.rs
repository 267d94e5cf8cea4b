//! A test clock for [`Engine::with_clock`](crate::engine::Engine::with_clock): epoch
//! milliseconds that start at [`START`] and move only when a test calls [`advance`]. One clock
//! per thread, so each `#[tokio::test]` (a thread of its own) has its own.

use std::cell::Cell;

/// Where every thread's clock starts (2027-01-15T08:00:00Z).
pub const START: i64 = 1_800_000_000_000;

thread_local! {
    static NOW: Cell<i64> = const { Cell::new(START) };
}

/// The clock's time, epoch ms: a `fn() -> i64` for `with_clock`.
pub fn now() -> i64 {
    NOW.with(Cell::get)
}

/// Moves this thread's clock on by `ms`.
pub fn advance(ms: i64) {
    NOW.with(|c| c.set(c.get() + ms));
}
