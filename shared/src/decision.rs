//! What to do with one message received from the DLQ: redrive it to the source queue with a
//! backoff delay, or isolate it in the poison queue with a reason.

use crate::attributes::{Attributes, message_size};
use crate::backoff::{Backoff, MAX_WAIT_SECONDS, RandomSource};
use crate::key::sha256_hex;
use crate::limits::{MAX_ATTRIBUTES, MAX_FIFO_ID_LEN};
use crate::meta::{IsolationReason, MetaSource, RedriveMeta};
use crate::timefmt::rfc3339_from_millis;

/// The re-driver's policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// A message whose next attempt would exceed this goes to the poison queue.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// The source queue is FIFO (`.fifo`): no per-message delay, group id kept, dedup id derived.
    pub source_fifo: bool,
    /// The poison queue is FIFO.
    pub poison_fifo: bool,
    /// The source queue's `MaximumMessageSize` (read at init): a redriven copy, stamp included,
    /// must fit, else the message is isolated `size-limit` instead of being rejected forever.
    pub source_max_bytes: usize,
    /// The poison queue's `MaximumMessageSize`: an isolation copy that does not fit with its
    /// stamp goes unstamped.
    pub poison_max_bytes: usize,
    /// The longest `DelaySeconds` a copy gets (at most SQS's 900). A longer backoff waits on
    /// the DLQ: [`Decision::Wait`].
    pub max_delay_seconds: u32,
    /// The longest hop of a wait on the DLQ: `max_delay_seconds`, or less where the DLQ's
    /// retention period is short (a hop must end before its copy could expire).
    pub max_hop_seconds: u32,
    /// The ARN of the message's source queue, for a protected DLQ whose messages go back each
    /// to its own source ([`crate::source`]): every decision records it in `x-redrive`
    /// ([`RedriveMeta::set_source`]), so a copy redrive moves keeps where it came from. `None`
    /// for a DLQ with one configured source.
    pub source_arn: Option<String>,
}

impl Policy {
    /// A policy between standard queues at SQS's limits: messages up to 1 MiB, copies delayed
    /// up to 900 s, one configured source.
    pub fn standard(max_attempts: u32, backoff: Backoff) -> Self {
        Self {
            max_attempts,
            backoff,
            source_fifo: false,
            poison_fifo: false,
            source_max_bytes: crate::limits::MAX_MESSAGE_BYTES,
            poison_max_bytes: crate::limits::MAX_MESSAGE_BYTES,
            max_delay_seconds: crate::limits::MAX_DELAY_SECONDS,
            max_hop_seconds: crate::limits::MAX_DELAY_SECONDS,
            source_arn: None,
        }
    }

    /// One hop of a wait: at least 1 s, at most the delay cap and the retention's cap.
    pub fn hop_seconds(&self) -> u32 {
        self.max_delay_seconds.min(self.max_hop_seconds).max(1)
    }
}

/// A view of a message as received from the DLQ. The body is only measured, never parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedMessage<'a> {
    pub message_id: &'a str,
    pub body: &'a str,
    pub attributes: &'a Attributes,
    /// `MessageGroupId` system attribute (FIFO queues).
    pub group_id: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Redrive(RedrivePlan),
    Isolate(IsolationPlan),
    /// Back to the DLQ with a delay: the backoff is longer than [`Policy::max_delay_seconds`],
    /// or the message is already waiting and its `notBefore` has not come.
    Wait(WaitPlan),
}

/// Send back to the DLQ with `delay_seconds`, `notBefore` in the metadata: one hop of a wait
/// longer than SQS's `DelaySeconds`. The message is in a queue at every instant (the copy is
/// acknowledged before the original is deleted), any drain can take it up, and each hop starts
/// a new retention period.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitPlan {
    /// The metadata written into `attributes`: the attempt the redrive will carry, and
    /// `notBefore`.
    pub meta: RedriveMeta,
    /// When the wait ends, epoch ms.
    pub not_before_ms: i64,
    /// This hop: the time left, at most [`Policy::max_delay_seconds`].
    pub delay_seconds: u32,
    /// The whole backoff drawn (on the first hop) or the time left (on a later one), seconds.
    pub wait_seconds: u32,
    pub attributes: Attributes,
    pub read_from: MetaSource,
    /// A later hop of a wait begun earlier (the message came waiting, `notBefore` in its
    /// `x-redrive`), not the start of one: no attempt decided, nothing new to record.
    pub continued: bool,
}

/// Send to the source queue.
#[derive(Debug, Clone, PartialEq)]
pub struct RedrivePlan {
    /// The metadata written into `attributes` (attempt already incremented).
    pub meta: RedriveMeta,
    /// `None` for a FIFO source, which takes no per-message delay.
    pub delay_seconds: Option<u32>,
    /// Every attribute of the received message, with `x-redrive` updated.
    pub attributes: Attributes,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    /// How the incoming metadata was read (for logs: garbled or legacy values are repaired).
    pub read_from: MetaSource,
}

/// Send to the poison queue.
#[derive(Debug, Clone, PartialEq)]
pub struct IsolationPlan {
    pub reason: IsolationReason,
    /// The metadata of the message (stamped with `isolatedAt` and `reason` when `stamped`).
    pub meta: RedriveMeta,
    /// False when the stamp does not fit (attribute or size limit): the copy then carries the
    /// received attributes unchanged and the reason is only in logs and metrics.
    pub stamped: bool,
    pub attributes: Attributes,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    pub read_from: MetaSource,
}

impl Decision {
    pub fn attributes(&self) -> &Attributes {
        match self {
            Self::Redrive(p) => &p.attributes,
            Self::Isolate(p) => &p.attributes,
            Self::Wait(p) => &p.attributes,
        }
    }

    pub fn meta(&self) -> &RedriveMeta {
        match self {
            Self::Redrive(p) => &p.meta,
            Self::Isolate(p) => &p.meta,
            Self::Wait(p) => &p.meta,
        }
    }

    pub fn group_id(&self) -> Option<&str> {
        match self {
            Self::Redrive(p) => p.group_id.as_deref(),
            Self::Isolate(p) => p.group_id.as_deref(),
            Self::Wait(_) => None,
        }
    }

    pub fn dedup_id(&self) -> Option<&str> {
        match self {
            Self::Redrive(p) => p.dedup_id.as_deref(),
            Self::Isolate(p) => p.dedup_id.as_deref(),
            Self::Wait(_) => None,
        }
    }

