//! The operator's rules file: an ordered list of rules, each a match and a group name. The
//! first rule a message matches puts it in the group `r-<name>` whatever its computed id: a
//! rule that matches several computed groups merges them, one that matches part of a group
//! splits it. Removing a rule gives its messages back their computed ids.
//!
//! ```json
//! {"version": 1, "rules": [
//!   {"name": "orders-api-outage", "match": {"code": "HTTP_503", "source": "orders"}},
//!   {"name": "eu-schema", "match": {"class": "permanent", "attribute": {"name": "tenant", "regex": "^eu-"}}},
//!   {"name": "timeouts", "match": {"regex": "(?i)timed? ?out"}}
//! ]}
//! ```
//!
//! A match holds when every condition it names holds: `class` and `code` (equal to the recorded
//! cause's), `regex` (found in the recorded message, as written), `source` (the source queue's
//! name), `recorded` (true: a cause was recorded; false: none was), `attribute` (a message
//! attribute `name`, present, and when given `equals` its value or `regex` found in it).

use regex_lite::Regex;
use serde::Deserialize;

use super::facts::{Facts, Observation};
use crate::attributes::AttributeValue;

/// The rules file format this build reads.
pub const VERSION: u32 = 1;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    version: u32,
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: String,
    #[serde(rename = "match")]
    when: MatchSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchSpec {
    class: Option<String>,
    code: Option<String>,
    regex: Option<String>,
    source: Option<String>,
    recorded: Option<bool>,
    attribute: Option<AttributeSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttributeSpec {
    name: String,
    equals: Option<String>,
    regex: Option<String>,
}

/// Rules, checked and compiled; an empty set changes nothing.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    name: String,
    class: Option<String>,
    code: Option<String>,
    regex: Option<Regex>,
    source: Option<String>,
    recorded: Option<bool>,
    attribute: Option<(String, Option<String>, Option<Regex>)>,
}

/// A rule name: 1 to 64 of ASCII letters, digits and `-_.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "rule name {name:?} must be 1 to 64 of ASCII letters, digits and -_."
        ))
    }
}

impl Rules {
    /// Parses a rules file; the error names the rule (by position and name) and what was wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let spec: FileSpec = serde_json::from_str(text).map_err(|e| format!("rules file: {e}"))?;
        if spec.version != VERSION {
            return Err(format!(
                "rules file: version {} is not one this build reads (it reads {VERSION})",
                spec.version
            ));
        }
        let mut rules = Vec::with_capacity(spec.rules.len());
        for (i, r) in spec.rules.into_iter().enumerate() {
            let at = format!("rules file: rule {} ({:?})", i + 1, r.name);
            check_name(&r.name).map_err(|e| format!("{at}: {e}"))?;
            if rules.iter().any(|q: &Rule| q.name == r.name) {
                return Err(format!("{at}: the name is used by an earlier rule"));
            }
            let w = r.when;
            if w.class.is_none()
                && w.code.is_none()
                && w.regex.is_none()
                && w.source.is_none()
                && w.recorded.is_none()
                && w.attribute.is_none()
            {
                return Err(format!("{at}: its match names no condition"));
            }
            let compile = |what: &str, re: Option<String>| -> Result<Option<Regex>, String> {
                re.map(|re| {
                    Regex::new(&re).map_err(|e| format!("{at}: {what} is not a regex: {e}"))
                })
                .transpose()
            };
            let regex = compile("regex", w.regex)?;
            let attribute = match w.attribute {
                Some(a) => {
                    let re = compile("attribute.regex", a.regex)?;
                    Some((a.name, a.equals, re))
                }
                None => None,
            };
            rules.push(Rule {
                name: r.name,
                class: w.class,
                code: w.code,
                regex,
                source: w.source,
                recorded: w.recorded,
                attribute,
            });
        }
        Ok(Self { rules })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The name of the first rule `m` matches.
    pub fn group_of(&self, m: &Observation<'_>, f: &Facts) -> Option<&str> {
        self.rules
            .iter()
            .find(|r| r.matches(m, f))
            .map(|r| r.name.as_str())
    }
}

impl Rule {
    fn matches(&self, m: &Observation<'_>, f: &Facts) -> bool {
        let cause = f.cause.as_ref();
        let eq = |want: &Option<String>, got: Option<&str>| {
            want.as_deref().is_none_or(|w| got == Some(w))
        };
        eq(&self.class, cause.map(|c| c.class.as_str()))
            && eq(&self.code, cause.map(|c| c.code.as_str()))
            && eq(&self.source, f.source.as_deref())
            && self.recorded.is_none_or(|want| want == cause.is_some())
            && self
                .regex
                .as_ref()
                .is_none_or(|re| cause.is_some_and(|c| re.is_match(&c.message)))
            && self.attribute.as_ref().is_none_or(|(name, equals, re)| {
                let value = m.attributes.get(name).map(|a| match &a.value {
                    AttributeValue::String(v) => v.as_str(),
                    AttributeValue::Binary(_) => "",
                });
                value.is_some_and(|v| {
                    equals.as_deref().is_none_or(|e| e == v)
                        && re.as_ref().is_none_or(|re| re.is_match(v))
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_refused_naming_the_rule_and_the_fault() {
        let cases = [
            (r#"{"version":2,"rules":[]}"#, "version 2"),
            (
                r#"{"version":1,"rules":[{"name":"a","match":{}}]}"#,
                "rule 1 (\"a\"): its match names no condition",
            ),
            (
                r#"{"version":1,"rules":[{"name":"a b","match":{"code":"X"}}]}"#,
                "rule name",
            ),
            (
                r#"{"version":1,"rules":[{"name":"a","match":{"code":"X"}},{"name":"a","match":{"code":"Y"}}]}"#,
                "rule 2 (\"a\"): the name is used",
            ),
            (
                r#"{"version":1,"rules":[{"name":"a","match":{"regex":"("}}]}"#,
                "regex is not a regex",
            ),
            (
                r#"{"version":1,"rules":[{"name":"a","match":{"cod":"X"}}]}"#,
                "unknown field `cod`",
            ),
        ];
        for (text, want) in cases {
            let err = Rules::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(
            Rules::parse(r#"{"version":1,"rules":[]}"#)
                .unwrap()
                .is_empty()
        );
    }
}
