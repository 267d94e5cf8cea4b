//! JSON read as raw text: RFC 6901 pointers that keep a number's exact text, and a canonical
//! form for the payload check.

use std::collections::{BTreeMap, HashMap};

use serde_json::value::RawValue;

/// The body is not JSON (trailing text included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotJson;

/// Parses the whole body as one raw value: checks that it is JSON, trailing text included.
pub(crate) fn parse(body: &str) -> Result<&RawValue, NotJson> {
    serde_json::from_str(body).map_err(|_| NotJson)
}

/// The value at `pointer` (RFC 6901, checked by [`check_pointer`]), `None` when the document
/// has none there. `null` is returned as it is.
pub(crate) fn lookup<'a>(
    root: &'a RawValue,
    pointer: &str,
) -> Result<Option<&'a RawValue>, NotJson> {
    let mut current = root;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let raw = current.get();
        let next = match raw.as_bytes().first() {
            Some(b'{') => {
                let mut fields: HashMap<String, &RawValue> =
                    serde_json::from_str(raw).map_err(|_| NotJson)?;
                fields.remove(&token)
            }
            Some(b'[') => {
                let items: Vec<&RawValue> = serde_json::from_str(raw).map_err(|_| NotJson)?;
                array_index(&token).and_then(|i| items.get(i).copied())
            }
            _ => None,
        };
        match next {
            Some(value) => current = value,
            None => return Ok(None),
        }
    }
    Ok(Some(current))
}

/// An RFC 6901 array index: `0` or digits without a leading zero (`-`, past the end, is
/// never there).
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

/// Checks a configured pointer: it starts with `/` and every `~` is an RFC 6901 escape
/// (`~0` or `~1`).
pub(crate) fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer (it must start with `/`)"
        ));
    }
    let bytes = pointer.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')) {
            return Err(format!(
                "the JSON pointer {pointer:?} has a `~` that is not `~0` (for ~) or `~1` (for /)"
            ));
        }
    }
    Ok(())
}

/// The canonical text of a JSON value: no whitespace, object members sorted by name (the last
/// of duplicate names wins, as in `serde_json`), strings re-escaped the one way `serde_json`
/// writes them, numbers by their exact text as written. Two spellings of one document that
/// differ only in layout, member order or string escapes get one text.
pub(crate) fn canonical(raw: &RawValue) -> Result<String, NotJson> {
    let mut out = String::with_capacity(raw.get().len());
    write_canonical(raw, &mut out)?;
    Ok(out)
}

fn write_canonical(raw: &RawValue, out: &mut String) -> Result<(), NotJson> {
    let text = raw.get().trim();
    match text.as_bytes().first() {
        Some(b'{') => {
            let members: BTreeMap<String, &RawValue> =
                serde_json::from_str(text).map_err(|_| NotJson)?;
            out.push('{');
            for (i, (name, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(name).map_err(|_| NotJson)?);
                out.push(':');
                write_canonical(value, out)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|_| NotJson)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(|_| NotJson)?;
            out.push_str(&serde_json::to_string(&s).map_err(|_| NotJson)?);
        }
        Some(_) => out.push_str(text),
        None => return Err(NotJson),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        canonical(parse(text).unwrap()).unwrap()
    }

    #[test]
    fn canonical_text_ignores_layout_order_and_escapes_but_keeps_number_text() {
        for (a, b) in [
            (r#"{"b":1,"a":[1, 2]}"#, r#"{ "a" : [1,2], "b" : 1 }"#),
            (r#""\u00e9\/""#, r#""é/""#),
            (
                r#"{"a":{"y":null,"x":true}}"#,
                r#"{"a":{"x":true,"y":null}}"#,
            ),
            (r#"{"a":1,"a":2}"#, r#"{"a":2}"#),
        ] {
            assert_eq!(canon(a), canon(b), "{a} vs {b}");
        }
        assert_eq!(
            canon(r#"{ "b" : 1.0 , "a" : "x" }"#),
            r#"{"a":"x","b":1.0}"#
        );
        for (a, b) in [
            ("1", "1.0"),
            ("[1,2]", "[2,1]"),
            (r#"{"a":1}"#, r#"{"a":"1"}"#),
            ("123456789012345678901234", "123456789012345678901235"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} vs {b}");
        }
    }

    #[test]
    fn pointers_are_checked_at_configuration() {
        for ok in ["/a", "/a~0b~1c", "/", "/0/x"] {
            assert_eq!(check_pointer(ok), Ok(()), "{ok}");
        }
        for bad in ["a", "", "/a~", "/a~2", "~1"] {
            assert!(check_pointer(bad).is_err(), "{bad}");
        }
    }
}
