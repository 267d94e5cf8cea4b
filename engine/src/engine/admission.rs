//! The adaptive circuit as the engine's callers see it: the `circuit` of a response, a drain's
//! share of a round's plan ([`Admission`]) and what it reports back ([`DrainCounts`]), and the
//! check before a run made of steps ([`CircuitCheck`]).
//!
//! Drains that run side by side as one round (a workflow's scale-out drains) share one plan:
//! the round's plan is read once ([`super::Engine::round_plan`]) and split among them
//! ([`Admission::split`]: a canary of n messages is n in all, a ramp budget B is B in all);
//! each drain follows its [`Admission`] (in its [`super::DrainRequest`]) and writes nothing to
//! the record, and reports what it did and saw ([`DrainCounts`]); the round's counts then land
//! once ([`super::Engine::land_round`]): one write, one canary, one step of the ramp.

use redrive_shared::circuit::{Bounce, Override, Plan, Sample, State};
use serde::{Deserialize, Serialize};

use crate::ports::CircuitMetrics;

/// The circuit in the response (`"circuit"`), present only when the circuit is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CircuitSummary {
    /// After the run: `closed`, `open` or `half-open`.
    pub state: State,
    /// The operator's override: `auto`, `open` or `closed`.
    pub operator: Override,
    /// What the run was allowed to do: `drain`, `canary`, `watch` (half-open, canary out:
    /// looking for it, redriving nothing) or `hold` (open: nothing received).
    pub plan: &'static str,
    /// The most messages the circuit let the run redrive (`null`: no limit of its own).
    pub budget: Option<u32>,
    /// Redriven copies the run saw back on the DLQ within the window.
    pub bounced: u64,
    /// Transitions the run made (each is logged and kept in the record's history).
    pub transitions: u64,
    /// A drain that followed an [`Admission`]: what it did and saw, for the round's landing
    /// ([`super::Engine::land_round`]). Absent from the Lambda's response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<DrainCounts>,
}

/// One drain's share of a plan that the drains of a round share (see the module's docs).
/// The round's plan is read once; a canary or a ramp budget is split among the drains, so
/// that the round redrives at most the canary, or the budget, in all. A drain whose share is
/// 0 receives nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "kebab-case")]
pub enum Admission {
    /// Closed: drain, at most `budget` messages (this drain's share of the ramp) when set.
    Drain {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<u32>,
    },
    /// Half-open: this drain's share of the canary, its copies sent without their backoff.
    Canary { size: u32 },
    /// Half-open with the canary out: look for canary copies coming back, redrive nothing.
    Watch,
    /// Open: receive nothing.
    Hold,
}

impl Admission {
    /// The plan this drain follows.
    pub fn plan(self) -> Plan {
        match self {
            Self::Drain { budget } => Plan::Drain { budget },
            Self::Canary { size } => Plan::Canary { size },
            Self::Watch => Plan::Watch,
            Self::Hold => Plan::Hold,
        }
    }

    /// The round's `plan` split among drains that may take `caps[i]` messages each: a canary
    /// or a ramp budget spread evenly (never beyond a drain's cap, the rest to the others), so
    /// that the shares add up to at most the canary or the budget. Watch, hold and an
    /// unlimited drain are every drain's.
    pub fn split(plan: Plan, caps: &[u32]) -> Vec<Self> {
        let spread = |total: u32| {
            let mut got = vec![0u32; caps.len()];
            let mut left = total;
            loop {
                let open: Vec<usize> = (0..caps.len()).filter(|&i| got[i] < caps[i]).collect();
                if left == 0 || open.is_empty() {
                    return got;
                }
                let each = (left / open.len() as u32).max(1);
                for i in open {
                    let give = each.min(caps[i] - got[i]).min(left);
                    got[i] += give;
                    left -= give;
                }
            }
        };
        match plan {
            Plan::Drain { budget: None } => vec![Self::Drain { budget: None }; caps.len()],
            Plan::Drain { budget: Some(b) } => spread(b)
                .into_iter()
                .map(|n| Self::Drain { budget: Some(n) })
                .collect(),
            Plan::Canary { size } => spread(size)
                .into_iter()
                .map(|size| Self::Canary { size })
                .collect(),
            Plan::Watch => vec![Self::Watch; caps.len()],
            Plan::Hold => vec![Self::Hold; caps.len()],
        }
    }

