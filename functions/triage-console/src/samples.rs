//! The samples popup of a group: a few messages of its frozen plan as they are on the queue,
//! their ids, `x-redrive` and other attributes, and their bodies only where `TRIAGE_SHOW_BODIES`
//! allows. Every text is escaped; nothing of a message is logged. The messages are received
//! (held while read) and made visible again at once: nothing is moved or deleted.

use redrive_console::escape_html;
use redrive_engine::aws::SqsQueue;
use redrive_engine::ports::Received;
use redrive_engine::triage_act::{ActError, sqs::Walk};
use redrive_engine::triage_store::TriageStore;
use redrive_shared::attributes::AttributeValue;
use redrive_shared::meta::ATTRIBUTE_NAME;

use crate::console::{BookReader, Console};
use crate::context::WidgetContext;
use crate::moves::shown_plan;
use crate::request::ActionRequest;

/// Messages a popup shows at most.
pub const SAMPLES: usize = 5;
/// Characters of a body shown at most.
const BODY_CHARS: usize = 4000;

fn attribute_text(v: &AttributeValue) -> String {
    match v {
        AttributeValue::String(s) => s.clone(),
        AttributeValue::Binary(b) => format!("({} bytes of binary)", b.len()),
    }
}

fn section(m: &Received, show_bodies: bool) -> String {
    let mut out = format!(
        r#"<section class="rd-sample" style="margin:0 0 12px;padding:6px 0;border-top:1px solid #ccc"><div><b>MessageId</b> <code>{}</code></div>"#,
        escape_html(&m.message_id)
    );
    if let Some(meta) = m.attributes.get(ATTRIBUTE_NAME) {
        let text = attribute_text(&meta.value);
        let pretty = serde_json::from_str::<serde_json::Value>(&text)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or(text);
        out.push_str(&format!(
            r#"<div><b>{ATTRIBUTE_NAME}</b></div><pre style="white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0">{}</pre>"#,
            escape_html(&pretty)
        ));
    } else {
        out.push_str(&format!("<div><b>{ATTRIBUTE_NAME}</b> none</div>"));
    }
    let others: Vec<_> = m
        .attributes
        .iter()
        .filter(|(k, _)| k.as_str() != ATTRIBUTE_NAME)
        .collect();
    if !others.is_empty() {
        out.push_str(r#"<table class="rd-attrs" style="border-collapse:collapse">"#);
        for (name, a) in others {
            out.push_str(&format!(
                "<tr><td><code>{}</code></td><td>{}</td><td style=\"overflow-wrap:anywhere\">{}</td></tr>",
                escape_html(name),
                escape_html(&a.data_type),
                escape_html(&attribute_text(&a.value))
            ));
        }
        out.push_str("</table>");
    }
    if show_bodies {
        let body: String = m.body.chars().take(BODY_CHARS).collect();
        let cut = if body.len() < m.body.len() {
            " (cut)"
        } else {
            ""
        };
        out.push_str(&format!(
            r#"<div><b>body</b>{cut}</div><pre style="white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0">{}</pre>"#,
            escape_html(&body)
        ));
    }
    out.push_str("</section>");
    out
}

/// The popup of `r`'s group: up to [`SAMPLES`] messages of its current plan.
pub(crate) async fn samples<S: TriageStore + BookReader + Clone>(
    console: &Console<S>,
    r: &ActionRequest,
    ctx: &WidgetContext,
) -> Result<String, ActError> {
    let op = shown_plan(console, r, ctx).await?;
    let plan = op.plan();
    let queue = SqsQueue {
        client: console.sqs.clone(),
    };
    let mut walk = Walk::new(&queue, r.queue.as_str());
    let mut found: Vec<Received> = Vec::new();
    let walked = async {
        while found.len() < SAMPLES {
            let batch = walk.next().await?;
            if batch.is_empty() {
                break;
            }
            found.extend(
                batch
                    .into_iter()
                    .map(|(m, _)| m)
                    .filter(|m| plan.contains(&m.message_id))
                    .take(SAMPLES - found.len()),
            );
        }
        Ok::<(), redrive_engine::ports::PortError>(())
    }
    .await;
    walk.release().await;
    walked?;
    let show = console.config.show_bodies;
    let mut out = format!(
        r#"<div class="rd-samples" style="font:13px/1.4 'Amazon Ember',Helvetica,Arial,sans-serif"><h3 style="margin:0 0 8px">Samples of group {} (plan {}) on {}: {} of its {} message(s)</h3>"#,
        escape_html(&op.group),
        escape_html(&op.plan_id),
        escape_html(r.queue.name()),
        found.len(),
        op.ids.len()
    );
    if !show {
        out.push_str("<p>Bodies are not shown: TRIAGE_SHOW_BODIES is off.</p>");
    }
    if found.is_empty() {
        out.push_str("<p>No message of the plan is visible on the queue now.</p>");
    }
    for m in &found {
        out.push_str(&section(m, show));
    }
    out.push_str("</div>");
    Ok(out)
}
