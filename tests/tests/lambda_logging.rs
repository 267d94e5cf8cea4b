//! Lambda's advanced logging controls, honoured by every function as a Lambda: the four
//! shipped binaries under `cargo lambda watch`, configured as Lambda configures a function whose
//! logging configuration sets an application log level (`AWS_LAMBDA_LOG_LEVEL`) or a log
//! format (`AWS_LAMBDA_LOG_FORMAT`).

use redrive_tests::{
    Downstream, LambdaWatch, QueueSet, create_idempotency_table, moto, receive_raw, send_raw,
    sqs_event, unique_name,
};
use serde_json::{Value, json};

/// The shipped functions, each with an event that makes it log at INFO by default.
const FUNCTIONS: [&str; 4] = ["redriver", "redrive-workflow", "archiver", "consumer"];

struct World {
    sqs: aws_sdk_sqs::Client,
    queues: QueueSet,
    env: Vec<(String, String)>,
    _downstream: Downstream,
}

impl World {
    /// One queue set, an idempotency table and a healthy downstream on moto, and the
    /// configuration all four functions read from one environment.
    async fn new() -> World {
        let moto = moto();
        let sqs = moto.sqs().await;
        let queues = QueueSet::create(&sqs, false, 3).await;
        let table = create_idempotency_table(&moto.dynamodb().await).await;
        let downstream = Downstream::start().await;
        let mut env = moto.env();
        env.extend(queues.redriver_env());
        for (k, v) in [
            ("METRIC_NAMESPACE", unique_name("ns")),
            ("REARM_ALARM", "false".to_string()),
            // The archiver: nothing on its queues is old enough, so it never writes to S3.
            (
                "ARCHIVE_BUCKET",
                unique_name("archive").to_ascii_lowercase(),
            ),
            ("IDEMPOTENCY_TABLE", table),
            ("DOWNSTREAM_URL", downstream.url()),
        ] {
            env.push((k.to_string(), v));
        }
        World {
            sqs,
            queues,
            env,
            _downstream: downstream,
        }
    }

    /// The event `function` gets: a manual drain, a workflow task, a scheduled sweep, and for
    /// the consumer a batch of one message really received from the source queue.
    async fn event(&self, function: &str) -> Value {
        match function {
            "redriver" | "archiver" => json!({}),
            "redrive-workflow" => json!({"action": "checkCircuit"}),
            "consumer" => {
                send_raw(
                    &self.sqs,
                    &self.queues.source_url,
                    "{\"order\":\"o-1\"}",
                    &[],
                )
                .await;
                let received = receive_raw(&self.sqs, &self.queues.source_url, 30).await;
                assert_eq!(received.len(), 1);
                sqs_event(&received, &self.queues.source_arn)
            }
            other => panic!("no event for {other}"),
        }
    }

    /// Starts the four functions under `cargo lambda watch` with `extra` in their environment
    /// and invokes each once; returns, per function, what it printed from its start (at its
    /// first invoke) to its answer.
    async fn run(&self, extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let mut env = self.env.clone();
        for (k, v) in extra {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v.to_string()));
        }
        let watch = LambdaWatch::start(&FUNCTIONS, &env).await;
        let mut printed = Vec::new();
        for function in FUNCTIONS {
            let event = self.event(function).await;
            let from = watch.log().len();
            let answer = watch.invoke(function, &event).await;
            let answer = answer.unwrap_or_else(|e| panic!("{function}: {e}"));
            assert!(answer.is_object(), "{function}: {answer}");
            printed.push((function, watch.log()[from..].to_string()));
        }
        printed
    }
}

/// The JSON log lines (objects with a `level`) of what a function printed.
fn json_lines(printed: &str) -> Vec<Value> {
    printed
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("level").is_some())
        .collect()
}

#[tokio::test]
async fn aws_lambda_log_level_error_silences_every_functions_info_lines_and_wins_over_rust_log() {
    // GIVEN one environment for the four functions
    let world = World::new().await;

    // WHEN each runs with RUST_LOG=info and AWS_LAMBDA_LOG_FORMAT=Text, as Lambda sets a
    // function whose log format is Text
    let text = world
        .run(&[("RUST_LOG", "info"), ("AWS_LAMBDA_LOG_FORMAT", "Text")])
        .await;

    // THEN each prints INFO lines, as text, and those of the invocation lead with its request
    // and trace ids
    for (function, printed) in &text {
        assert!(json_lines(printed).is_empty(), "{function}: {printed}");
        let invocation_lines: Vec<&str> = printed
            .lines()
            .filter(|l| l.starts_with("requestId="))
            .collect();
        assert!(
            invocation_lines
                .iter()
                .any(|l| l.contains(" xrayTraceId=Root=1-") && l.contains(" INFO ")),
            "{function}: no INFO line of the invocation with its ids: {printed}"
        );
    }

    // WHEN each runs again with AWS_LAMBDA_LOG_LEVEL=ERROR, RUST_LOG=debug beside it and no
    // log format (JSON)
    let quiet = world
        .run(&[("AWS_LAMBDA_LOG_LEVEL", "ERROR"), ("RUST_LOG", "debug")])
        .await;

    // THEN none prints a line below ERROR, at init or in the invocation, though each answered
    for (function, printed) in &quiet {
        let lines = json_lines(printed);
        let below_error: Vec<&Value> = lines.iter().filter(|l| l["level"] != "ERROR").collect();
        assert!(below_error.is_empty(), "{function}: {below_error:?}");
        for level in ["INFO", "WARN", "DEBUG", "TRACE"] {
            assert!(
                !printed.contains(&format!("\"level\":\"{level}\"")),
                "{function} printed a {level} line: {printed}"
            );
        }
    }
}
