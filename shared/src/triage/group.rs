//! The group id: a pure function of what a message's cause is, never of when or where it
//! failed. Computed ids are `g<normaliser version>-<16 hex digits>` (the first 8 bytes of a
//! SHA-256), so that an id stored by an older build is resolved by running the version it names;
//! a group a rule names is `r-<rule name>`.
//!
//! What is hashed:
//! - a recorded cause: its class, its code, the source queue's name (`-` when unknown) and the
//!   normalised template of its message;
//! - no recorded cause: the source queue's name, the body shape and the message attributes'
//!   names and types (with the values of the attributes the operator chose).
//!
//! Never hashed: times, message ids, hosts and request ids in the text (they are masked),
//! attempts, the queue the message now sits on.

use std::fmt;

use super::facts::{Facts, Observation};
use super::normalise::{Normalised, Version, normalise};
use super::shape::body_shape;
use crate::attributes::AttributeValue;
use crate::key::sha256_hex;
use crate::meta::{ATTRIBUTE_NAME, LEGACY_ATTEMPT_ATTRIBUTE};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupId {
    Computed { version: Version, digest: String },
    Rule(String),
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Computed { version, digest } => write!(f, "g{}-{digest}", version.number()),
            Self::Rule(name) => write!(f, "r-{name}"),
        }
    }
}

impl GroupId {
    /// Reads an id as [`Display`](fmt::Display) writes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("r-") {
            return super::rules::check_name(name).map(|()| Self::Rule(name.to_string()));
        }
        let bad =
            || format!("{text:?} is not a group id (g<version>-<16 hex digits>, or r-<rule name>)");
        let (version, digest) = text
            .strip_prefix('g')
            .and_then(|rest| rest.split_once('-'))
            .ok_or_else(bad)?;
        let n: u32 = version.parse().map_err(|_| bad())?;
        let version = Version::from_number(n).ok_or_else(|| {
            format!("{text:?} names normaliser version {n}, which this build does not know")
        })?;
        if digest.len() != 16
            || !digest
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(bad());
        }
        Ok(Self::Computed {
            version,
            digest: digest.to_string(),
        })
    }
}

/// What a message is grouped by.
#[derive(Debug, Clone)]
pub struct Key {
    pub id: GroupId,
    /// The normalised template (recorded cause), else a label saying that no cause was recorded.
    pub title: String,
    /// The recorded message normalised (none without a recorded cause).
    pub normalised: Option<Normalised>,
}

/// The computed key of a message with `version`; `key_attributes` names the attributes whose
/// values split the messages without a recorded cause.
pub fn key(m: &Observation<'_>, facts: &Facts, key_attributes: &[String], version: Version) -> Key {
    let source = facts.source.as_deref().unwrap_or("-");
    let (text, title, normalised) = match &facts.cause {
        Some(cause) => {
            let n = normalise(&cause.message, version);
            let text = format!(
                "recorded\n{}\n{}\n{source}\n{}",
                cause.class, cause.code, n.template
            );
            (text, n.template.clone(), Some(n))
        }
        None => {
            let shape = body_shape(m.body);
            let mut attrs: Vec<String> = m
                .attributes
                .iter()
                .filter(|(name, _)| *name != ATTRIBUTE_NAME && *name != LEGACY_ATTEMPT_ATTRIBUTE)
                .map(|(name, a)| {
                    let chosen = key_attributes.iter().any(|k| k == name);
                    match (&a.value, chosen) {
                        (AttributeValue::String(v), true) => format!("{name}:{}={v}", a.data_type),
                        _ => format!("{name}:{}", a.data_type),
                    }
                })
                .collect();
            attrs.sort();
            let attrs = attrs.join(",");
            let text = format!("unrecorded\n{source}\n{shape}\n{attrs}");
            let from = facts
                .source
                .as_deref()
                .map_or("an unknown source".to_string(), |s| format!("source {s}"));
            let with = if attrs.is_empty() {
                String::new()
            } else {
                format!(", attributes {attrs}")
            };
            let title = format!("no recorded cause: body {shape} from {from}{with}");
            (text, title, None)
        }
    };
    let digest = sha256_hex(
        format!("redrive-triage\nv{}\n{text}", version.number()).as_bytes(),
        16,
    );
    Key {
        id: GroupId::Computed { version, digest },
        title,
        normalised,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_as_written_and_bad_ones_say_why() {
        for text in [
            "g1-0123456789abcdef",
            "g2-ffffffffffffffff",
            "r-orders-outage",
        ] {
            assert_eq!(GroupId::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "g1",
            "g1-xyz",
            "g1-0123456789ABCDEF",
            "x-1",
            "r-",
            "r-has space",
        ] {
            assert!(GroupId::parse(bad).is_err(), "{bad}");
        }
        let future = GroupId::parse("g99-0123456789abcdef").unwrap_err();
        assert!(future.contains("version 99"), "{future}");
    }
}
