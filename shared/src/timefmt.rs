//! RFC 3339 timestamps (UTC, second precision) from Unix time, as the `x-redrive` attribute
//! carries them, e.g. `2026-11-21T10:00:00Z`.

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;

/// Formats Unix epoch milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC). Times before 1970 clamp to
/// the epoch: the re-driver never stamps the past.
pub fn rfc3339_from_millis(epoch_ms: i64) -> String {
    DateTime::from_secs(epoch_ms.max(0) / 1000)
        .fmt(Format::DateTime)
        .unwrap_or_else(|_| "9999-12-31T23:59:59Z".into())
}

/// Parses the `YYYY-MM-DDTHH:MM:SS[.fff]Z` form written by [`rfc3339_from_millis`] (and by most
/// AWS services) back to epoch milliseconds. Returns `None` for anything else (an offset other
/// than `Z`, a space for the `T`, a date that does not exist).
pub fn millis_from_rfc3339(s: &str) -> Option<i64> {
    DateTime::from_str(s, Format::DateTime)
        .ok()?
        .to_millis()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_from_millis(0), "1970-01-01T00:00:00Z");
        // 2026-11-21T10:00:00Z
        assert_eq!(
            rfc3339_from_millis(1_795_255_200_000),
            "2026-11-21T10:00:00Z"
        );
        assert_eq!(rfc3339_from_millis(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_from_millis(-5), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn parses_what_aws_writes() {
        assert_eq!(
            millis_from_rfc3339("2026-11-21T10:00:00Z"),
            Some(1_795_255_200_000)
        );
        assert_eq!(
            millis_from_rfc3339("2026-11-21T10:00:00.123Z"),
            Some(1_795_255_200_123)
        );
        assert_eq!(millis_from_rfc3339("2026-11-21 10:00:00Z"), None);
        assert_eq!(millis_from_rfc3339("2026-13-21T10:00:00Z"), None);
        assert_eq!(millis_from_rfc3339("garbage"), None);
        assert_eq!(millis_from_rfc3339("2026-11-21T10:00:00.Z"), None);
    }

    proptest! {
        #[test]
        fn round_trips_whole_seconds(secs in 0i64..253_402_300_799) {
            let s = rfc3339_from_millis(secs * 1000);
            prop_assert_eq!(millis_from_rfc3339(&s), Some(secs * 1000));
        }

        #[test]
        fn parser_never_panics(s in "\\PC{0,40}") {
            let _ = millis_from_rfc3339(&s);
        }
    }
}

/// Epoch milliseconds before which a Lambda deadline cannot be an absolute time (2001-09-09).
const PLAUSIBLE_EPOCH_MS: u64 = 1_000_000_000_000;

/// The Lambda deadline as epoch milliseconds. The Runtime API sends an absolute epoch time;
/// some local emulators (`cargo lambda watch` 1.9) send the timeout as a duration instead
/// (e.g. `600000`). A value that cannot be an epoch time is read as a duration from `now_ms`.
pub fn deadline_epoch_ms(raw: u64, now_ms: u64) -> u64 {
    if raw < PLAUSIBLE_EPOCH_MS {
        now_ms.saturating_add(raw)
    } else {
        raw
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::deadline_epoch_ms;

    #[test]
    fn absolute_deadlines_pass_and_durations_are_anchored_at_now() {
        let now = 1_795_255_200_000;
        assert_eq!(deadline_epoch_ms(now + 30_000, now), now + 30_000);
        assert_eq!(
            deadline_epoch_ms(now - 5, now),
            now - 5,
            "a past deadline stays past"
        );
        assert_eq!(deadline_epoch_ms(600_000, now), now + 600_000);
    }
}
