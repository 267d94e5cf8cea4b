//! The shape of a body: what a message with no recorded cause is grouped by. A JSON body's
//! shape is its keys (sorted) and the types of their values, arrays by the distinct shapes of
//! their elements; any other body is `text`, an empty one `empty`. Values never appear in it.

use serde_json::Value;

/// Nesting below this depth is written `…`.
const MAX_DEPTH: usize = 8;
/// A shape is cut to this many characters.
const MAX_CHARS: usize = 512;

pub fn body_shape(body: &str) -> String {
    if body.trim().is_empty() {
        return "empty".into();
    }
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return "text".into();
    };
    let mut out = String::new();
    write_shape(&value, 0, &mut out);
    if out.chars().count() > MAX_CHARS {
        out = out.chars().take(MAX_CHARS).collect();
    }
    out
}

fn write_shape(value: &Value, depth: usize, out: &mut String) {
    if depth >= MAX_DEPTH {
        out.push('…');
        return;
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(_) => out.push_str("bool"),
        Value::Number(_) => out.push_str("number"),
        Value::String(_) => out.push_str("string"),
        Value::Array(items) => {
            let mut shapes: Vec<String> = items
                .iter()
                .map(|item| {
                    let mut s = String::new();
                    write_shape(item, depth + 1, &mut s);
                    s
                })
                .collect();
            shapes.sort();
            shapes.dedup();
            out.push('[');
            out.push_str(&shapes.join("|"));
            out.push(']');
        }
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(key);
                out.push(':');
                write_shape(&fields[key], depth + 1, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_reduced_to_keys_and_types() {
        assert_eq!(
            body_shape(r#"{"b":[1,2,{"x":"y"}],"a":"s","c":null,"d":true}"#),
            "{a:string,b:[number|{x:string}],c:null,d:bool}"
        );
        // Same keys and types, other values and order: the same shape.
        assert_eq!(
            body_shape(r#"{"orderId":"a-1","amount":12.5}"#),
            body_shape(r#"{"amount":7,"orderId":"zz"}"#)
        );
        assert_ne!(
            body_shape(r#"{"orderId":"a-1","amount":12.5}"#),
            body_shape(r#"{"orderId":"a-1","amount":"12,50"}"#)
        );
    }

    #[test]
    fn other_bodies_are_text_or_empty() {
        assert_eq!(body_shape("hello 42"), "text");
        assert_eq!(body_shape("{not json"), "text");
        assert_eq!(body_shape("  "), "empty");
        let deep = "[".repeat(20) + &"]".repeat(20);
        assert!(
            body_shape(&deep).ends_with("[…]]]]]]]]"),
            "{}",
            body_shape(&deep)
        );
    }
}
