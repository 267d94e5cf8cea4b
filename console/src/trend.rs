//! The per-group trend: failures per time bucket over the dashboard's time range, drawn as an
//! inline SVG bar chart (no script, no external resource).

use std::fmt::Write;

use crate::escape::html;
use crate::time::{compact, span};

/// A time range in epoch milliseconds, `start < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl TimeRange {
    /// The range, or `None` when `end` is not after `start`.
    pub fn new(start_ms: i64, end_ms: i64) -> Option<Self> {
        (end_ms > start_ms).then_some(Self { start_ms, end_ms })
    }

    /// A range that holds every time of `times` (padded by a twentieth on each side, at least
    /// half an hour), or `None` for no times at all.
    pub fn around(times: impl IntoIterator<Item = i64>) -> Option<Self> {
        let (min, max) = times.into_iter().fold(None, |acc, t| match acc {
            None => Some((t, t)),
            Some((a, b)) => Some((t.min(a), t.max(b))),
        })?;
        let pad = ((max - min) / 20).max(30 * 60 * 1000);
        Self::new(min - pad, max + pad)
    }
}

/// Failures per bucket: `buckets` equal slices of `range`; each time counts `weight` failures
/// (a kept time stands for `weight` messages). Times outside the range are not counted.
pub fn bucket(times: &[i64], weight: usize, range: TimeRange, buckets: usize) -> Vec<usize> {
    let mut counts = vec![0; buckets];
    let len = i128::from(range.end_ms - range.start_ms);
    for &t in times {
        if t < range.start_ms || t > range.end_ms {
            continue;
        }
        let offset = i128::from(t - range.start_ms);
        let i = usize::try_from(offset * buckets as i128 / len)
            .unwrap_or(0)
            .min(buckets - 1);
        counts[i] += weight;
    }
    counts
}

/// The SVG: one bar per bucket, scaled to the largest, on a baseline, with a title stating what
/// it shows.
pub fn svg(times: &[i64], weight: usize, range: TimeRange, buckets: usize) -> String {
    const BAR: usize = 6;
    const HEIGHT: usize = 28;
    let counts = bucket(times, weight, range, buckets);
    let in_range: usize = counts.iter().sum();
    let peak = counts.iter().copied().max().unwrap_or(0);
    let width = buckets * BAR;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="rd-trend" viewBox="0 0 {width} {HEIGHT}" preserveAspectRatio="none" role="img" aria-label="trend">"#
    );
    let about = if weight > 1 { "about " } else { "" };
    let _ = write!(
        out,
        "<title>{about}{in_range} failure(s) from {} to {} (UTC), {} per bar, peak {peak}</title>",
        html(&compact(range.start_ms)),
        html(&compact(range.end_ms)),
        span((range.end_ms - range.start_ms) / buckets as i64),
    );
    for (i, &n) in counts.iter().enumerate() {
        if n == 0 {
            continue;
        }
        // At least two units high, so that one failure among thousands still shows.
        let h = ((n * (HEIGHT - 2)).div_ceil(peak)).max(2);
        let _ = write!(
            out,
            r#"<rect class="rd-bar" x="{}" y="{}" width="{}" height="{h}"/>"#,
            i * BAR + 1,
            HEIGHT - 1 - h,
            BAR - 2
        );
    }
    let _ = write!(
        out,
        r#"<line class="rd-base" x1="0" y1="{y}" x2="{width}" y2="{y}"/></svg>"#,
        y = HEIGHT - 1
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fall_in_their_bucket_and_outside_ones_are_not_counted() {
        let range = TimeRange::new(0, 100).unwrap();
        let counts = bucket(&[0, 9, 10, 55, 99, 100, -1, 101], 1, range, 10);
        assert_eq!(counts, vec![2, 1, 0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(
            bucket(&[50], 4, range, 10)[5],
            4,
            "a kept time weighs its stride"
        );
    }

    #[test]
    fn the_svg_draws_one_bar_per_non_empty_bucket_scaled_to_the_peak() {
        let range = TimeRange::new(0, 100).unwrap();
        let svg = svg(&[5, 5, 5, 5, 55], 1, range, 10);
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(
            svg.contains(r#"height="26""#),
            "the peak is full height: {svg}"
        );
        assert!(svg.contains("5 failure(s)"), "{svg}");
        assert!(TimeRange::new(5, 5).is_none());
        let around = TimeRange::around([1_000, 2_000]).unwrap();
        assert!(around.start_ms < 1_000 && around.end_ms > 2_000);
        assert!(TimeRange::around([]).is_none());
    }
}
