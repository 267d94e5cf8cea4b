//! What the view shows and how: the queue, its groups and their states, and the options of one
//! rendering (theme, layout, page or widget, the trend's range, the buttons' endpoint).

use redrive_shared::triage::Group;

use crate::trend::TimeRange;

/// The queue's messages as SQS counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
}

/// How much of the queue the pass behind the view grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    pub grouped: usize,
    /// Messages on the queue when the pass began (or lines of a file).
    pub about: u64,
    /// `complete`, `sample`, `incomplete` or `failed`.
    pub status: String,
    /// What was not reached, and why.
    pub note: Option<String>,
}

/// One group as the view shows it: the grouper's group, its state when a store keeps one (new,
/// acknowledged, held, replay-failed, ...; `None`: not known, shown as a dash, and its buttons
/// are those of a new group), and its failure times for the trend.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub group: Group,
    pub state: Option<String>,
    /// Epoch milliseconds; each stands for `times_weight` messages.
    pub failure_times: Vec<i64>,
    pub times_weight: usize,
    /// The size of the group's frozen plan, what its buttons act on (default: its count).
    pub plan_size: Option<usize>,
}

impl GroupView {
    /// The group with the failure times the grouper kept, and no state.
    pub fn new(group: Group) -> Self {
        Self {
            failure_times: group.failure_times.clone(),
            times_weight: group.failure_times_every.max(1),
            group,
            state: None,
            plan_size: None,
        }
    }

    pub fn with_plan_size(mut self, size: Option<usize>) -> Self {
        self.plan_size = size;
        self
    }

    pub fn with_state(mut self, state: impl Into<String>) -> Self {
        self.state = Some(state.into());
        self
    }
}

/// What there is to show.
#[derive(Debug, Clone)]
pub enum Contents {
    /// The groups, largest first.
    Groups(Vec<GroupView>),
    /// The queue holds no message.
    Empty,
    /// The queue could not be read; the reason is shown (escaped).
    Unreadable(String),
    /// No triage pass has been made of this queue yet.
    NoIndex,
}

/// A DLQ's (or poison queue's) triage, as one pass or the index made it.
#[derive(Debug, Clone)]
pub struct TriageView {
    /// The queue's name (or the file a pass read).
    pub queue: String,
    pub depth: Option<Depth>,
    /// Age of the oldest message, in seconds.
    pub oldest_age_s: Option<u64>,
    /// When the pass (or the index) was made, epoch milliseconds.
    pub made_at_ms: Option<i64>,
    pub coverage: Option<Coverage>,
    pub contents: Contents,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Theme {
    #[default]
    Light,
    Dark,
}

impl Theme {
    /// The dashboard's theme as `widgetContext.theme` names it (`light` or `dark`); anything
    /// else is light.
    pub fn from_context(theme: Option<&str>) -> Self {
        match theme {
            Some("dark") => Self::Dark,
            _ => Self::Light,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// One block per group (a widget a quarter or a third of the dashboard wide).
    Narrow,
    /// A table, one row per group.
    #[default]
    Wide,
}

impl Layout {
    /// Below this width in pixels, groups are blocks rather than table rows.
    pub const NARROW_BELOW_PX: u32 = 720;

    /// The layout for a widget `px` pixels wide (`widgetContext.width`).
    pub fn for_width(px: u32) -> Self {
        if px < Self::NARROW_BELOW_PX {
            Self::Narrow
        } else {
            Self::Wide
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A whole HTML document (`redrive triage --html`).
    #[default]
    Page,
    /// The fragment a CloudWatch custom widget returns.
    Widget,
}

#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    pub theme: Theme,
    pub layout: Layout,
    pub mode: Mode,
    /// The trend's range (`widgetContext.timeRange`); `None`: around the groups' failures.
    pub range: Option<TimeRange>,
    /// Render the action buttons, calling this function (its ARN or name); `None`: no buttons.
    pub action_endpoint: Option<String>,
}
