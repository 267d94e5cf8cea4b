//! The consumer's outcomes as CloudWatch metrics: one Embedded Metric Format line per
//! invocation on stdout, which CloudWatch Logs turns into metrics. No API call, no IAM grant,
//! nothing added to the invocation's latency but one write to stdout.
//!
//! Namespace `METRIC_NAMESPACE` (default `RedriveConsumer`), dimension `QueueName` (the source
//! queue, from the records' `eventSourceARN`, as the re-driver's metrics name the DLQ), unit
//! `Count`, zeros included so that an alarm on a metric sees 0 rather than missing data:
//! `Records`, `BatchItemFailures`, and one metric per outcome ([`OUTCOME_METRICS`]).

use redrive_shared::emf::{Document, EmfError, Unit};

use crate::engine::{Handled, Outcome};

/// The metric of each outcome, in the order the line lists them.
pub const OUTCOME_METRICS: &[&str] = &[
    "Processed",
    "Duplicate",
    "InProgress",
    "Retried",
    "DeadLettered",
    "Failed",
    "PayloadMismatch",
    "Skipped",
    "Malformed",
    "Unstarted",
];

/// Records in the batch.
pub const RECORDS: &str = "Records";
/// Records reported in `batchItemFailures`.
pub const BATCH_ITEM_FAILURES: &str = "BatchItemFailures";

impl Outcome {
    /// The name of the metric that counts this outcome (one of [`OUTCOME_METRICS`]).
    pub fn metric_name(&self) -> &'static str {
        self.names().1
    }
}

/// The metrics of one invocation.
pub fn document(handled: &Handled, namespace: &str) -> Result<Document, EmfError> {
    let mut doc = Document::new(namespace)?;
    if let Some(queue) = handled.queue_name() {
        doc.dimension("QueueName", queue)?;
    }
    doc.metric(RECORDS, handled.records.len(), Unit::Count)?;
    doc.metric(
        BATCH_ITEM_FAILURES,
        handled.response.batch_item_failures.len(),
        Unit::Count,
    )?;
    for name in OUTCOME_METRICS {
        let count = handled
            .records
            .iter()
            .filter(|r| r.outcome.metric_name() == *name)
            .count();
        doc.metric(name, count, Unit::Count)?;
    }
    Ok(doc)
}

/// Prints the invocation's EMF line(s) on stdout, each under stdout's lock so that no log
/// line interleaves with it. A line that cannot be made is logged, never fails the batch.
pub fn emit(handled: &Handled, namespace: &str, timestamp_ms: i64) {
    match document(handled, namespace) {
        // `println!`, which a test harness captures, rather than a raw write to stdout.
        Ok(doc) => doc
            .lines(timestamp_ms)
            .iter()
            .for_each(|line| println!("{line}")),
        Err(e) => tracing::warn!(error = %e, "the batch's metrics could not be written"),
    }
}
