/// The longest prefix `unique_name` keeps.
const MAX_PREFIX: usize = 30;

/// A name unique to this call: `<prefix>-<32 hex digits>`, at most 63 characters, using only
/// `[A-Za-z0-9_-]` (characters outside that set in `prefix` become `-`).
///
/// Legal as an SQS queue name, a DynamoDB table name and a CloudWatch alarm name, with room
/// to spare: `-poison.fifo` still fits in SQS's 80 characters.
pub fn unique_name(prefix: &str) -> String {
    let prefix: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(MAX_PREFIX)
        .collect();
    let id = uuid::Uuid::new_v4().simple();
    if prefix.is_empty() {
        format!("t-{id}")
    } else {
        format!("{prefix}-{id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_legal_and_short() {
        let long = "x".repeat(200);
        for prefix in ["orders", "", "a b/c.d", long.as_str()] {
            let a = unique_name(prefix);
            let b = unique_name(prefix);
            assert_ne!(a, b);
            assert!(a.len() <= 63, "{a} is {} chars", a.len());
            assert!(
                a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{a}"
            );
            assert!(format!("{a}-poison.fifo").len() <= 80);
        }
        assert!(unique_name("orders").starts_with("orders-"));
        assert!(unique_name("a b").starts_with("a-b-"));
    }
}
