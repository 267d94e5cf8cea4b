//! RFC 3339 timestamps (UTC, second precision) from Unix time, as the `x-redrive` attribute
//! carries them, e.g. `2026-11-21T10:00:00Z`.

/// Formats Unix epoch milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC). Times before 1970 clamp to
/// the epoch: the re-driver never stamps the past.
pub fn rfc3339_from_millis(epoch_ms: i64) -> String {
    let secs = epoch_ms.max(0) / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses the `YYYY-MM-DDTHH:MM:SS[.fff]Z` form written by [`rfc3339_from_millis`] (and by most
/// AWS services) back to epoch milliseconds. Returns `None` for anything else.
pub fn millis_from_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut ms = 0;
    if b.len() > 20 {
        if b[19] != b'.' {
            return None;
        }
        let frac = s.get(20..s.len() - 1)?;
        if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let padded = format!("{frac:0<3}");
        ms = padded[..3].parse::<i64>().ok()?;
    }
    let days = days_from_civil(y, mo, d);
    Some(((days * 86_400) + h * 3600 + mi * 60 + se) * 1000 + ms)
}

// Howard Hinnant's civil calendar algorithms (public domain).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
