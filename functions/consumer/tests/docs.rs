//! The documented Lambda (examples/charge_orders.rs, the crate docs' example) and the README
//! that shows it: the lines a user writes, and the README's copy of them.

const EXAMPLE: &str = include_str!("../examples/charge_orders.rs");
const README: &str = include_str!("../README.md");

/// Powertools' Python handler for the same job, counted the same way (README.md shows it).
const POWERTOOLS_LINES: usize = 13;

/// The user's code: from the first item to the stand-in client, without the header comment.
fn user_code() -> &'static str {
    let start = EXAMPLE
        .find("#[derive")
        .expect("the example starts with its Order type");
    let end = EXAMPLE
        .find("// A stand-in")
        .expect("the stand-in client is marked");
    EXAMPLE[start..end].trim_end()
}

fn counted_lines(code: &str) -> usize {
    code.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

#[test]
fn the_documented_lambda_is_no_longer_than_the_powertools_handler() {
    let lines = counted_lines(user_code());
    assert!(
        lines <= POWERTOOLS_LINES,
        "the example takes {lines} lines, Powertools {POWERTOOLS_LINES}"
    );
    assert!(
        README.contains(&format!("**Lines a user writes: {lines}**")),
        "README.md states another figure than {lines}"
    );
    let python = README
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README.md shows the Powertools handler");
    assert_eq!(counted_lines(python), POWERTOOLS_LINES);
}

#[test]
fn the_readme_shows_the_example_as_it_is() {
    assert!(
        README.contains(&format!("```rust\n{}\n```", user_code())),
        "README.md's one-screen Lambda differs from examples/charge_orders.rs"
    );
}
