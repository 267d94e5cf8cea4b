//! CloudWatch's Embedded Metric Format: metrics written as one JSON object per log line, which
//! CloudWatch Logs turns into metrics. No API call, no IAM grant, no latency on the invocation.
//!
//! A [`Document`] holds one namespace, one dimension set and the metrics of one moment;
//! [`Document::lines`] renders it as the lines to print on the function's stdout, each a JSON
//! object on its own (no prefix: CloudWatch extracts only a log event that is one JSON object):
//!
//! ```json
//! {"_aws":{"Timestamp":1764000000000,"CloudWatchMetrics":[{"Namespace":"RedriveConsumer",
//!  "Dimensions":[["QueueName"]],"Metrics":[{"Name":"Processed","Unit":"Count"}]}]},
//!  "QueueName":"orders","Processed":9}
//! ```
//!
//! The specification allows at most 100 metric definitions per directive, so a document of
//! more metrics is split into several lines, each with the dimension values.
//!
//! ```
//! use redrive_shared::emf::{Document, Unit};
//!
//! let mut doc = Document::new("RedriveConsumer").unwrap();
//! doc.dimension("QueueName", "orders").unwrap();
//! doc.metric("Processed", 9, Unit::Count).unwrap();
//! let lines = doc.lines(1_764_000_000_000);
//! assert_eq!(lines.len(), 1);
//! assert!(lines[0].starts_with(r#"{"_aws":{"Timestamp":1764000000000,"#));
//! ```

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Number, Value};

/// Metric definitions one directive may hold (the specification's limit).
pub const MAX_METRICS_PER_LINE: usize = 100;
/// Dimension keys one dimension set may hold (the specification's limit).
pub const MAX_DIMENSIONS: usize = 30;
/// The longest dimension value CloudWatch accepts.
pub const MAX_DIMENSION_VALUE_CHARS: usize = 1024;

/// The units the consumer and the re-driver use (a subset of CloudWatch's `StandardUnit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Unit {
    Count,
    Seconds,
    Milliseconds,
    Bytes,
    Percent,
    None,
}

/// A name or value the specification (or CloudWatch) would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid EMF {what} {value:?}: {problem}")]
pub struct EmfError {
    pub what: &'static str,
    pub value: String,
    pub problem: &'static str,
}

fn err(what: &'static str, value: &str, problem: &'static str) -> EmfError {
    EmfError {
        what,
        value: value.to_string(),
        problem,
    }
}

/// A CloudWatch namespace: 1 to 255 characters, no control characters, not `AWS/...` (AWS's own).
pub fn validate_namespace(namespace: &str) -> Result<(), EmfError> {
    if namespace.is_empty() || namespace.chars().count() > 255 {
        return Err(err("namespace", namespace, "must be 1 to 255 characters"));
    }
    if namespace.starts_with("AWS/") {
        return Err(err(
            "namespace",
            namespace,
            "must not start with AWS/ (reserved for AWS)",
        ));
    }
    if namespace.contains(char::is_control) {
        return Err(err(
            "namespace",
            namespace,
            "must not contain control characters",
        ));
    }
    Ok(())
}

fn validate_name(what: &'static str, name: &str) -> Result<(), EmfError> {
    if name.is_empty() || name.chars().count() > 255 {
        return Err(err(what, name, "must be 1 to 255 characters"));
    }
    if name == "_aws" {
        return Err(err(what, name, "is the specification's metadata member"));
    }
    if name.contains(char::is_control) {
        return Err(err(what, name, "must not contain control characters"));
    }
    Ok(())
}

/// One namespace, one dimension set, and metric values of one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    namespace: String,
    dimensions: Vec<(String, String)>,
    metrics: Vec<(String, Number, Unit)>,
}

impl Document {
    pub fn new(namespace: &str) -> Result<Self, EmfError> {
        validate_namespace(namespace)?;
        Ok(Self {
            namespace: namespace.to_string(),
            dimensions: Vec::new(),
            metrics: Vec::new(),
        })
    }

    /// Adds a dimension (a key of the one dimension set, its value a top-level member).
    pub fn dimension(&mut self, name: &str, value: &str) -> Result<&mut Self, EmfError> {
        validate_name("dimension name", name)?;
        if value.is_empty() || value.chars().count() > MAX_DIMENSION_VALUE_CHARS {
            return Err(err(
                "dimension value",
                value,
                "must be 1 to 1024 characters",
            ));
        }
        if self.dimensions.len() >= MAX_DIMENSIONS {
            return Err(err(
                "dimension name",
                name,
                "a dimension set holds at most 30",
            ));
        }
        if self.has_member(name) {
            return Err(err("dimension name", name, "is already a member"));
        }
        self.dimensions.push((name.to_string(), value.to_string()));
        Ok(self)
    }

