//! The triage view as HTML: one pure renderer for the CloudWatch custom widget (a fragment the
//! dashboard hosts, with `<cwdb-action>` buttons that call the action function) and for the
//! standalone page `redrive triage --html FILE` writes (no buttons).
//!
//! What the renderer guarantees, whatever the messages hold:
//! - every text that comes from a message or a store (titles, ids, sources, error texts, state
//!   names, the queue's name) is HTML-escaped, in text and in attributes;
//! - no `<script>`, no event handler attribute, no link, image or font fetched from anywhere: CSS
//!   in one `<style>` element and inline SVG only (the standalone page also forbids scripts and
//!   fetches in its Content-Security-Policy);
//! - long unbroken text wraps inside its cell (`overflow-wrap:anywhere`, fixed table layout).
//!
//! The CloudWatch custom widget rules this follows: the dashboard calls a Lambda with a
//! `widgetContext` (theme, width and height in pixels, the time range, the widget's params) and
//! shows the HTML it returns; JavaScript is not run; an element followed by
//! `<cwdb-action action="call" endpoint="ARN" display="widget" confirmation="...">{params}</cwdb-action>`
//! becomes a button that calls that Lambda with the params, asks for the confirmation first when
//! one is given, and shows the answer in place of the widget.

mod buttons;
mod escape;
mod style;
mod time;
mod trend;
mod view;

use std::fmt::Write;

use redrive_shared::triage::{Action, Group};

pub use buttons::HOLD_HOURS;
use buttons::buttons;
pub use escape::{html as escape_html, json_text};
pub use time::{compact, compact_rfc3339, span};
pub use trend::{TimeRange, bucket};
pub use view::{
    Contents, Coverage, Depth, GroupView, Layout, Mode, RenderOptions, Theme, TriageView,
};

