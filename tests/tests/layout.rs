//! The workspace is laid out as the README says, read from `cargo metadata`: every path of the
//! README's layout table exists and every workspace member has a row; each front end stands on
//! the engine (or, for the consumer, the shared crate) and on no other front end; no Lambda
//! compiles clap.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The deployables and the library each stands on.
const FRONT_ENDS: [(&str, &str); 6] = [
    ("redriver", "redrive-engine"),
    ("redrive-triage-console", "redrive-engine"),
    ("redrive-workflow", "redrive-engine"),
    ("redrive-archiver", "redrive-engine"),
    ("redrive-cli", "redrive-engine"),
    ("redrive-consumer", "redrive-shared"),
];

/// The front ends that ship as Lambda functions.
const LAMBDAS: [&str; 5] = [
    "redriver",
    "redrive-triage-console",
    "redrive-workflow",
    "redrive-archiver",
    "redrive-consumer",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness crate sits in the workspace root")
        .to_path_buf()
}

/// `cargo metadata --offline --format-version 1` of the workspace.
struct Metadata {
    root: PathBuf,
    json: Value,
}

impl Metadata {
    fn read() -> Self {
        let root = workspace_root();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut metadata = Command::new(cargo);
        metadata
            .args(["metadata", "--offline", "--format-version", "1"])
            .current_dir(&root);
        let stdout = match metadata.output() {
            Ok(done) if done.status.success() => done.stdout,
            Ok(failed) => panic!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&failed.stderr)
            ),
            Err(error) => panic!("cargo metadata did not run: {error}"),
        };
        let json = serde_json::from_slice(&stdout).expect("cargo metadata prints JSON");
        Self { root, json }
    }

    fn packages(&self) -> &[Value] {
        self.json["packages"].as_array().expect("packages")
    }

    fn package(&self, name: &str) -> &Value {
        self.packages()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no package {name} in the workspace"))
    }

    fn name_of(&self, id: &str) -> &str {
        self.packages()
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["name"].as_str())
            .unwrap_or_else(|| panic!("no package with id {id}"))
    }

    /// Each workspace member's name and directory, relative to the workspace root.
    fn members(&self) -> BTreeMap<String, PathBuf> {
        let ids: BTreeSet<&str> = self.json["workspace_members"]
            .as_array()
            .expect("workspace_members")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        self.packages()
            .iter()
            .filter(|p| ids.contains(p["id"].as_str().unwrap_or_default()))
            .map(|p| {
                let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
                let dir = manifest.parent().expect("a manifest has a directory");
                let relative = dir.strip_prefix(&self.root).unwrap_or(dir).to_path_buf();
                (p["name"].as_str().expect("name").to_string(), relative)
            })
            .collect()
    }

    /// The package's declared dependencies of the given kind (`None`: normal, `Some("dev")`,
    /// `Some("build")`).
    fn declared(&self, package: &str, kind: Option<&str>) -> BTreeSet<String> {
        self.package(package)["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].as_str() == kind)
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect()
    }

    /// Every package in `package`'s normal dependency tree (not itself), each with the path
    /// from `package` that reaches it.
    fn normal_tree(&self, package: &str) -> BTreeMap<String, Vec<String>> {
        let nodes = self.json["resolve"]["nodes"]
            .as_array()
            .expect("resolve nodes");
        let node = |id: &str| {
            nodes
                .iter()
                .find(|n| n["id"] == id)
                .expect("a resolved package")
        };
        let start = self.package(package)["id"]
            .as_str()
            .expect("id")
            .to_string();
        let mut reached: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut queue = VecDeque::from([(start, vec![package.to_string()])]);
        while let Some((id, path)) = queue.pop_front() {
            for dep in node(&id)["deps"].as_array().expect("deps") {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .expect("dep_kinds")
                    .iter()
                    .any(|k| k["kind"].is_null());
                let dep_id = dep["pkg"].as_str().expect("pkg");
                let name = self.name_of(dep_id).to_string();
                if normal && !reached.contains_key(&name) && name != package {
                    let mut to = path.clone();
                    to.push(name.clone());
                    reached.insert(name, to.clone());
                    queue.push_back((dep_id.to_string(), to));
                }
            }
        }
        reached
    }
}

