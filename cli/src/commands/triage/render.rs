//! How a pass is shown: the groups as text, and the standalone page of `triage --html`.

use std::collections::HashMap;
use std::path::PathBuf;

use redrive_console::{Contents, GroupView, RenderOptions, Theme, TriageView};
use redrive_shared::triage::Group;

use super::Coverage;
use super::causes::{Origins, origin_note};
use crate::context::CliError;
use crate::output::Style;
use redrive_engine::now_ms;

pub(super) fn print_groups(
    s: &Style,
    input: &str,
    c: &Coverage,
    groups: &[Group],
    origins: &Origins,
) {
    println!(
        "{}: grouped {} of about {} message(s) in one pass ({}); {} group(s)",
        s.bold(input),
        c.grouped,
        c.about,
        c.status,
        groups.len()
    );
    if c.repeats > 0 {
        println!(
            "{}",
            s.dim(&format!(
                "{} message(s) received twice, counted once",
                c.repeats
            ))
        );
    }
    if let Some(note) = &c.note {
        println!("{} {note}", s.warn("note:"));
    }
    if let Some(r) = &c.records {
        println!(
            "{}",
            s.dim(&format!(
                "{} message(s) carried no cause: {} found in the consumer's records",
                r.looked_up, r.found
            ))
        );
        if r.looked_up > 0 && r.found == 0 {
            println!(
                "{} no cause record matched: check --causes-key and --causes-namespace against the consumer's IDEMPOTENCY_KEY and IDEMPOTENCY_NAMESPACE (a deployed consumer's namespace is its function's name)",
                s.warn("note:")
            );
        }
    }
    for (i, g) in groups.iter().enumerate() {
        print_group(s, i + 1, g, origins.of(&g.id));
    }
}

pub(super) fn print_group(s: &Style, index: usize, g: &Group, origin: Option<&str>) {
    let row = |key: &str, value: String| println!("   {}{value}", s.dim(&format!("{key:<11}")));
    let head = if index > 0 {
        format!("[{index}] ")
    } else {
        String::new()
    };
    println!(
        "{head}{}  {} message(s)  {}",
        s.bold(&g.id),
        g.count,
        s.warn(g.action.as_str())
    );
    row("title", g.title.clone());
    let cause = match (&g.class, &g.code) {
        (Some(class), Some(code)) => format!("{class} {code}{}", origin_note(origin)),
        _ => "none recorded".into(),
    };
    row("cause", cause);
    row(
        "source",
        g.source.clone().unwrap_or_else(|| "unknown".into()),
    );
    row(
        "attempts",
        format!("{} to {}", g.attempts.min, g.attempts.max),
    );
    let isolation: Vec<String> = g
        .isolation
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    row("isolation", isolation.join(", "));
    if let (Some(first), Some(last)) = (&g.first_failure, &g.last_failure) {
        // Without a recorded cause, the times are when the messages were sent.
        let key = if g.recorded { "failures" } else { "sent" };
        row(key, format!("{first} to {last}"));
    }
    for t in &g.top_values {
        let top: Vec<String> = t
            .top
            .iter()
            .map(|v| format!("{} ({})", v.value, v.count))
            .collect();
        let more = if t.distinct_capped {
            "1000+".to_string()
        } else {
            t.distinct.to_string()
        };
        row(
            &format!("<{}>", t.kind.as_str()),
            format!("{} of {more} distinct", top.join(", ")),
        );
    }
    if let Some(rule) = &g.rule {
        row(
            "rule",
            format!("{rule} (computed: {})", g.computed_ids.join(", ")),
        );
    }
    row("action", g.action_advice.to_string());
}

/// The standalone page of `triage --html`: its file is created before the pass, so that a path
/// that cannot be written fails before any message is read.
pub(super) struct HtmlPage {
    path: PathBuf,
    file: std::fs::File,
    theme: Theme,
}

impl HtmlPage {
    pub(super) fn open(path: PathBuf, theme: &str) -> Result<Self, CliError> {
        let file = std::fs::File::create(&path).map_err(|e| {
            CliError::Config(format!("cannot write the page {}: {e}", path.display()))
        })?;
        Ok(Self {
            path,
            file,
            theme: Theme::from_context(Some(theme)),
        })
    }

    pub(super) fn discard(self) {
        drop(self.file);
        let _ = std::fs::remove_file(&self.path);
    }

    pub(super) fn write(
        mut self,
        input: &str,
        coverage: &Coverage,
        groups: &[Group],
        oldest_sent_ms: Option<i64>,
        states: &HashMap<String, String>,
    ) -> Result<(), CliError> {
        use std::io::Write as _;
        let now = now_ms();
        // A queue's name (the last part of its URL), or the file's name.
        let queue = input.rsplit('/').next().unwrap_or(input).to_string();
        let contents = if groups.is_empty() && coverage.status == "complete" {
            Contents::Empty
        } else {
            Contents::Groups(
                groups
                    .iter()
                    .cloned()
                    .map(|g| {
                        let state = states.get(&g.id).cloned();
                        GroupView {
                            state,
                            ..GroupView::new(g)
                        }
                    })
                    .collect(),
            )
        };
        let view = TriageView {
            queue,
            depth: coverage.depth,
            oldest_age_s: oldest_sent_ms
                .map(|sent| u64::try_from((now - sent) / 1000).unwrap_or(0)),
            made_at_ms: Some(now),
            coverage: Some(redrive_console::Coverage {
                grouped: coverage.grouped,
                about: coverage.about,
                status: coverage.status.to_string(),
                note: coverage.note.clone(),
            }),
            contents,
        };
        let page = redrive_console::render(
            &view,
            &RenderOptions {
                theme: self.theme,
                ..RenderOptions::default()
            },
        );
        self.file
            .write_all(page.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| {
                CliError::Config(format!(
                    "cannot write the page {}: {e}",
                    self.path.display()
                ))
            })?;
        eprintln!("triage: the page is in {}", self.path.display());
        Ok(())
    }
}
