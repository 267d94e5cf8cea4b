//! Where archive objects go: the port, its S3 adapter with the timeouts of an upload, and the
//! bytes of one object.

use std::future::Future;
use std::time::Duration;

use redrive_engine::ports::PortError;
use redrive_shared::archive::{self, ArchivedMessage};
use redrive_shared::config::QueueUrl;

use crate::sweep::QueuedMessage;

/// One attempt of an S3 upload. An object holds up to 10 messages of up to 1 MiB each (a
/// 256 KiB-1 MiB body is usual, about 14 MiB at worst once written as JSON lines): far beyond
/// the 3 s that bounds an SQS call, this is 20 s, a slow 0.7 MB/s for the largest object.
pub const S3_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// One S3 upload, the SDK's retries included.
pub const S3_OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The archive's S3 client with its own timeouts ([`S3_ATTEMPT_TIMEOUT`],
/// [`S3_OPERATION_TIMEOUT`]) in place of the SQS calls' 3 s and 5 s: `client` is built from the
/// shared SDK configuration, its other settings (region, credentials, retries, path style)
/// are kept.
pub fn for_uploads(client: aws_sdk_s3::Client) -> aws_sdk_s3::Client {
    let timeouts = aws_sdk_s3::config::timeout::TimeoutConfig::builder()
        .connect_timeout(redrive_shared::sdk::CONNECT_TIMEOUT)
        .operation_attempt_timeout(S3_ATTEMPT_TIMEOUT)
        .operation_timeout(S3_OPERATION_TIMEOUT)
        .build();
    aws_sdk_s3::Client::from_conf(
        client
            .config()
            .to_builder()
            .timeout_config(timeouts)
            .build(),
    )
}

/// Where archive objects go.
pub trait ObjectStore: Sync {
    /// Writes `body` at `key` with its SHA-256, which the store verifies before it answers: an
    /// `Ok` means the bytes are stored as sent.
    fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The object's bytes: one line per message in the shared archive format
/// ([`redrive_shared::archive`]), each ending in `\n`.
pub fn archive_object(
    queue: &QueueUrl,
    archived_at_ms: i64,
    messages: &[QueuedMessage],
) -> Vec<u8> {
    let mut out = String::new();
    for m in messages {
        out.push_str(&archive::to_line(&ArchivedMessage {
            queue: queue.to_string(),
            archived_at_ms,
            message_id: m.message_id.clone(),
            body: m.body.clone(),
            attributes: m.attributes.clone(),
            system: m.system.clone(),
        }));
        out.push('\n');
    }
    out.into_bytes()
}

/// S3 through the SDK.
#[derive(Clone)]
pub struct S3Store {
    pub client: aws_sdk_s3::Client,
}

pub use redrive_engine::s3::sha256_base64;

impl ObjectStore for S3Store {
    async fn put(&self, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), PortError> {
        redrive_engine::s3::put_verified(&self.client, bucket, key, body).await
    }
}
