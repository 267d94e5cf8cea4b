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

/// `--output`: how every command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns and sentences for people (colour on a terminal).
    #[default]
    Table,
    /// The command's documented JSON document.
    Json,
    /// The same document as tab-separated lines, as the AWS CLI's `--output text`.
    Text,
}

impl Format {
    /// `--output` and `--json` together: `--json` is `--output json`, and a contradiction is
    /// refused by name.
    pub fn choose(output: Option<Format>, json: bool) -> Result<Format, String> {
        match (output, json) {
            (None, false) => Ok(Format::Table),
            (None, true) | (Some(Format::Json), _) => Ok(Format::Json),
            (Some(other), false) => Ok(other),
            (Some(other), true) => Err(format!(
                "--json asks for --output json, not --output {}",
                other.name()
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Text => "text",
        }
    }

    /// Whether a command builds its JSON document (json and text) instead of its table.
    pub fn is_document(self) -> bool {
        self != Format::Table
    }
}

static FORMAT: std::sync::OnceLock<Format> = std::sync::OnceLock::new();

/// Sets how [`print_json`] prints, once per process (the first call wins).
pub fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

/// Prints a command's JSON document on stdout: as JSON, or with `--output text` as
/// tab-separated lines ([`to_text`]).
pub fn print_json(value: &serde_json::Value) {
    if FORMAT.get() == Some(&Format::Text) {
        print!("{}", to_text(value));
        return;
    }
    // Serialising a `Value` cannot fail.
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A JSON document as the AWS CLI's text output lays it out: an object's scalar values on one
/// line, tab-separated, in the order of their keys (sorted); then each of its lists and objects
/// under its key in capitals, one line per object in a list (a list of scalars is one line).
/// The first line of a nested object or list item starts with that identifier, so
/// `grep ^GROUPS | cut -f3` selects one column. Null is `None`, as in the AWS CLI; a string's
/// tabs and line breaks become spaces so that a value never splits a line.
pub fn to_text(value: &serde_json::Value) -> String {
    let mut out = String::new();
    text_of(None, value, &mut out);
    out
}

fn text_of(id: Option<&str>, value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let scalars: Vec<String> = keys
                .iter()
                .filter(|k| !is_nested(&map[k.as_str()]))
                .map(|k| scalar(&map[k.as_str()]))
                .collect();
            line(id, &scalars, out);
            for k in keys.iter().filter(|k| is_nested(&map[k.as_str()])) {
                text_of(Some(&k.to_uppercase()), &map[k.as_str()], out);
            }
        }
        Value::Array(items) if items.iter().all(|v| !is_nested(v)) => {
            let values: Vec<String> = items.iter().map(scalar).collect();
            line(id, &values, out);
        }
        Value::Array(items) => {
            for item in items {
                text_of(id, item, out);
            }
        }
        scalar_value => line(id, &[scalar(scalar_value)], out),
    }
}

fn is_nested(v: &serde_json::Value) -> bool {
    v.is_object() || v.is_array()
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "None".into(),
        serde_json::Value::String(s) => s
            .chars()
            .map(|c| if c == '\t' || c.is_control() { ' ' } else { c })
            .collect(),
        other => other.to_string(),
    }
}

fn line(id: Option<&str>, values: &[String], out: &mut String) {
    if values.is_empty() {
        return;
    }
    let mut fields: Vec<&str> = id.into_iter().collect();
    fields.extend(values.iter().map(String::as_str));
    out.push_str(&fields.join("\t"));
    out.push('\n');
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
    fn text_output_lays_a_document_out_as_the_aws_cli_does() {
        let doc = serde_json::json!({
            "queue": "orders-dlq",
            "complete": true,
            "groups": [
                {"id": "g2-a", "count": 12, "title": "timeout\tafter\n30s", "top": {"n": 1}},
                {"id": "g2-b", "count": 4, "title": null, "samples": ["m1", "m2"]}
            ],
            "alerts": []
        });
        assert_eq!(
            to_text(&doc),
            "true\torders-dlq\n\
             GROUPS\t12\tg2-a\ttimeout after 30s\n\
             TOP\t1\n\
             GROUPS\t4\tg2-b\tNone\n\
             SAMPLES\tm1\tm2\n"
        );
        assert_eq!(to_text(&serde_json::json!([1, 2])), "1\t2\n");
    }

    #[test]
    fn json_is_output_json_and_a_contradiction_is_named() {
        assert_eq!(Format::choose(None, false), Ok(Format::Table));
        assert_eq!(Format::choose(None, true), Ok(Format::Json));
        assert_eq!(Format::choose(Some(Format::Json), true), Ok(Format::Json));
        assert_eq!(Format::choose(Some(Format::Text), false), Ok(Format::Text));
        assert_eq!(
            Format::choose(Some(Format::Table), true).unwrap_err(),
            "--json asks for --output json, not --output table"
        );
    }

    #[test]
    fn plain_style_adds_no_escape_codes() {
        let s = Style::plain();
        assert_eq!(s.bad("x"), "x");
        assert_eq!(Style { color: true }.bad("x"), "\x1b[31mx\x1b[0m");
    }
}
