//! Each received message decided: redriven to its route, isolated, or sent back to wait, by the
//! policy of its destination, stamped by the engine's clock, jittered by its random source.

use redrive_shared::attributes::message_size;
use redrive_shared::decision::{
    Decision, Policy, ReceivedMessage, decide_from, decide_unknown_source_from,
};
use redrive_shared::limits::MAX_ATTRIBUTES;
use redrive_shared::meta::{IsolationReason, MetaSource};

use super::Engine;
use super::destinations::Route;
use crate::circuit::CircuitStore;
use crate::lock;
use crate::ports::{Alarms, Metrics, Queue, Received};

/// A received batch's messages bound for one route, decided (`None`: source unknown).
pub(super) type Routed = (Option<Route>, Vec<(Received, Decision)>);

pub(super) fn view_of(m: &Received) -> ReceivedMessage<'_> {
    ReceivedMessage {
        message_id: &m.message_id,
        body: &m.body,
        attributes: &m.attributes,
        group_id: m.group_id.as_deref(),
    }
}

impl<Q: Queue, A: Alarms, M: Metrics, C: CircuitStore> Engine<Q, A, M, C> {
    /// The policy of messages going to `route`.
    pub(super) fn policy_for(&self, route: Option<&Route>) -> Policy {
        self.destinations.policy(&self.config, route)
    }

    /// Decides a received batch, by destination: one group for a DLQ with a configured
    /// source; for a protected DLQ, a group per source its messages named and a group
    /// (`None`) of those whose source is unknown, each isolated `unknown-source`.
    pub(super) fn decide_routed(&self, messages: Vec<Received>) -> Vec<Routed> {
        let grouped = self.destinations.group(&self.config, messages);
        let mut out: Vec<Routed> = grouped
            .known
            .into_iter()
            .map(|(route, members)| {
                let decided = self.decide_with(members, &self.policy_for(Some(&route)));
                (Some(route), decided)
            })
            .collect();
        if !grouped.unknown.is_empty() {
            let policy = self.policy_for(None);
            let now = (self.clock)();
            let decided = grouped
                .unknown
                .into_iter()
                .map(|m| {
                    // The DLQ it came from, and the source SQS stamped, which is no source of
                    // this DLQ's: recorded as claimed, never routed by.
                    let d = decide_unknown_source_from(
                        Some(self.config.dlq_url.as_str()),
                        m.dead_letter_source_arn.as_deref(),
                        &view_of(&m),
                        &policy,
                        now,
                    );
                    (m, d)
                })
                .collect();
            out.push((None, decided));
        }
        out
    }

    fn decide_with(&self, messages: Vec<Received>, policy: &Policy) -> Vec<(Received, Decision)> {
        let now = (self.clock)();
        let mut rng = lock(&self.rng);
        messages
            .into_iter()
            .map(|m| {
                let decision = decide_from(
                    Some(self.config.dlq_url.as_str()),
                    &view_of(&m),
                    policy,
                    now,
                    &mut *rng,
                );
                if let MetaSource::Garbled(why) = decision.read_from() {
                    tracing::warn!(message_id = %m.message_id, problem = %why, "garbled redrive metadata: restarting its history");
                }
                (m, decision)
            })
            .collect()
    }

    /// The isolation of a message whose copy the source keeps rejecting: `decide`'s own
    /// isolation (stamp, FIFO ids, the poison queue's size limit), with reason `send-rejected`.
    pub(super) fn isolate_send_rejected(
        &self,
        message: &ReceivedMessage<'_>,
        route: Option<&Route>,
    ) -> Decision {
        let policy = Policy {
            max_attempts: 0,
            ..self.policy_for(route)
        };
        let now = (self.clock)();
        let decision = decide_from(
            Some(self.config.dlq_url.as_str()),
            message,
            &policy,
            now,
            &mut *lock(&self.rng),
        );
        let Decision::Isolate(mut plan) = decision else {
            return decision;
        };
        plan.reason = IsolationReason::SendRejected;
        plan.meta.reason = Some(IsolationReason::SendRejected);
        if plan.stamped {
            let mut attributes = message.attributes.clone();
            plan.meta.write_into(&mut attributes);
            if attributes.len() <= MAX_ATTRIBUTES
                && message_size(message.body, &attributes) <= policy.poison_max_bytes
            {
                plan.attributes = attributes;
            } else {
                plan.stamped = false;
                plan.attributes = message.attributes.clone();
            }
        }
        Decision::Isolate(plan)
    }
}
