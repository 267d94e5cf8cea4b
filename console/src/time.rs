//! Times and durations as an operator reads them: UTC, minutes, the largest two units.

use redrive_shared::timefmt::rfc3339_from_millis;

/// `2026-11-21 10:09` (UTC) from epoch milliseconds.
pub fn compact(epoch_ms: i64) -> String {
    compact_rfc3339(&rfc3339_from_millis(epoch_ms))
}

/// `2026-11-21T10:09:10Z` as `2026-11-21 10:09`; any other text is kept as it is.
pub fn compact_rfc3339(text: &str) -> String {
    match (text.get(..10), text.get(10..11), text.get(11..16)) {
        (Some(date), Some("T"), Some(hm)) => format!("{date} {hm}"),
        _ => text.to_string(),
    }
}

/// A duration in milliseconds as its largest two units: `45 s`, `12 min`, `2 h 10 min`, `3 d 4 h`.
pub fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_spans_read_as_an_operator_writes_them() {
        assert_eq!(compact(1_795_255_200_000), "2026-11-21 10:00");
        assert_eq!(compact_rfc3339("2026-11-21T10:09:10Z"), "2026-11-21 10:09");
        assert_eq!(compact_rfc3339("yesterday"), "yesterday");
        assert_eq!(span(45_000), "45 s");
        assert_eq!(span(12 * 60_000), "12 min");
        assert_eq!(span(2 * 3_600_000), "2 h");
        assert_eq!(span(130 * 60_000), "2 h 10 min");
        assert_eq!(span(76 * 3_600_000), "3 d 4 h");
        assert_eq!(span(-5), "0 s");
    }
}
