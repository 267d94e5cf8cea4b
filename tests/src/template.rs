//! The self-contained template (`infra/standalone_template.py`, the release's
//! `redrive-attach.template.json`) as the tests read it: the environment it gives a function,
//! rendered for the test's own resources by `tests/function_env.py`, so that a test runs the
//! built function under exactly the configuration the template deploys.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

use crate::{ScratchDir, venv_bin, workspace_root};

/// The template's text, generated once per test process.
fn standalone() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let dir = ScratchDir::new("redrive-standalone-");
        let path = dir.file("redrive-attach.template.json");
        run(Command::new(venv_bin().join("python"))
            .arg(workspace_root().join("infra/standalone_template.py"))
            .arg(&path));
        std::fs::read_to_string(&path).expect("the generated template")
    })
}

fn run(command: &mut Command) -> Vec<u8> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The environment the self-contained template gives the function `logical_id`
/// (`RedriverFunction`, `ArchiverFunction`, ...), its references resolved with `values`:
/// parameters and logical ids to the test's values (a queue's URL, a table's name); a parameter
/// not given takes its default.
pub fn standalone_function_env(logical_id: &str, values: &[(&str, &str)]) -> Vec<(String, String)> {
    let values: BTreeMap<&str, &str> = values.iter().copied().collect();
    let dir = ScratchDir::new("redrive-standalone-");
    let template = dir.file("redrive-attach.template.json");
    std::fs::write(&template, standalone()).expect("writing the template");
    let out = run(Command::new(venv_bin().join("python"))
        .arg(workspace_root().join("tests/function_env.py"))
        .arg(&template)
        .arg(logical_id)
        .arg(serde_json::to_string(&values).expect("values as JSON")));
    let env: BTreeMap<String, String> =
        serde_json::from_slice(&out).expect("function_env.py prints a JSON object of strings");
    env.into_iter().collect()
}
