//! The cold-start measurement against the minimal Runtime API, on the hello-world Lambda.

use std::path::Path;

use redrive_bench::coldstart;
use serde_json::json;

#[tokio::test]
async fn a_bootstrap_is_timed_from_exec_to_its_first_next_and_through_two_invocations() {
    let binary = Path::new(env!("CARGO_BIN_EXE_hello_lambda"));
    let cs = coldstart::measure("hello", binary, &[], None, 2, |run| async move {
        vec![json!({"run": run}), json!({"run": run, "second": true})]
    })
    .await;
    assert!(cs.failures.is_empty(), "{:?}", cs.failures);
    assert_eq!(cs.init_ms.len(), 2);
    assert!(cs.init() > 0.0 && cs.init() < 10_000.0, "{cs:?}");
    assert_eq!(cs.first_invocation_ms.len(), 2);
    assert_eq!(cs.second_invocation_ms.len(), 2);
    assert!(cs.peak_mb() > 0.5, "{cs:?}");
}

#[tokio::test]
async fn a_binary_that_never_asks_for_work_is_reported_not_timed() {
    // `true` exits at once without calling the Runtime API.
    let cs = coldstart::measure("true", Path::new("/bin/true"), &[], None, 1, |_| async {
        vec![json!({})]
    })
    .await;
    assert!(cs.init_ms.is_empty());
    assert_eq!(cs.failures.len(), 1, "{:?}", cs.failures);
}