    /// Adds a metric value. Whole numbers stay whole in the JSON (`3`, not `3.0`).
    pub fn metric(
        &mut self,
        name: &str,
        value: impl Into<MetricValue>,
        unit: Unit,
    ) -> Result<&mut Self, EmfError> {
        validate_name("metric name", name)?;
        if self.has_member(name) {
            return Err(err("metric name", name, "is already a member"));
        }
        let number = match value.into() {
            MetricValue::Whole(n) => Number::from(n),
            MetricValue::Real(f) => Number::from_f64(f)
                .ok_or_else(|| err("metric value", name, "must be a finite number"))?,
        };
        self.metrics.push((name.to_string(), number, unit));
        Ok(self)
    }

    fn has_member(&self, name: &str) -> bool {
        self.dimensions.iter().any(|(n, _)| n == name)
            || self.metrics.iter().any(|(n, ..)| n == name)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The EMF lines (no trailing newline), at most [`MAX_METRICS_PER_LINE`] metrics each;
    /// none when there is no metric. `timestamp_ms`: epoch milliseconds of the values.
    pub fn lines(&self, timestamp_ms: i64) -> Vec<String> {
        let dimension_keys: Vec<&str> = self.dimensions.iter().map(|(n, _)| n.as_str()).collect();
        self.metrics
            .chunks(MAX_METRICS_PER_LINE)
            .map(|chunk| {
                let mut members: BTreeMap<&str, Value> = self
                    .dimensions
                    .iter()
                    .map(|(n, v)| (n.as_str(), Value::String(v.clone())))
                    .collect();
                for (name, value, _) in chunk {
                    members.insert(name, Value::Number(value.clone()));
                }
                let line = Line {
                    aws: Metadata {
                        timestamp: timestamp_ms,
                        cloud_watch_metrics: [Directive {
                            namespace: &self.namespace,
                            dimensions: [dimension_keys.as_slice()],
                            metrics: chunk
                                .iter()
                                .map(|(name, _, unit)| Definition { name, unit: *unit })
                                .collect(),
                        }],
                    },
                    members,
                };
                serde_json::to_string(&line).expect("an EMF line serializes")
            })
            .collect()
    }
}

/// A metric's value: a whole count or a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricValue {
    Whole(u64),
    Real(f64),
}

impl From<u64> for MetricValue {
    fn from(n: u64) -> Self {
        Self::Whole(n)
    }
}

impl From<usize> for MetricValue {
    fn from(n: usize) -> Self {
        Self::Whole(n as u64)
    }
}

impl From<u32> for MetricValue {
    fn from(n: u32) -> Self {
        Self::Whole(u64::from(n))
    }
}

impl From<i32> for MetricValue {
    fn from(n: i32) -> Self {
        match u64::try_from(n) {
            Ok(n) => Self::Whole(n),
            Err(_) => Self::Real(f64::from(n)),
        }
    }
}

