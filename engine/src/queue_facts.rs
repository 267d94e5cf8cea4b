//! The attributes of a queue an operator's action needs: depth, redrive policy, retention,
//! visibility timeout (the operator CLI's commands, the triage console's replay).

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use crate::aws::{SqsQueue, port_error};
use crate::ports::PortError;

#[derive(Debug, Clone)]
pub struct QueueFacts {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
    /// The queue's own RedrivePolicy (a source queue has one; the DLQ and poison queue must not).
    pub redrive_policy: Option<Value>,
    pub retention_seconds: Option<u64>,
    pub visibility_timeout_seconds: Option<u64>,
}

impl QueueFacts {
    /// `maxReceiveCount` of the RedrivePolicy: receives (peeks included) before SQS moves a
    /// message to the DLQ.
    pub fn max_receive_count(&self) -> Option<u64> {
        let v = &self.redrive_policy.as_ref()?["maxReceiveCount"];
        v.as_u64().or_else(|| v.as_str()?.parse().ok())
    }

    /// The DLQ named by the RedrivePolicy.
    pub fn dead_letter_target(&self) -> Option<&str> {
        self.redrive_policy.as_ref()?["deadLetterTargetArn"].as_str()
    }
}

pub async fn facts(queue: &SqsQueue, url: &str) -> Result<QueueFacts, PortError> {
    let out = queue
        .client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| port_error("GetQueueAttributes", e))?;
    let attrs = out.attributes.unwrap_or_default();
    let number = |k: QueueAttributeName| attrs.get(&k).and_then(|v| v.parse::<u64>().ok());
    Ok(QueueFacts {
        visible: number(QueueAttributeName::ApproximateNumberOfMessages).unwrap_or(0),
        in_flight: number(QueueAttributeName::ApproximateNumberOfMessagesNotVisible).unwrap_or(0),
        delayed: number(QueueAttributeName::ApproximateNumberOfMessagesDelayed).unwrap_or(0),
        redrive_policy: attrs
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|v| serde_json::from_str(v).ok()),
        retention_seconds: number(QueueAttributeName::MessageRetentionPeriod),
        visibility_timeout_seconds: number(QueueAttributeName::VisibilityTimeout),
    })
}