    /// The round's plan from its drains' shares (`None`: no shares, no shared plan): a canary
    /// or a budget is the sum of the shares.
    pub fn round(shares: &[Self]) -> Option<Plan> {
        let first = shares.first()?;
        let sum = |f: fn(&Self) -> Option<u32>| {
            shares
                .iter()
                .map(f)
                .try_fold(0u32, |a, n| Some(a.saturating_add(n?)))
        };
        Some(match first {
            Self::Drain { .. } => Plan::Drain {
                budget: sum(|a| match a {
                    Self::Drain { budget } => *budget,
                    _ => None,
                }),
            },
            Self::Canary { .. } => Plan::Canary {
                size: sum(|a| match a {
                    Self::Canary { size } => Some(*size),
                    _ => Some(0),
                })
                .unwrap_or(0),
            },
            Self::Watch => Plan::Watch,
            Self::Hold => Plan::Hold,
        })
    }
}

/// What one drain that followed an [`Admission`] did and saw, for the round's landing
/// ([`super::Engine::land_round`]): counts, not messages (a drain's answer stays small).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainCounts {
    /// When the drain started, epoch ms: no later than any `lastRedrivenAt` its copies carry.
    pub started_at: i64,
    /// Copies it redrove (0 in a dry run).
    pub redriven: u64,
    /// The bounced copies it saw, by their `lastRedrivenAt`.
    #[serde(default)]
    pub bounced: Vec<Sample>,
    /// Those of them that may be copies of the canary out (redriven since it was sent), by
    /// chain, so that each is counted once against the canary.
    #[serde(default)]
    pub canary_copies: Vec<Bounce>,
}

impl CircuitSummary {
    pub(super) fn metrics(&self) -> CircuitMetrics {
        CircuitMetrics {
            open: self.state != State::Closed,
            transitions: self.transitions,
            bounced: self.bounced,
        }
    }
}

/// The circuit and the guard alarms before a run made of steps (see [`super::Engine::check_circuit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitCheck {
    /// The guard alarms that hold the circuit open (in ALARM, missing, or unreadable).
    pub guards: Vec<String>,
    /// The record's operator override (`auto`, `open`, `closed`), `unknown` when the record
    /// cannot be read; `None` when the adaptive circuit is off.
    pub operator: Option<&'static str>,
    /// The record holds the circuit open (an operator's `open`, or open and cooling down).
    pub held: bool,
}

impl CircuitCheck {
    /// Nothing may be received.
    pub fn open(&self) -> bool {
        !self.guards.is_empty() || self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(shares: &[Admission]) -> Vec<Option<u32>> {
        shares.iter().map(|a| a.plan().budget()).collect()
    }

    #[test]
    fn a_canary_or_a_budget_is_split_so_that_the_shares_add_up_to_it() {
        let canary = Admission::split(Plan::Canary { size: 10 }, &[25, 25, 25, 25]);
        assert_eq!(sizes(&canary), [Some(3), Some(3), Some(2), Some(2)]);
        assert_eq!(Admission::round(&canary), Some(Plan::Canary { size: 10 }));
        // A canary smaller than the drains: the others get nothing.
        let small = Admission::split(Plan::Canary { size: 2 }, &[10, 10, 10, 10]);
        assert_eq!(sizes(&small), [Some(1), Some(1), Some(0), Some(0)]);
        // A drain's cap is never exceeded; its part goes to the others.
        let ramp = Admission::split(Plan::Drain { budget: Some(12) }, &[1, 10, 10]);
        assert_eq!(sizes(&ramp), [Some(1), Some(6), Some(5)]);
        assert_eq!(
            Admission::round(&ramp),
            Some(Plan::Drain { budget: Some(12) })
        );
        // Nothing to split: every drain's.
        let open = Admission::split(Plan::Drain { budget: None }, &[5, 5]);
        assert_eq!(sizes(&open), [None, None]);
        assert_eq!(Admission::round(&open), Some(Plan::Drain { budget: None }));
        assert_eq!(
            Admission::split(Plan::Watch, &[5, 5]),
            [Admission::Watch, Admission::Watch]
        );
        assert_eq!(Admission::round(&[]), None);
    }

    #[test]
    fn an_admission_reads_as_its_plan() {
        let json = |a: Admission| serde_json::to_value(a).unwrap();
        assert_eq!(
            json(Admission::Canary { size: 3 }),
            serde_json::json!({"plan": "canary", "size": 3})
        );
        assert_eq!(
            json(Admission::Drain { budget: None }),
            serde_json::json!({"plan": "drain"})
        );
        let back: Admission =
            serde_json::from_value(serde_json::json!({"plan": "drain", "budget": 4})).unwrap();
        assert_eq!(back, Admission::Drain { budget: Some(4) });
    }
}
