//! A lock that survives a panicking holder.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a lock a panicking holder poisoned. For values that stay consistent
/// between their statements, so that a panic elsewhere never leaves one half-written: a
/// panicking test or task must not hide its own failure behind a second panic on the lock.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_over_a_lock_a_panicking_holder_poisoned() {
        // GIVEN a mutex whose holder panicked mid-update
        let m = Mutex::new(1);
        let poisoned = std::panic::catch_unwind(|| {
            let mut guard = m.lock().unwrap();
            *guard = 2;
            panic!("holder fails");
        });
        assert!(poisoned.is_err() && m.is_poisoned());

        // WHEN it is locked again
        let mut guard = lock(&m);

        // THEN the value the holder left is there and can be updated
        assert_eq!(*guard, 2);
        *guard = 3;
        drop(guard);
        assert_eq!(*lock(&m), 3);
    }
}
