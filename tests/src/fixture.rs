//! Checks that several crates' tests make the same way.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::MessageSystemAttributeName;

use crate::receive_raw;

/// The one message on `url` is visible and this receive is its first: whatever ran before
/// (an init that refused its configuration) never received it.
pub async fn assert_never_received(sqs: &Client, url: &str) {
    let visible = receive_raw(sqs, url, 0).await;
    assert_eq!(visible.len(), 1, "one message visible on {url}");
    assert_eq!(
        visible[0]
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .map(String::as_str),
        Some("1"),
        "received before"
    );
}
