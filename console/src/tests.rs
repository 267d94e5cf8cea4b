use serde_json::Value;

use super::fixtures::{self, IMG, SCRIPT, STYLE_END};
use super::*;

const ENDPOINT: &str = "arn:aws:lambda:us-east-1:123456789012:function:redrive-triage-act:live";

fn opts(theme: Theme, layout: Layout, mode: Mode, buttons: bool) -> RenderOptions {
    RenderOptions {
        theme,
        layout,
        mode,
        range: Some(fixtures::range()),
        action_endpoint: buttons.then(|| ENDPOINT.to_string()),
    }
}

fn every_option() -> Vec<RenderOptions> {
    let mut all = Vec::new();
    for theme in [Theme::Light, Theme::Dark] {
        for layout in [Layout::Narrow, Layout::Wide] {
            for mode in [Mode::Page, Mode::Widget] {
                for buttons in [false, true] {
                    all.push(opts(theme, layout, mode, buttons));
                }
            }
        }
    }
    all
}

/// The elements and attributes the renderer may write; anything else in its output is markup
/// that came from a message.
const TAGS: &[&str] = &[
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "div",
    "span",
    "b",
    "br",
    "p",
    "table",
    "colgroup",
    "col",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "svg",
    "rect",
    "line",
    "a",
    "cwdb-action",
];
const ATTRIBUTES: &[&str] = &[
    "lang",
    "charset",
    "http-equiv",
    "content",
    "name",
    "class",
    "style",
    "viewBox",
    "preserveAspectRatio",
    "role",
    "aria-label",
    "x",
    "y",
    "x1",
    "y1",
    "x2",
    "y2",
    "width",
    "height",
    "data-action",
    "action",
    "endpoint",
    "display",
    "confirmation",
    "title",
];

/// Every tag of `html` (outside the stylesheet), as (name, attribute names).
fn tags(html: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>').expect("a tag ends");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('/') || tag == "!DOCTYPE html" {
            continue;
        }
        let tag = tag.trim_end_matches('/');
        let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        let mut names = Vec::new();
        while !attrs.trim().is_empty() {
            attrs = attrs.trim_start();
            let (attr, after) = attrs.split_once('=').unwrap_or((attrs, ""));
            names.push(attr.to_string());
            if after.is_empty() {
                break;
            }
            // Values are always double-quoted and hold no double quote.
            let after = after.strip_prefix('"').expect("a quoted value");
            let close = after.find('"').expect("the value ends");
            attrs = &after[close + 1..];
        }
        out.push((name.to_string(), names));
        if name == "style" {
            let close = rest.find("</style>").expect("the stylesheet ends");
            rest = &rest[close..];
        }
    }
    out
}

fn assert_only_renderer_markup(html: &str) {
    for (name, attrs) in tags(html) {
        assert!(TAGS.contains(&name.as_str()), "tag <{name}> in {html}");
        for a in attrs {
            assert!(
                ATTRIBUTES.contains(&a.as_str()),
                "attribute {a} on <{name}>"
            );
        }
    }
}

