//! The recommended action: exactly one per message, from a fixed table read top to bottom (the
//! first row that holds wins); a group recommends the action of most of its messages (a tie goes
//! to the row higher in the table).
//!
//! | row | when                                                                    | action |
//! |-----|-------------------------------------------------------------------------|--------|
//! | 1   | isolated for `size-limit` or `attribute-limit`                          | `export-or-discard` |
//! | 2   | class `permanent`, or isolated for `permanent-failure` or `send-rejected` | `fix-then-replay-canary` |
//! | 3   | no source queue known, or isolated for `unknown-source`                 | `replay-to-named-queue` |
//! | 4   | not isolated and attempts below the limit                               | `redriver-will-retry` |
//! | 5   | anything else (attempts spent, isolated by hand)                        | `fix-then-replay-canary` |

use super::facts::Facts;
use crate::meta::{ErrorClass, IsolationReason};

crate::text_enum! {
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Action {
        /// It cannot be sent as it is (too large, too many attributes): export it, or discard it.
        ExportOrDiscard,
        /// Fix the cause, then replay with a canary (one message first, then the rest).
        FixThenReplayCanary,
        /// No source queue is known: replay it to a queue you name.
        ReplayToNamedQueue,
        /// Transient and under the limit: the re-driver will retry it; nothing to do now.
        RedriverWillRetry,
    }
}

impl Action {
    /// Reads the name [`as_str`](Self::as_str) writes.
    pub fn parse(name: &str) -> Option<Self> {
        Self::from_text(name)
    }

    /// One line for an operator.
    pub fn advice(self) -> &'static str {
        match self {
            Self::ExportOrDiscard => {
                "export or discard: it cannot be sent as it is (size or attribute limit)"
            }
            Self::FixThenReplayCanary => {
                "fix the cause, then replay with a canary (one message first, then the rest)"
            }
            Self::ReplayToNamedQueue => "replay to a queue you name: no source queue is known",
            Self::RedriverWillRetry => {
                "the re-driver will retry: transient and under the attempt limit"
            }
        }
    }

    /// The table's row for one message; `max_attempts` is the re-driver's limit.
    pub fn of(f: &Facts, max_attempts: u32) -> (Self, u8) {
        use IsolationReason as R;
        let reason = f.reason.as_ref();
        if matches!(reason, Some(R::SizeLimit | R::AttributeLimit)) {
            return (Self::ExportOrDiscard, 1);
        }
        let permanent = f
            .cause
            .as_ref()
            .is_some_and(|c| c.class == ErrorClass::Permanent);
        if permanent || matches!(reason, Some(R::PermanentFailure | R::SendRejected)) {
            return (Self::FixThenReplayCanary, 2);
        }
        if f.source.is_none() || matches!(reason, Some(R::UnknownSource)) {
            return (Self::ReplayToNamedQueue, 3);
        }
        if reason.is_none() && f.attempt < max_attempts {
            return (Self::RedriverWillRetry, 4);
        }
        (Self::FixThenReplayCanary, 5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triage::facts::{CauseOrigin, RecordedCause};

    fn facts(
        class: Option<ErrorClass>,
        reason: Option<IsolationReason>,
        source: bool,
        attempt: u32,
    ) -> Facts {
        Facts {
            message_id: "m".into(),
            original_message_id: "m".into(),
            attempt,
            reason,
            garbled: false,
            source: source.then(|| "orders".to_string()),
            cause: class.map(|class| RecordedCause {
                class,
                code: "C".into(),
                message: String::new(),
                at_ms: None,
                origin: CauseOrigin::Stamp,
            }),
            sent_ms: None,
        }
    }

    #[test]
    fn an_action_reads_back_from_its_name() {
        for a in [
            Action::ExportOrDiscard,
            Action::FixThenReplayCanary,
            Action::ReplayToNamedQueue,
            Action::RedriverWillRetry,
        ] {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Action::parse("replay"), None);
    }

    #[test]
    fn every_row_of_the_table() {
        use ErrorClass::{Permanent, Transient};
        use IsolationReason as R;
        let cases = [
            (
                facts(Some(Permanent), Some(R::SizeLimit), true, 1),
                Action::ExportOrDiscard,
                1,
            ),
            (
                facts(None, Some(R::AttributeLimit), false, 1),
                Action::ExportOrDiscard,
                1,
            ),
            (
                facts(Some(Permanent), None, false, 0),
                Action::FixThenReplayCanary,
                2,
            ),
            (
                facts(None, Some(R::SendRejected), true, 1),
                Action::FixThenReplayCanary,
                2,
            ),
            (facts(None, None, false, 0), Action::ReplayToNamedQueue, 3),
            (
                facts(Some(Transient), Some(R::UnknownSource), true, 0),
                Action::ReplayToNamedQueue,
                3,
            ),
            (
                facts(Some(Transient), None, true, 4),
                Action::RedriverWillRetry,
                4,
            ),
            (facts(None, None, true, 0), Action::RedriverWillRetry, 4),
            (
                facts(Some(Transient), None, true, 5),
                Action::FixThenReplayCanary,
                5,
            ),
            (
                facts(Some(Transient), Some(R::MaxAttempts), true, 5),
                Action::FixThenReplayCanary,
                5,
            ),
            (
                facts(None, Some(R::Manual), true, 0),
                Action::FixThenReplayCanary,
                5,
            ),
        ];
        for (f, action, row) in cases {
            assert_eq!(Action::of(&f, 5), (action, row), "{f:?}");
        }
    }
}
