//! The triage console in CloudWatch: two Lambdas behind a dashboard's custom widgets.
//!
//! - **The widget** (`triage-widget`, read only): the dashboard calls it with the documented
//!   custom widget event (`widgetContext`: theme, width, time range, the widget's `params`). It
//!   renders, for the queue `params.queue` names (one of `TRIAGE_QUEUE_URLS`, else a refusal in
//!   the widget), the groups of the queue's triage book (the index each `redrive triage --table`
//!   pass records: title, count, trend, first and last failure, source, state, recommended
//!   action) and the queue's depth, with the renderer of `redrive-console`. `describe: true`
//!   answers the widget's documentation (markdown).
//! - **The action function** (`triage-action`): each button of the widget (a `<cwdb-action>`)
//!   calls it with the button's parameters and the `widgetContext`. It accepts `acknowledge`,
//!   `hold` (`hours` 1..=168), `release` and `note` on a configured queue, for a group the book
//!   holds and the plan the book holds now; applies it to the book (load, change, conditional
//!   save) with an audit entry; and answers the widget re-rendered, with a line saying what was
//!   done or why not. `replay-canary` and `discard` move messages: it answers them with the
//!   `redrive triage` command line to run, and changes nothing.
//!
//! Nothing a request carries names an AWS resource: the queue is looked up among the configured
//! ones, the table is the configured one. Message bodies are never read (the book holds none)
//! and never logged; every text from the book is escaped by the renderer.

use std::collections::BTreeSet;

use aws_sdk_sqs::types::QueueAttributeName;
use redrive_console::{
    Contents, Depth, GroupView, Layout, Mode, RenderOptions, Theme, TimeRange, TriageView,
    escape_html, render,
};
use redrive_engine::triage_store::{self, TriageError, TriageStore};
use redrive_shared::config::{ConfigError, Env, QueueUrl, parse_bool, parse_table_name};
use redrive_shared::timefmt::millis_from_rfc3339;
use redrive_shared::triage::grouper::Attempts;
use redrive_shared::triage::state::{Book, GroupRecord, Refused, State};
use redrive_shared::triage::{Action, Group, GroupId};
use serde::Deserialize;
use serde_json::Value;

/// The longest hold the console's hold button may ask for, in hours (a week).
pub const MAX_HOLD_HOURS: u64 = 168;
/// The longest note accepted from the console, in characters.
pub const MAX_NOTE_CHARS: usize = 1000;
/// Who the audit names for a console action, before the dashboard's name.
pub const CONSOLE_WHO: &str = "console";

/// The console's configuration, read once at init; every error names its variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// `TRIAGE_TABLE`: the table of the triage books (the stack's circuit table).
    pub table: String,
    /// `TRIAGE_QUEUE_URLS`: the DLQs and poison queue the console may show and act on.
    pub queues: Vec<QueueUrl>,
    /// `TRIAGE_ACTION_FUNCTION`: the function the widget's buttons call (the widget's only).
    pub action_function: Option<String>,
    /// `TRIAGE_SHOW_BODIES` (default false). The console shows no message samples yet, so no
    /// body is shown whatever it says.
    pub show_bodies: bool,
}

fn parse_queue_urls(v: &str) -> Result<Vec<QueueUrl>, String> {
    let mut urls = Vec::new();
    let mut names = BTreeSet::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let url = QueueUrl::parse(part).map_err(|e| format!("{part:?} {e}"))?;
        if !names.insert(url.name().to_string()) {
            return Err(format!(
                "two queues are named {:?}: the widget's params name a queue by its name or URL, so names must differ",
                url.name()
            ));
        }
        urls.push(url);
    }
    if urls.is_empty() {
        return Err("must list at least one queue URL (comma-separated)".into());
    }
    Ok(urls)
}

fn parse_function(v: &str) -> Result<String, String> {
    let ok = v.len() <= 256
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err("must be a Lambda function name or ARN (a-z A-Z 0-9 - _ : .)".into())
    }
}

