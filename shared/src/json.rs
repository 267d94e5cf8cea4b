//! Parsing JSON that users wrote (message bodies, envelopes, records) with errors that say
//! where and what kind of failure, and never what the input held.
//!
//! serde_json's own messages quote the value they met (`invalid type: string "4111...",
//! expected u64`), which is body content. [`from_str`] and [`from_value`] track the field path
//! with `serde_path_to_error` and report only that path, serde's error category and the
//! position.

use serde::de::DeserializeOwned;
use serde_json::error::Category;
use serde_path_to_error::{Path, Segment};

/// Why a JSON input did not parse as a type: the path of the field, the category of the
/// failure and (for text) its line and column. Holds nothing of the input but the names of
/// the fields on the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} at `{path}`{}", self.what(), position(*line, *column))]
pub struct JsonError {
    /// `order.amount`, `items[2].sku`, `.` for the top level.
    pub path: String,
    pub category: Category,
    /// 1-based; 0 when the input was not text (a [`serde_json::Value`]).
    pub line: usize,
    pub column: usize,
}

/// `text` as `T`, or where and why it does not fit.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(JsonError::new)?;
    // Text after the value is the top level's.
    de.end().map_err(|e| JsonError::at(".".to_string(), &e))?;
    Ok(value)
}

/// `value` as `T`, or where and why it does not fit.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, JsonError> {
    serde_path_to_error::deserialize(value).map_err(JsonError::new)
}

impl JsonError {
    /// What kind of failure, from serde's category: `not valid JSON`, `the JSON ends early`,
    /// `a value that does not fit the type (...)`.
    pub fn what(&self) -> &'static str {
        match self.category {
            Category::Data => {
                "a value that does not fit the type (wrong type, unknown value or missing field)"
            }
            Category::Syntax => "not valid JSON",
            Category::Eof => "the JSON ends early",
            Category::Io => "the input could not be read",
        }
    }

    fn new(e: serde_path_to_error::Error<serde_json::Error>) -> Self {
        Self::at(safe_path(e.path()), e.inner())
    }

    fn at(path: String, e: &serde_json::Error) -> Self {
        Self {
            path,
            category: e.classify(),
            line: e.line(),
            column: e.column(),
        }
    }
}

/// The path with each key that does not read as a field name (a map's keys are input: an
/// e-mail, an account number) replaced by `?`.
fn safe_path(path: &Path) -> String {
    if path.iter().next().is_none() {
        return ".".to_string();
    }
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(if is_field_name(key) { key } else { "?" });
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// A letter or `_` first, then letters, digits, `_` and `-`, at most 64 characters.
fn is_field_name(key: &str) -> bool {
    let mut chars = key.chars();
    key.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn position(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" (line {line} column {column})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize)]
    struct Order {
        #[allow(dead_code)]
        amount: u64,
    }

    #[derive(Debug, Deserialize)]
    struct Envelope {
        #[allow(dead_code)]
        order: Order,
        #[allow(dead_code)]
        #[serde(default)]
        totals: BTreeMap<String, u64>,
    }

    const SECRET: &str = "4111111111111111";

    #[test]
    fn a_value_of_the_wrong_type_names_its_path_and_never_the_value() {
        let body = format!(r#"{{"order": {{"amount": "{SECRET}"}}}}"#);
        let e = from_str::<Envelope>(&body).unwrap_err();
        assert_eq!(e.path, "order.amount");
        assert_eq!(e.category, Category::Data);
        let text = e.to_string();
        assert!(text.contains("`order.amount`"), "{text}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(!text.contains("4111"), "{text}");
    }

    #[test]
    fn a_map_key_that_is_input_is_not_named() {
        let body = format!(r#"{{"order": {{"amount": 1}}, "totals": {{"{SECRET}": "x"}}}}"#);
        let e = from_str::<Envelope>(&body).unwrap_err();
        assert_eq!(e.path, "totals.?");
        assert!(!e.to_string().contains(SECRET), "{e}");
        let body = r#"{"order": {"amount": 1}, "totals": {"a@b.example": "x"}}"#;
        assert_eq!(from_str::<Envelope>(body).unwrap_err().path, "totals.?");
    }

    #[test]
    fn a_missing_field_names_the_object_that_lacks_it() {
        let e = from_str::<Envelope>(r#"{"order": {}}"#).unwrap_err();
        assert_eq!((e.path.as_str(), e.category), ("order", Category::Data));
        assert!(e.to_string().contains("missing field"), "{e}");
    }

    #[test]
    fn syntax_errors_and_trailing_text_say_so_with_the_position() {
        let e = from_str::<Envelope>(&format!("{{\"order\": {{\"amount\": {SECRET}x")).unwrap_err();
        assert_eq!(e.category, Category::Syntax);
        assert!(!e.to_string().contains(SECRET), "{e}");
        let e = from_str::<Order>(r#"{"amount": 1} trailing"#).unwrap_err();
        assert_eq!(
            (e.path.as_str(), e.category, e.line),
            (".", Category::Syntax, 1)
        );
        let e = from_str::<Order>(r#"{"amount": "#).unwrap_err();
        assert_eq!(e.category, Category::Eof);
    }

    #[test]
    fn a_value_is_read_with_the_same_errors() {
        let value = serde_json::json!({"order": {"amount": SECRET}});
        let e = from_value::<Envelope>(value).unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("order.amount", 0));
        assert_eq!(
            e.to_string(),
            "a value that does not fit the type (wrong type, unknown value or missing field) at `order.amount`"
        );
    }
}
