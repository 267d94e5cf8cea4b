//! Where a protected DLQ's message goes back to: its own source queue, read from the message,
//! never guessed.
//!
//! A DLQ that redrive did not create can be fed by several queues (their RedrivePolicy names
//! it), and a message may have reached it by other ways (sent by hand, by SNS, by a Lambda
//! destination). The rule, for one message:
//! 1. SQS's system attribute `DeadLetterQueueSourceArn`, which SQS writes when it moves a
//!    message to the DLQ;
//! 2. else the `source` redrive recorded in the message's `x-redrive` when it moved the message
//!    itself (back to the DLQ to wait, or after a rejection; to the poison queue);
//! 3. the queue named must be one of the DLQ's sources now (`ListDeadLetterSourceQueues`):
//!    a redrive role may send to exactly those, and a queue whose RedrivePolicy no longer names
//!    this DLQ is not where its old messages should land unasked.
//!
//! Anything else is [`UnknownSource`]: the message is isolated with reason `unknown-source`.

use std::fmt;

/// An SQS queue ARN: `arn:<partition>:sqs:<region>:<account>:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueArn {
    pub partition: String,
    pub region: String,
    pub account: String,
    pub name: String,
}

impl QueueArn {
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').collect();
        match parts.as_slice() {
            ["arn", partition, "sqs", region, account, name]
                if !partition.is_empty()
                    && !region.is_empty()
                    && !account.is_empty()
                    && !name.is_empty() =>
            {
                Ok(Self {
                    partition: partition.to_string(),
                    region: region.to_string(),
                    account: account.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "{text:?} is not an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)"
            )),
        }
    }

    /// True when `url` (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`, or an emulator's
    /// `http://HOST:PORT/ACCOUNT/NAME`) names this queue: same account and name, and the same
    /// region where the URL's host names one (an emulator's host names none).
    pub fn names_url(&self, url: &str) -> bool {
        url_account_and_name(url) == Some((self.account.as_str(), self.name.as_str()))
            && url_region(url).is_none_or(|region| region == self.region)
    }
}

impl fmt::Display for QueueArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arn:{}:sqs:{}:{}:{}",
            self.partition, self.region, self.account, self.name
        )
    }
}

/// The account and the name of a queue URL: its last two path segments.
pub fn url_account_and_name(url: &str) -> Option<(&str, &str)> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let mut segments = path.trim_end_matches('/').rsplit('/');
    let name = segments.next().filter(|s| !s.is_empty())?;
    let account = segments.next().filter(|s| !s.is_empty())?;
    // The host alone is not an account.
    segments.next()?;
    Some((account, name))
}

/// The region a queue URL's host names (`sqs.eu-west-1.amazonaws.com`,
/// `eu-west-1.queue.amazonaws.com`, `sqs.cn-north-1.amazonaws.com.cn`,
/// `sqs.us-east-1.localhost.localstack.cloud`): the first label shaped like a region
/// (`xx-name-N`, `xx-gov-name-N`); `None` for a host with none (`127.0.0.1`, `localhost`).
pub fn url_region(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split('/').next()?;
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next()?;
    host.split('.').find(|label| is_region(label))
}

fn is_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// Why a message's source is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownSource {
    /// Neither `DeadLetterQueueSourceArn` nor a recorded `source`.
    NotRecorded,
    /// The text is not an SQS queue ARN.
    Garbled(String),
    /// A queue that is not (or no longer) one of the DLQ's sources.
    NotASource(String),
}

impl fmt::Display for UnknownSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRecorded => f.write_str(
                "no DeadLetterQueueSourceArn and no recorded source: not moved here by SQS",
            ),
            Self::Garbled(why) => write!(f, "unreadable source: {why}"),
            Self::NotASource(arn) => write!(
                f,
                "{arn} is not a source of this DLQ (its RedrivePolicy does not name the DLQ)"
            ),
        }
    }
}

/// A message's source: the URL to send it back to, and the ARN to record in its `x-redrive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<'a> {
    pub url: &'a str,
    pub arn: String,
}

