//! The wall clock, read in one place. The logic modules of this crate take the time as an
//! argument; the Lambdas, the CLI and the harnesses read it here.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock, Unix epoch milliseconds (0 before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_wall_clock_in_milliseconds() {
        // GIVEN the system clock read around the call, in milliseconds
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();

        // WHEN the clock is read
        let now = now_ms();

        // THEN it lies between the two reads (milliseconds, not seconds or microseconds)
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(i128::from(now) >= before.as_millis() as i128);
        assert!(i128::from(now) <= after.as_millis() as i128);
    }
}
