//! What a Lambda with its own processor compiles: the crate's default features, as a user's
//! `cargo add redrive-consumer` gets them, read from `cargo tree` (no build).

use std::process::Command;

/// `cargo tree -p redrive-consumer -e normal,features` (no dev-dependencies) with `args`,
/// one package or feature per line.
fn tree(args: &[&str]) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", "redrive-consumer", "-e", "normal,features"])
        .args(["--prefix", "none", "--offline"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn has_package(tree: &str, name: &str) -> bool {
    tree.lines().any(|l| l.starts_with(&format!("{name} v")))
}

/// The crate's own features that are on, from the inverted tree.
fn own_features(args: &[&str]) -> Vec<String> {
    let mut args = args.to_vec();
    args.extend(["-i", "redrive-consumer"]);
    let mut features: Vec<String> = tree(&args)
        .lines()
        .filter_map(|l| l.strip_prefix("redrive-consumer feature \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect();
    features.sort();
    features.dedup();
    features
}

#[test]
fn a_lambda_with_its_own_processor_compiles_no_http_client_and_no_fakes() {
    // GIVEN the default features (what `run()` with the DynamoDB store needs)
    let defaults = tree(&[]);

    // THEN the Lambda runtime and the DynamoDB and SQS clients are in, reqwest is not, and
    // neither the HTTP step nor the fakes are compiled
    for needed in [
        "lambda_runtime",
        "aws-sdk-dynamodb",
        "aws-sdk-sqs",
        "aws-config",
    ] {
        assert!(has_package(&defaults, needed), "{needed} missing");
    }
    assert!(!has_package(&defaults, "reqwest"), "reqwest is compiled");
    assert_eq!(own_features(&[]), ["default", "dynamodb", "runtime"]);

    // AND the shipped HTTP step brings reqwest only when asked for
    let with_http = tree(&["--features", "http"]);
    assert!(has_package(&with_http, "reqwest"));
    assert_eq!(
        own_features(&["--no-default-features", "--features", "http,fake"]),
        ["fake", "http"]
    );

    // AND without `runtime`, a user's own glue over `Consumer` compiles no Lambda runtime and
    // no SDK client at all
    let bare = tree(&["--no-default-features"]);
    for absent in [
        "lambda_runtime",
        "aws-sdk-dynamodb",
        "aws-sdk-sqs",
        "aws-config",
        "reqwest",
    ] {
        assert!(!has_package(&bare, absent), "{absent} is compiled");
    }
}
