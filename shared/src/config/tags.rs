//! Per-DLQ settings from the queue's own tags, over the install's defaults.
//!
//! A team that owns a DLQ tunes its redrive on the queue itself (`aws sqs tag-queue`), without
//! a deploy. Each tag stands for one variable of [`RedriverConfig`] and is read and validated
//! exactly as that variable is; a tag that is absent falls back to the variable. A bad value,
//! or a `redrive:` tag this version does not know (a typo would otherwise be ignored silently),
//! is a [`TagError`] naming the queue, the tag and the value: the caller leaves that DLQ alone
//! and serves the others.

use std::collections::HashMap;

use super::{ConfigError, Env, RedriverConfig};

/// Each settings tag and the variable it overrides.
pub const SETTINGS_TAGS: [(&str, &str); 7] = [
    ("redrive:max-attempts", "MAX_REDRIVE_ATTEMPTS"),
    ("redrive:backoff-base-seconds", "BACKOFF_BASE_SECONDS"),
    ("redrive:backoff-multiplier", "BACKOFF_MULTIPLIER"),
    ("redrive:backoff-max-seconds", "BACKOFF_MAX_SECONDS"),
    ("redrive:backoff-jitter", "BACKOFF_JITTER"),
    (
        "redrive:max-messages-per-invocation",
        "MAX_MESSAGES_PER_INVOCATION",
    ),
    ("redrive:max-messages-per-second", "MAX_MESSAGES_PER_SECOND"),
];

/// `redrive:circuit`: `off` turns the adaptive circuit off for this DLQ (`on`, the default,
/// keeps the install's `CIRCUIT_TABLE`).
pub const CIRCUIT_TAG: &str = "redrive:circuit";

/// `redrive:archive-after-days`: the archiver's `ARCHIVE_AFTER_DAYS` for this DLQ.
pub const ARCHIVE_AFTER_DAYS_TAG: &str = "redrive:archive-after-days";

/// The tag `make deploy` selects DLQs by (`PROTECT_TAG`'s usual key); not a setting.
pub const PROTECT_TAG: &str = "redrive:protect";

/// The prefix of every tag redrive reads.
pub const PREFIX: &str = "redrive:";

/// A DLQ's tag that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "queue {queue}: invalid tag {tag}={value:?}: {problem}; this DLQ is left alone until the tag is fixed"
)]
pub struct TagError {
    pub queue: String,
    pub tag: String,
    pub value: String,
    pub problem: String,
}

/// Every tag name redrive knows.
pub fn known_tags() -> impl Iterator<Item = &'static str> {
    SETTINGS_TAGS.iter().map(|(tag, _)| *tag).chain([
        CIRCUIT_TAG,
        ARCHIVE_AFTER_DAYS_TAG,
        PROTECT_TAG,
    ])
}

fn tag_of(variable: &str) -> Option<&'static str> {
    SETTINGS_TAGS
        .iter()
        .find(|(_, v)| *v == variable)
        .map(|(t, _)| *t)
}

/// The settings of `base`'s DLQ with its `tags` over the variables of `env` (the same `env`
/// `base` was read from).
pub fn apply<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    base: &RedriverConfig,
    tags: &HashMap<String, String>,
) -> Result<RedriverConfig, TagError> {
    let queue = base.dlq_url.name().to_string();
    let bad = |tag: &str, problem: String| TagError {
        queue: queue.clone(),
        tag: tag.to_string(),
        value: tags.get(tag).cloned().unwrap_or_default(),
        problem,
    };
    let mut names: Vec<&String> = tags.keys().filter(|t| t.starts_with(PREFIX)).collect();
    names.sort();
    for tag in names {
        if !known_tags().any(|k| k == tag) {
            let known: Vec<&str> = known_tags().collect();
            return Err(bad(
                tag,
                format!("not a redrive tag (known: {})", known.join(", ")),
            ));
        }
    }
    let layered = Env(|variable: &str| {
        tag_of(variable)
            .and_then(|tag| tags.get(tag).cloned())
            .or_else(|| (env.0)(variable))
    });
    let mut config = RedriverConfig::for_dlq(
        &layered,
        base.dlq_url.clone(),
        base.source_queue_url.clone(),
    )
    .map_err(|e: ConfigError| match tag_of(e.variable) {
        Some(tag) if tags.contains_key(tag) => bad(tag, e.problem),
        // The install's own variables were valid when `base` was read; a combination (a
        // backoff base above a tagged maximum) is the tags' doing.
        _ => match SETTINGS_TAGS.iter().find(|(t, _)| tags.contains_key(*t)) {
            Some((tag, _)) => bad(tag, e.to_string()),
            None => bad(e.variable, e.to_string()),
        },
    })?;
    if let Some(value) = tags.get(CIRCUIT_TAG) {
        match value.trim() {
            "on" => {}
            "off" => config.circuit = None,
            _ => return Err(bad(CIRCUIT_TAG, "must be on or off".into())),
        }
    }
    if let Some(value) = tags.get(ARCHIVE_AFTER_DAYS_TAG) {
        archive_after_days(value).map_err(|p| bad(ARCHIVE_AFTER_DAYS_TAG, p))?;
    }
    Ok(config)
}