    pub fn delay_seconds(&self) -> Option<u32> {
        match self {
            Self::Redrive(p) => p.delay_seconds,
            Self::Isolate(_) => None,
            Self::Wait(p) => Some(p.delay_seconds),
        }
    }

    pub fn read_from(&self) -> &MetaSource {
        match self {
            Self::Redrive(p) => &p.read_from,
            Self::Isolate(p) => &p.read_from,
            Self::Wait(p) => &p.read_from,
        }
    }

    pub fn is_redrive(&self) -> bool {
        matches!(self, Self::Redrive(_))
    }

    pub fn is_wait(&self) -> bool {
        matches!(self, Self::Wait(_))
    }

    /// `redrive`, `isolate:<reason>` or `wait`, for logs.
    pub fn action(&self) -> String {
        match self {
            Self::Redrive(_) => "redrive".to_string(),
            Self::Isolate(p) => format!("isolate:{}", p.reason),
            Self::Wait(_) => "wait".to_string(),
        }
    }

    /// The same move without its delay (a canary goes out at once): a wait becomes the
    /// redrive it was waiting for, stamped at `now_ms`, unless the copy no longer fits.
    pub fn at_once(self, now_ms: i64) -> Self {
        match self {
            Self::Redrive(mut p) => {
                if p.delay_seconds.is_some() {
                    p.delay_seconds = Some(0);
                }
                Self::Redrive(p)
            }
            Self::Wait(p) => {
                let now = rfc3339_from_millis(now_ms);
                let mut meta = p.meta;
                meta.set_not_before(None);
                meta.first_redriven_at = meta.first_redriven_at.or_else(|| Some(now.clone()));
                meta.last_redriven_at = Some(now);
                let mut attributes = p.attributes;
                meta.write_into(&mut attributes);
                Self::Redrive(RedrivePlan {
                    meta,
                    delay_seconds: Some(0),
                    attributes,
                    group_id: None,
                    dedup_id: None,
                    read_from: p.read_from,
                })
            }
            other => other,
        }
    }
}

/// Decides one message. `now_ms` is the Unix time in milliseconds stamped into the metadata.
/// The same as [`decide_from`] without naming the DLQ.
pub fn decide(
    message: &ReceivedMessage<'_>,
    policy: &Policy,
    now_ms: i64,
    rng: &mut impl RandomSource,
) -> Decision {
    decide_from(None, message, policy, now_ms, rng)
}

/// Decides one message received from the DLQ `dlq` (its URL): an isolation records it in
/// `x-redrive` ([`RedriveMeta::set_dlq`]), so that a message in a poison queue shared by
/// several DLQs says which one it came from.
pub fn decide_from(
    dlq: Option<&str>,
    message: &ReceivedMessage<'_>,
    policy: &Policy,
    now_ms: i64,
    rng: &mut impl RandomSource,
) -> Decision {
    let (mut meta, read_from) = RedriveMeta::read(message.attributes, message.message_id);
    if let Some(arn) = &policy.source_arn {
        meta.set_source(arn);
    }
    let now = rfc3339_from_millis(now_ms);

    // A message waiting on the DLQ: its attempt was decided and counted when its wait began.
    // A FIFO source takes no delays, so a wait there (written by hand) is over at once.
    if let Some(mut not_before) = meta.not_before_ms() {
        // A wait is never longer than the longest backoff any setting allows (12 h), counted
        // from now: a stamp further out (written by hand, or corrupt) is brought back to that
        // bound and written so, or the message would hop on the DLQ for as long as it says.
        // Not this front end's own cap: the Lambda must not cut short a wait the Step
        // Functions orchestrator drew.
        let longest = policy.backoff.max().max(MAX_WAIT_SECONDS);
        let latest = now_ms.saturating_add(i64::from(longest) * 1000);
        let bounded = not_before > latest;
        if bounded {
            meta.set_not_before(Some(latest));
            not_before = meta.not_before_ms().unwrap_or(latest);
        }
        let left_ms = not_before - now_ms;
        if left_ms > 0 && !policy.source_fifo {
            let left = u32::try_from((left_ms + 999) / 1000).unwrap_or(u32::MAX);
            return Decision::Wait(WaitPlan {
                not_before_ms: not_before,
                delay_seconds: left.min(policy.hop_seconds()),
                wait_seconds: left,
                attributes: if policy.source_arn.is_some() || bounded {
                    let mut attributes = message.attributes.clone();
                    meta.write_into(&mut attributes);
                    attributes
                } else {
                    message.attributes.clone()
                },
                meta,
                read_from,
                continued: true,
            });
        }
        let mut due = meta.clone();
        due.set_not_before(None);
        due.first_redriven_at = due.first_redriven_at.or_else(|| Some(now.clone()));
        due.last_redriven_at = Some(now.clone());
        let mut attributes = message.attributes.clone();
        due.write_into(&mut attributes);
        return Decision::Redrive(RedrivePlan {
            delay_seconds: (!policy.source_fifo).then_some(0),
            group_id: policy.source_fifo.then(|| {
                message
                    .group_id
                    .unwrap_or(&meta.original_message_id)
                    .to_string()
            }),
            dedup_id: policy
                .source_fifo
                .then(|| dedup_id(message.message_id, "r")),
            meta: due,
            attributes,
            read_from,
        });
    }

    let intended = if meta.is_permanent_failure() {
        Err(IsolationReason::PermanentFailure)
    } else if meta.attempt >= policy.max_attempts {
        Err(IsolationReason::MaxAttempts)
    } else {
        Ok(meta.attempt + 1)
    };

    let group_for = |fifo: bool| {
        fifo.then(|| {
            message
                .group_id
                .unwrap_or(&meta.original_message_id)
                .to_string()
        })
    };

    let isolate = |reason: IsolationReason| {
        isolation(message, policy, &meta, read_from.clone(), reason, &now, dlq)
    };

    let attempt = match intended {
        Ok(attempt) => attempt,
        Err(reason) => return isolate(reason),
    };
    let mut redriven = RedriveMeta {
        attempt,
        first_redriven_at: meta.first_redriven_at.clone().or_else(|| Some(now.clone())),
        last_redriven_at: Some(now.clone()),
        ..meta.clone()
    };
    // A message replayed from the poison queue carries its old isolation: a copy sent on to be
    // processed again must not look parked.
    redriven.clear_isolation();
    let mut attributes = message.attributes.clone();
    redriven.write_into(&mut attributes);
    if attributes.len() > MAX_ATTRIBUTES {
        return isolate(IsolationReason::AttributeLimit);
    }
    if message_size(message.body, &attributes) > policy.source_max_bytes {
        return isolate(IsolationReason::SizeLimit);
    }
    let delay = (!policy.source_fifo).then(|| policy.backoff.delay_seconds(attempt, None, rng));
    if let Some(backoff) = delay
        && backoff > policy.max_delay_seconds
    {
        // Longer than a copy's delay may be: the message waits on the DLQ, its attempt and
        // its not-before time in `x-redrive`, its redrive times still those of its last
        // redrive (a hop is not a redrive).
        let not_before = now_ms + i64::from(backoff) * 1000;
        let mut waiting = RedriveMeta {
            attempt,
            ..meta.clone()
        };
        waiting.clear_isolation();
        waiting.set_not_before(Some(not_before));
        // As written: rounded up to the second.
        let not_before = waiting.not_before_ms().unwrap_or(not_before);
        let mut attributes = message.attributes.clone();
        waiting.write_into(&mut attributes);
        if message_size(message.body, &attributes) > policy.source_max_bytes {
            return isolate(IsolationReason::SizeLimit);
        }
        return Decision::Wait(WaitPlan {
            meta: waiting,
            not_before_ms: not_before,
            delay_seconds: backoff.min(policy.hop_seconds()),
            wait_seconds: backoff,
            attributes,
            read_from,
            continued: false,
        });
    }
    Decision::Redrive(RedrivePlan {
        delay_seconds: delay,
        group_id: group_for(policy.source_fifo),
        dedup_id: policy
            .source_fifo
            .then(|| dedup_id(message.message_id, "r")),
        meta: redriven,
        attributes,
        read_from,
    })
}

