//! The one build of the Lambdas (see the module's notes): the workspace's binaries built with
//! the test build's feature set, their executables and dependency artifacts read from cargo's
//! JSON messages.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;

use crate::workspace_root;

/// The arguments of the one build (after `cargo`), without the `--bin`/`--bins` selection.
/// scripts/demo.sh builds with the same ones: change them together.
pub const BUILD_ARGS: [&str; 3] = ["build", "--workspace", "--examples"];

/// What `build_lambdas` built.
#[derive(Clone, Debug, Default)]
pub struct LambdaBuild {
    /// Binary name -> executable.
    pub executables: HashMap<String, PathBuf>,
    /// The artifact files of the packages outside the workspace (fresh or not): the identity
    /// of the dependency builds, features and profile hashed into their names.
    pub dependency_artifacts: BTreeSet<PathBuf>,
    /// Packages outside the workspace that this build compiled (were not fresh).
    pub compiled_dependencies: BTreeSet<String>,
}

/// Builds `bins` (every binary of the workspace when empty) with `BUILD_ARGS`, cargo's
/// progress and diagnostics on our stderr. `Err` holds cargo's exit status.
pub fn build_lambdas(bins: &[String]) -> Result<LambdaBuild, String> {
    let mut args: Vec<String> = BUILD_ARGS.iter().map(|s| s.to_string()).collect();
    if bins.is_empty() {
        args.push("--bins".into());
    }
    for bin in bins {
        args.extend(["--bin".to_string(), bin.clone()]);
    }
    cargo_json(&args)
}

/// `cargo ARGS --message-format=json-render-diagnostics` in the workspace root, with this
/// process's environment unchanged (the outer build's: a changed variable that a build script
/// tracks would rebuild it), its artifacts collected from the JSON messages.
pub(crate) fn cargo_json(args: &[String]) -> Result<LambdaBuild, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args(args)
        .args(["--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped())
        // cargo's progress goes straight to our stderr (libtest does not capture a child's
        // output): the first build can take minutes and should say so.
        .stderr(Stdio::inherit());
    let description = format!("{command:?}");
    let mut child = command
        .spawn()
        .map_err(|e| format!("running {description}: {e}"))?;
    let mut build = LambdaBuild::default();
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let package = message["package_id"].as_str().unwrap_or_default();
        let in_workspace = package.starts_with("path+file://");
        if !in_workspace {
            let files = message["filenames"].as_array().into_iter().flatten();
            build
                .dependency_artifacts
                .extend(files.filter_map(Value::as_str).map(PathBuf::from));
            if message["fresh"] == false {
                build.compiled_dependencies.insert(package.to_string());
            }
        }
        let is_bin = message["target"]["kind"]
            .as_array()
            .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"));
        if let (true, Some(name), Some(exe)) = (
            is_bin,
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            build
                .executables
                .insert(name.to_string(), PathBuf::from(exe));
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {description}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "{status}: see cargo's output above. Command: {description}"
        ));
    }
    Ok(build)
}

/// The binaries of the workspace's packages (`cargo metadata`), empty if it fails.
pub(super) fn workspace_bins() -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .current_dir(workspace_root())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output();
    let Ok(output) = output else {
        return Vec::new();
    };
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let packages = metadata["packages"].as_array().into_iter().flatten();
    let targets = packages.flat_map(|p| p["targets"].as_array().into_iter().flatten());
    targets
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dependency graph is built once. After the build
    /// of `make test` (`cargo test --workspace --lib --tests --benches --examples`), the build of the Lambdas, the
    /// demo and the harness's own function (what scripts/demo.sh and `LambdaWatch` run)
    /// needs no dependency artifact that build did not make, and compiles none. Slow the first
    /// time when run alone (it makes `make test`'s build); seconds under `make test`.
    #[test]
    fn first_ten_minutes_the_lambda_build_reuses_the_test_build() {
        let test_build: Vec<String> = [
            "test",
            "--workspace",
            "--lib",
            "--tests",
            "--benches",
            "--examples",
            "--no-run",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let tests = cargo_json(&test_build).unwrap();
        let bins: Vec<String> = ["demo", "redriver", "consumer", "archiver", "echo_lambda"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let lambdas = build_lambdas(&bins).unwrap();

        let second_variant: Vec<&PathBuf> = lambdas
            .dependency_artifacts
            .difference(&tests.dependency_artifacts)
            .collect();
        assert!(
            second_variant.is_empty(),
            "the Lambda build needs {} dependency artifacts that the test build did not make, e.g. {:?}",
            second_variant.len(),
            &second_variant[..second_variant.len().min(5)]
        );
        assert!(
            lambdas.compiled_dependencies.is_empty(),
            "the Lambda build compiled dependencies again: {:?}",
            lambdas.compiled_dependencies
        );
        for bin in &bins {
            assert!(lambdas.executables[bin].exists(), "{bin} was not built");
        }
    }
}