/// `redrive:archive-after-days`: a number of days above 0 and below 13 (the archiver needs
/// room before SQS's longest retention of 14 days).
pub fn archive_after_days(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d < 13.0 => Ok(d),
        _ => Err("must be a number of days above 0 and below 13".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "DLQ_URLS" => Some(
                "https://sqs.eu-west-1.amazonaws.com/111122223333/orders-dlq,https://sqs.eu-west-1.amazonaws.com/111122223333/billing-dlq.fifo"
                    .into(),
            ),
            "POISON_QUEUE_URL" => {
                Some("https://sqs.eu-west-1.amazonaws.com/111122223333/redrive-poison".into())
            }
            "MAX_REDRIVE_ATTEMPTS" => Some("5".into()),
            "CIRCUIT_TABLE" => Some("redrive-circuit".into()),
            _ => None,
        }
    }

    fn tags(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base() -> RedriverConfig {
        RedriverConfig::fleet_from_env(&Env(env)).unwrap().remove(0)
    }

    #[test]
    fn tags_override_the_installs_settings_and_the_rest_falls_back() {
        let e = Env(env);
        let c = apply(
            &e,
            &base(),
            &tags(&[
                ("redrive:max-attempts", "2"),
                ("redrive:backoff-base-seconds", "5"),
                ("redrive:backoff-max-seconds", "30"),
                ("redrive:max-messages-per-second", "20"),
                ("redrive:circuit", "off"),
                ("team", "orders"),
            ]),
        )
        .unwrap();
        assert_eq!(c.max_redrive_attempts, 2);
        assert_eq!(c.backoff.max(), 30);
        assert_eq!(c.max_messages_per_second, 20.0);
        assert!(c.circuit.is_none());
        assert_eq!(
            c.max_messages_per_invocation, 100,
            "not tagged: the default"
        );
        assert_eq!(c.dlq_url, base().dlq_url);
        assert_eq!(c.source_queue_url, None);
        let untagged = apply(&e, &base(), &HashMap::new()).unwrap();
        assert_eq!(untagged, base());
    }

    #[test]
    fn a_bad_value_names_the_queue_the_tag_and_the_value() {
        let err = apply(
            &Env(env),
            &base(),
            &tags(&[("redrive:max-attempts", "many")]),
        )
        .unwrap_err();
        assert_eq!(err.queue, "orders-dlq");
        assert_eq!(err.tag, "redrive:max-attempts");
        assert_eq!(err.value, "many");
        let text = err.to_string();
        assert!(
            text.contains("orders-dlq")
                && text.contains("redrive:max-attempts")
                && text.contains("\"many\""),
            "{text}"
        );
        for (tag, value) in [
            ("redrive:backoff-max-seconds", "3600"),
            ("redrive:backoff-jitter", "sometimes"),
            ("redrive:max-messages-per-invocation", "0"),
            ("redrive:circuit", "maybe"),
            ("redrive:archive-after-days", "20"),
        ] {
            let err = apply(&Env(env), &base(), &tags(&[(tag, value)])).unwrap_err();
            assert_eq!((err.tag.as_str(), err.value.as_str()), (tag, value));
        }
    }

    #[test]
    fn an_unknown_redrive_tag_is_an_error_not_ignored() {
        let err = apply(&Env(env), &base(), &tags(&[("redrive:max-attempt", "3")])).unwrap_err();
        assert_eq!(err.tag, "redrive:max-attempt");
        assert!(
            err.problem.contains("redrive:max-attempts"),
            "{}",
            err.problem
        );
    }
}