/// A protected DLQ's message whose source is not known ([`crate::source`]): isolated
/// `unknown-source`, its history kept, never sent to a guessed queue. The same as
/// [`decide_unknown_source_from`] without naming the DLQ or the claimed source.
pub fn decide_unknown_source(
    message: &ReceivedMessage<'_>,
    policy: &Policy,
    now_ms: i64,
) -> Decision {
    decide_unknown_source_from(None, None, message, policy, now_ms)
}

/// [`decide_unknown_source`] of a message received from `dlq` (its URL), which SQS stamped
/// with `claimed_source` (its `DeadLetterQueueSourceArn`, when it has one). The isolation
/// records the DLQ, and keeps the claimed source (else a `source` an earlier move recorded)
/// as `claimedSource`, never as `source`: a clue for people that nothing routes by.
pub fn decide_unknown_source_from(
    dlq: Option<&str>,
    claimed_source: Option<&str>,
    message: &ReceivedMessage<'_>,
    policy: &Policy,
    now_ms: i64,
) -> Decision {
    let (mut meta, read_from) = RedriveMeta::read(message.attributes, message.message_id);
    meta.demote_source(claimed_source);
    isolation(
        message,
        policy,
        &meta,
        read_from,
        IsolationReason::UnknownSource,
        &rfc3339_from_millis(now_ms),
        dlq,
    )
}

/// The move of `message` to the poison queue for `reason`, stamped with its isolation when
/// the stamp fits.
fn isolation(
    message: &ReceivedMessage<'_>,
    policy: &Policy,
    meta: &RedriveMeta,
    read_from: MetaSource,
    reason: IsolationReason,
    now: &str,
    dlq: Option<&str>,
) -> Decision {
    let mut isolated = RedriveMeta {
        isolated_at: Some(now.to_string()),
        reason: Some(reason.clone()),
        ..meta.clone()
    };
    if let Some(dlq) = dlq.filter(|d| !d.is_empty()) {
        isolated.set_dlq(dlq);
    }
    // A FIFO DLQ's message parked in a standard poison queue loses its MessageGroupId: the
    // stamp keeps it, for a replay to a FIFO queue.
    if let Some(group) = message.group_id.filter(|g| !g.is_empty()) {
        isolated.set_group_id(group);
    }
    let mut attributes = message.attributes.clone();
    isolated.write_into(&mut attributes);
    let stamped = attributes.len() <= MAX_ATTRIBUTES
        && message_size(message.body, &attributes) <= policy.poison_max_bytes;
    if !stamped {
        // The stamp does not fit: park the message exactly as received rather than lose
        // it; the reason is then only in logs and metrics. Even unstamped it may be too
        // large for the poison queue: the engine finds that out when the queue rejects it.
        attributes = message.attributes.clone();
    }
    Decision::Isolate(IsolationPlan {
        reason,
        dedup_id: policy
            .poison_fifo
            .then(|| dedup_id(message.message_id, "p")),
        group_id: policy.poison_fifo.then(|| {
            message
                .group_id
                .unwrap_or(&meta.original_message_id)
                .to_string()
        }),
        meta: isolated,
        stamped,
        attributes,
        read_from,
    })
}