impl ConsoleConfig {
    fn common<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            table: env.required("TRIAGE_TABLE", parse_table_name)?,
            queues: env.required("TRIAGE_QUEUE_URLS", parse_queue_urls)?,
            action_function: None,
            show_bodies: env.or("TRIAGE_SHOW_BODIES", false, parse_bool)?,
        })
    }

    /// The widget's configuration: the action function is required (its buttons call it).
    pub fn widget_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = Self::common(env)?;
        cfg.action_function = Some(env.required("TRIAGE_ACTION_FUNCTION", parse_function)?);
        Ok(cfg)
    }

    /// The action function's configuration (it re-renders the widget with buttons that call
    /// itself, `TRIAGE_ACTION_FUNCTION` when set, else its own name from the runtime).
    pub fn action_from_env<F: Fn(&str) -> Option<String>>(
        env: &Env<F>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = Self::common(env)?;
        cfg.action_function = env
            .optional("TRIAGE_ACTION_FUNCTION", parse_function)?
            .or_else(|| env.get("AWS_LAMBDA_FUNCTION_NAME"));
        Ok(cfg)
    }

    /// The configured queue `text` names (its URL, or its name); `None` for any other.
    pub fn queue(&self, text: &str) -> Option<&QueueUrl> {
        self.queues
            .iter()
            .find(|q| q.as_str() == text || q.name() == text)
    }
}

/// `widgetContext.timeRange` (epoch milliseconds).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextTimeRange {
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub start: Option<i64>,
    #[serde(default)]
    pub end: Option<i64>,
    #[serde(default)]
    pub relative_start: Option<i64>,
    #[serde(default)]
    pub zoom: Option<Zoom>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Zoom {
    #[serde(default)]
    pub start: Option<i64>,
    #[serde(default)]
    pub end: Option<i64>,
}

/// The `widgetContext` every call from a dashboard carries (the fields this console reads;
/// the others are accepted and ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WidgetContext {
    #[serde(default)]
    pub dashboard_name: Option<String>,
    #[serde(default)]
    pub widget_id: Option<String>,
    #[serde(default)]
    pub time_range: Option<ContextTimeRange>,
    #[serde(default)]
    pub theme: Option<String>,
    #[serde(default)]
    pub params: Option<Value>,
    #[serde(default)]
    pub width: Option<u32>,
    #[serde(default)]
    pub height: Option<u32>,
}

impl WidgetContext {
    /// The context of `event` (an empty one when it has none or it does not parse).
    pub fn of(event: &Value) -> Self {
        event
            .get("widgetContext")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    }

    /// The dashboard's time range for the trend: the zoomed range when zoomed.
    pub fn range(&self) -> Option<TimeRange> {
        let r = self.time_range.as_ref()?;
        let zoomed = r
            .zoom
            .as_ref()
            .and_then(|z| TimeRange::new(z.start?, z.end?));
        zoomed.or_else(|| TimeRange::new(r.start?, r.end?))
    }

    fn options(&self, endpoint: Option<&str>) -> RenderOptions {
        RenderOptions {
            theme: Theme::from_context(self.theme.as_deref()),
            layout: self.width.map_or(Layout::Wide, Layout::for_width),
            mode: Mode::Widget,
            range: self.range(),
            action_endpoint: endpoint.map(str::to_string),
        }
    }

    /// Who an action is audited as: the console and the dashboard it came from. A dashboard's
    /// call carries no caller identity to the function; CloudTrail's Invoke record names it.
    pub fn who(&self) -> String {
        match self.dashboard_name.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => format!("{CONSOLE_WHO} (dashboard {d})"),
            None => CONSOLE_WHO.to_string(),
        }
    }
}

