//! The table `make bench` prints (Markdown, pasted as is into the README) and its JSON.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// One figure: ours, the baseline measured in the same run, their ratio, and the target.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub section: String,
    pub figure: String,
    pub ours: f64,
    pub baseline: f64,
    pub unit: String,
    /// How the ratio reads: `ours / baseline`, or `baseline / ours` for "x times faster".
    pub ratio: f64,
    pub ratio_label: String,
    /// The acceptance target, when there is one.
    pub target: Option<String>,
    pub met: Option<bool>,
    pub note: String,
}

impl Row {
    pub fn new(section: &str, figure: &str, ours: f64, baseline: f64, unit: &str) -> Self {
        Self {
            section: section.into(),
            figure: figure.into(),
            ours,
            baseline,
            unit: unit.into(),
            ratio: ours / baseline,
            ratio_label: "ours/baseline".into(),
            target: None,
            met: None,
            note: String::new(),
        }
    }

    /// Ratio as "x times faster": baseline time over ours (or our rate over the baseline's).
    pub fn speedup(mut self) -> Self {
        self.ratio = self.ours / self.baseline;
        self.ratio_label = "× faster".into();
        self
    }

    /// Ratio as ours over the baseline (smaller is better).
    pub fn fraction(mut self) -> Self {
        self.ratio = self.ours / self.baseline;
        self.ratio_label = "ours/baseline".into();
        self
    }

    pub fn target(mut self, target: &str, met: bool) -> Self {
        self.target = Some(target.into());
        self.met = Some(met);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }
}

/// The whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub started_at: String,
    pub host: String,
    pub commit: String,
    pub rows: Vec<Row>,
    /// Extra tables (the pipelines sweep), already formatted.
    pub extra: Vec<String>,
    pub notes: Vec<String>,
    /// The raw measurements, for anyone who wants to recompute.
    pub raw: serde_json::Value,
}

fn fmt_value(v: f64, unit: &str) -> String {
    if v.is_nan() {
        return "n/a".into();
    }
    // Counts (whole numbers without a unit) without decimals.
    let number = if v.abs() >= 100.0 || (unit.is_empty() && v.fract() == 0.0) {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if unit.is_empty() {
        number
    } else {
        format!("{number} {unit}")
    }
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "redrive bench, {} on {} (commit {})\n\n",
            self.started_at, self.host, self.commit
        ));
        out.push_str("| Figure | Ours | Baseline, same run | Ratio | Target | Met |\n");
        out.push_str("|---|---:|---:|---:|---|:-:|\n");
        let mut section = String::new();
        for r in &self.rows {
            if r.section != section {
                section = r.section.clone();
                out.push_str(&format!("| **{section}** | | | | | |\n"));
            }
            let ratio = if r.ratio.is_nan() {
                "n/a".to_string()
            } else if r.ratio_label == "× faster" {
                format!("{:.1}× faster", r.ratio)
            } else {
                format!("{:.3}", r.ratio)
            };
            let figure = if r.note.is_empty() {
                r.figure.clone()
            } else {
                format!("{} ({})", r.figure, r.note)
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                figure,
                fmt_value(r.ours, &r.unit),
                fmt_value(r.baseline, &r.unit),
                ratio,
                r.target.as_deref().unwrap_or(""),
                match r.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "",
                }
            ));
        }
        for extra in &self.extra {
            out.push('\n');
            out.push_str(extra);
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }

    /// Writes `<dir>/bench-<stamp>.json`, `<dir>/latest.json` and `<dir>/latest.md`.
    pub fn write(&self, dir: &Path, stamp: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        let path = dir.join(format!("bench-{stamp}.json"));
        std::fs::write(&path, &json)?;
        std::fs::write(dir.join("latest.json"), &json)?;
        std::fs::write(dir.join("latest.md"), self.markdown())?;
        Ok(path)
    }

    /// True when every figure with a target met it.
    pub fn all_met(&self) -> bool {
        self.rows.iter().all(|r| r.met != Some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_ratios_targets_and_misses() {
        let report = Report {
            started_at: "now".into(),
            host: "h".into(),
            commit: "c".into(),
            rows: vec![
                Row::new("API calls", "per message", 0.306, 2.101, "")
                    .fraction()
                    .target("≤ 0.35 (ours)", true),
                Row::new("Throughput", "moto", 18.0, 8.0, "msg/s")
                    .speedup()
                    .target("≥ 3×", false),
            ],
            ..Report::default()
        };
        let md = report.markdown();
        assert!(
            md.contains("| per message | 0.306 | 2.10 | 0.146 | ≤ 0.35 (ours) | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| moto | 18.0 msg/s | 8.00 msg/s | 2.2× faster | ≥ 3× | **no** |"),
            "{md}"
        );
        assert!(!report.all_met());
    }
}
