//! SQS's documented limits, enforced by redrive itself because emulators (moto) do not, and the
//! splitting of outgoing entries into valid batches.
//!
//! The `AWSTraceHeader` system attribute a copy carries ([`Outgoing::trace_header`]) counts
//! toward neither limit: it is not a message attribute, and SQS documents that a message system
//! attribute's size does not count toward the message size.

use std::collections::HashSet;

use crate::attributes::{Attributes, message_size};
use crate::trace_header::TraceHeader;

/// Message attributes per message (the `AWSTraceHeader` system attribute is not one of them).
pub const MAX_ATTRIBUTES: usize = 10;
/// Maximum message size (body plus attribute names, types and values; not the `AWSTraceHeader`
/// system attribute): 1 MiB.
pub const MAX_MESSAGE_BYTES: usize = 1_048_576;
/// Entries per SendMessageBatch / DeleteMessageBatch / ChangeMessageVisibilityBatch.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// Total payload of one SendMessageBatch.
pub const MAX_BATCH_BYTES: usize = 1_048_576;
/// Messages per ReceiveMessage.
pub const MAX_RECEIVE: i32 = 10;
/// DelaySeconds range.
pub const MAX_DELAY_SECONDS: u32 = 900;
/// FIFO MessageGroupId and MessageDeduplicationId length.
pub const MAX_FIFO_ID_LEN: usize = 128;
/// Visibility timeout upper bound (12 hours).
pub const MAX_VISIBILITY_SECONDS: u32 = 43_200;