/// The view as HTML: a whole page or a widget fragment, as `opts` says.
pub fn render(view: &TriageView, opts: &RenderOptions) -> String {
    let theme = match opts.theme {
        Theme::Light => "rd-light",
        Theme::Dark => "rd-dark",
    };
    let layout = match opts.layout {
        Layout::Narrow => "rd-narrow",
        Layout::Wide => "rd-wide",
    };
    let mut body = String::new();
    let _ = write!(body, r#"<div class="rd {theme} {layout}">"#);
    head(&mut body, view);
    match &view.contents {
        Contents::Empty => plain(
            &mut body,
            &format!(
                "{} is empty: no message to triage.",
                escape_html(&view.queue)
            ),
        ),
        Contents::Unreadable(reason) => plain(
            &mut body,
            &format!(
                "{} could not be read: {}. The groups are shown again once it can be.",
                escape_html(&view.queue),
                escape_html(reason)
            ),
        ),
        Contents::NoIndex => plain(
            &mut body,
            &format!(
                "No triage of {} yet: no pass has grouped its messages. Run <span class=\"rd-mono\">redrive triage {}</span>, or wait for the next pass.",
                escape_html(&view.queue),
                escape_html(&view.queue)
            ),
        ),
        Contents::Groups(groups) if groups.is_empty() => plain(
            &mut body,
            &format!(
                "No group: the pass read no message of {}.",
                escape_html(&view.queue)
            ),
        ),
        Contents::Groups(groups) => {
            let range = opts.range.or_else(|| {
                TimeRange::around(groups.iter().flat_map(|g| g.failure_times.iter().copied()))
            });
            match opts.layout {
                Layout::Wide => wide(&mut body, view, groups, range, opts),
                Layout::Narrow => narrow(&mut body, view, groups, range, opts),
            }
            if let Some(r) = range {
                let _ = write!(
                    body,
                    r#"<div class="rd-foot">Trend: failures from {} to {} UTC{}.</div>"#,
                    compact(r.start_ms),
                    compact(r.end_ms),
                    if opts.range.is_some() {
                        " (the dashboard's time range)"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    body.push_str("</div>");
    match opts.mode {
        Mode::Widget => format!(
            r#"<div class="cwdb-no-default-styles"></div><style>{}</style>{body}"#,
            style::CSS
        ),
        Mode::Page => {
            let page_theme = match opts.theme {
                Theme::Light => "rd-page-light",
                Theme::Dark => "rd-page-dark",
            };
            format!(
                concat!(
                    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
                    "<title>redrive triage: {title}</title><style>{page}{css}</style></head>",
                    "<body class=\"{page_theme}\">{body}</body></html>\n"
                ),
                title = escape_html(&view.queue),
                page = style::PAGE_CSS,
                css = style::CSS,
                page_theme = page_theme,
                body = body
            )
        }
    }
}

fn head(out: &mut String, view: &TriageView) {
    let _ = write!(
        out,
        r#"<div class="rd-head"><span class="rd-q">{}</span>"#,
        escape_html(&view.queue)
    );
    if let Some(d) = view.depth {
        let _ = write!(
            out,
            r#"<span class="rd-kv"><b>{}</b> visible</span><span class="rd-kv"><b>{}</b> in flight</span>"#,
            d.visible, d.in_flight
        );
    }
    if let Some(age) = view.oldest_age_s {
        let _ = write!(
            out,
            r#"<span class="rd-kv">oldest <b>{}</b></span>"#,
            span(
                i64::try_from(age)
                    .unwrap_or(i64::MAX / 1000)
                    .saturating_mul(1000)
            )
        );
    }
    if let Contents::Groups(groups) = &view.contents {
        let _ = write!(
            out,
            r#"<span class="rd-kv"><b>{}</b> group(s)</span>"#,
            groups.len()
        );
    }
    let mut facts = Vec::new();
    if let Some(c) = &view.coverage {
        facts.push(format!(
            "grouped {} of about {} ({})",
            c.grouped,
            c.about,
            escape_html(&c.status)
        ));
    }
    if let Some(at) = view.made_at_ms {
        facts.push(format!("pass of {} UTC", compact(at)));
    }
    if !facts.is_empty() {
        let _ = write!(
            out,
            r#"<span class="rd-muted">{}</span>"#,
            facts.join(" · ")
        );
    }
    out.push_str("</div>");
    if let Some(note) = view.coverage.as_ref().and_then(|c| c.note.as_ref()) {
        let _ = write!(
            out,
            r#"<div class="rd-sub">Not complete: {}</div>"#,
            escape_html(note)
        );
    }
}

fn plain(out: &mut String, sentence_html: &str) {
    let _ = write!(out, r#"<p class="rd-plain">{sentence_html}</p>"#);
}

/// The action as the view names it, why (the row of the action table, in a few words), and its
/// CSS class.
fn action_label(action: Action) -> (&'static str, &'static str, &'static str) {
    match action {
        Action::RedriverWillRetry => (
            "Re-driver will retry",
            "transient and under the attempt limit: nothing to do now",
            "rd-a-retry",
        ),
        Action::FixThenReplayCanary => (
            "Fix, then replay with a canary",
            "fix the cause first; the replay sends one message, then the rest",
            "rd-a-fix",
        ),
        Action::ReplayToNamedQueue => (
            "Replay to a named queue",
            "no source queue is known: redrive replay --to QUEUE",
            "rd-a-named",
        ),
        Action::ExportOrDiscard => (
            "Export or discard",
            "over SQS's size or attribute limit: it cannot be sent as it is",
            "rd-a-discard",
        ),
    }
}

/// The state's tag: its text (escaped) and a class from a fixed list (an unknown state is shown
/// plainly); a dash when no state is known (a page written from one pass, without a store).
fn state_tag(state: Option<&str>) -> String {
    let Some(state) = state else {
        return r#"<span class="rd-muted" title="no state recorded">–</span>"#.into();
    };
    let class = match state {
        "new" | "regressed" => "rd-s-new",
        "acknowledged" => "rd-s-ack",
        "held" => "rd-s-held",
        "replay-failed" => "rd-s-bad",
        "replaying" | "resolved" => "rd-s-ok",
        _ => "rd-s-ack",
    };
    format!(
        r#"<span class="rd-tag {class}">{}</span>"#,
        escape_html(state)
    )
}

fn cause_line(g: &Group) -> String {
    let cause = match (&g.class, &g.code) {
        (Some(class), Some(code)) => format!("{} {}", escape_html(class), escape_html(code)),
        _ => "no recorded cause".into(),
    };
    let attempts = if g.attempts.min == g.attempts.max {
        format!("attempt {}", g.attempts.min)
    } else {
        format!("attempts {}–{}", g.attempts.min, g.attempts.max)
    };
    format!(
        r#"<span class="rd-mono">{}</span> · {cause} · {attempts}"#,
        escape_html(&g.id)
    )
}

fn times(g: &Group) -> String {
    match (&g.first_failure, &g.last_failure) {
        (Some(first), Some(last)) if first == last => escape_html(&compact_rfc3339(first)),
        (Some(first), Some(last)) => format!(
            "{}<br>{}",
            escape_html(&compact_rfc3339(first)),
            escape_html(&compact_rfc3339(last))
        ),
        _ => "unknown".into(),
    }
}

fn trend(out: &mut String, g: &GroupView, range: Option<TimeRange>, buckets: usize) {
    match range {
        Some(r) => out.push_str(&trend::svg(&g.failure_times, g.times_weight, r, buckets)),
        None => out.push_str(r#"<span class="rd-muted">no failure times</span>"#),
    }
}

fn source(g: &Group) -> String {
    g.source
        .as_deref()
        .map_or_else(|| "unknown".to_string(), escape_html)
}

fn wide(
    out: &mut String,
    view: &TriageView,
    groups: &[GroupView],
    range: Option<TimeRange>,
    opts: &RenderOptions,
) {
    out.push_str(concat!(
        r#"<table class="rd-t"><colgroup><col style="width:32%"><col style="width:7%">"#,
        r#"<col style="width:14%"><col style="width:11%"><col style="width:8%">"#,
        r#"<col style="width:10%"><col style="width:18%"></colgroup><thead><tr>"#,
        r#"<th>Group</th><th class="rd-n">Messages</th><th>Trend</th><th>First / last (UTC)</th>"#,
        r#"<th>Source</th><th>State</th><th>Recommended action</th></tr></thead><tbody>"#
    ));
    for gv in groups {
        let g = &gv.group;
        let (label, why, class) = action_label(g.action);
        let _ = write!(
            out,
            r#"<tr class="rd-row"><td><div class="rd-title" title="{title}">{title}</div><div class="rd-sub">{}</div></td><td class="rd-n"><span class="rd-count">{}</span></td><td>"#,
            cause_line(g),
            g.count,
            title = escape_html(&g.title),
        );
        trend(out, gv, range, 30);
        let _ = write!(
            out,
            r#"</td><td>{}</td><td><div class="rd-src">{}</div></td><td>{}</td><td><div class="rd-a {class}" title="{advice}">{label}</div><div class="rd-sub">{why}</div>"#,
            times(g),
            source(g),
            state_tag(gv.state.as_deref()),
            advice = escape_html(g.action_advice),
        );
        buttons(out, &view.queue, gv, opts);
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table>");
}

fn narrow(
    out: &mut String,
    view: &TriageView,
    groups: &[GroupView],
    range: Option<TimeRange>,
    opts: &RenderOptions,
) {
    for gv in groups {
        let g = &gv.group;
        let (label, why, class) = action_label(g.action);
        let _ = write!(
            out,
            r#"<div class="rd-card rd-row"><div class="rd-card-top"><span class="rd-title" title="{title}">{title}</span><span class="rd-count">{}</span></div><div class="rd-sub">{}</div>"#,
            g.count,
            cause_line(g),
            title = escape_html(&g.title),
        );
        trend(out, gv, range, 24);
        let _ = write!(
            out,
            r#"<div class="rd-card-meta"><span>{}</span><span class="rd-src">from {}</span><span>{}</span></div><div><span class="rd-a {class}" title="{advice}">{label}</span> <span class="rd-muted">{why}</span></div>"#,
            times(g).replace("<br>", " → "),
            source(g),
            state_tag(gv.state.as_deref()),
            advice = escape_html(g.action_advice),
        );
        buttons(out, &view.queue, gv, opts);
        out.push_str("</div>");
    }
}

// The fixtures are shared with the integration tests, which name this crate by its name.
#[cfg(test)]
extern crate self as redrive_console;
#[cfg(test)]
#[path = "../tests/fixtures/mod.rs"]
mod fixtures;
#[cfg(test)]
mod tests;