/// FIFO `MessageDeduplicationId` of a move of one received message: `kind` (`r` to the source,
/// `p` to the poison queue) and the MessageId of the copy being moved. A retry of the same
/// received message (a crash between send and delete) is deduplicated by SQS; every later move
/// is a new message, even of a chain that `redrive replay` restarted at attempt 0 with the same
/// `originalMessageId` and the same attempt numbers.
///
/// Total: SQS MessageIds are UUIDs and are used as they are; an id that is not 1 to 128
/// characters of ASCII letters, digits and punctuation with its prefix is replaced by the hex
/// SHA-256 of its text, so the result is always a valid deduplication id.
pub fn dedup_id(moved_message_id: &str, kind: &str) -> String {
    let plain = format!("{kind}-{moved_message_id}");
    let valid = !moved_message_id.is_empty()
        && plain.len() <= MAX_FIFO_ID_LEN
        && plain.bytes().all(|b| b.is_ascii_graphic());
    if valid {
        plain
    } else {
        // "h" marks a digested id, so that it never equals a plain one.
        format!("{kind}h{}", sha256_hex(moved_message_id.as_bytes(), 32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::MessageAttribute;
    use crate::backoff::{Fixed, Jitter};
    use crate::limits::{MAX_MESSAGE_BYTES, Outgoing};
    use crate::meta::{ATTRIBUTE_NAME, ErrorClass, LEGACY_ATTEMPT_ATTRIBUTE, LastError};

    const NOW: i64 = 1_795_255_200_000; // 2026-11-21T10:00:00Z
    const ORIG: &str = "5fea7756-0ea4-451a-a703-a558b933e274";

    fn policy() -> Policy {
        Policy::standard(3, Backoff::new(60.0, 2.0, 900, Jitter::None).unwrap())
    }

    /// An owned message for tests; `view` lends it to `decide`.
    struct Msg {
        body: String,
        attributes: Attributes,
        group_id: Option<String>,
    }

    impl Msg {
        fn view(&self) -> ReceivedMessage<'_> {
            ReceivedMessage {
                message_id: "m-now",
                body: &self.body,
                attributes: &self.attributes,
                group_id: self.group_id.as_deref(),
            }
        }
    }

    fn message(attrs: Attributes) -> Msg {
        Msg {
            body: "not json ✓".into(),
            attributes: attrs,
            group_id: None,
        }
    }

    fn with_meta(meta: &RedriveMeta) -> Attributes {
        let mut a = Attributes::new();
        meta.write_into(&mut a);
        a
    }

    /// When the message was first and last redriven.
    fn redriven_at(meta: &RedriveMeta) -> (Option<&str>, Option<&str>) {
        (
            meta.first_redriven_at.as_deref(),
            meta.last_redriven_at.as_deref(),
        )
    }

    /// The metadata of a message whose last delivery failed with this class and code.
    fn failed_before(class: ErrorClass, code: &str) -> RedriveMeta {
        RedriveMeta {
            last_error: Some(LastError::new(class, code, "failed", "t".into())),
            ..RedriveMeta::fresh(ORIG)
        }
    }

    fn run(m: &Msg, p: &Policy) -> Decision {
        decide(&m.view(), p, NOW, &mut Fixed(0.5))
    }

    /// A policy whose backoff (12 h at most) can outgrow a copy's delay of `max_delay` s.
    fn long_policy(max_delay: u32) -> Policy {
        Policy {
            backoff: Backoff::new_long(7200.0, 2.0, 43_200, Jitter::None).unwrap(),
            max_delay_seconds: max_delay,
            max_hop_seconds: max_delay,
            ..policy()
        }
    }

    const ORDERS_ARN: &str = "arn:aws:sqs:eu-west-1:111122223333:orders";

    /// What a decision's copy carries in its `x-redrive`.
    fn carried(d: &Decision) -> RedriveMeta {
        RedriveMeta::read(d.attributes(), "m-now").0
    }

    #[test]
    fn every_move_of_a_protected_dlqs_message_records_its_source() {
        let p = Policy {
            source_arn: Some(ORDERS_ARN.into()),
            ..policy()
        };
        let fresh = message(Attributes::new());
        let redrive = run(&fresh, &p);
        assert!(redrive.is_redrive());
        assert_eq!(carried(&redrive).source(), Some(ORDERS_ARN));
        let spent = RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        };
        let isolate = run(&message(with_meta(&spent)), &p);
        assert!(
            matches!(&isolate, Decision::Isolate(i) if i.reason == IsolationReason::MaxAttempts)
        );
        assert_eq!(carried(&isolate).source(), Some(ORDERS_ARN));
        let long = Policy {
            source_arn: Some(ORDERS_ARN.into()),
            ..long_policy(900)
        };
        let prior = RedriveMeta {
            attempt: 1,
            ..RedriveMeta::fresh(ORIG)
        };
        let wait = run(&message(with_meta(&prior)), &long);
        assert!(wait.is_wait());
        assert_eq!(carried(&wait).source(), Some(ORDERS_ARN));
        // A hop received again before its time keeps going back with its source.
        let waiting = Msg {
            attributes: wait.attributes().clone(),
            ..message(Attributes::new())
        };
        let again = run(&waiting, &long);
        assert!(again.is_wait());
        assert_eq!(carried(&again).source(), Some(ORDERS_ARN));
        // A DLQ with one configured source records none.
        assert_eq!(carried(&run(&fresh, &policy())).source(), None);
    }

    #[test]
    fn a_message_with_no_known_source_is_isolated_with_its_history() {
        let prior = RedriveMeta {
            attempt: 2,
            ..RedriveMeta::fresh(ORIG)
        };
        let m = message(with_meta(&prior));
        let d = decide_unknown_source(&m.view(), &policy(), NOW);
        let Decision::Isolate(plan) = &d else {
            panic!("isolated, never sent to a guessed queue")
        };
        assert_eq!(plan.reason, IsolationReason::UnknownSource);
        assert!(plan.stamped);
        let meta = carried(&d);
        assert_eq!(meta.attempt, 2, "the history is kept");
        assert_eq!(meta.reason, Some(IsolationReason::UnknownSource));
        assert_eq!(meta.original_message_id, ORIG);
    }

    const DLQ_URL: &str = "https://sqs.eu-west-1.amazonaws.com/111122223333/orders-dlq";

    #[test]
    fn every_isolation_records_the_dlq_it_was_received_from() {
        let spent = message(with_meta(&RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        }));
        let d = decide_from(
            Some(DLQ_URL),
            &spent.view(),
            &policy(),
            NOW,
            &mut Fixed(0.5),
        );
        assert!(matches!(&d, Decision::Isolate(i) if i.stamped));
        assert_eq!(carried(&d).dlq(), Some(DLQ_URL));
        assert_eq!(d.meta().dlq(), Some(DLQ_URL));
        let d = decide_unknown_source_from(
            Some(DLQ_URL),
            None,
            &message(Attributes::new()).view(),
            &policy(),
            NOW,
        );
        assert_eq!(carried(&d).dlq(), Some(DLQ_URL));
        // A redrive and a wait do not: the message is not parked.
        let fresh = message(Attributes::new());
        let d = decide_from(
            Some(DLQ_URL),
            &fresh.view(),
            &policy(),
            NOW,
            &mut Fixed(0.5),
        );
        assert!(d.is_redrive());
        assert_eq!(carried(&d).dlq(), None);
        // A replayed message's old isolation marks, its DLQ among them, are dropped on redrive.
        let mut replayed = RedriveMeta::fresh(ORIG);
        replayed.set_dlq(DLQ_URL);
        let d = run(&message(with_meta(&replayed)), &policy());
        assert!(d.is_redrive());
        assert_eq!(carried(&d).dlq(), None);
    }

    #[test]
    fn an_unknown_source_isolation_keeps_the_claimed_source_as_a_clue_not_a_route() {
        let other = "arn:aws:sqs:eu-west-1:111122223333:payments";
        // SQS stamped a queue that is not (or no longer) a source of the DLQ.
        let m = message(Attributes::new());
        let d = decide_unknown_source_from(Some(DLQ_URL), Some(other), &m.view(), &policy(), NOW);
        let meta = carried(&d);
        assert_eq!(meta.reason, Some(IsolationReason::UnknownSource));
        assert_eq!(meta.claimed_source(), Some(other));
        assert_eq!(meta.source(), None, "nothing may route by it");
        // A stale `source` an earlier move recorded is demoted the same way; SQS's stamp wins.
        let mut moved = RedriveMeta::fresh(ORIG);
        moved.set_source(ORDERS_ARN);
        let m = message(with_meta(&moved));
        let d = decide_unknown_source_from(Some(DLQ_URL), None, &m.view(), &policy(), NOW);
        let meta = carried(&d);
        assert_eq!(
            (meta.source(), meta.claimed_source()),
            (None, Some(ORDERS_ARN))
        );
        let d = decide_unknown_source_from(Some(DLQ_URL), Some(other), &m.view(), &policy(), NOW);
        assert_eq!(carried(&d).claimed_source(), Some(other));
        // Nothing claimed: no clue invented.
        let d = decide_unknown_source_from(
            Some(DLQ_URL),
            Some(""),
            &message(Attributes::new()).view(),
            &policy(),
            NOW,
        );
        assert_eq!(carried(&d).claimed_source(), None);
    }

    #[test]
    fn a_not_before_beyond_the_longest_backoff_is_bounded_from_now() {
        // A stamp 30 days out, written by hand: the settings allow 12 h at most.
        let p = long_policy(900);
        let mut far = RedriveMeta {
            attempt: 2,
            ..RedriveMeta::fresh(ORIG)
        };
        far.set_not_before(Some(NOW + 30 * 86_400_000));
        let Decision::Wait(plan) = run(&message(with_meta(&far)), &p) else {
            panic!("still waiting, but not for 30 days")
        };
        let latest = NOW + 43_200_000;
        assert_eq!(plan.not_before_ms, latest);
        assert_eq!(plan.wait_seconds, 43_200);
        assert_eq!(plan.delay_seconds, 900);
        assert_eq!(
            carried(&Decision::Wait(plan.clone())).not_before_ms(),
            Some(latest),
            "written so"
        );
        // The bound holds across hops: received when it is due, it is redriven as attempt 2.
        let hop = Msg {
            attributes: plan.attributes.clone(),
            ..message(Attributes::new())
        };
        let d = decide(&hop.view(), &p, latest, &mut Fixed(0.5));
        assert!(d.is_redrive(), "{}", d.action());
        assert_eq!(d.meta().attempt, 2);
        // The re-driver's own settings (900 s at most) bound it the same: a wait another front
        // end drew is not cut short.
        let d = run(&message(with_meta(&far)), &policy());
        assert_eq!(d.meta().not_before_ms(), Some(latest));
        // A stamp within the bound is left as written.
        let mut near = far.clone();
        near.set_not_before(Some(NOW + 600_000));
        let d = run(&message(with_meta(&near)), &p);
        assert_eq!(d.meta().not_before_ms(), Some(NOW + 600_000));
    }

    #[test]
    fn a_backoff_longer_than_a_delay_waits_on_the_dlq_with_its_attempt_and_not_before() {
        let prior = RedriveMeta {
            attempt: 1,
            last_redriven_at: Some("2026-11-21T09:00:00Z".into()),
            ..RedriveMeta::fresh(ORIG)
        };
        let Decision::Wait(plan) = run(&message(with_meta(&prior)), &long_policy(900)) else {
            panic!("a 4 h backoff must wait on the DLQ")
        };
        assert_eq!(
            plan.meta.attempt, 2,
            "the attempt is decided when the wait begins"
        );
        assert_eq!(plan.wait_seconds, 14_400);
        assert_eq!(plan.delay_seconds, 900, "one hop is at most a copy's delay");
        assert_eq!(plan.not_before_ms, NOW + 14_400_000);
        assert_eq!(plan.meta.not_before_ms(), Some(NOW + 14_400_000));
        assert_eq!(
            redriven_at(&plan.meta),
            (None, Some("2026-11-21T09:00:00Z")),
            "a hop is not a redrive"
        );
        assert_eq!(plan.attributes[ATTRIBUTE_NAME], plan.meta.to_attribute());
        // A DLQ whose retention is short shortens the hops, not the delays of copies that fit.
        let short_retention = Policy {
            max_hop_seconds: 30,
            ..long_policy(900)
        };
        let Decision::Wait(hop) = run(&message(with_meta(&prior)), &short_retention) else {
            panic!("still a wait")
        };
        assert_eq!(hop.delay_seconds, 30);
        // The same backoff within the delay cap is an ordinary delayed redrive.
        assert!(run(&message(with_meta(&prior)), &long_policy(900).clone()).is_wait());
        let short = Policy {
            max_delay_seconds: 900,
            max_hop_seconds: 900,
            ..policy()
        };
        assert!(run(&message(with_meta(&prior)), &short).is_redrive());
    }

    #[test]
    fn a_waiting_message_hops_again_until_its_not_before_then_goes_at_once() {
        let mut waiting = RedriveMeta {
            attempt: 2,
            first_redriven_at: Some("2026-11-21T08:00:00Z".into()),
            last_redriven_at: Some("2026-11-21T09:00:00Z".into()),
            ..RedriveMeta::fresh(ORIG)
        };
        waiting.set_not_before(Some(NOW + 1_000_500));
        let m = message(with_meta(&waiting));
        let Decision::Wait(hop) = run(&m, &long_policy(900)) else {
            panic!("not yet due: it must wait again")
        };
        assert_eq!(hop.meta, waiting, "a hop changes nothing in the history");
        assert_eq!(
            hop.not_before_ms,
            NOW + 1_001_000,
            "rounded up, never early"
        );
        assert_eq!(hop.delay_seconds, 900);
        assert_eq!(hop.wait_seconds, 1001);
        let Decision::Wait(last) = run(&m, &long_policy(2000)) else {
            panic!("not yet due")
        };
        assert_eq!(last.delay_seconds, 1001, "the last hop is the time left");

        let due = decide(
            &m.view(),
            &long_policy(900),
            NOW + 1_001_000,
            &mut Fixed(0.5),
        );
        let Decision::Redrive(plan) = due else {
            panic!("due: it must be redriven")
        };
        assert_eq!(
            plan.meta.attempt, 2,
            "the attempt was counted when the wait began"
        );
        assert_eq!(plan.delay_seconds, Some(0));
        assert_eq!(plan.meta.not_before_ms(), None);
        assert!(!plan.meta.extra.contains_key(crate::meta::NOT_BEFORE_FIELD));
        assert_eq!(
            plan.meta.first_redriven_at.as_deref(),
            Some("2026-11-21T08:00:00Z")
        );
        assert_ne!(
            plan.meta.last_redriven_at.as_deref(),
            Some("2026-11-21T09:00:00Z")
        );
        assert_eq!(plan.meta.original_message_id, ORIG);
    }

    #[test]
    fn a_canary_takes_a_waiting_message_at_once_as_a_redrive() {
        let m = message(Attributes::new());
        let wait = run(&m, &long_policy(900));
        assert!(wait.is_wait());
        let Decision::Redrive(plan) = wait.at_once(NOW) else {
            panic!("at once")
        };
        assert_eq!(plan.delay_seconds, Some(0));
        assert_eq!(plan.meta.attempt, 1);
        assert_eq!(plan.meta.not_before_ms(), None);
        assert_eq!(plan.attributes[ATTRIBUTE_NAME], plan.meta.to_attribute());
    }

    #[test]
    fn a_waiting_message_is_not_a_bounce() {
        use crate::circuit::{CircuitSettings, bounce_of};
        let mut meta = RedriveMeta {
            attempt: 2,
            last_redriven_at: Some("2026-11-21T10:00:00Z".into()),
            ..RedriveMeta::fresh(ORIG)
        };
        let settings = CircuitSettings::default();
        assert!(bounce_of(&meta, NOW + 1000, &settings).is_some());
        meta.set_not_before(Some(NOW + 60_000));
        assert!(bounce_of(&meta, NOW + 1000, &settings).is_none());
    }

    #[test]
    fn first_redrive_starts_the_history() {
        let mut attrs = Attributes::new();
        attrs.insert("tenant".into(), MessageAttribute::string("acme"));
        let Decision::Redrive(plan) = run(&message(attrs), &policy()) else {
            panic!("not redriven")
        };
        assert_eq!(plan.meta.attempt, 1);
        assert_eq!(plan.meta.original_message_id, "m-now");
        assert_eq!(
            redriven_at(&plan.meta),
            (Some("2026-11-21T10:00:00Z"), Some("2026-11-21T10:00:00Z"))
        );
        assert_eq!(plan.delay_seconds, Some(60));
        assert_eq!(plan.read_from, MetaSource::Absent);
        assert_eq!(plan.attributes["tenant"], MessageAttribute::string("acme"));
        assert_eq!(plan.attributes[ATTRIBUTE_NAME], plan.meta.to_attribute());
        assert_eq!(plan.attributes.len(), 2);
    }

    #[test]
    fn later_redrives_keep_the_original_id_and_first_time() {
        let prior = RedriveMeta {
            attempt: 2,
            first_redriven_at: Some("2026-11-20T00:00:00Z".into()),
            last_redriven_at: Some("2026-11-20T01:00:00Z".into()),
            ..RedriveMeta::fresh(ORIG)
        };
        let Decision::Redrive(plan) = run(&message(with_meta(&prior)), &policy()) else {
            panic!()
        };
        assert_eq!(plan.meta.attempt, 3);
        assert_eq!(plan.meta.original_message_id, ORIG);
        assert_eq!(
            redriven_at(&plan.meta),
            (Some("2026-11-20T00:00:00Z"), Some("2026-11-21T10:00:00Z"))
        );
        assert_eq!(plan.delay_seconds, Some(240), "60 * 2^(3-1)");
    }

    #[test]
    fn attempt_at_max_is_isolated_with_stamp() {
        let prior = RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        };
        let Decision::Isolate(plan) = run(&message(with_meta(&prior)), &policy()) else {
            panic!()
        };
        assert_eq!(plan.reason, IsolationReason::MaxAttempts);
        assert!(plan.stamped);
        assert_eq!(plan.meta.attempt, 3);
        assert_eq!(
            plan.meta.isolated_at.as_deref(),
            Some("2026-11-21T10:00:00Z")
        );
        assert_eq!(plan.meta.reason, Some(IsolationReason::MaxAttempts));
        let (written, _) = RedriveMeta::read(&plan.attributes, "x");
        assert_eq!(written, plan.meta);
        // One below max is still redriven.
        let prior = RedriveMeta {
            attempt: 2,
            ..RedriveMeta::fresh(ORIG)
        };
        assert!(run(&message(with_meta(&prior)), &policy()).is_redrive());
    }

    #[test]
    fn permanent_failure_is_isolated_at_once() {
        let prior = failed_before(ErrorClass::Permanent, "HTTP_400");
        let Decision::Isolate(plan) = run(&message(with_meta(&prior)), &policy()) else {
            panic!()
        };
        assert_eq!(plan.reason, IsolationReason::PermanentFailure);
        assert!(
            plan.meta.last_error.is_some(),
            "the consumer's stamp is kept"
        );
        // A transient lastError does not isolate.
        let prior = failed_before(ErrorClass::Transient, "HTTP_503");
        assert!(run(&message(with_meta(&prior)), &policy()).is_redrive());
    }

    #[test]
    fn ten_attributes_without_metadata_are_isolated_unchanged() {
        let mut attrs = Attributes::new();
        for i in 0..10 {
            attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        let Decision::Isolate(plan) = run(&message(attrs.clone()), &policy()) else {
            panic!()
        };
        assert_eq!(plan.reason, IsolationReason::AttributeLimit);
        assert!(!plan.stamped);
        assert_eq!(plan.attributes, attrs);
        // Nine attributes leave room for x-redrive.
        attrs.remove("a9");
        let Decision::Redrive(plan) = run(&message(attrs), &policy()) else {
            panic!()
        };
        assert_eq!(plan.attributes.len(), 10);
    }

    #[test]
    fn ten_attributes_including_metadata_are_redriven() {
        let mut attrs = with_meta(&RedriveMeta {
            attempt: 1,
            ..RedriveMeta::fresh(ORIG)
        });
        for i in 0..9 {
            attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        let Decision::Redrive(plan) = run(&message(attrs), &policy()) else {
            panic!()
        };
        assert_eq!(plan.attributes.len(), 10);
    }

    #[test]
    fn legacy_attribute_is_migrated_in_its_own_slot() {
        let mut attrs = Attributes::new();
        attrs.insert(
            LEGACY_ATTEMPT_ATTRIBUTE.into(),
            MessageAttribute::number("2"),
        );
        for i in 0..9 {
            attrs.insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        let Decision::Redrive(plan) = run(&message(attrs), &policy()) else {
            panic!()
        };
        assert_eq!(plan.meta.attempt, 3);
        assert_eq!(plan.read_from, MetaSource::Legacy);
        assert!(!plan.attributes.contains_key(LEGACY_ATTEMPT_ATTRIBUTE));
        assert_eq!(plan.attributes.len(), 10);
    }

    #[test]
    fn garbled_metadata_restarts_the_chain_on_the_current_id() {
        let mut attrs = Attributes::new();
        attrs.insert(ATTRIBUTE_NAME.into(), MessageAttribute::string("{oops"));
        let Decision::Redrive(plan) = run(&message(attrs), &policy()) else {
            panic!()
        };
        assert_eq!(
            (plan.meta.attempt, plan.meta.original_message_id.as_str()),
            (1, "m-now")
        );
        assert!(matches!(plan.read_from, MetaSource::Garbled(_)));
    }

    #[test]
    fn too_large_to_carry_the_stamp_is_isolated_by_size() {
        let mut m = message(Attributes::new());
        m.body = "x".repeat(MAX_MESSAGE_BYTES - 20);
        let Decision::Isolate(plan) = run(&m, &policy()) else {
            panic!()
        };
        assert_eq!(plan.reason, IsolationReason::SizeLimit);
        assert!(!plan.stamped);
        assert!(plan.attributes.is_empty());
        // A body that leaves room for the stamp is redriven, and the result fits.
        m.body = "x".repeat(MAX_MESSAGE_BYTES - 300);
        let d = run(&m, &policy());
        assert!(d.is_redrive());
        let out = Outgoing {
            body: m.body.clone(),
            attributes: d.attributes().clone(),
            delay_seconds: d.delay_seconds(),
            group_id: None,
            dedup_id: None,
            trace_header: None,
        };
        assert_eq!(out.validate(false), Ok(()));
    }

    #[test]
    fn fifo_keeps_group_derives_dedup_and_drops_delay() {
        let p = Policy {
            source_fifo: true,
            poison_fifo: true,
            ..policy()
        };
        let mut m = message(with_meta(&RedriveMeta {
            attempt: 1,
            ..RedriveMeta::fresh(ORIG)
        }));
        m.group_id = Some("customer-7".into());
        let Decision::Redrive(plan) = run(&m, &p) else {
            panic!()
        };
        assert_eq!(plan.delay_seconds, None);
        assert_eq!(plan.group_id.as_deref(), Some("customer-7"));
        assert_eq!(plan.dedup_id.as_deref(), Some("r-m-now"));
        let out = Outgoing {
            body: m.body.clone(),
            attributes: plan.attributes.clone(),
            delay_seconds: plan.delay_seconds,
            group_id: plan.group_id.clone(),
            dedup_id: plan.dedup_id.clone(),
            trace_header: None,
        };
        assert_eq!(out.validate(true), Ok(()));
        // The same message decided twice (a retry after a crash) gets the same dedup id.
        assert_eq!(run(&m, &p).dedup_id(), Some("r-m-now"));

        let iso = RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        };
        let mut m = message(with_meta(&iso));
        m.group_id = Some("customer-7".into());
        let Decision::Isolate(plan) = run(&m, &p) else {
            panic!()
        };
        assert_eq!(plan.group_id.as_deref(), Some("customer-7"));
        assert_eq!(plan.dedup_id.as_deref(), Some("p-m-now"));
    }

    #[test]
    fn a_fifo_dlqs_message_isolated_in_a_standard_poison_queue_keeps_its_group_in_the_stamp() {
        let p = Policy {
            source_fifo: true,
            poison_fifo: false,
            ..policy()
        };
        let mut m = message(with_meta(&RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        }));
        m.group_id = Some("customer-7".into());
        let Decision::Isolate(plan) = run(&m, &p) else {
            panic!()
        };
        assert_eq!(
            plan.group_id, None,
            "a standard poison queue takes no group"
        );
        let written = plan.attributes[ATTRIBUTE_NAME].as_str().unwrap_or_default();
        assert!(written.contains(r#""groupId":"customer-7""#), "{written}");
        // A redriven copy of the replayed message does not carry it on.
        let mut replayed = RedriveMeta::fresh(ORIG);
        replayed.set_group_id("customer-7");
        let d = run(&message(with_meta(&replayed)), &policy());
        assert!(d.is_redrive());
        assert_eq!(carried(&d).group_id(), None);
    }

    fn run_as(message_id: &str, m: &Msg, p: &Policy) -> Decision {
        let view = ReceivedMessage {
            message_id,
            ..m.view()
        };
        decide(&view, p, NOW, &mut Fixed(0.5))
    }

    #[test]
    fn fifo_dedup_id_follows_the_moved_message_not_the_chain() {
        let p = Policy {
            source_fifo: true,
            poison_fifo: true,
            ..policy()
        };
        // A chain replayed at attempt 0 and redriven again: the same originalMessageId and the
        // same next attempt, but a new received copy (a new MessageId).
        let mut m = message(with_meta(&RedriveMeta::fresh(ORIG)));
        m.group_id = Some("customer-7".into());
        let first = run_as("dlq-copy-1", &m, &p);
        let after_replay = run_as("dlq-copy-2", &m, &p);
        assert!(first.is_redrive() && after_replay.is_redrive());
        assert_eq!(first.meta().attempt, after_replay.meta().attempt);
        assert_ne!(
            first.dedup_id(),
            after_replay.dedup_id(),
            "a later move of the replayed chain must not be deduplicated away"
        );
        // A retry of the same received message (crash between send and delete) deduplicates.
        assert_eq!(first.dedup_id(), run_as("dlq-copy-1", &m, &p).dedup_id());

        // The same for isolation: a replayed-then-isolated copy is a new poison message.
        let spent = RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        };
        let mut m = message(with_meta(&spent));
        m.group_id = Some("customer-7".into());
        let a = run_as("dlq-copy-1", &m, &p);
        let b = run_as("dlq-copy-2", &m, &p);
        assert!(!a.is_redrive() && !b.is_redrive());
        assert_ne!(a.dedup_id(), b.dedup_id());
        assert_eq!(a.dedup_id(), run_as("dlq-copy-1", &m, &p).dedup_id());
    }

    #[test]
    fn dedup_id_is_a_valid_fifo_id_for_any_message_id() {
        let cases = [
            "5fea7756-0ea4-451a-a703-a558b933e274".to_string(),
            String::new(),
            "has space and é".to_string(),
            "x".repeat(200),
            "x".repeat(126),
        ];
        for id in &cases {
            for kind in ["r", "p"] {
                let out = Outgoing {
                    body: "b".into(),
                    attributes: Attributes::new(),
                    delay_seconds: None,
                    group_id: Some("g".into()),
                    dedup_id: Some(dedup_id(id, kind)),
                    trace_header: None,
                };
                assert_eq!(out.validate(true), Ok(()), "{id:?}");
            }
        }
        // Distinct ids stay distinct, even when they have to be digested.
        assert_ne!(
            dedup_id(&"x".repeat(200), "r"),
            dedup_id(&"x".repeat(201), "r")
        );
        assert_ne!(dedup_id("a b", "r"), dedup_id("a_b", "r"));
        // A move to the source and a move to the poison queue of one message differ.
        assert_ne!(dedup_id("dlq-copy-1", "r"), dedup_id("dlq-copy-1", "p"));
    }

    const KIB_256: usize = 262_144;

    #[test]
    fn a_copy_too_large_for_the_source_queue_is_isolated_by_size() {
        // A 256 KiB source queue: a 255 KiB message that gains the stamp no longer fits.
        let p = Policy {
            source_max_bytes: KIB_256,
            ..policy()
        };
        let mut m = message(Attributes::new());
        m.body = "x".repeat(KIB_256 - 20);
        let Decision::Isolate(plan) = run(&m, &p) else {
            panic!("redriven into a queue that rejects it")
        };
        assert_eq!(plan.reason, IsolationReason::SizeLimit);
        // The poison queue (1 MiB) has room for the isolation stamp: the copy carries it.
        assert!(plan.stamped);
        assert_eq!(
            RedriveMeta::read(&plan.attributes, "x").0.reason,
            Some(IsolationReason::SizeLimit)
        );
        // With room for the stamp it is redriven, and fits the source queue.
        m.body = "x".repeat(KIB_256 - 300);
        let d = run(&m, &p);
        assert!(d.is_redrive());
        assert!(message_size(&m.body, d.attributes()) <= KIB_256);
    }

    #[test]
    fn an_isolation_copy_that_cannot_carry_the_stamp_goes_unstamped() {
        let p = Policy {
            source_max_bytes: KIB_256,
            poison_max_bytes: KIB_256,
            ..policy()
        };
        let spent = with_meta(&RedriveMeta {
            attempt: 3,
            ..RedriveMeta::fresh(ORIG)
        });
        let mut m = message(spent.clone());
        m.body = "x".repeat(KIB_256 - message_size("", &spent) - 10);
        let Decision::Isolate(plan) = run(&m, &p) else {
            panic!()
        };
        assert_eq!(plan.reason, IsolationReason::MaxAttempts);
        assert!(
            !plan.stamped,
            "the isolation stamp would exceed the poison queue's limit"
        );
        assert_eq!(plan.attributes, spent, "parked exactly as received");
        assert_eq!(plan.meta.reason, Some(IsolationReason::MaxAttempts));
        // Too large for the poison queue even unstamped: still a plan to isolate (the engine
        // finds the poison queue rejecting it, and leaves it on the DLQ).
        m.body = "x".repeat(KIB_256 + 1);
        let Decision::Isolate(plan) = run(&m, &p) else {
            panic!()
        };
        assert!(!plan.stamped);
        assert_eq!(plan.reason, IsolationReason::MaxAttempts);
        // And a redrive that fits neither queue is isolated size-limit, unstamped.
        let mut fresh = message(Attributes::new());
        fresh.body = "x".repeat(KIB_256 + 1);
        let Decision::Isolate(plan) = run(&fresh, &p) else {
            panic!()
        };
        assert_eq!(
            (plan.reason, plan.stamped),
            (IsolationReason::SizeLimit, false)
        );
    }

    #[test]
    fn a_redriven_copy_of_a_replayed_message_does_not_look_isolated() {
        // What `redrive replay` writes: attempt 0 and the earlier isolation's marks.
        let replayed = RedriveMeta {
            attempt: 0,
            isolated_at: Some("2026-11-20T09:00:00Z".into()),
            reason: Some(IsolationReason::Manual),
            ..RedriveMeta::fresh(ORIG)
        };
        let Decision::Redrive(plan) = run(&message(with_meta(&replayed)), &policy()) else {
            panic!()
        };
        assert_eq!(
            (plan.meta.isolated_at.as_deref(), plan.meta.reason.as_ref()),
            (None, None)
        );
        let written = plan.attributes[ATTRIBUTE_NAME].as_str().unwrap_or_default();
        assert!(
            !written.contains("isolatedAt") && !written.contains("reason"),
            "{written}"
        );
        let (read, _) = RedriveMeta::read(&plan.attributes, "x");
        assert_eq!((read.attempt, read.original_message_id.as_str()), (1, ORIG));
        assert_eq!(read.reason, None);
    }

    #[test]
    fn standard_queues_get_no_fifo_fields() {
        let d = run(&message(Attributes::new()), &policy());
        assert_eq!((d.group_id(), d.dedup_id()), (None, None));
    }

    #[test]
    fn zero_max_attempts_isolates_everything() {
        let p = Policy {
            max_attempts: 0,
            ..policy()
        };
        assert!(matches!(
            run(&message(Attributes::new()), &p),
            Decision::Isolate(IsolationPlan {
                reason: IsolationReason::MaxAttempts,
                ..
            })
        ));
    }

    #[test]
    fn huge_attempt_does_not_overflow() {
        let prior = RedriveMeta {
            attempt: u32::MAX,
            ..RedriveMeta::fresh(ORIG)
        };
        let p = Policy {
            max_attempts: u32::MAX,
            ..policy()
        };
        assert!(!run(&message(with_meta(&prior)), &p).is_redrive());
    }
}