impl From<f64> for MetricValue {
    fn from(f: f64) -> Self {
        Self::Real(f)
    }
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "_aws")]
    aws: Metadata<'a>,
    #[serde(flatten)]
    members: BTreeMap<&'a str, Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Metadata<'a> {
    timestamp: i64,
    #[serde(rename = "CloudWatchMetrics")]
    cloud_watch_metrics: [Directive<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Directive<'a> {
    namespace: &'a str,
    dimensions: [&'a [&'a str]; 1],
    metrics: Vec<Definition<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Definition<'a> {
    name: &'a str,
    unit: Unit,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(line: &str) -> Value {
        assert!(!line.contains('\n'), "one line: {line}");
        serde_json::from_str(line).unwrap()
    }

    /// One metric CloudWatch would extract: namespace, dimensions, name, unit, value.
    type Extracted = (String, Vec<(String, String)>, String, String, Value);

    /// The checks of the specification's "Validating" section, as CloudWatch Logs applies
    /// them: returns the metrics CloudWatch would extract.
    fn extract(line: &Value) -> Vec<Extracted> {
        let root = line.as_object().expect("the root is an object");
        let aws = root["_aws"].as_object().expect("_aws is an object");
        assert!(aws["Timestamp"].is_i64(), "Timestamp is a number of ms");
        let directives = aws["CloudWatchMetrics"].as_array().unwrap();
        let mut out = Vec::new();
        for d in directives {
            let namespace = d["Namespace"].as_str().unwrap().to_string();
            let sets = d["Dimensions"].as_array().unwrap();
            let metrics = d["Metrics"].as_array().unwrap();
            assert!(metrics.len() <= 100, "at most 100 metric definitions");
            for set in sets {
                let set = set.as_array().unwrap();
                assert!(set.len() <= 30);
                let dims: Vec<(String, String)> = set
                    .iter()
                    .map(|k| {
                        let k = k.as_str().unwrap();
                        let v = root[k].as_str().expect("a dimension's member is a string");
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                for m in metrics {
                    let name = m["Name"].as_str().unwrap().to_string();
                    let value = root.get(&name).expect("a metric's member exists").clone();
                    assert!(value.is_number(), "a metric's value is a number");
                    out.push((
                        namespace.clone(),
                        dims.clone(),
                        name,
                        m["Unit"].as_str().unwrap().to_string(),
                        value,
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn a_document_renders_the_specifications_shape() {
        // GIVEN a namespace, one dimension and two counts
        let mut doc = Document::new("RedriveConsumer").unwrap();
        doc.dimension("QueueName", "orders").unwrap();
        doc.metric("Processed", 9u64, Unit::Count).unwrap();
        doc.metric("Duplicate", 0u64, Unit::Count).unwrap();

        // WHEN it is rendered
        let lines = doc.lines(1_764_000_000_123);

        // THEN it is one JSON object on one line with _aws first, as the specification has it
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("{\"_aws\":{"), "{}", lines[0]);
        assert_eq!(
            parse(&lines[0]),
            json!({
                "_aws": {
                    "Timestamp": 1_764_000_000_123i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "RedriveConsumer",
                        "Dimensions": [["QueueName"]],
                        "Metrics": [
                            {"Name": "Processed", "Unit": "Count"},
                            {"Name": "Duplicate", "Unit": "Count"}
                        ]
                    }]
                },
                "QueueName": "orders",
                "Processed": 9,
                "Duplicate": 0
            })
        );
        // AND CloudWatch would extract both, zeros included
        let extracted = extract(&parse(&lines[0]));
        assert_eq!(extracted.len(), 2);
        assert_eq!(
            extracted[0],
            (
                "RedriveConsumer".to_string(),
                vec![("QueueName".to_string(), "orders".to_string())],
                "Processed".to_string(),
                "Count".to_string(),
                json!(9)
            )
        );
    }

    #[test]
    fn more_than_100_metrics_are_split_into_lines_that_each_carry_the_dimensions() {
        let mut doc = Document::new("Team/Orders").unwrap();
        doc.dimension("QueueName", "orders").unwrap();
        for i in 0..250u64 {
            doc.metric(&format!("M{i}"), i, Unit::Count).unwrap();
        }

        let lines = doc.lines(0);

        assert_eq!(lines.len(), 3);
        let mut names = Vec::new();
        for line in &lines {
            let extracted = extract(&parse(line));
            assert!(extracted.len() <= 100);
            for (_, dims, name, _, value) in extracted {
                assert_eq!(dims, [("QueueName".to_string(), "orders".to_string())]);
                assert_eq!(value, json!(name[1..].parse::<u64>().unwrap()));
                names.push(name);
            }
        }
        assert_eq!(names.len(), 250, "every metric once");
    }

    #[test]
    fn no_dimension_is_an_empty_dimension_set_and_no_metric_is_no_line() {
        let mut doc = Document::new("RedriveConsumer").unwrap();
        assert!(doc.lines(0).is_empty());
        doc.metric("Latency", 12.5, Unit::Milliseconds).unwrap();
        let line = parse(&doc.lines(0)[0]);
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[]])
        );
        assert_eq!(line["Latency"], json!(12.5));
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Milliseconds"
        );
    }

    #[test]
    fn what_cloudwatch_would_reject_is_refused_naming_it() {
        for bad in ["", "AWS/SQS", "a\nb", &"n".repeat(256)] {
            let e = Document::new(bad).unwrap_err();
            assert_eq!(e.what, "namespace");
            assert!(e.to_string().contains("namespace"), "{e}");
        }
        let mut doc = Document::new("ns").unwrap();
        assert_eq!(
            doc.dimension("QueueName", "").unwrap_err().what,
            "dimension value"
        );
        assert!(doc.dimension("QueueName", &"q".repeat(1025)).is_err());
        assert!(doc.dimension("_aws", "x").is_err());
        doc.dimension("QueueName", "orders").unwrap();
        assert_eq!(
            doc.metric("QueueName", 1u64, Unit::Count)
                .unwrap_err()
                .problem,
            "is already a member"
        );
        doc.metric("Processed", 1u64, Unit::Count).unwrap();
        assert!(doc.metric("Processed", 2u64, Unit::Count).is_err());
        assert_eq!(
            doc.metric("Nan", f64::NAN, Unit::None).unwrap_err().what,
            "metric value"
        );
        assert!(doc.metric("", 1u64, Unit::Count).is_err());
        for i in 0..29 {
            doc.dimension(&format!("D{i}"), "v").unwrap();
        }
        assert!(doc.dimension("D29", "v").is_err(), "a set holds at most 30");
    }
}