#[test]
fn hostile_text_is_shown_as_text_in_every_theme_layout_and_mode() {
    let view = fixtures::hostile();
    for o in every_option() {
        let html = render(&view, &o);
        assert_only_renderer_markup(&html);
        // (the allowlist above leaves no room for an event handler attribute)
        let lower = html.to_lowercase();
        for raw in ["<script", "<img", "<h1", "href"] {
            assert!(!lower.contains(raw), "{raw} in {o:?}");
        }
        assert_eq!(html.matches("<style>").count(), 1, "{o:?}");
        assert_eq!(html.matches("</style>").count(), 1, "{o:?}");
        // AND the texts are there, escaped
        assert!(html.contains(&escape_html(SCRIPT)), "{o:?}");
        assert!(html.contains(&escape_html(IMG)));
        assert!(html.contains(&escape_html(STYLE_END)));
        assert!(html.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"));
    }
}

#[test]
fn hostile_ids_reach_the_action_function_as_data_not_markup() {
    let html = render(
        &fixtures::hostile(),
        &opts(Theme::Light, Layout::Wide, Mode::Widget, true),
    );
    let params = action_params(&html);
    assert!(!params.is_empty());
    let g1: Vec<&Value> = params
        .iter()
        .filter(|p| p["group"] == format!("g2-{SCRIPT}").as_str())
        .collect();
    assert!(!g1.is_empty(), "the id reaches the function as it was");
    assert!(
        params
            .iter()
            .all(|p| p["queue"] == format!("dlq-{IMG}").as_str())
    );
}

/// The JSON params of every `<cwdb-action>`.
fn action_params(html: &str) -> Vec<Value> {
    html.split("<cwdb-action ")
        .skip(1)
        .map(|part| {
            let body = &part[part.find('>').unwrap() + 1..part.find("</cwdb-action>").unwrap()];
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
        })
        .collect()
}

fn confirmations(html: &str) -> Vec<String> {
    html.split(" confirmation=\"")
        .skip(1)
        .map(|part| part[..part.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn buttons_call_the_action_function_with_the_groups_plan_and_confirm_destructive_steps() {
    let view = fixtures::three_groups();
    let html = render(&view, &opts(Theme::Light, Layout::Wide, Mode::Widget, true));
    let params = action_params(&html);
    let of = |group: &str| -> Vec<String> {
        params
            .iter()
            .filter(|p| p["group"] == group)
            .map(|p| p["action"].as_str().unwrap().to_string())
            .collect()
    };
    // Every group shows its samples (in a popup).
    // The re-driver retries the 503s: acknowledge or hold, nothing destructive.
    assert_eq!(
        of("g2-072dd8b1ff7e28a6"),
        ["samples", "acknowledge", "hold"]
    );
    // The held schema errors: release, replay with a canary, or discard.
    assert_eq!(
        of("g2-2ea6e15f3329a177"),
        [
            "samples",
            "acknowledge",
            "release",
            "replay-canary",
            "discard"
        ]
    );
    // The acknowledged oversized messages: hold or discard.
    assert_eq!(of("g2-9c1f00ab34d2e871"), ["samples", "hold", "discard"]);
    assert_eq!(html.matches("<cwdb-action ").count(), 11);
    assert_eq!(
        html.matches(&format!(r#"endpoint="{ENDPOINT}""#)).count(),
        11
    );
    assert_eq!(html.matches(r#"display="widget""#).count(), 8);
    assert_eq!(html.matches(r#"display="popup""#).count(), 3);
    for p in &params {
        assert_eq!(p["queue"], "orders-dlq");
        assert!(p["planId"].as_str().unwrap().starts_with("p-"));
    }
    let hold = params.iter().find(|p| p["action"] == "hold").unwrap();
    assert_eq!(hold["hours"], HOLD_HOURS);
    let replay = params
        .iter()
        .find(|p| p["action"] == "replay-canary")
        .unwrap();
    assert_eq!(replay["count"], 37);

    // Only the destructive steps ask first, and they say what happens to how many messages.
    let asks = confirmations(&html);
    assert_eq!(asks.len(), 3, "{asks:?}");
    assert!(
        asks[0].starts_with(
            "Replay a canary of the 37 message(s) of group g2-2ea6e15f3329a177 (plan p-"
        )
    );
    assert!(asks[0].contains("1 message sent from"));
    assert!(asks[0].contains("to orders and deleted from"));
    assert!(asks[0].contains("the replay stops and the group is marked replay-failed"));
    assert!(asks[1].starts_with("Discard the 37 message(s)"));
    assert!(asks[2].starts_with("Discard the 3 message(s) of group g2-9c1f00ab34d2e871"));
    assert!(asks[2].contains("archived to S3 first, then deleted"));

    // The narrow layout has the same buttons.
    let narrow = render(
        &view,
        &opts(Theme::Dark, Layout::Narrow, Mode::Widget, true),
    );
    assert_eq!(action_params(&narrow), params);
}

#[test]
fn without_an_endpoint_there_are_no_buttons() {
    for o in every_option()
        .into_iter()
        .filter(|o| o.action_endpoint.is_none())
    {
        let html = render(&fixtures::three_groups(), &o);
        assert!(!html.contains("<cwdb-action"), "{o:?}");
        assert!(!html.contains("rd-btn\""), "{o:?}");
        assert!(!html.contains("class=\"rd-btn"), "{o:?}");
    }
}

#[test]
fn every_group_shows_its_facts_and_trend() {
    let view = fixtures::three_groups();
    for o in every_option() {
        let html = render(&view, &o);
        assert_eq!(html.matches("rd-row").count(), 3, "{o:?}");
        assert_eq!(html.matches("<svg class=\"rd-trend\"").count(), 3);
        for text in [
            "g2-072dd8b1ff7e28a6",
            ">412<",
            ">37<",
            ">3<",
            "Re-driver will retry",
            "Fix, then replay with a canary",
            "Export or discard",
            "transient HTTP_503",
            "permanent SCHEMA_INVALID",
            "no recorded cause",
            "2026-11-21 11:10",
            ">held<",
            ">acknowledged<",
            ">new<",
            "<b>452</b> visible",
            "oldest <b>2 h 10 min</b>",
            "grouped 452 of about 452 (complete)",
            "pass of 2026-11-21 12:05 UTC",
            "(the dashboard's time range)",
        ] {
            assert!(html.contains(text), "{text} missing with {o:?}");
        }
        assert!(html.contains("412 failure(s) from 2026-11-21 10:00 to 2026-11-21 12:00"));
    }
}

#[test]
fn themes_and_modes_differ_where_they_should() {
    let view = fixtures::three_groups();
    let light = render(&view, &opts(Theme::Light, Layout::Wide, Mode::Page, false));
    let dark = render(&view, &opts(Theme::Dark, Layout::Wide, Mode::Page, false));
    assert!(light.contains(r#"<div class="rd rd-light rd-wide">"#));
    assert!(dark.contains(r#"<div class="rd rd-dark rd-wide">"#));
    assert!(dark.contains(r#"<body class="rd-page-dark">"#));
    for page in [&light, &dark] {
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("Content-Security-Policy\" content=\"default-src 'none'"));
        assert!(page.contains("<title>redrive triage: orders-dlq</title>"));
    }
    let widget = render(
        &view,
        &opts(Theme::Dark, Layout::Narrow, Mode::Widget, false),
    );
    assert!(widget.starts_with(r#"<div class="cwdb-no-default-styles"></div><style>"#));
    assert!(!widget.contains("<html") && !widget.contains("<body"));
    assert!(widget.contains(r#"<div class="rd rd-dark rd-narrow">"#));
    assert!(!widget.contains("<table"), "narrow: one block per group");
    assert_eq!(Theme::from_context(Some("dark")), Theme::Dark);
    assert_eq!(Theme::from_context(Some("bright")), Theme::Light);
    assert_eq!(Layout::for_width(588), Layout::Narrow);
    assert_eq!(Layout::for_width(1200), Layout::Wide);
}

#[test]
fn an_empty_an_unreadable_and_an_unindexed_queue_say_so_plainly() {
    let mut view = fixtures::three_groups();
    let o = opts(Theme::Light, Layout::Wide, Mode::Widget, true);
    view.contents = Contents::Empty;
    let empty = render(&view, &o);
    assert!(empty.contains("orders-dlq is empty: no message to triage."));
    view.contents = Contents::Unreadable(format!("AccessDenied {SCRIPT}"));
    let unreadable = render(&view, &o);
    assert!(unreadable.contains("orders-dlq could not be read: AccessDenied &lt;script&gt;"));
    view.contents = Contents::NoIndex;
    let none = render(&view, &o);
    assert!(none.contains("No triage of orders-dlq yet"));
    for html in [&empty, &unreadable, &none] {
        assert!(!html.contains("<cwdb-action"));
        assert!(!html.contains("<table"));
        assert_only_renderer_markup(html);
    }
}

#[test]
fn without_a_range_the_trend_spans_the_failures() {
    let view = fixtures::three_groups();
    let html = render(
        &view,
        &RenderOptions {
            range: None,
            ..RenderOptions::default()
        },
    );
    assert!(
        html.contains("412 failure(s) from"),
        "every failure is in range"
    );
    assert!(!html.contains("the dashboard"));

    // A group whose state no store knows shows a dash, not an invented state.
    let mut view = fixtures::three_groups();
    if let Contents::Groups(groups) = &mut view.contents {
        groups[0].state = None;
    }
    let html = render(&view, &RenderOptions::default());
    assert!(html.contains(r#"title="no state recorded">–<"#));
    assert!(!html.contains(">new<"));
}
