//! The `widgetContext` a dashboard sends with every call, and what the console reads of it.

use redrive_console::{Layout, Mode, RenderOptions, Theme, TimeRange};
use serde::Deserialize;
use serde_json::Value;

use crate::CONSOLE_WHO;

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

    pub(crate) fn options(&self, endpoint: Option<&str>) -> RenderOptions {
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
pub(crate) fn queue_param(event: &Value, ctx: &WidgetContext) -> Option<String> {
    ctx.params
        .as_ref()
        .and_then(|p| p.get("queue"))
        .or_else(|| event.get("queue"))
        .and_then(Value::as_str)
        .map(str::to_string)
}
