//! The message filters `peek`, `replay`, `discard`, `export` and `import` share: one set of
//! flags ([`FilterArgs`]), one predicate ([`MessageFilter`]).
//!
//! Different flags narrow together (all must hold); a flag repeated widens for `--reason` and
//! `--error-code` (any of the values) and narrows for `--attribute` and `--where` (every pair
//! must hold). The body is read only by `--where`, parsed as JSON and never printed or logged.

use std::time::Duration;

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::{Args, ValueEnum};
use redrive_shared::attributes::AttributeValue;
use redrive_shared::meta::{IsolationReason, RedriveMeta};

use super::view::standing_reason;
use redrive_engine::ports::Received;

#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only messages isolated for this reason (repeatable: any of them). A message parked
    /// without room for x-redrive carries no reason, and a copy sent on after its isolation no
    /// longer counts as isolated.
    #[arg(long, value_name = "REASON", value_parser = EnumValueParser::<ReasonValue>::new().map(|r| r.0), action = clap::ArgAction::Append)]
    pub reason: Vec<IsolationReason>,
    /// Only messages whose x-redrive lastError has this code, e.g. HTTP_400 (repeatable: any
    /// of them).
    #[arg(long, value_name = "CODE", action = clap::ArgAction::Append)]
    pub error_code: Vec<String>,
    /// Only messages sent to their queue at least this long ago (SentTimestamp): 90s, 15m,
    /// 2h, 3d.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Only messages sent to their queue less than this long ago (SentTimestamp).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub newer_than: Option<Duration>,
    /// Only messages with this message attribute value (repeatable: all of them). String and
    /// Number attributes compare their text, Binary ones their base64.
    #[arg(long, value_name = "NAME=VALUE", value_parser = parse_attribute, action = clap::ArgAction::Append)]
    pub attribute: Vec<(String, String)>,
    /// Only messages whose JSON body holds VALUE at the JSON pointer (repeatable: all of
    /// them), e.g. --where /customer/tier=gold. A string compares its text, anything else
    /// its JSON (42, true, null). A body that is not JSON does not match.
    #[arg(long = "where", value_name = "POINTER=VALUE", value_parser = parse_where, action = clap::ArgAction::Append)]
    pub where_: Vec<(String, String)>,
}

/// An isolation reason as a flag value. The names (and clap's list of them, its completions
/// and its suggestions for a typo) come from [`IsolationReason::ALL`] and its one spelling.
#[derive(Debug, Clone)]
pub struct ReasonValue(pub IsolationReason);

impl ValueEnum for ReasonValue {
    fn value_variants<'a>() -> &'a [Self] {
        static VARIANTS: std::sync::LazyLock<Vec<ReasonValue>> = std::sync::LazyLock::new(|| {
            IsolationReason::ALL.into_iter().map(ReasonValue).collect()
        });
        &VARIANTS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.as_str().to_string()))
    }
}

/// `90s`, `15m`, `2h`, `3d`, `1w`: a whole number and one unit.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let n: u64 = number.parse().map_err(|_| {
        format!("{v:?}: a duration is a whole number and a unit: 90s, 15m, 2h, 3d, 1w")
    })?;
    let unit_seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(format!(
                "{v:?}: the unit must be s, m, h, d or w (90s, 15m, 2h, 3d, 1w)"
            ));
        }
    };
    n.checked_mul(unit_seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{v:?} is too long"))
}

fn parse_attribute(v: &str) -> Result<(String, String), String> {
    match v.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err("must be NAME=VALUE, e.g. tenant=acme".into()),
    }
}

fn parse_where(v: &str) -> Result<(String, String), String> {
    match v.split_once('=') {
        Some((pointer, value)) if pointer.starts_with('/') => {
            Ok((pointer.to_string(), value.to_string()))
        }
        _ => Err("must be /json/pointer=VALUE, e.g. /customer/tier=gold".into()),
    }
}

/// The predicate of [`FilterArgs`] at one instant.
#[derive(Debug, Clone)]
pub struct MessageFilter {
    args: FilterArgs,
    now_ms: i64,
}

impl MessageFilter {
    pub fn new(args: &FilterArgs, now_ms: i64) -> Self {
        Self {
            args: args.clone(),
            now_ms,
        }
    }

    /// True when no filter flag was given.
    pub fn is_empty(&self) -> bool {
        let a = &self.args;
        a.reason.is_empty()
            && a.error_code.is_empty()
            && a.older_than.is_none()
            && a.newer_than.is_none()
            && a.attribute.is_empty()
            && a.where_.is_empty()
    }