/// The queue the widget shows: `params.queue` of the widget (also sent at the event's top
/// level by the dashboard).
fn queue_param(event: &Value, ctx: &WidgetContext) -> Option<String> {
    ctx.params
        .as_ref()
        .and_then(|p| p.get("queue"))
        .or_else(|| event.get("queue"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The widget's documentation, answered to `describe: true`.
pub const DESCRIBE: &str = r#"## redrive triage

Shows the triage of one dead-letter (or poison) queue: its groups of failed messages by cause,
each with its count, a trend over the dashboard's time range, first and last failure, source,
state and recommended action, and the queue's depth. The groups are those the last
`redrive triage QUEUE --table TABLE` pass recorded in the triage book.

Parameters:

```
queue: the queue's URL or name (one of the function's TRIAGE_QUEUE_URLS)
```

Buttons call the triage action function: acknowledge, hold 24 h, release. Replay and
discard answer with the `redrive triage` command to run.
"#;

/// The queue's depth, from `GetQueueAttributes`.
pub async fn depth(sqs: &aws_sdk_sqs::Client, queue: &QueueUrl) -> Result<Depth, String> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(queue.as_str())
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| redrive_engine::aws::port_error("GetQueueAttributes", e).to_string())?;
    let attrs = out.attributes.unwrap_or_default();
    let n = |a: QueueAttributeName| {
        attrs
            .get(&a)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Depth {
        visible: n(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    })
}

/// The advice shown for a group whose book record predates the recorded pass facts.
const UNRECORDED_ADVICE: &str =
    "the recommended action was not recorded: run redrive triage on the queue with --table";

/// A group of the book as the renderer's grouper group: what the last pass recorded.
pub fn group_of(id: &str, r: &GroupRecord) -> Group {
    let facts = r.pass.clone().unwrap_or_default();
    let (action, advice) = match Action::parse(&facts.action) {
        Some(a) => (a, a.advice()),
        None => (Action::FixThenReplayCanary, UNRECORDED_ADVICE),
    };
    Group {
        id: id.to_string(),
        rule: id.strip_prefix("r-").map(str::to_string),
        computed_ids: Vec::new(),
        title: r.title.clone(),
        recorded: facts.class.is_some(),
        count: usize::try_from(r.last_count).unwrap_or(usize::MAX),
        first_failure: facts.first_failure,
        last_failure: facts.last_failure,
        source: r.source.clone(),
        class: facts.class,
        code: facts.code,
        attempts: Attempts {
            min: facts.attempts_min,
            max: facts.attempts_max,
            histogram: Default::default(),
        },
        isolation: Default::default(),
        top_values: Vec::new(),
        action,
        action_advice: advice,
        action_row: 0,
        garbled: 0,
        message_ids: Vec::new(),
        plan_id: r.plan_id.clone().unwrap_or_default(),
        failure_times: facts.failure_times,
        failure_times_every: usize::try_from(facts.failure_times_every.max(1)).unwrap_or(1),
    }
}

/// The view of `queue` from its book (`None`: none yet) and its depth (or why it could not be
/// read). Resolved groups are not shown; the largest groups come first.
pub fn view_of(queue: &QueueUrl, book: Option<&Book>, depth: Result<Depth, String>) -> TriageView {
    let made_at_ms = book
        .and_then(|b| b.passed_at.as_deref())
        .and_then(millis_from_rfc3339);
    let (depth, contents) = match depth {
        Err(reason) => (None, Some(Contents::Unreadable(reason))),
        Ok(d) => (Some(d), None),
    };
    let mut groups: Vec<GroupView> = book
        .map(|b| {
            b.groups
                .iter()
                .filter(|(_, r)| r.state != State::Resolved && r.last_count > 0)
                .map(|(id, r)| GroupView::new(group_of(id, r)).with_state(r.state.as_str()))
                .collect()
        })
        .unwrap_or_default();
    groups.sort_by(|a, b| {
        b.group
            .count
            .cmp(&a.group.count)
            .then(a.group.id.cmp(&b.group.id))
    });
    let contents = contents.unwrap_or_else(|| {
        let empty = depth.is_some_and(|d| d.visible + d.in_flight == 0);
        let no_index = book.is_none_or(|b| b.groups.is_empty() && b.passed_at.is_none());
        if !groups.is_empty() {
            Contents::Groups(groups)
        } else if empty {
            Contents::Empty
        } else if no_index {
            Contents::NoIndex
        } else {
            Contents::Groups(Vec::new())
        }
    });
    TriageView {
        queue: queue.name().to_string(),
        depth,
        oldest_age_s: None,
        made_at_ms,
        coverage: None,
        contents,
    }
}

/// A line above the widget: what an action did, or why it was refused (escaped here).
fn notice(ok: bool, text: &str) -> String {
    let colour = if ok { "#1d8102" } else { "#d13212" };
    format!(
        r#"<div class="rd-notice" role="status" style="font:13px/1.4 'Amazon Ember',Helvetica,Arial,sans-serif;padding:6px 10px;margin:0 0 6px;border-left:4px solid {colour};overflow-wrap:anywhere">{}</div>"#,
        escape_html(text)
    )
}

/// What the console renders with: the configuration, the book store and SQS.
pub struct Console<S> {
    pub config: ConsoleConfig,
    pub store: S,
    pub sqs: aws_sdk_sqs::Client,
}

impl<S: TriageStore> Console<S> {
    /// The widget of `queue` (configured) as `ctx` asks for it.
    async fn render_queue(&self, queue: &QueueUrl, ctx: &WidgetContext) -> String {
        let book = match self.store.load(queue.as_str()).await {
            Ok(b) => b.map(|(_, b)| b),
            Err(e) => {
                tracing::warn!(queue = queue.name(), error = %e, "the triage book could not be read");
                let view = view_of(
                    queue,
                    None,
                    Err(format!("its triage book could not be read ({e})")),
                );
                return render(&view, &ctx.options(None));
            }
        };
        let depth = depth(&self.sqs, queue).await;
        if let Err(e) = &depth {
            tracing::warn!(queue = queue.name(), error = %e, "the queue's depth could not be read");
        }
        let view = view_of(queue, book.as_ref(), depth);
        render(&view, &ctx.options(self.config.action_function.as_deref()))
    }

    /// The widget function: the HTML of the queue the widget's params name, or its
    /// documentation when the dashboard asks `describe`.
    pub async fn widget(&self, event: &Value) -> Value {
        if event.get("describe").and_then(Value::as_bool) == Some(true) {
            return Value::String(DESCRIBE.to_string());
        }
        let ctx = WidgetContext::of(event);
        let Some(asked) = queue_param(event, &ctx) else {
            tracing::info!(outcome = "refused", reason = "no queue parameter", "widget");
            return Value::String(notice(
                false,
                "This widget names no queue: set its parameter queue to one of the console's queues.",
            ));
        };
        let Some(queue) = self.config.queue(&asked) else {
            tracing::info!(
                outcome = "refused",
                reason = "queue not configured",
                "widget"
            );
            return Value::String(notice(false, &not_configured(&asked, &self.config)));
        };
        tracing::info!(queue = queue.name(), "widget");
        Value::String(self.render_queue(queue, &ctx).await)
    }

    /// The action function: validates the button's request, applies it to the book and
    /// answers the widget re-rendered with a line saying what happened.
    pub async fn action(&self, event: &Value, now_ms: i64) -> Value {
        let ctx = WidgetContext::of(event);
        let request = match ActionRequest::parse(&self.config, event) {
            Ok(r) => r,
            Err(Rejected { queue, reason }) => {
                tracing::info!(outcome = "refused", reason = %reason, "triage action");
                let line = notice(false, &format!("Refused: {reason}"));
                let html = match queue {
                    Some(q) => format!("{line}{}", self.render_queue(&q, &ctx).await),
                    None => line,
                };
                return Value::String(html);
            }
        };
        let (ok, text) = self.apply(&request, &ctx, now_ms).await;
        tracing::info!(
            queue = request.queue.name(),
            group = %request.group,
            action = request.kind.as_str(),
            plan = %request.plan_id,
            outcome = if ok { "done" } else { "refused" },
            "triage action"
        );
        let line = notice(ok, &text);
        Value::String(format!(
            "{line}{}",
            self.render_queue(&request.queue, &ctx).await
        ))
    }

    async fn apply(&self, r: &ActionRequest, ctx: &WidgetContext, now_ms: i64) -> (bool, String) {
        if matches!(r.kind, Kind::Replay | Kind::Discard) {
            return self.command_line(r).await;
        }
        let who = ctx.who();
        let group = r.group.as_str();
        let plan = r.plan_id.as_str();
        let result = triage_store::update(&self.store, r.queue.as_str(), |b| {
            let rec = b.get(group)?;
            let current = rec.plan_id.clone().unwrap_or_default();
            if current != plan {
                return Err(Refused::Invalid(format!(
                    "the widget showed plan {plan} of group {group}, the book's current plan is {}: look at the group again (shown below) and act on what it holds now",
                    if current.is_empty() { "none" } else { &current }
                )));
            }
            let count = rec.plan_size.unwrap_or(rec.last_count);
            match &r.kind {
                Kind::Acknowledge => b.acknowledge(group, &who, now_ms)?,
                Kind::Hold { hours } => {
                    let until = now_ms + i64::try_from(*hours).unwrap_or(0) * 3_600_000;
                    b.hold(group, &who, Some(until), None, now_ms)?
                }
                Kind::Release => b.release(group, &who, now_ms)?,
                Kind::Note { text } => b.note(group, &who, text, now_ms)?,
                Kind::Replay | Kind::Discard => {
                    unreachable!("answered with their command line before any change")
                }
            }
            b.stamp_last_audit(group, plan, count);
            Ok(())
        })
        .await;
        match result {
            Ok(((), _)) => (true, r.kind.done(group, r.queue.name())),
            Err(TriageError::Refused(e)) => (false, format!("Refused: {e}")),
            Err(e) => (false, format!("Not done: {e}")),
        }
    }

    /// Replay and discard from the console: the command that does it, after the same checks
    /// (the group is in the book with this plan). Nothing is changed.
    async fn command_line(&self, r: &ActionRequest) -> (bool, String) {
        let book = match self.store.load(r.queue.as_str()).await {
            Ok(b) => b.map(|(_, b)| b),
            Err(e) => return (false, format!("Not done: {e}")),
        };
        let group = r.group.as_str();
        let plan = r.plan_id.as_str();
        let current = book
            .as_ref()
            .and_then(|b| b.groups.get(group))
            .map(|rec| rec.plan_id.clone().unwrap_or_default());
        match current {
            None => {
                return (
                    false,
                    format!("Refused: {}", Refused::Unknown(group.to_string())),
                );
            }
            Some(c) if c != plan => {
                return (
                    false,
                    format!(
                        "Refused: the widget showed plan {plan} of group {group}, the book's current plan is {c}"
                    ),
                );
            }
            Some(_) => {}
        }
        let table = &self.config.table;
        let queue = r.queue.as_str();
        let text = match r.kind {
            Kind::Replay => format!(
                "Replay moves messages, which this console leaves to the CLI: nothing was changed. Run: redrive triage replay {group} {queue} --plan {plan} --table {table}"
            ),
            _ => format!(
                "Discard deletes messages (archived first), which this console leaves to the CLI: nothing was changed. Run: redrive triage discard {group} {queue} --plan {plan} --archive s3://BUCKET/PREFIX --table {table}"
            ),
        };
        (true, text)
    }
}

fn not_configured(asked: &str, cfg: &ConsoleConfig) -> String {
    let names: Vec<&str> = cfg.queues.iter().map(QueueUrl::name).collect();
    format!(
        "the queue {asked:?} is not one this console shows (its TRIAGE_QUEUE_URLS: {})",
        names.join(", ")
    )
}

/// What a button asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Acknowledge,
    Hold { hours: u64 },
    Release,
    Note { text: String },
    Replay,
    Discard,
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Acknowledge => "acknowledge",
            Self::Hold { .. } => "hold",
            Self::Release => "release",
            Self::Note { .. } => "note",
            Self::Replay => "replay-canary",
            Self::Discard => "discard",
        }
    }

    fn done(&self, group: &str, queue: &str) -> String {
        match self {
            Self::Acknowledge => format!("Acknowledged group {group} of {queue}."),
            Self::Hold { hours } => format!(
                "Held group {group} of {queue} for {hours} h: the re-driver leaves its messages on the queue until then."
            ),
            Self::Release => format!(
                "Released group {group} of {queue}: the re-driver drains its messages again."
            ),
            Self::Note { .. } => format!("Noted on group {group} of {queue}."),
            Self::Replay | Self::Discard => String::new(),
        }
    }
}

