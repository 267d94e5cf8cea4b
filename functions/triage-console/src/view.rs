//! The queue's view from its book and its depth: the groups as the last pass recorded them.

use aws_sdk_sqs::types::QueueAttributeName;
use redrive_console::{Contents, Depth, GroupView, TriageView, escape_html};
use redrive_shared::config::QueueUrl;
use redrive_shared::timefmt::millis_from_rfc3339;
use redrive_shared::triage::grouper::Attempts;
use redrive_shared::triage::state::{Book, GroupRecord};
use redrive_shared::triage::{Action, Group};

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

Buttons call the triage action function: samples (a popup of a few of the group's messages),
acknowledge, hold 24 h, release, replay with a
canary (one message of the group's plan to its source, judged; a failed canary stops it) and
discard (each message of the plan archived to S3, then deleted). Replay and discard ask first,
naming how many messages the plan holds.
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
    let groups: Vec<GroupView> = book
        .map(|b| {
            b.largest_first(false)
                .into_iter()
                .filter(|(_, r)| r.last_count > 0)
                .map(|(id, r)| {
                    GroupView::new(group_of(id, r))
                        .with_state(r.state.as_str())
                        .with_plan_size(r.plan_size.and_then(|n| usize::try_from(n).ok()))
                })
                .collect()
        })
        .unwrap_or_default();
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
pub(crate) fn notice(ok: bool, text: &str) -> String {
    let colour = if ok { "#1d8102" } else { "#d13212" };
    format!(
        r#"<div class="rd-notice" role="status" style="font:13px/1.4 'Amazon Ember',Helvetica,Arial,sans-serif;padding:6px 10px;margin:0 0 6px;border-left:4px solid {colour};overflow-wrap:anywhere">{}</div>"#,
        escape_html(text)
    )
}