/// The paths in the first column of the README's "Layout" table, without a trailing `/`.
fn layout_table(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("the README has a \"## Layout\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .flat_map(|line| {
            let cell = line.split('|').nth(1).unwrap_or_default();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(|path| path.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_readme_layout_table_names_every_workspace_member_and_only_paths_that_exist() {
    // GIVEN the README's layout table and the workspace as cargo resolves it
    let metadata = Metadata::read();
    let readme = std::fs::read_to_string(metadata.root.join("README.md")).expect("README.md");
    let table = layout_table(&readme);
    assert!(!table.is_empty(), "the layout table lists no path");

    // WHEN each row's path is looked up in the tree
    let missing: Vec<&String> = table
        .iter()
        .filter(|path| !metadata.root.join(path).exists())
        .collect();

    // THEN every row names a path of this checkout
    assert!(
        missing.is_empty(),
        "the README's layout table names paths that do not exist: {missing:?}"
    );

    // AND every workspace member has its row
    let rows: BTreeSet<PathBuf> = table.iter().map(PathBuf::from).collect();
    let unlisted: Vec<String> = metadata
        .members()
        .into_iter()
        .filter(|(_, dir)| !rows.contains(dir))
        .map(|(name, dir)| format!("{name} ({})", dir.display()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "workspace members missing from the README's layout table: {unlisted:?}"
    );
}

#[test]
fn each_front_end_stands_on_the_engine_and_on_no_other_front_end() {
    // GIVEN the workspace's packages and their resolved dependencies
    let metadata = Metadata::read();
    let front_ends: BTreeSet<&str> = FRONT_ENDS.iter().map(|(name, _)| *name).collect();

    for (front_end, base) in FRONT_ENDS {
        // WHEN a front end's declared and normal transitive dependencies are read
        let normal = metadata.declared(front_end, None);
        let declared: BTreeSet<String> = [None, Some("dev"), Some("build")]
            .into_iter()
            .flat_map(|kind| metadata.declared(front_end, kind))
            .collect();
        let tree = metadata.normal_tree(front_end);

        // THEN it depends on its base library
        assert!(
            normal.contains(base),
            "{front_end} does not depend on {base}: {normal:?}"
        );

        // AND on no other front end, directly (of any kind) or through its normal tree
        for other in front_ends.iter().filter(|other| **other != front_end) {
            assert!(
                !declared.contains(*other),
                "{front_end} declares a dependency on the front end {other}"
            );
            if let Some(path) = tree.get(*other) {
                panic!(
                    "{front_end} reaches the front end {other}: {}",
                    path.join(" -> ")
                );
            }
        }
    }
}

#[test]
fn no_lambda_compiles_clap() {
    // GIVEN the Lambda packages
    let metadata = Metadata::read();
    for lambda in LAMBDAS {
        // WHEN its normal dependency tree is walked (features unified as for the workspace,
        // so this errs on the side of finding it)
        let tree = metadata.normal_tree(lambda);

        // THEN no clap crate is in it
        let clap: Vec<String> = tree
            .iter()
            .filter(|(name, _)| *name == "clap" || name.starts_with("clap_"))
            .map(|(_, path)| path.join(" -> "))
            .collect();
        assert!(clap.is_empty(), "{lambda} compiles clap: {clap:?}");
    }
}

#[test]
fn the_layout_table_is_read_from_its_section_only() {
    // GIVEN a README with a layout table between two other sections
    let readme = "# x\n\n## Layout\n| path | what |\n|---|---|\n| `engine/` | e |\n| `cli/`, `docs/` | c |\n\n## Next\n| `not/` | n |\n";

    // WHEN the table is read
    let table = layout_table(readme);

    // THEN only its rows count, every backticked path of a row, without the trailing slash
    assert_eq!(table, ["engine", "cli", "docs"]);
}
