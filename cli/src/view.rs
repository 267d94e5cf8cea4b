//! What an operator sees of one message: its redrive history decoded from `x-redrive`, its age
//! and size, its other attributes, and (on request) its body.

use redrive_shared::attributes::{AttributeValue, message_size};
use redrive_shared::meta::{ATTRIBUTE_NAME, IsolationReason, LastError, MetaSource, RedriveMeta};
use redrive_shared::timefmt::rfc3339_from_millis;
use serde::Serialize;
use serde_json::{Value, json};

use super::output::{Style, age, bytes, truncate};
use redrive_engine::ports::Received;

/// Characters of an attribute value shown.
const ATTRIBUTE_VALUE_CHARS: usize = 60;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    pub message_id: String,
    pub original_message_id: String,
    pub attempt: u32,
    pub reason: Option<IsolationReason>,
    pub isolated_at: Option<String>,
    pub last_redriven_at: Option<String>,
    pub last_error: Option<LastError>,
    /// Why the `x-redrive` attribute could not be read, when it could not.
    pub garbled: Option<String>,
    pub sent_at: Option<String>,
    pub age_seconds: Option<u64>,
    pub size_bytes: usize,
    pub receive_count: u32,
    /// Every attribute but `x-redrive`: name -> {dataType, value | bytes}.
    pub attributes: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// The isolation a stamp stands for (see the shared crate): replays and redrives now drop
/// `isolatedAt` and `reason`, but copies written before that still carry them and must not look
/// parked to `stats` and `--reason`.
pub use redrive_shared::triage::facts::standing_reason;

impl MessageView {
    /// `body_chars`: `Some(n)` shows the body cut to n characters, `None` hides it.
    pub fn new(m: &Received, now_ms: i64, body_chars: Option<usize>) -> Self {
        let (meta, source) = RedriveMeta::read(&m.attributes, &m.message_id);
        let reason = standing_reason(&meta).cloned();
        let attributes = m
            .attributes
            .iter()
            .filter(|(name, _)| name.as_str() != ATTRIBUTE_NAME)
            .map(|(name, a)| {
                let value = match &a.value {
                    AttributeValue::String(s) => {
                        json!({"dataType": a.data_type, "value": truncate(s, ATTRIBUTE_VALUE_CHARS)})
                    }
                    AttributeValue::Binary(b) => json!({"dataType": a.data_type, "bytes": b.len()}),
                };
                (name.clone(), value)
            })
            .collect();
        Self {
            message_id: m.message_id.clone(),
            original_message_id: meta.original_message_id,
            attempt: meta.attempt,
            isolated_at: meta.isolated_at.filter(|_| reason.is_some()),
            reason,
            last_redriven_at: meta.last_redriven_at,
            last_error: meta.last_error,
            garbled: match source {
                MetaSource::Garbled(why) => Some(why),
                _ => None,
            },
            sent_at: m.sent_timestamp_ms.map(rfc3339_from_millis),
            age_seconds: m
                .sent_timestamp_ms
                .map(|sent| (now_ms.saturating_sub(sent).max(0) / 1000) as u64),
            size_bytes: message_size(&m.body, &m.attributes),
            receive_count: m.receive_count,
            attributes,
            body: body_chars.map(|n| truncate(&m.body, n)),
        }
    }

    pub fn reason_label(&self) -> &str {
        self.reason.as_ref().map_or("none", IsolationReason::as_str)
    }

