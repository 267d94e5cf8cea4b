//! SQS's `AWSTraceHeader` message system attribute: the X-Ray trace header of the request that
//! sent a message (SQS sets it when the sender was traced, or a sender sets it through
//! `MessageSystemAttributes`). Every copy redrive sends carries the original's on (the
//! consumer's permanent-failure copy to the DLQ, the re-driver's copies to the source and the
//! poison queue, the CLI's `replay` and `import`), so that a trace follows a message through the
//! DLQ and back instead of starting again at the copy.
//!
//! Limits (SQS's SendMessage documentation): `AWSTraceHeader` is the only message system
//! attribute a sender may set; it is not one of the 10 message attributes, and its size does
//! not count toward the message size ([`crate::limits`] leaves it out of both).
//!
//! Its value must be a well-formed X-Ray trace header, such as
//! `Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`: `;`-separated
//! `key=value` pairs of printable ASCII, one of them a `Root` of the form `1-<8 hex>-<24 hex>`.
//! [`TraceHeader::parse`] holds to that, so that a value SQS would refuse (an edited archive
//! line) is named as such before anything is sent.

use std::fmt;

/// The system attribute's name, as SQS spells it on receive and send.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// A well-formed X-Ray trace header, as SQS keeps it in `AWSTraceHeader`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceHeader(String);

/// Why a value is no X-Ray trace header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an X-Ray trace header ({problem})")]
pub struct TraceHeaderError {
    pub value: String,
    pub problem: &'static str,
}

impl TraceHeader {
    /// Longest value accepted; X-Ray headers are well under 256 bytes (Root 35, Parent 16,
    /// Sampled, an optional Lineage), and SQS keeps them as they are.
    pub const MAX_LEN: usize = 1024;

    pub fn parse(value: &str) -> Result<Self, TraceHeaderError> {
        let fail = |problem| {
            Err(TraceHeaderError {
                value: value.chars().take(80).collect(),
                problem,
            })
        };
        if value.is_empty() {
            return fail("empty");
        }
        if value.len() > Self::MAX_LEN {
            return fail("longer than 1024 bytes");
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return fail("only printable ASCII without spaces");
        }
        let mut root = None;
        for pair in value.split(';') {
            let Some((key, field)) = pair.split_once('=') else {
                return fail("every part is key=value");
            };
            if key.is_empty() {
                return fail("every part is key=value");
            }
            if key == "Root" {
                root = Some(field);
            }
        }
        match root {
            None => fail("no Root"),
            Some(root) if !is_root(root) => fail("Root is not 1-<8 hex>-<24 hex>"),
            Some(_) => Ok(Self(value.to_string())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `1-<8 hex digits: epoch seconds>-<24 hex digits>`.
fn is_root(root: &str) -> bool {
    let mut parts = root.split('-');
    let hex = |part: Option<&str>, len: usize| {
        part.is_some_and(|p| p.len() == len && p.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    parts.next() == Some("1")
        && hex(parts.next(), 8)
        && hex(parts.next(), 24)
        && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_ray_headers_as_sqs_and_lambda_hand_them_out_are_accepted_whole() {
        for value in [
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "Root=1-5759e988-bd862e3fe1be46a994272793",
            "Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0;Lineage=a87bd80c:1|68fd508a:5",
            "Root=1-67891233-abcdef012345678912345678;Parent=0000000000000001;Sampled=?",
        ] {
            assert_eq!(TraceHeader::parse(value).unwrap().as_str(), value);
        }
    }

    #[test]
    fn anything_else_is_refused_naming_what_is_wrong() {
        for (value, problem) in [
            ("", "empty"),
            ("Parent=53995c3f42cd8ad8;Sampled=1", "no Root"),
            ("Root=1-5759e988", "Root is not 1-<8 hex>-<24 hex>"),
            (
                "Root=2-5759e988-bd862e3fe1be46a994272793",
                "Root is not 1-<8 hex>-<24 hex>",
            ),
            (
                "Root=1-5759e98g-bd862e3fe1be46a994272793",
                "Root is not 1-<8 hex>-<24 hex>",
            ),
            (
                "Root=1-5759e988-bd862e3fe1be46a994272793-00",
                "Root is not 1-<8 hex>-<24 hex>",
            ),
            (
                "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled",
                "every part is key=value",
            ),
            (
                "Root=1-5759e988-bd862e3fe1be46a994272793; Sampled=1",
                "only printable ASCII without spaces",
            ),
            (
                "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=\u{e9}",
                "only printable ASCII without spaces",
            ),
        ] {
            let err = TraceHeader::parse(value).unwrap_err();
            assert_eq!(err.problem, problem, "{value:?}");
        }
        let long = format!(
            "Root=1-5759e988-bd862e3fe1be46a994272793;X={}",
            "a".repeat(1024)
        );
        assert_eq!(
            TraceHeader::parse(&long).unwrap_err().problem,
            "longer than 1024 bytes"
        );
    }
}