    pub fn matches(&self, m: &Received) -> bool {
        let a = &self.args;
        let (meta, _) = RedriveMeta::read(&m.attributes, &m.message_id);
        if !a.reason.is_empty() && !standing_reason(&meta).is_some_and(|r| a.reason.contains(r)) {
            return false;
        }
        if !a.error_code.is_empty()
            && !meta
                .last_error
                .as_ref()
                .is_some_and(|e| a.error_code.contains(&e.code))
        {
            return false;
        }
        if a.older_than.is_some() || a.newer_than.is_some() {
            let Some(sent) = m.sent_timestamp_ms else {
                return false;
            };
            let age_ms = self.now_ms.saturating_sub(sent).max(0) as u128;
            if a.older_than.is_some_and(|d| age_ms < d.as_millis()) {
                return false;
            }
            if a.newer_than.is_some_and(|d| age_ms >= d.as_millis()) {
                return false;
            }
        }
        for (name, want) in &a.attribute {
            let hit = m
                .attributes
                .get(name)
                .is_some_and(|attr| match &attr.value {
                    AttributeValue::String(s) => s == want,
                    AttributeValue::Binary(b) => redrive_shared::archive::base64_encode(b) == *want,
                });
            if !hit {
                return false;
            }
        }
        if !a.where_.is_empty() {
            // Parsed once, only here; the body never leaves this function.
            let Ok(body) = serde_json::from_str::<serde_json::Value>(&m.body) else {
                return false;
            };
            for (pointer, want) in &a.where_ {
                let hit = body.pointer(pointer).is_some_and(|v| match v {
                    serde_json::Value::String(s) => s == want,
                    other => {
                        serde_json::from_str::<serde_json::Value>(want).is_ok_and(|w| &w == other)
                    }
                });
                if !hit {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_shared::meta::{ErrorClass, LastError};
    use redrive_shared::{Attributes, MessageAttribute};

    const NOW: i64 = 1_795_255_200_000;

    fn message(body: &str, sent_ago_s: Option<i64>, meta: Option<RedriveMeta>) -> Received {
        let mut attributes = Attributes::new();
        attributes.insert("tenant".into(), MessageAttribute::string("acme"));
        attributes.insert("blob".into(), MessageAttribute::binary(vec![0u8, 255]));
        if let Some(meta) = meta {
            meta.write_into(&mut attributes);
        }
        Received {
            sent_timestamp_ms: sent_ago_s.map(|s| NOW - s * 1000),
            ..crate::fixtures::received("m-1", body, attributes)
        }
    }

    fn filter(f: impl FnOnce(&mut FilterArgs)) -> MessageFilter {
        let mut args = FilterArgs::default();
        f(&mut args);
        MessageFilter::new(&args, NOW)
    }

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("3d"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert!(parse_duration("2").unwrap_err().contains("unit"));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("1.5h").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn no_flag_selects_everything() {
        let f = filter(|_| {});
        assert!(f.is_empty());
        assert!(f.matches(&message("not json", None, None)));
    }

    #[test]
    fn age_bounds_use_the_sent_timestamp() {
        let older = filter(|a| a.older_than = Some(Duration::from_secs(3600)));
        assert!(!older.is_empty());
        assert!(older.matches(&message("", Some(7200), None)));
        assert!(!older.matches(&message("", Some(60), None)));
        assert!(!older.matches(&message("", None, None)), "no SentTimestamp");
        let newer = filter(|a| a.newer_than = Some(Duration::from_secs(3600)));
        assert!(newer.matches(&message("", Some(60), None)));
        assert!(!newer.matches(&message("", Some(7200), None)));
        let window = filter(|a| {
            a.older_than = Some(Duration::from_secs(60));
            a.newer_than = Some(Duration::from_secs(3600));
        });
        assert!(window.matches(&message("", Some(600), None)));
        assert!(!window.matches(&message("", Some(30), None)));
    }

    #[test]
    fn reason_and_error_code_read_x_redrive() {
        let parked = RedriveMeta {
            reason: Some(IsolationReason::PermanentFailure),
            isolated_at: Some("2026-11-21T11:00:00Z".into()),
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "HTTP_400",
                "bad",
                "2026-11-21T10:59:00Z".into(),
            )),
            ..RedriveMeta::fresh("o-1")
        };
        let m = message("", None, Some(parked));
        let plain = message("", None, None);
        let perm = filter(|a| {
            a.reason = vec![
                IsolationReason::MaxAttempts,
                IsolationReason::PermanentFailure,
            ]
        });
        assert!(perm.matches(&m));
        assert!(!perm.matches(&plain));
        let code = filter(|a| a.error_code = vec!["HTTP_500".into(), "HTTP_400".into()]);
        assert!(code.matches(&m));
        assert!(!code.matches(&plain));
        assert!(!filter(|a| a.error_code = vec!["HTTP_500".into()]).matches(&m));
        let both = filter(|a| {
            a.reason = vec![IsolationReason::MaxAttempts];
            a.error_code = vec!["HTTP_400".into()];
        });
        assert!(!both.matches(&m), "flags narrow together");
    }

    #[test]
    fn attributes_compare_text_or_base64_and_all_must_hold() {
        let m = message("", None, None);
        let a = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            filter(move |a| a.attribute = pairs)
        };
        assert!(a(&[("tenant", "acme")]).matches(&m));
        assert!(a(&[("blob", "AP8=")]).matches(&m));
        assert!(!a(&[("tenant", "other")]).matches(&m));
        assert!(!a(&[("missing", "")]).matches(&m));
        assert!(!a(&[("tenant", "acme"), ("blob", "AAAA")]).matches(&m));
        assert_eq!(
            parse_attribute("k=a=b"),
            Ok(("k".to_string(), "a=b".to_string()))
        );
        assert!(parse_attribute("=x").is_err());
        assert!(parse_attribute("novalue").is_err());
    }

    #[test]
    fn where_reads_a_json_pointer_of_the_body() {
        let body = r#"{"customer":{"tier":"gold","id":42,"vip":true},"note":null}"#;
        let m = message(body, None, None);
        let w = |pointer: &str, value: &str| {
            let pair = vec![(pointer.to_string(), value.to_string())];
            filter(move |a| a.where_ = pair)
        };
        assert!(w("/customer/tier", "gold").matches(&m));
        assert!(w("/customer/id", "42").matches(&m));
        assert!(w("/customer/vip", "true").matches(&m));
        assert!(w("/note", "null").matches(&m));
        assert!(!w("/customer/tier", "silver").matches(&m));
        assert!(!w("/customer/id", "\"42\"").matches(&m));
        assert!(!w("/missing", "x").matches(&m));
        assert!(!w("/customer/tier", "gold").matches(&message("tier=gold", None, None)));
        assert!(parse_where("customer=1").is_err());
        assert_eq!(
            parse_where("/a=b=c"),
            Ok(("/a".to_string(), "b=c".to_string()))
        );
    }
}
