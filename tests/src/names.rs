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

/// A directory of its own under the system's temporary one, removed with everything in it when
/// dropped (kept when the test is panicking, so that a failure can be looked at).
#[derive(Debug)]
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// Creates `<temp>/<unique_name(prefix)>`.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Self(dir)
    }

    /// The path of `name` inside the directory.
    pub fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for ScratchDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
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

    #[test]
    fn a_scratch_dir_goes_with_its_contents_when_dropped() {
        let dir = ScratchDir::new("scratch");
        let path = dir.to_path_buf();
        std::fs::create_dir_all(dir.join("inner")).unwrap();
        std::fs::write(dir.file("inner/file.txt"), "x").unwrap();
        assert!(path.is_dir());
        drop(dir);
        assert!(!path.exists(), "{} is left behind", path.display());
    }
}
