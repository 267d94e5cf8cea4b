//! Errors as the AWS CLI words them, not the SDK's debug dumps: what the operator reads on
//! stderr, and the exit code that goes with it (see [`crate::context::Exit`]).

use std::error::Error as StdError;
use std::sync::OnceLock;

use aws_credential_types::provider::error::CredentialsError;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_types::error::ErrorMetadata;
use redrive_engine::ports::PortError;

use crate::context::{CliError, Exit};

/// What an error message names beyond the error itself: the profile in use and where each
/// service's calls go.
#[derive(Debug, Clone, Default)]
pub struct Setting {
    /// `--profile`, else `AWS_PROFILE`, else `default`.
    pub profile: String,
    pub region: Option<String>,
    /// `AWS_ENDPOINT_URL` (or the profile's `endpoint_url`), when set.
    pub endpoint: Option<String>,
}

/// The setting of this run, for errors reported where it is not at hand.
static SETTING: OnceLock<Setting> = OnceLock::new();

/// Keeps the run's setting for [`describe`].
pub fn remember(setting: &Setting) {
    let _ = SETTING.set(setting.clone());
}

/// A failed call as one line, the AWS CLI's way (without the `redrive: ` prefix): for a walk
/// that failed part-way, whose report says what was done.
pub fn describe(e: &PortError) -> String {
    let setting = SETTING.get().cloned().unwrap_or_default();
    aws(e, &setting).0
}

/// The line printed on stderr (without the `redrive: ` prefix) and the exit code.
pub fn report(e: &CliError, setting: &Setting) -> (String, Exit) {
    match e {
        CliError::Config(message) => (message.clone(), Exit::Usage),
        CliError::NoSuchQueue { queue, code } => (
            format!("queue '{queue}' does not exist ({code})"),
            Exit::Error,
        ),
        CliError::Aws(p) => aws(p, setting),
    }
}

/// The error underneath `p` and its causes, outermost first.
fn chain(p: &PortError) -> Vec<&(dyn StdError + 'static)> {
    let mut errors = Vec::new();
    let mut next: Option<&(dyn StdError + 'static)> =
        p.source.as_deref().map(|e| e as &(dyn StdError + 'static));
    while let Some(e) = next {
        errors.push(e);
        next = e.source();
    }
    errors
}

fn aws(p: &PortError, setting: &Setting) -> (String, Exit) {
    if let Some(c) = chain(p)
        .into_iter()
        .find_map(|e| e.downcast_ref::<CredentialsError>())
    {
        let profile = &setting.profile;
        return match c {
            CredentialsError::CredentialsNotLoaded(_) => (
                format!(
                    "no credentials found (profile '{profile}'): configure the profile (`aws configure`, `aws configure sso`) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                ),
                Exit::Usage,
            ),
            other => {
                let why = causes(other);
                // An IAM Identity Center profile whose session expired or never started.
                let hint = if why.contains("SSO") {
                    format!(" (run `aws sso login --profile {profile}`)")
                } else {
                    String::new()
                };
                (
                    format!("could not load credentials (profile '{profile}'): {why}{hint}"),
                    Exit::Usage,
                )
            }
        };
    }
    if chain(p)
        .into_iter()
        .filter_map(|e| e.downcast_ref::<ConnectorError>())
        .any(|c| c.is_io() || c.is_timeout())
    {
        return (
            format!(
                "could not connect to the endpoint URL: \"{}\"",
                endpoint(p.operation, setting)
            ),
            Exit::Error,
        );
    }
    let message = chain(p)
        .into_iter()
        .find_map(|e| e.downcast_ref::<ErrorMetadata>())
        .and_then(|m| m.message().map(str::to_string))
        .or_else(|| modeled_message(p))
        .unwrap_or_else(|| p.message.clone());
    (
        format!(
            "An error occurred ({}) when calling the {} operation: {message}",
            p.code, p.operation
        ),
        Exit::Error,
    )
}

/// A modeled service error (`QueueDoesNotExist: message`) is the deepest of the chain, below
/// the SDK's error and the operation's.
fn modeled_message(p: &PortError) -> Option<String> {
    let errors = chain(p);
    if errors.len() < 2 {
        return errors.first().map(|e| e.to_string());
    }
    let deepest = errors.last()?.to_string();
    Some(match deepest.split_once(": ") {
        Some((name, message)) if !name.contains(' ') => message.to_string(),
        _ => deepest,
    })
}

/// An error and its causes on one line, as the SDK's `DisplayErrorContext` does without the
/// debug dump.
fn causes(e: &(dyn StdError + 'static)) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

/// The service of an operation: its endpoint prefix and its `AWS_ENDPOINT_URL_<ID>` suffix.
fn service(operation: &str) -> (&'static str, &'static str) {
    match operation {
        "PutMetricData"
        | "DescribeAlarms"
        | "SetAlarmState"
        | "GetMetricStatistics"
        | "GetMetricData"
        | "ListMetrics" => ("monitoring", "CLOUDWATCH"),
        "GetItem" | "PutItem" | "UpdateItem" | "DeleteItem" | "Query" | "Scan" => {
            ("dynamodb", "DYNAMODB")
        }
        "PutObject" | "GetObject" | "HeadBucket" | "ListObjectsV2" | "HeadObject" => ("s3", "S3"),
        "ListExecutions" | "GetExecutionHistory" | "DescribeExecution" => ("states", "SFN"),
        _ => ("sqs", "SQS"),
    }
}

/// Where `operation`'s call went: the service's own `AWS_ENDPOINT_URL_<ID>`, else the
/// configured endpoint, else the service's regional endpoint; with a trailing `/` as the AWS
/// CLI prints it.
fn endpoint(operation: &str, setting: &Setting) -> String {
    let (prefix, id) = service(operation);
    let url = std::env::var(format!("AWS_ENDPOINT_URL_{id}"))
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| setting.endpoint.clone())
        .unwrap_or_else(|| {
            let region = setting.region.as_deref().unwrap_or("us-east-1");
            format!("https://{prefix}.{region}.amazonaws.com")
        });
    if url.ends_with('/') {
        url
    } else {
        format!("{url}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_without_an_sdk_cause_keeps_its_message() {
        let e = CliError::Aws(PortError::new(
            "PutItem",
            "Contended",
            "the record kept changing",
            false,
        ));
        let (line, code) = report(&e, &Setting::default());
        assert_eq!(
            line,
            "An error occurred (Contended) when calling the PutItem operation: the record kept changing"
        );
        assert_eq!(code, Exit::Error);
    }

    #[test]
    fn the_endpoint_is_the_services_own_or_the_regional_one() {
        let setting = Setting {
            region: Some("eu-west-1".into()),
            ..Setting::default()
        };
        assert_eq!(
            endpoint("DescribeAlarms", &setting),
            "https://monitoring.eu-west-1.amazonaws.com/"
        );
        let setting = Setting {
            endpoint: Some("http://127.0.0.1:4566".into()),
            ..setting
        };
        assert_eq!(
            endpoint("ReceiveMessage", &setting),
            "http://127.0.0.1:4566/"
        );
    }
}
