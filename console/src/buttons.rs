//! A group's buttons in the widget: which actions its state and recommended action offer, each
//! a `<cwdb-action>` that calls the action function with the group's plan.

use std::fmt::Write;

use redrive_shared::triage::Action;
use serde_json::json;

use crate::escape::{html as escape_html, json_text};
use crate::view::{GroupView, RenderOptions};

/// One button of a group: what it does, and what the action function is asked.
struct Button {
    label: &'static str,
    action: &'static str,
    /// The recommended next step for the group: drawn filled.
    primary: bool,
    danger: bool,
    confirmation: Option<String>,
    extra: Option<(&'static str, serde_json::Value)>,
    /// Where the dashboard shows the answer: the widget redrawn, or a popup over it.
    display: &'static str,
}

/// Hours a group is held by the widget's hold button.
pub const HOLD_HOURS: u32 = 24;

fn group_buttons(queue: &str, gv: &GroupView) -> Vec<Button> {
    let g = &gv.group;
    let state = gv.state.as_deref().unwrap_or("new");
    let n = gv.plan_size.unwrap_or(g.count);
    let mut out = vec![Button {
        label: "Samples",
        action: "samples",
        primary: false,
        danger: false,
        confirmation: None,
        extra: None,
        display: "popup",
    }];
    if !matches!(state, "acknowledged") {
        out.push(Button {
            label: "Acknowledge",
            action: "acknowledge",
            primary: g.action == Action::RedriverWillRetry && state == "new",
            danger: false,
            confirmation: None,
            extra: None,
            display: "widget",
        });
    }
    if state == "held" {
        out.push(Button {
            label: "Release",
            action: "release",
            primary: false,
            danger: false,
            confirmation: None,
            extra: None,
            display: "widget",
        });
    } else {
        out.push(Button {
            label: "Hold 24 h",
            action: "hold",
            primary: false,
            danger: false,
            confirmation: None,
            extra: Some(("hours", json!(HOLD_HOURS))),
            display: "widget",
        });
    }
    if g.action == Action::FixThenReplayCanary {
        let to = g.source.as_deref().unwrap_or("its source queue");
        out.push(Button {
            label: "Replay with canary",
            action: "replay-canary",
            primary: true,
            danger: false,
            confirmation: Some(format!(
                "Replay a canary of the {n} message(s) of group {id} (plan {plan}): {canary} message sent from {queue} to {to} and deleted from {queue} only after its copy is accepted, then judged; if it fails again the replay stops and the group is marked replay-failed. The other messages stay on {queue}. Replay only once the cause is fixed.",
                canary = n.min(1),
                id = g.id,
                plan = g.plan_id
            )),
            extra: None,
            display: "widget",
        });
    }
    if g.action != Action::RedriverWillRetry {
        out.push(Button {
            label: "Discard",
            action: "discard",
            primary: g.action == Action::ExportOrDiscard,
            danger: true,
            confirmation: Some(format!(
                "Discard the {n} message(s) of group {id} (plan {plan}) from {queue}: each is archived to S3 first, then deleted from the queue. They are not processed; redrive import of the archive restores them.",
                id = g.id,
                plan = g.plan_id
            )),
            extra: None,
            display: "widget",
        });
    }
    out
}

pub(crate) fn buttons(out: &mut String, queue: &str, gv: &GroupView, opts: &RenderOptions) {
    let Some(endpoint) = &opts.action_endpoint else {
        return;
    };
    let g = &gv.group;
    out.push_str(r#"<div class="rd-btns">"#);
    for b in group_buttons(queue, gv) {
        let mut params = json!({
            "action": b.action,
            "queue": queue,
            "group": g.id,
            "planId": g.plan_id,
            "count": gv.plan_size.unwrap_or(g.count),
        });
        if let Some((key, value)) = b.extra {
            params[key] = value;
        }
        let class = match (b.primary, b.danger) {
            (true, true) => "rd-btn rd-danger rd-go",
            (false, true) => "rd-btn rd-danger",
            (true, false) => "rd-btn rd-go",
            (false, false) => "rd-btn",
        };
        let confirmation = b
            .confirmation
            .map(|c| format!(r#" confirmation="{}""#, escape_html(&c)))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<a class="{class}" data-action="{action}">{label}</a><cwdb-action action="call" endpoint="{endpoint}" display="{display}"{confirmation}>{params}</cwdb-action>"#,
            action = b.action,
            display = b.display,
            label = b.label,
            endpoint = escape_html(endpoint),
            params = json_text(&params)
        );
    }
    out.push_str("</div>");
}