/// The rule above. `system` is the message's `DeadLetterQueueSourceArn`, `recorded` the
/// `source` of its `x-redrive`, `sources` the DLQ's source queue URLs.
pub fn resolve<'a>(
    system: Option<&str>,
    recorded: Option<&str>,
    sources: &'a [String],
) -> Result<Resolved<'a>, UnknownSource> {
    let text = system
        .filter(|s| !s.is_empty())
        .or(recorded.filter(|s| !s.is_empty()))
        .ok_or(UnknownSource::NotRecorded)?;
    let arn = QueueArn::parse(text).map_err(UnknownSource::Garbled)?;
    sources
        .iter()
        .find(|url| arn.names_url(url))
        .map(|url| Resolved {
            url: url.as_str(),
            arn: arn.to_string(),
        })
        .ok_or_else(|| UnknownSource::NotASource(arn.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<String> {
        vec![
            "https://sqs.eu-west-1.amazonaws.com/111122223333/orders".to_string(),
            "http://127.0.0.1:4566/000000000000/billing.fifo".to_string(),
        ]
    }

    #[test]
    fn the_system_attribute_names_the_source() {
        let s = sources();
        let r = resolve(Some("arn:aws:sqs:eu-west-1:111122223333:orders"), None, &s).unwrap();
        assert_eq!(r.url, s[0]);
        assert_eq!(r.arn, "arn:aws:sqs:eu-west-1:111122223333:orders");
    }

    #[test]
    fn the_system_attribute_wins_over_the_recorded_source() {
        let s = sources();
        let r = resolve(
            Some("arn:aws:sqs:us-east-1:000000000000:billing.fifo"),
            Some("arn:aws:sqs:eu-west-1:111122223333:orders"),
            &s,
        )
        .unwrap();
        assert_eq!(r.url, s[1]);
    }

    #[test]
    fn the_recorded_source_serves_a_message_redrive_moved() {
        let s = sources();
        let r = resolve(None, Some("arn:aws:sqs:eu-west-1:111122223333:orders"), &s).unwrap();
        assert_eq!(r.url, s[0]);
    }

    #[test]
    fn no_source_is_never_guessed_even_with_one_candidate() {
        let one = vec![sources().remove(0)];
        assert_eq!(resolve(None, None, &one), Err(UnknownSource::NotRecorded));
        assert_eq!(
            resolve(Some(""), Some(""), &one),
            Err(UnknownSource::NotRecorded)
        );
    }

    #[test]
    fn a_queue_that_is_not_a_source_is_unknown() {
        let s = sources();
        let other = "arn:aws:sqs:eu-west-1:111122223333:payments";
        assert_eq!(
            resolve(Some(other), None, &s),
            Err(UnknownSource::NotASource(other.to_string()))
        );
        // Same name, another account.
        let elsewhere = "arn:aws:sqs:eu-west-1:444455556666:orders";
        assert!(matches!(
            resolve(Some(elsewhere), None, &s),
            Err(UnknownSource::NotASource(_))
        ));
    }

    #[test]
    fn a_queue_of_another_region_with_the_same_account_and_name_is_not_a_source() {
        let s = sources();
        let elsewhere = "arn:aws:sqs:us-west-2:111122223333:orders";
        assert_eq!(
            resolve(Some(elsewhere), None, &s),
            Err(UnknownSource::NotASource(elsewhere.to_string()))
        );
        assert!(
            resolve(None, Some(elsewhere), &s).is_err(),
            "a recorded source neither"
        );
        // The legacy and the China host forms name their region too.
        let legacy = vec!["https://eu-west-1.queue.amazonaws.com/111122223333/orders".to_string()];
        assert!(resolve(Some(elsewhere), None, &legacy).is_err());
        assert!(
            resolve(
                Some("arn:aws:sqs:eu-west-1:111122223333:orders"),
                None,
                &legacy
            )
            .is_ok()
        );
        let china = vec!["https://sqs.cn-north-1.amazonaws.com.cn/111122223333/orders".to_string()];
        assert!(
            resolve(
                Some("arn:aws-cn:sqs:cn-north-1:111122223333:orders"),
                None,
                &china
            )
            .is_ok()
        );
        assert!(
            resolve(
                Some("arn:aws-cn:sqs:cn-northwest-1:111122223333:orders"),
                None,
                &china
            )
            .is_err()
        );
    }

    #[test]
    fn urls_give_their_region_when_the_host_names_one() {
        for (url, want) in [
            ("https://sqs.eu-west-1.amazonaws.com/1/q", Some("eu-west-1")),
            (
                "https://sqs-fips.us-gov-west-1.amazonaws.com/1/q",
                Some("us-gov-west-1"),
            ),
            (
                "https://ap-southeast-2.queue.amazonaws.com/1/q",
                Some("ap-southeast-2"),
            ),
            (
                "http://sqs.us-east-1.localhost.localstack.cloud:4566/1/q",
                Some("us-east-1"),
            ),
            ("http://127.0.0.1:5000/123456789012/q", None),
            ("http://localhost:4566/123456789012/q", None),
        ] {
            assert_eq!(url_region(url), want, "{url}");
        }
    }

    #[test]
    fn a_garbled_arn_is_named() {
        let s = sources();
        let e = resolve(Some("orders"), None, &s).unwrap_err();
        assert!(matches!(e, UnknownSource::Garbled(_)));
        assert!(e.to_string().contains("\"orders\""), "{e}");
    }

    #[test]
    fn urls_give_their_account_and_name() {
        assert_eq!(
            url_account_and_name("https://sqs.us-east-1.amazonaws.com/123456789012/q"),
            Some(("123456789012", "q"))
        );
        assert_eq!(
            url_account_and_name("http://localhost:5000/123456789012/q.fifo/"),
            Some(("123456789012", "q.fifo"))
        );
        assert_eq!(url_account_and_name("http://localhost:5000/q"), None);
    }
}