/// One message about to be sent, as far as the limits care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub body: String,
    pub attributes: Attributes,
    pub delay_seconds: Option<u32>,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    /// The original's `AWSTraceHeader`, sent as a message system attribute: outside
    /// [`MAX_ATTRIBUTES`] and [`Outgoing::size`].
    pub trace_header: Option<TraceHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("message has {0} attributes; SQS allows {MAX_ATTRIBUTES}")]
    TooManyAttributes(usize),
    #[error("message is {0} bytes with its attributes; SQS allows {MAX_MESSAGE_BYTES}")]
    TooLarge(usize),
    #[error("DelaySeconds {0} is outside 0..={MAX_DELAY_SECONDS}")]
    Delay(u32),
    #[error("a FIFO queue needs a MessageGroupId")]
    MissingGroupId,
    #[error("a FIFO queue does not accept a per-message DelaySeconds")]
    FifoDelay,
    #[error(
        "{field} {value:?} must be 1 to {MAX_FIFO_ID_LEN} characters of letters, digits and punctuation"
    )]
    FifoId { field: &'static str, value: String },
    #[error("a standard queue does not accept {0}")]
    FifoFieldOnStandard(&'static str),
}

impl Outgoing {
    /// What counts toward [`MAX_MESSAGE_BYTES`]: the body and the message attributes.
    pub fn size(&self) -> usize {
        message_size(&self.body, &self.attributes)
    }

    /// Checks this message against SQS's rules for a queue of the given kind.
    pub fn validate(&self, fifo: bool) -> Result<(), LimitError> {
        if self.attributes.len() > MAX_ATTRIBUTES {
            return Err(LimitError::TooManyAttributes(self.attributes.len()));
        }
        let size = self.size();
        if size > MAX_MESSAGE_BYTES {
            return Err(LimitError::TooLarge(size));
        }
        if let Some(d) = self.delay_seconds
            && d > MAX_DELAY_SECONDS
        {
            return Err(LimitError::Delay(d));
        }
        if fifo {
            if self.delay_seconds.is_some_and(|d| d > 0) {
                return Err(LimitError::FifoDelay);
            }
            let group = self.group_id.as_deref().ok_or(LimitError::MissingGroupId)?;
            check_fifo_id("MessageGroupId", group)?;
            if let Some(dedup) = &self.dedup_id {
                check_fifo_id("MessageDeduplicationId", dedup)?;
            }
        } else {
            if self.group_id.is_some() {
                return Err(LimitError::FifoFieldOnStandard("MessageGroupId"));
            }
            if self.dedup_id.is_some() {
                return Err(LimitError::FifoFieldOnStandard("MessageDeduplicationId"));
            }
        }
        Ok(())
    }
}

fn check_fifo_id(field: &'static str, value: &str) -> Result<(), LimitError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_FIFO_ID_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation());
    if ok {
        Ok(())
    } else {
        Err(LimitError::FifoId {
            field,
            value: value.to_string(),
        })
    }
}

/// True when a queue URL or name names a FIFO queue.
pub fn is_fifo(queue_url_or_name: &str) -> bool {
    queue_url_or_name.trim_end_matches('/').ends_with(".fifo")
}

/// Splits entries into batches of at most [`MAX_BATCH_ENTRIES`] entries and [`MAX_BATCH_BYTES`]
/// bytes, keeping their order. `size` gives each entry's payload size. An entry that alone
/// exceeds the byte limit gets a batch of its own (SQS will reject that one entry, not its
/// neighbours).
pub fn split_batches<T>(entries: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    split_batches_by(entries, size, |_| None::<&str>)
}

/// Like [`split_batches`] for a FIFO queue: a batch holds at most one entry per message group,
/// so that when one entry fails, no later message of its group in the same batch can overtake
/// it. Order within each group is kept across batches.
pub fn split_fifo_batches<T>(
    entries: Vec<T>,
    size: impl Fn(&T) -> usize,
    group: impl Fn(&T) -> Option<&str>,
) -> Vec<Vec<T>> {
    split_batches_by(entries, size, group)
}

/// FIFO order across batches: once an entry of a message group was not acknowledged, no later
/// entry of that group may be sent in the same run (it would overtake the failed one). Batches
/// come from [`split_fifo_batches`]; each batch is split with [`HeldGroups::partition`] before
/// it is sent, and every entry that was not acknowledged is recorded with [`HeldGroups::hold`].
#[derive(Debug, Clone, Default)]
pub struct HeldGroups(HashSet<String>);

impl HeldGroups {
    /// Splits a batch into the entries that may be sent now and those held behind an earlier
    /// failure of their group, keeping the order of each.
    pub fn partition<T>(
        &self,
        batch: Vec<T>,
        group: impl Fn(&T) -> Option<&str>,
    ) -> (Vec<T>, Vec<T>) {
        batch
            .into_iter()
            .partition(|e| group(e).is_none_or(|g| !self.0.contains(g)))
    }

    /// An entry of `group` was not acknowledged: the group is held from now on.
    pub fn hold(&mut self, group: Option<&str>) {
        if let Some(g) = group {
            self.0.insert(g.to_string());
        }
    }

    pub fn is_held(&self, group: &str) -> bool {
        self.0.contains(group)
    }
}

fn split_batches_by<T>(
    entries: Vec<T>,
    size: impl Fn(&T) -> usize,
    group: impl Fn(&T) -> Option<&str>,
) -> Vec<Vec<T>> {
    let mut batches: Vec<Vec<T>> = Vec::new();
    let mut current: Vec<T> = Vec::new();
    let mut bytes = 0usize;
    let mut groups: HashSet<String> = HashSet::new();
    for entry in entries {
        let s = size(&entry);
        let g = group(&entry).map(str::to_string);
        let group_clash = g.as_ref().is_some_and(|g| groups.contains(g));
        if !current.is_empty()
            && (current.len() == MAX_BATCH_ENTRIES || bytes + s > MAX_BATCH_BYTES || group_clash)
        {
            batches.push(std::mem::take(&mut current));
            bytes = 0;
            groups.clear();
        }
        bytes += s;
        if let Some(g) = g {
            groups.insert(g);
        }
        current.push(entry);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::MessageAttribute;
    use proptest::prelude::*;

    fn msg(body: &str) -> Outgoing {
        Outgoing {
            body: body.into(),
            attributes: Attributes::new(),
            delay_seconds: None,
            group_id: None,
            dedup_id: None,
            trace_header: None,
        }
    }

    #[test]
    fn a_trace_header_counts_toward_neither_the_attributes_nor_the_size() {
        // GIVEN a message at both limits: ten attributes, every byte of the size used
        let mut m = msg("");
        for i in 0..10 {
            m.attributes
                .insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        m.body = "x".repeat(MAX_MESSAGE_BYTES - m.size());
        assert_eq!(m.validate(false), Ok(()));
        // WHEN it carries an AWSTraceHeader too
        m.trace_header = Some(
            TraceHeader::parse(
                "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            )
            .unwrap(),
        );
        // THEN it is still within both (a system attribute is neither)
        assert_eq!(m.size(), MAX_MESSAGE_BYTES);
        assert_eq!(m.validate(false), Ok(()));
    }

    #[test]
    fn ten_attributes_pass_eleven_fail() {
        let mut m = msg("b");
        for i in 0..10 {
            m.attributes
                .insert(format!("a{i}"), MessageAttribute::string("v"));
        }
        assert_eq!(m.validate(false), Ok(()));
        m.attributes
            .insert("a10".into(), MessageAttribute::string("v"));
        assert_eq!(m.validate(false), Err(LimitError::TooManyAttributes(11)));
    }

    #[test]
    fn size_limit_counts_attributes() {
        let mut m = msg(&"x".repeat(MAX_MESSAGE_BYTES - 10));
        m.attributes
            .insert("k".into(), MessageAttribute::string("abc")); // 1 + 6 + 3 = 10
        assert_eq!(m.validate(false), Ok(()));
        m.attributes
            .insert("k".into(), MessageAttribute::string("abcd"));
        assert_eq!(
            m.validate(false),
            Err(LimitError::TooLarge(MAX_MESSAGE_BYTES + 1))
        );
    }

    #[test]
    fn delay_and_fifo_rules() {
        let mut m = msg("b");
        m.delay_seconds = Some(900);
        assert_eq!(m.validate(false), Ok(()));
        m.delay_seconds = Some(901);
        assert_eq!(m.validate(false), Err(LimitError::Delay(901)));

        let mut f = msg("b");
        assert_eq!(f.validate(true), Err(LimitError::MissingGroupId));
        f.group_id = Some("g1".into());
        f.dedup_id = Some("5fea7756-0ea4:1".into());
        assert_eq!(f.validate(true), Ok(()));
        f.delay_seconds = Some(5);
        assert_eq!(f.validate(true), Err(LimitError::FifoDelay));
        f.delay_seconds = None;
        f.dedup_id = Some("x".repeat(129));
        assert!(matches!(
            f.validate(true),
            Err(LimitError::FifoId {
                field: "MessageDeduplicationId",
                ..
            })
        ));
        f.dedup_id = Some("has space".into());
        assert!(matches!(f.validate(true), Err(LimitError::FifoId { .. })));
        f.dedup_id = None;
        assert_eq!(
            f.validate(false),
            Err(LimitError::FifoFieldOnStandard("MessageGroupId"))
        );
    }

    #[test]
    fn fifo_names() {
        assert!(is_fifo(
            "https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo"
        ));
        assert!(is_fifo("orders.fifo"));
        assert!(!is_fifo(
            "https://sqs.us-east-1.amazonaws.com/000000000000/orders"
        ));
    }

    #[test]
    fn batches_hold_ten_entries_at_most() {
        let batches = split_batches((0..25).collect(), |_| 1);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        assert_eq!(batches.concat(), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn batches_respect_the_payload_limit() {
        let third = MAX_BATCH_BYTES / 3 + 1;
        let batches = split_batches(vec![third; 5], |s| *s);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
        // An oversized entry stands alone.
        let batches = split_batches(vec![1, MAX_BATCH_BYTES + 5, 1], |s| *s);
        assert_eq!(batches, vec![vec![1], vec![MAX_BATCH_BYTES + 5], vec![1]]);
    }

    #[test]
    fn fifo_batches_hold_one_entry_per_group() {
        let entries = vec![("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)];
        let batches = split_fifo_batches(entries, |_| 1, |e| Some(e.0));
        assert_eq!(
            batches,
            vec![
                vec![("a", 1), ("b", 1)],
                vec![("a", 2), ("c", 1)],
                vec![("a", 3)]
            ]
        );
    }

    #[test]
    fn a_group_that_failed_is_held_for_the_rest_of_the_run() {
        let mut held = HeldGroups::default();
        let entries = vec![("a", 1), ("b", 1), ("a", 2), ("c", 1)];
        let batches = split_fifo_batches(entries, |_| 1, |e| Some(e.0));
        let (send, hold) = held.partition(batches[0].clone(), |e| Some(e.0));
        assert_eq!((send, hold), (vec![("a", 1), ("b", 1)], vec![]));
        held.hold(Some("a"));
        let (send, hold) = held.partition(batches[1].clone(), |e| Some(e.0));
        assert_eq!((send, hold), (vec![("c", 1)], vec![("a", 2)]));
        assert!(held.is_held("a") && !held.is_held("b"));
    }

    proptest! {
        #[test]
        fn every_batch_is_valid_and_order_is_kept(sizes in proptest::collection::vec(0usize..400_000, 0..60)) {
            let batches = split_batches(sizes.clone(), |s| *s);
            for b in &batches {
                prop_assert!(!b.is_empty() && b.len() <= MAX_BATCH_ENTRIES);
                prop_assert!(b.len() == 1 || b.iter().sum::<usize>() <= MAX_BATCH_BYTES);
            }
            prop_assert_eq!(batches.concat(), sizes);
        }

        #[test]
        fn fifo_batches_keep_group_order(groups in proptest::collection::vec(0u8..4, 0..50)) {
            let entries: Vec<(String, usize)> = groups.iter().enumerate().map(|(i, g)| (format!("g{g}"), i)).collect();
            let batches = split_fifo_batches(entries.clone(), |_| 1, |e| Some(e.0.as_str()));
            for b in &batches {
                let distinct: HashSet<&str> = b.iter().map(|e| e.0.as_str()).collect();
                prop_assert_eq!(distinct.len(), b.len());
            }
            prop_assert_eq!(batches.concat(), entries);
        }
    }
}
