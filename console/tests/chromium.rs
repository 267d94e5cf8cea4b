//! The rendered view as a person sees it: loaded in headless Chromium (Debian's `chromium`, which
//! `make setup` installs), in the light and dark themes and at a narrow and a wide width, with
//! screenshots kept under `target/console-screenshots/`.
//!
//! The widget fragment is loaded in a host page of the test's own, as the dashboard hosts it.
//! That host page (never the renderer's output) carries one script of the test: once the page
//! has loaded, it measures whether any element or line of text reaches past the right edge of
//! the widget (a box of the width under test, as the dashboard gives it) or of its table cell,
//! or breaks a count, a button or a state over two lines, and writes what it found on `<body data-overflow>`, which `--dump-dom` shows. A script
//! from a message, had it run, would have changed the page's title (the hostile fixture's
//! payloads all set `document.title`) or added an element.

#[path = "fixtures/mod.rs"]
mod fixtures;

use std::path::{Path, PathBuf};
use std::process::Command;

use redrive_console::{Layout, Mode, RenderOptions, Theme, TriageView, render};

const ENDPOINT: &str = "arn:aws:lambda:us-east-1:123456789012:function:redrive-triage-act:live";
const NARROW: (u32, u32) = (480, 900);
const WIDE: (u32, u32) = (1280, 520);

const MEASURE: &str = r#"<script>
window.addEventListener('load', function () {
  var root = document.getElementById('widget');
  var vw = root.getBoundingClientRect().right;
  var bad = [];
  root.querySelectorAll('*').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 0.5) bad.push('<' + el.tagName + ' class=' + el.className + '>');
  });
  var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (var n = walker.nextNode(); n; n = walker.nextNode()) {
    var range = document.createRange();
    range.selectNodeContents(n);
    var rects = range.getClientRects();
    for (var i = 0; i < rects.length; i++) {
      if (rects[i].right > vw + 0.5) { bad.push('text ' + n.textContent.slice(0, 30)); break; }
    }
  }
  if (root.scrollWidth > root.clientWidth) bad.push('the widget scrolls sideways');
  root.querySelectorAll('td, .rd-card').forEach(function (cell) {
    var edge = cell.getBoundingClientRect().right + 0.5;
    cell.querySelectorAll('*').forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > edge) bad.push('out of its cell: <' + el.tagName + ' class=' + el.className + '>');
    });
  });
  root.querySelectorAll('.rd-count, .rd-btn, .rd-tag').forEach(function (el) {
    // A state of a store's own words is one line; one longer than a word may wrap.
    if (el.textContent.length > 16) return;
    var range = document.createRange();
    range.selectNodeContents(el);
    if (range.getClientRects().length > 1) bad.push('broken over lines: ' + el.textContent);
  });
  document.body.setAttribute('data-overflow', bad.length ? bad.join(' | ') : 'none');
  document.body.setAttribute('data-width', String(vw));
});
</script>"#;

fn chromium() -> PathBuf {
    let name = std::env::var("REDRIVE_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(&name))
            .find(|p| p.is_file())
    });
    found.or_else(|| Some(PathBuf::from(&name)).filter(|p| p.is_file())).unwrap_or_else(|| {
        panic!(
            "{name} not found: `make setup` installs Debian's chromium (apt-get install chromium), or set REDRIVE_CHROMIUM"
        )
    })
}

/// `target/console-screenshots/`, where the screenshots are kept.
fn shots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs headless Chromium on `page` with `args`, a profile of its own (tests run at once).
fn run_chromium(page: &Path, size: (u32, u32), args: &[String]) -> String {
    let profile = std::env::temp_dir().join(format!(
        "redrive-chromium-{}-{}",
        std::process::id(),
        page.file_stem().unwrap().to_string_lossy()
    ));
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed on {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The width and height a PNG file declares (its IHDR chunk).
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is a PNG",
        path.display()
    );
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

struct Shown {
    dom: String,
    shot: PathBuf,
}

/// The widget fragment of `view`, hosted, loaded, measured and screenshotted.
fn show(name: &str, view: &TriageView, theme: Theme, size: (u32, u32)) -> Shown {
    let opts = RenderOptions {
        theme,
        layout: Layout::for_width(size.0),
        mode: Mode::Widget,
        range: Some(fixtures::range()),
        action_endpoint: Some(ENDPOINT.into()),
    };
    let theme_name = match theme {
        Theme::Light => "light",
        Theme::Dark => "dark",
    };
    let stem = format!("{name}-{theme_name}-{}", size.0);
    let dir = shots_dir();
    let page = dir.join(format!("{stem}.html"));
    let bg = match theme {
        Theme::Light => "#ffffff",
        Theme::Dark => "#0f1b2a",
    };
    std::fs::write(
        &page,
        format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>host</title><style>body{{margin:0;background:{bg}}}</style></head><body><div id=\"widget\" style=\"width:{}px\">{}</div>{MEASURE}</body></html>",
            size.0,
            render(view, &opts)
        ),
    )
    .unwrap();
    let dom = run_chromium(&page, size, &["--dump-dom".into()]);
    let shot = dir.join(format!("{stem}.png"));
    let _ = std::fs::remove_file(&shot);
    run_chromium(&page, size, &[format!("--screenshot={}", shot.display())]);
    assert_eq!(png_size(&shot), size, "{}", shot.display());
    Shown { dom, shot }
}

