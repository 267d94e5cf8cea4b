//! HTML escaping. Everything that comes from a message (titles, ids, sources, error text, state
//! names) goes through [`html`] before it reaches the page, in text and in attributes alike
//! (attributes are always double-quoted).

use std::fmt::Write;

/// `text` as HTML text or a double-quoted attribute value: `&`, `<`, `>`, `"` and `'` become
/// character references, so markup in `text` shows as text and cannot end an attribute.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline have no place in a page.
            c if c.is_control() && c != '\t' && c != '\n' => {
                let _ = write!(out, "&#xFFFD;");
            }
            c => out.push(c),
        }
    }
    out
}

/// A JSON document made safe as the text content of an element: `<`, `>` and `&` only occur
/// inside JSON strings, where `\u003c`, `\u003e` and `\u0026` mean the same characters, so the
/// result is the same JSON and holds no markup, whether the reader takes the element's text or
/// its HTML.
pub fn json_text(value: &serde_json::Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_become_references() {
        assert_eq!(
            html(r#"<script>alert('x')</script> & "q""#),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(html("plain text é"), "plain text é");
        assert_eq!(html("a\u{0}b\u{1b}c"), "a&#xFFFD;b&#xFFFD;c");
    }

    #[test]
    fn json_text_is_the_same_json_without_markup() {
        let v = serde_json::json!({"group": "</cwdb-action><img src=x onerror=alert(1)>&"});
        let text = json_text(&v);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
    }
}
