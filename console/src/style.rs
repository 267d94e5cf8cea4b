//! The stylesheet: one `<style>` element, every rule scoped under `.rd` so that it styles the
//! widget and nothing else on a dashboard. Colours follow the CloudWatch console's light and dark
//! themes. Long unbroken text wraps anywhere (`overflow-wrap:anywhere`) and the table lays out at
//! a fixed width, so no value from a message can push the view wider than its widget; a title or
//! a source longer than three lines is cut there (the whole text is its tooltip).

pub const CSS: &str = r#"
.rd{--bg:#ffffff;--fg:#16191f;--muted:#5f6b7a;--line:#e9ebed;--head:#f4f4f4;--link:#0972d3;
--bar:#0972d3;--ok:#037f0c;--ok-bg:#f2fcf3;--warn:#8d4a00;--warn-bg:#fff7e6;--info:#0972d3;
--info-bg:#f2f8fd;--bad:#d91515;--bad-bg:#fff7f7;--btn:#ffffff;
box-sizing:border-box;background:var(--bg);color:var(--fg);
font:12px/1.45 "Amazon Ember","Helvetica Neue",Roboto,Arial,"DejaVu Sans",sans-serif;
padding:8px 10px;overflow-wrap:anywhere;word-break:normal;max-width:100%}
.rd.rd-dark{--bg:#0f1b2a;--fg:#d1d5db;--muted:#8d99a8;--line:#2c3a4b;--head:#192534;--link:#539fe5;
--bar:#539fe5;--ok:#29ad32;--ok-bg:#001a02;--warn:#ffb04d;--warn-bg:#2a1a00;--info:#89bdee;
--info-bg:#00142b;--bad:#ff5d64;--bad-bg:#270a11;--btn:#0f1b2a}
.rd *{box-sizing:border-box;min-width:0;overflow-wrap:anywhere}
.rd-head{display:flex;flex-wrap:wrap;align-items:baseline;gap:4px 14px;padding:0 0 6px;
border-bottom:1px solid var(--line)}
.rd-q{font-size:14px;font-weight:700}
.rd-kv{white-space:nowrap}.rd-kv b{font-size:13px}
.rd-muted{color:var(--muted)}
.rd-mono{font-family:Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:11px}
.rd-plain{padding:14px 2px;font-size:13px}
.rd-t{width:100%;table-layout:fixed;border-collapse:collapse;margin-top:2px}
.rd-t th{text-align:left;font-weight:700;color:var(--muted);background:var(--head);
padding:4px 6px;border-bottom:1px solid var(--line);white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.rd-t td{vertical-align:top;padding:6px;border-bottom:1px solid var(--line)}
.rd-t td.rd-n,.rd-t th.rd-n{text-align:right;font-variant-numeric:tabular-nums}
.rd-count{font-size:15px;font-weight:700;white-space:nowrap;overflow-wrap:normal;flex:none}
.rd-title{font-weight:700;display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:3;
overflow:hidden}
.rd-src{display:-webkit-box;-webkit-box-orient:vertical;-webkit-line-clamp:3;overflow:hidden}
.rd-sub{color:var(--muted);margin-top:2px}
.rd-trend{display:block;width:100%;height:28px}
.rd-narrow .rd-trend{height:22px;margin:3px 0}
.rd-bar{fill:var(--bar)}.rd-base{stroke:var(--line);stroke-width:1}
.rd-tag{display:inline-block;max-width:100%;padding:0 6px;border-radius:10px;
border:1px solid currentColor;font-weight:700;font-size:11px;line-height:16px}
.rd-s-new{color:var(--info);background:var(--info-bg)}
.rd-s-ack{color:var(--muted)}
.rd-s-held{color:var(--warn);background:var(--warn-bg)}
.rd-s-bad{color:var(--bad);background:var(--bad-bg)}
.rd-s-ok{color:var(--ok);background:var(--ok-bg)}
.rd-a{font-weight:700}
.rd-a-retry{color:var(--ok)}.rd-a-fix{color:var(--warn)}.rd-a-named{color:var(--info)}
.rd-a-discard{color:var(--bad)}
.rd-btns{display:flex;flex-wrap:wrap;gap:4px;margin-top:5px}
.rd-btn{display:inline-block;padding:1px 8px;border:1px solid var(--link);border-radius:12px;
color:var(--link);background:var(--btn);font-weight:700;font-size:11px;line-height:16px;
cursor:pointer;white-space:nowrap;overflow-wrap:normal;text-decoration:none}
.rd-btn:hover{background:var(--info-bg)}
.rd-btn.rd-go{background:var(--link);color:var(--bg)}
.rd-btn.rd-danger{border-color:var(--bad);color:var(--bad)}
.rd-btn.rd-danger.rd-go{background:var(--bad);color:var(--bg)}
.rd-card{padding:7px 0;border-bottom:1px solid var(--line)}
.rd-card-top{display:flex;align-items:baseline;gap:8px}
.rd-card-top .rd-title{flex:1 1 auto}
.rd-card-meta{display:flex;flex-wrap:wrap;gap:2px 12px;color:var(--muted);margin-top:3px}
.rd-card-meta span{white-space:normal}
.rd-foot{color:var(--muted);margin-top:6px}
.rd cwdb-action{display:none}
"#;

/// The page's own rules (standalone page only): the page takes the theme's background.
pub const PAGE_CSS: &str = "html,body{margin:0;padding:0}body.rd-page-dark{background:#0f1b2a}";
