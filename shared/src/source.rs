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
    /// `http://HOST:PORT/ACCOUNT/NAME`) names this queue.
    pub fn names_url(&self, url: &str) -> bool {
        url_account_and_name(url) == Some((self.account.as_str(), self.name.as_str()))
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
