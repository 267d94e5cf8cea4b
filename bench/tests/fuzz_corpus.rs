//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz targets'
//! checks on the stable toolchain, so that `cargo test` keeps every input the fuzzer found
//! interesting, and every crash saved there as a regression, passing.

#[path = "../../fuzz/src/checks.rs"]
mod checks;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = redrive_tests::workspace_root()
        .join("fuzz")
        .join("corpus")
        .join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{} fails its check", path.display());
        inputs += 1;
    }
    assert!(inputs >= 5, "{}: only {inputs} inputs", dir.display());
}

#[test]
fn x_redrive_corpus_passes() {
    replay("x_redrive", checks::x_redrive);
}

#[test]
fn event_recognize_corpus_passes() {
    replay("event_recognize", checks::event_recognize);
}

#[test]
fn config_parse_corpus_passes() {
    replay("config_parse", checks::config_parse);
}
