//! Text output: colour only on a terminal and never with `NO_COLOR`, human durations and sizes.

use anstyle::{AnsiColor, Effects};

/// Colours for text on stdout.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    /// anstream's choice for stdout, the same as clap's own help and errors: colour on a
    /// terminal (not `TERM=dumb`) or with `CLICOLOR_FORCE`, never with `NO_COLOR` (no-color.org),
    /// which wins over both.
    pub fn detect() -> Self {
        let choice = anstream::AutoStream::choice(&std::io::stdout());
        Self {
            color: choice != anstream::ColorChoice::Never,
        }
    }

    pub fn plain() -> Self {
        Self { color: false }
    }

    fn paint(&self, style: anstyle::Style, text: &str) -> String {
        if self.color {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_string()
        }
    }

    fn fg(color: AnsiColor) -> anstyle::Style {
        anstyle::Style::new().fg_color(Some(color.into()))
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint(anstyle::Style::new().effects(Effects::BOLD), text)
    }
    pub fn good(&self, text: &str) -> String {
        self.paint(Self::fg(AnsiColor::Green), text)
    }
    pub fn warn(&self, text: &str) -> String {
        self.paint(Self::fg(AnsiColor::Yellow), text)
    }
    pub fn bad(&self, text: &str) -> String {
        self.paint(Self::fg(AnsiColor::Red), text)
    }
    pub fn dim(&self, text: &str) -> String {
        self.paint(anstyle::Style::new().effects(Effects::DIMMED), text)
    }
}

/// `45s`, `3m12s`, `2h05m`, `4d03h`.
pub fn age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `512 B`, `1.5 KiB`, `1.0 MiB`.
pub fn bytes(n: usize) -> String {
    match n {
        n if n < 1024 => format!("{n} B"),
        n if n < 1024 * 1024 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}

/// At most `max` characters, with `…` when cut; control characters shown as spaces so that a
/// body cannot move the cursor or change the terminal's colours.
pub fn truncate(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Prints a JSON document on stdout.
pub fn print_json(value: &serde_json::Value) {
    // Serialising a `Value` cannot fail.
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_read_naturally() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(192), "3m12s");
        assert_eq!(age(7500), "2h05m");
        assert_eq!(age(3 * 86_400 + 7200), "3d02h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(1_048_576), "1.0 MiB");
    }

    #[test]
    fn truncation_is_by_character_and_neutralises_control_characters() {
        assert_eq!(truncate("héllo", 3), "hél…");
        assert_eq!(truncate("ok", 3), "ok");
        assert_eq!(truncate("a\x1b[31mb", 10), "a [31mb");
    }

    #[test]
    fn plain_style_adds_no_escape_codes() {
        let s = Style::plain();
        assert_eq!(s.bad("x"), "x");
        assert_eq!(Style { color: true }.bad("x"), "\x1b[31mx\x1b[0m");
    }
}