/// What every rendering must show: the page as loaded, untouched by any message, nothing wider
/// than the window.
fn assert_inert_and_contained(s: &Shown, width: u32) {
    let dom = &s.dom;
    assert!(
        dom.contains("<title>host</title>"),
        "the title changed: a script ran ({})",
        s.shot.display()
    );
    assert_eq!(dom.matches("<script").count(), 1, "only the host's script");
    assert!(!dom.contains("<img"), "no image element");
    assert!(!dom.contains("<h1"), "no injected element");
    assert!(
        dom.contains(&format!("data-width=\"{width}\"")),
        "measured at the window's width: {}",
        s.shot.display()
    );
    assert!(
        dom.contains("data-overflow=\"none\""),
        "overflow in {}: {}",
        s.shot.display(),
        dom.split("data-overflow=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .unwrap_or("(not measured)")
    );
}

#[test]
fn three_groups_render_with_counts_trends_states_and_buttons_in_both_themes_and_widths() {
    let view = fixtures::three_groups();
    for theme in [Theme::Light, Theme::Dark] {
        for size in [NARROW, WIDE] {
            let s = show("three-groups", &view, theme, size);
            assert_inert_and_contained(&s, size.0);
            let dom = &s.dom;
            assert_eq!(dom.matches("rd-row").count(), 3, "{}", s.shot.display());
            for count in ["412", "37", "3"] {
                assert!(
                    dom.contains(&format!("class=\"rd-count\">{count}<")),
                    "{count}"
                );
            }
            assert_eq!(dom.matches("<svg class=\"rd-trend\"").count(), 3);
            assert!(
                dom.matches("<rect class=\"rd-bar\"").count() > 20,
                "bars drawn"
            );
            for state in [">new<", ">held<", ">acknowledged<"] {
                assert!(dom.contains(state), "{state}");
            }
            // Each group's samples (a popup), and eight actions on the three groups' states.
            assert_eq!(dom.matches("<cwdb-action ").count(), 3 + 8);
            assert_eq!(dom.matches("data-action=\"samples\"").count(), 3);
            for action in ["acknowledge", "hold", "release", "replay-canary", "discard"] {
                assert!(
                    dom.contains(&format!("data-action=\"{action}\"")),
                    "{action}"
                );
            }
            assert_eq!(
                dom.matches("confirmation=\"Discard the ").count(),
                2,
                "{}",
                s.shot.display()
            );
        }
    }
}

#[test]
fn hostile_messages_render_as_inert_text_within_the_widget() {
    let view = fixtures::hostile();
    for theme in [Theme::Light, Theme::Dark] {
        for size in [NARROW, WIDE] {
            let s = show("hostile", &view, theme, size);
            assert_inert_and_contained(&s, size.0);
            // The markup shows as text.
            assert!(
                s.dom
                    .contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;")
            );
            assert!(s.dom.contains("&lt;img src=x onerror="));
            assert!(s.dom.contains(&fixtures::long_word(600)));
        }
    }
}

#[test]
fn the_standalone_page_loads_without_script_or_fetch() {
    let view = fixtures::three_groups();
    let dir = shots_dir();
    let page = dir.join("page-light-1280.html");
    std::fs::write(
        &page,
        render(
            &view,
            &RenderOptions {
                mode: Mode::Page,
                ..RenderOptions::default()
            },
        ),
    )
    .unwrap();
    let dom = run_chromium(&page, WIDE, &["--dump-dom".into()]);
    assert!(dom.contains("<title>redrive triage: orders-dlq</title>"));
    assert_eq!(dom.matches("rd-row").count(), 3);
    assert!(!dom.contains("<cwdb-action"), "no buttons on the page");
    let shot = dir.join("page-light-1280.png");
    run_chromium(&page, WIDE, &[format!("--screenshot={}", shot.display())]);
    assert_eq!(png_size(&shot), WIDE);
}
