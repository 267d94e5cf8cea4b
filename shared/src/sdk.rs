//! Conversions between the pure attribute model and `aws-sdk-sqs` types (feature `aws`).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName, MessageSystemAttributeNameForSends,
    MessageSystemAttributeValue,
};

use crate::attributes::{AttributeValue, Attributes, MessageAttribute};
use crate::trace_header::{AWS_TRACE_HEADER, TraceHeader};

pub use aws_sdk_sqs::config::timeout::TimeoutConfig;

/// Connecting to an AWS endpoint takes milliseconds; longer means it is unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One HTTP attempt. Above the re-driver's 1 s long poll, far above a normal SQS, DynamoDB or
/// CloudWatch answer.
pub const OPERATION_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// One operation, the SDK's own retries included: a stalled call ends here, so that it cannot
/// outlive the Lambda deadline margin or the visibility timeout of the messages it carries.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeouts for every SDK client of both Lambdas (`aws_config::defaults(..).timeout_config(..)`):
/// without them only the connect is bounded, and a stalled send or delete outlives the deadline.
pub fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(OPERATION_ATTEMPT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// SDK attributes as received, to the model. Values are kept byte for byte; an attribute with
/// neither a string nor a binary value (list values are reserved by SQS and never set) keeps
/// its type with an empty string.
pub fn attributes_from_sdk(attrs: Option<&HashMap<String, MessageAttributeValue>>) -> Attributes {
    attrs
        .into_iter()
        .flatten()
        .map(|(name, v)| {
            let value = match (v.binary_value(), v.string_value()) {
                (Some(b), _) => AttributeValue::Binary(b.as_ref().to_vec()),
                (None, Some(s)) => AttributeValue::String(s.to_string()),
                (None, None) => AttributeValue::String(String::new()),
            };
            (
                name.clone(),
                MessageAttribute {
                    data_type: v.data_type().to_string(),
                    value,
                },
            )
        })
        .collect()
}

/// One model attribute to the SDK type.
pub fn attribute_to_sdk(attr: &MessageAttribute) -> MessageAttributeValue {
    let builder = MessageAttributeValue::builder().data_type(&attr.data_type);
    let builder = match &attr.value {
        AttributeValue::String(s) => builder.string_value(s),
        AttributeValue::Binary(b) => builder.binary_value(Blob::new(b.clone())),
    };
    // `build` only fails when `data_type`, the one required field, is missing; it is set above.
    builder.build().expect("data_type is set")
}

/// Model attributes to the SDK map.
pub fn attributes_to_sdk(attrs: &Attributes) -> HashMap<String, MessageAttributeValue> {
    attrs
        .iter()
        .map(|(k, v)| (k.clone(), attribute_to_sdk(v)))
        .collect()
}

/// A received message's `AWSTraceHeader` (ReceiveMessage with that system attribute, or `All`).
/// A value that is no X-Ray trace header is logged and left behind: a copy must never be
/// refused for its trace header.
pub fn trace_header_from_sdk(
    system: Option<&HashMap<MessageSystemAttributeName, String>>,
    message_id: &str,
) -> Option<TraceHeader> {
    let value = system?.get(&MessageSystemAttributeName::AwsTraceHeader)?;
    TraceHeader::parse(value)
        .inspect_err(|e| {
            tracing::warn!(message_id, error = %e, "{AWS_TRACE_HEADER} not carried onto the copy");
        })
        .ok()
}

/// The `MessageSystemAttributes` of a copy carrying `trace_header` (None: none).
pub fn trace_header_to_sdk(
    trace_header: Option<&TraceHeader>,
) -> Option<HashMap<MessageSystemAttributeNameForSends, MessageSystemAttributeValue>> {
    let header = trace_header?;
    let value = MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(header.as_str())
        .build()
        // `build` only fails when `data_type`, the one required field, is missing; it is set.
        .expect("data_type is set");
    Some(HashMap::from([(
        MessageSystemAttributeNameForSends::AwsTraceHeader,
        value,
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_gets_attempt_and_operation_timeouts() {
        let t = timeout_config();
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(
            t.operation_attempt_timeout(),
            Some(OPERATION_ATTEMPT_TIMEOUT)
        );
        assert_eq!(t.operation_timeout(), Some(OPERATION_TIMEOUT));
        assert!(OPERATION_ATTEMPT_TIMEOUT <= OPERATION_TIMEOUT);
    }

    #[test]
    fn round_trips_every_type_byte_for_byte() {
        let mut attrs = Attributes::new();
        attrs.insert("s".into(), MessageAttribute::string("héllo"));
        attrs.insert(
            "n".into(),
            MessageAttribute {
                data_type: "Number.int".into(),
                value: AttributeValue::String("007".into()),
            },
        );
        attrs.insert("b".into(), MessageAttribute::binary(vec![0u8, 255, 10, 13]));
        attrs.insert(
            "c".into(),
            MessageAttribute {
                data_type: "Binary.png".into(),
                value: AttributeValue::Binary(vec![1]),
            },
        );
        let sdk = attributes_to_sdk(&attrs);
        assert_eq!(sdk["n"].data_type(), "Number.int");
        assert_eq!(
            sdk["b"].binary_value().unwrap().as_ref(),
            &[0u8, 255, 10, 13]
        );
        assert_eq!(attributes_from_sdk(Some(&sdk)), attrs);
        assert!(attributes_from_sdk(None).is_empty());
    }
}