    /// A block of text: the id, then one line per fact.
    pub fn render(&self, index: usize, style: &Style) -> String {
        let mut out = format!(
            "{} {}\n",
            style.dim(&format!("#{index}")),
            style.bold(&self.message_id)
        );
        let line = |out: &mut String, key: &str, value: String| {
            out.push_str(&format!("   {}{value}\n", style.dim(&format!("{key:<11}"))));
        };
        if self.original_message_id != self.message_id {
            line(&mut out, "original", self.original_message_id.clone());
        }
        let mut history = format!("attempt {}", self.attempt);
        if let Some(reason) = &self.reason {
            let reason = match reason {
                IsolationReason::Manual => style.good(reason.as_str()),
                _ => style.warn(reason.as_str()),
            };
            history.push_str(&format!(", reason {reason}"));
        }
        if let Some(at) = &self.isolated_at {
            history.push_str(&format!(", isolated {at}"));
        }
        line(&mut out, "redrive", history);
        if let Some(why) = &self.garbled {
            line(
                &mut out,
                "x-redrive",
                style.bad(&format!("unreadable ({why})")),
            );
        }
        if let Some(e) = &self.last_error {
            let class = match &e.class {
                redrive_shared::ErrorClass::Permanent => style.bad("permanent"),
                redrive_shared::ErrorClass::Transient => style.warn("transient"),
                // A newer writer's class, shown as written.
                other => style.warn(other.as_str()),
            };
            line(
                &mut out,
                "last error",
                format!(
                    "{class} {}: {} ({})",
                    e.code,
                    truncate(&e.message, 120),
                    e.at
                ),
            );
        }
        let mut facts = Vec::new();
        if let Some(a) = self.age_seconds {
            facts.push(format!("age {}", age(a)));
        }
        facts.push(format!("size {}", bytes(self.size_bytes)));
        facts.push(format!("received {}x", self.receive_count));
        line(&mut out, "message", facts.join(", "));
        if !self.attributes.is_empty() {
            let attrs: Vec<String> = self
                .attributes
                .iter()
                .map(
                    |(name, v)| match (v["value"].as_str(), v["bytes"].as_u64()) {
                        (Some(s), _) => {
                            format!("{name} ({}) = {s}", v["dataType"].as_str().unwrap_or(""))
                        }
                        (None, Some(n)) => format!(
                            "{name} ({}, {n} bytes)",
                            v["dataType"].as_str().unwrap_or("")
                        ),
                        _ => name.clone(),
                    },
                )
                .collect();
            line(&mut out, "attributes", attrs.join("; "));
        }
        if let Some(body) = &self.body {
            line(&mut out, "body", body.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_shared::{Attributes, ErrorClass, MessageAttribute};

    fn received(attributes: Attributes, body: &str) -> Received {
        Received {
            receive_count: 3,
            sent_timestamp_ms: Some(1_000_000),
            ..crate::fixtures::received("m-2", body, attributes)
        }
    }

    #[test]
    fn decodes_the_history_and_hides_the_body_unless_asked() {
        let mut attrs = Attributes::new();
        attrs.insert("tenant".into(), MessageAttribute::string("acme"));
        attrs.insert("blob".into(), MessageAttribute::binary(vec![1, 2, 3]));
        RedriveMeta {
            attempt: 2,
            reason: Some(IsolationReason::PermanentFailure),
            isolated_at: Some("2026-11-21T11:00:00Z".into()),
            last_error: Some(LastError::new(
                ErrorClass::Permanent,
                "HTTP_400",
                "bad order",
                "2026-11-21T10:59:00Z".into(),
            )),
            ..RedriveMeta::fresh("m-1")
        }
        .write_into(&mut attrs);
        let m = received(attrs, "{\"secret\":true}");

        let view = MessageView::new(&m, 1_192_000, None);
        assert_eq!(view.original_message_id, "m-1");
        assert_eq!(view.attempt, 2);
        assert_eq!(view.reason_label(), "permanent-failure");
        assert_eq!(view.age_seconds, Some(192));
        assert_eq!(view.last_error.as_ref().unwrap().code, "HTTP_400");
        assert!(!view.attributes.contains_key(ATTRIBUTE_NAME));
        assert_eq!(
            view.attributes["blob"],
            json!({"dataType":"Binary","bytes":3})
        );
        let text = view.render(1, &Style::plain());
        assert!(text.contains("original   m-1"), "{text}");
        assert!(text.contains("reason permanent-failure"), "{text}");
        assert!(text.contains("permanent HTTP_400: bad order"), "{text}");
        assert!(text.contains("age 3m12s"), "{text}");
        assert!(!text.contains("secret"), "no body unless asked: {text}");

        let shown = MessageView::new(&m, 1_192_000, Some(4));
        assert_eq!(shown.body.as_deref(), Some("{\"se…"));
    }

    #[test]
    fn a_garbled_attribute_is_reported_not_fatal() {
        let mut attrs = Attributes::new();
        attrs.insert(ATTRIBUTE_NAME.into(), MessageAttribute::string("{nope"));
        let view = MessageView::new(&received(attrs, "x"), 0, None);
        assert_eq!(view.attempt, 0);
        assert_eq!(view.original_message_id, "m-2");
        assert!(view.garbled.is_some());
    }
}
