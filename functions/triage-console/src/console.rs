//! The console's two calls: the widget rendered for its queue, and a button's action applied
//! to the book (replay and discard move the group's messages too, [`crate::moves`]).

use redrive_console::render;
use redrive_engine::ports::PortError;
use redrive_engine::triage_act::ActError;
use redrive_engine::triage_store::{self, DynamoDbTriageStore, TriageError, TriageStore};
use redrive_shared::config::QueueUrl;
use redrive_shared::triage::state::{Book, Refused};
use serde_json::Value;
use tokio::time::Instant;

use crate::config::{ConsoleConfig, not_configured};
use crate::context::{WidgetContext, queue_param};
use crate::request::{ActionRequest, Kind, Rejected};
use crate::view::{DESCRIBE, depth, notice, view_of};

/// How the console reads a book to show it: read only, so that the widget's role needs no
/// write (`TriageStore::load` copies a book found under its older key, a write).
pub trait BookReader: Sync {
    /// The book of `queue`, `None` when there is none.
    fn read_book(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Option<Book>, PortError>> + Send;
}

impl BookReader for DynamoDbTriageStore {
    async fn read_book(&self, queue: &str) -> Result<Option<Book>, PortError> {
        self.read(queue).await
    }
}

/// What the console renders and acts with: the configuration, the book store, SQS, and S3
/// (the action function's discard archives there).
pub struct Console<S> {
    pub config: ConsoleConfig,
    pub store: S,
    pub sqs: aws_sdk_sqs::Client,
    pub s3: aws_sdk_s3::Client,
}

impl<S: TriageStore + BookReader + Clone> Console<S> {
    /// The widget of `queue` (configured) as `ctx` asks for it.
    pub(crate) async fn render_queue(&self, queue: &QueueUrl, ctx: &WidgetContext) -> String {
        let book = match self.store.read_book(queue.as_str()).await {
            Ok(b) => b,
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
        self.action_until(event, now_ms, None).await
    }

    /// [`Console::action`] within the invocation's `deadline`: a replay's verdict window ends
    /// before it.
    pub async fn action_until(
        &self,
        event: &Value,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> Value {
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
        if request.kind == Kind::Samples {
            // A popup over the widget: the samples, or why not; nothing changes.
            let answer = crate::samples::samples(self, &request, &ctx).await;
            tracing::info!(
                queue = request.queue.name(),
                group = %request.group,
                action = request.kind.as_str(),
                plan = %request.plan_id,
                outcome = if answer.is_ok() { "shown" } else { "refused" },
                "triage action"
            );
            return Value::String(match answer {
                Ok(html) => html,
                Err(ActError::Refused(e)) => notice(false, &format!("Refused: {e}")),
                Err(ActError::Port(e)) => notice(false, &format!("Not done: {e}")),
            });
        }
        let (ok, text) = self.apply(&request, &ctx, now_ms, deadline).await;
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

    async fn apply(
        &self,
        r: &ActionRequest,
        ctx: &WidgetContext,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> (bool, String) {
        if matches!(r.kind, Kind::Replay | Kind::Discard) {
            return match crate::moves::act(self, r, ctx, deadline).await {
                Ok(text) => (true, text),
                Err(ActError::Refused(e)) => (false, format!("Refused: {e}")),
                Err(ActError::Port(e)) => (false, format!("Not done: {e}")),
            };
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
                Kind::Replay | Kind::Discard | Kind::Samples => {
                    unreachable!("moved or shown before any change here")
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
}
