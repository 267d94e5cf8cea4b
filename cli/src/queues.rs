//! Queues as the operator names them: a name, an ARN or a URL, wherever the CLI takes a queue.
//! One resolver turns each into the URL the SQS API wants: a name with `GetQueueUrl`, an ARN
//! with `GetQueueUrl` in the ARN's account (its region must be the client's), a URL as it is.

use std::collections::HashMap;
use std::sync::Mutex;

use redrive_engine::aws::port_error;
use redrive_shared::config::QueueUrl;

use crate::context::CliError;

/// A queue as given on the command line or in a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRef {
    Url(QueueUrl),
    Arn {
        region: String,
        account: String,
        name: String,
    },
    Name(String),
}

const FORMS: &str = "must be a queue name, an SQS queue ARN (arn:aws:sqs:<region>:<account-id>:<name>) or a queue URL (https://sqs.<region>.amazonaws.com/<account-id>/<name>)";

/// What SQS accepts as a queue name: 1 to 80 letters, digits, `-` and `_`, `.fifo` at the end
/// of a FIFO queue's.
fn valid_name(name: &str) -> bool {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    !stem.is_empty()
        && name.len() <= 80
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl QueueRef {
    pub fn parse(v: &str) -> Result<Self, String> {
        if v.starts_with("https://") || v.starts_with("http://") {
            return QueueUrl::parse(v).map(Self::Url);
        }
        if let Some(rest) = v.strip_prefix("arn:") {
            // arn:<partition>:sqs:<region>:<account-id>:<name>
            let parts: Vec<&str> = rest.split(':').collect();
            return match parts[..] {
                [partition, "sqs", region, account, name]
                    if !partition.is_empty()
                        && !region.is_empty()
                        && !account.is_empty()
                        && account.bytes().all(|b| b.is_ascii_alphanumeric())
                        && valid_name(name) =>
                {
                    Ok(Self::Arn {
                        region: region.to_string(),
                        account: account.to_string(),
                        name: name.to_string(),
                    })
                }
                _ => Err(FORMS.to_string()),
            };
        }
        if valid_name(v) {
            Ok(Self::Name(v.to_string()))
        } else {
            Err(FORMS.to_string())
        }
    }

    /// The queue's name, whatever the form.
    pub fn name(&self) -> &str {
        match self {
            Self::Url(u) => u.name(),
            Self::Arn { name, .. } | Self::Name(name) => name,
        }
    }
}

impl std::fmt::Display for QueueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Url(u) => write!(f, "{u}"),
            Self::Arn {
                region,
                account,
                name,
            } => write!(f, "arn:aws:sqs:{region}:{account}:{name}"),
            Self::Name(n) => f.write_str(n),
        }
    }
}

/// The clap value parser of every queue flag.
pub fn parse_queue(v: &str) -> Result<QueueRef, String> {
    QueueRef::parse(v)
}

/// A queue flag whose default is the variable `var`: a bad value names the variable too,
/// since it may have come from there.
pub fn queue_from(
    var: &'static str,
) -> impl Fn(&str) -> Result<QueueRef, String> + Clone + Send + Sync + 'static {
    move |v| QueueRef::parse(v).map_err(|e| format!("{e} (the flag or {var})"))
}

/// Turns queue references into URLs, each name or ARN asked of SQS once per run.
pub struct Resolver {
    sqs: aws_sdk_sqs::Client,
    region: String,
    known: Mutex<HashMap<String, QueueUrl>>,
}

impl Resolver {
    pub fn new(sqs: aws_sdk_sqs::Client, region: String) -> Self {
        Self {
            sqs,
            region,
            known: Mutex::new(HashMap::new()),
        }
    }

    pub async fn resolve(&self, queue: &QueueRef) -> Result<QueueUrl, CliError> {
        let (name, account) = match queue {
            QueueRef::Url(u) => return Ok(u.clone()),
            QueueRef::Name(name) => (name, None),
            QueueRef::Arn {
                region,
                account,
                name,
            } => {
                if *region != self.region {
                    return Err(CliError::Config(format!(
                        "queue '{queue}' is in region {region}, but the client's region is {}: pass --region {region}",
                        self.region
                    )));
                }
                (name, Some(account))
            }
        };
        let key = queue.to_string();
        if let Some(url) = self.known.lock().map_or(None, |k| k.get(&key).cloned()) {
            return Ok(url);
        }
        let out = self
            .sqs
            .get_queue_url()
            .queue_name(name)
            .set_queue_owner_aws_account_id(account.cloned())
            .send()
            .await;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                let e = port_error("GetQueueUrl", e);
                let code = e.code.to_ascii_lowercase();
                if code.contains("nonexistentqueue") || code.contains("queuedoesnotexist") {
                    return Err(CliError::NoSuchQueue {
                        queue: key,
                        code: e.code,
                    });
                }
                return Err(CliError::Aws(e));
            }
        };
        let url = out.queue_url().unwrap_or_default();
        let url = QueueUrl::parse(url).map_err(|e| {
            CliError::Aws(redrive_engine::ports::PortError::new(
                "GetQueueUrl",
                "InvalidQueueUrl",
                format!("SQS answered '{url}' for queue '{key}': {e}"),
                false,
            ))
        })?;
        if let Ok(mut known) = self.known.lock() {
            known.insert(key, url.clone());
        }
        Ok(url)
    }

    /// Each of `queues`, resolved.
    pub async fn resolve_all(&self, queues: &[QueueRef]) -> Result<Vec<QueueUrl>, CliError> {
        let mut urls = Vec::with_capacity(queues.len());
        for q in queues {
            urls.push(self.resolve(q).await?);
        }
        Ok(urls)
    }
}

/// The queue's ARN, from its URL and the region (the URL's path is `<account-id>/<name>`).
pub fn arn_of(url: &QueueUrl, region: &str) -> String {
    let mut parts = url.as_str().rsplit('/');
    let name = parts.next().unwrap_or_default();
    let account = parts.next().unwrap_or_default();
    format!("arn:aws:sqs:{region}:{account}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse_and_anything_else_is_refused() {
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq";
        assert_eq!(
            QueueRef::parse(url),
            Ok(QueueRef::Url(QueueUrl::parse(url).unwrap()))
        );
        assert_eq!(
            QueueRef::parse("arn:aws:sqs:eu-west-1:123456789012:orders-dlq.fifo"),
            Ok(QueueRef::Arn {
                region: "eu-west-1".into(),
                account: "123456789012".into(),
                name: "orders-dlq.fifo".into()
            })
        );
        assert_eq!(
            QueueRef::parse("orders_dlq-2"),
            Ok(QueueRef::Name("orders_dlq-2".into()))
        );
        for bad in [
            "",
            "orders dlq",
            "arn:aws:sns:eu-west-1:123456789012:topic",
            "arn:aws:sqs:eu-west-1:123456789012",
            "arn:aws:sqs:eu-west-1:123456789012:a:b",
            "https://sqs.eu-west-1.amazonaws.com/orders-dlq",
            &"q".repeat(81),
            ".fifo",
        ] {
            assert!(QueueRef::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_arn_is_rebuilt_from_a_url() {
        let url = QueueUrl::parse("http://127.0.0.1:5000/123456789012/orders-dlq").unwrap();
        assert_eq!(
            arn_of(&url, "us-east-1"),
            "arn:aws:sqs:us-east-1:123456789012:orders-dlq"
        );
    }
}