/// A button's request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRequest {
    pub kind: Kind,
    pub queue: QueueUrl,
    pub group: String,
    pub plan_id: String,
}

/// A request refused before the book is read: why, and the configured queue it named (when it
/// named one: the widget of that queue is shown below the refusal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub queue: Option<QueueUrl>,
    pub reason: String,
}

fn text_param<'a>(event: &'a Value, name: &str) -> Result<&'a str, String> {
    match event.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(_) => Err(format!("the parameter {name} must be a non-empty string")),
        None => Err(format!("the parameter {name} is missing")),
    }
}

fn is_plan_id(p: &str) -> bool {
    (1..=128).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

impl ActionRequest {
    /// Checks a button's parameters (the event's top level): a known action, a configured
    /// queue, a well-formed group id and plan id, and `hours` in 1..=168 for a hold.
    pub fn parse(cfg: &ConsoleConfig, event: &Value) -> Result<Self, Rejected> {
        let reject = |queue: Option<&QueueUrl>, reason: String| Rejected {
            queue: queue.cloned(),
            reason,
        };
        let asked = text_param(event, "queue").map_err(|e| reject(None, e))?;
        let queue = cfg
            .queue(asked)
            .ok_or_else(|| reject(None, not_configured(asked, cfg)))?;
        let q = Some(queue);
        let action = text_param(event, "action").map_err(|e| reject(q, e))?;
        let group = text_param(event, "group").map_err(|e| reject(q, e))?;
        GroupId::parse(group).map_err(|e| reject(q, e))?;
        let plan_id = text_param(event, "planId").map_err(|e| reject(q, e))?;
        if !is_plan_id(plan_id) {
            return Err(reject(q, format!("{plan_id:?} is not a plan id")));
        }
        if let Some(c) = event.get("count")
            && !c.is_u64()
        {
            return Err(reject(
                q,
                "the parameter count must be a whole number".into(),
            ));
        }
        let kind = match action {
            "acknowledge" => Kind::Acknowledge,
            "release" => Kind::Release,
            "hold" => {
                let hours = event.get("hours").and_then(Value::as_u64);
                match hours {
                    Some(h) if (1..=MAX_HOLD_HOURS).contains(&h) => Kind::Hold { hours: h },
                    _ => {
                        return Err(reject(
                            q,
                            format!("a hold needs hours, a whole number in 1..={MAX_HOLD_HOURS}"),
                        ));
                    }
                }
            }
            "note" => {
                let text = text_param(event, "text").map_err(|e| reject(q, e))?;
                if text.chars().count() > MAX_NOTE_CHARS || text.trim().is_empty() {
                    return Err(reject(
                        q,
                        format!("a note is 1 to {MAX_NOTE_CHARS} characters"),
                    ));
                }
                Kind::Note {
                    text: text.to_string(),
                }
            }
            "replay-canary" | "replay" => Kind::Replay,
            "discard" => Kind::Discard,
            other => {
                return Err(reject(
                    q,
                    format!(
                        "{other:?} is not an action of this console (acknowledge, hold, release, note; replay-canary and discard answer with the command to run)"
                    ),
                ));
            }
        };
        Ok(Self {
            kind,
            queue: queue.clone(),
            group: group.to_string(),
            plan_id: plan_id.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
