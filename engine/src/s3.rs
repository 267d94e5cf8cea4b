//! S3 for archive objects, as `redrive export` and `redrive import` use it: a verified put,
//! a listing under a prefix, a get. Small on purpose; the archiver's port lives in
//! the archiver crate and can share these calls.
//!
//! - Path-style addressing (`bucket` in the path), which AWS and every emulator reached
//!   through `AWS_ENDPOINT_URL` (moto, in the tests) accept alike.
//! - A put carries the SHA-256 of its bytes (`x-amz-checksum-sha256`): S3 hashes what it
//!   received and refuses the put when they differ, so `Ok` means the bytes are stored as sent.
//!   A message may be deleted from its queue only after that.

use aws_config::SdkConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;
use redrive_shared::archive::{
    ArchivedMessage, S3Location, SystemAttributes, base64_encode, object_key, to_line,
};
use redrive_shared::config::QueueUrl;
use sha2::{Digest, Sha256};

use crate::aws::port_error;
use crate::now_ms;
use crate::ports::{PortError, Received};

/// An S3 client from the shared SDK configuration, path-style.
pub fn client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(true)
            .build(),
    )
}

/// The standard base64 of the SHA-256 of `bytes`: what S3's `x-amz-checksum-sha256` carries.
pub fn sha256_base64(bytes: &[u8]) -> String {
    base64_encode(&Sha256::digest(bytes))
}

/// Writes `body` at `bucket`/`key` with its SHA-256, which S3 verifies before it answers.
pub async fn put_verified(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    body: Vec<u8>,
) -> Result<(), PortError> {
    let checksum = sha256_base64(&body);
    let out = client
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_type("application/x-ndjson")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .checksum_sha256(&checksum)
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(|e| port_error("PutObject", e))?;
    match out.checksum_sha256() {
        Some(echoed) if echoed != checksum => Err(PortError::new(
            "PutObject",
            "ChecksumMismatch",
            format!("S3 acknowledged SHA-256 {echoed}, the object's is {checksum}"),
            // Nothing is deleted on this path; another put of the same bytes may succeed.
            true,
        )),
        _ => Ok(()),
    }
}

/// Every key under `prefix` (a folder: `a/b` lists `a/b/...`, not `a/bc`) ending in
/// `suffix`, in key order, every page.
pub async fn list_keys(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
    suffix: &str,
) -> Result<Vec<String>, PortError> {
    let folder = if prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", prefix.trim_end_matches('/'))
    };
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(&folder)
            .set_continuation_token(token.take())
            .send()
            .await
            .map_err(|e| port_error("ListObjectsV2", e))?;
        keys.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key())
                .filter(|k| k.ends_with(suffix))
                .map(str::to_string),
        );
        match out.next_continuation_token() {
            Some(next) if out.is_truncated() == Some(true) => token = Some(next.to_string()),
            _ => break,
        }
    }
    keys.sort();
    Ok(keys)
}

/// The bytes of one object.
pub async fn get_bytes(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
) -> Result<Vec<u8>, PortError> {
    let out = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| port_error("GetObject", e))?;
    let bytes = out.body.collect().await.map_err(|e| {
        PortError::new(
            "GetObject",
            "Body",
            format!("reading s3://{bucket}/{key}: {e}"),
            true,
        )
        .with_source(e)
    })?;
    Ok(bytes.into_bytes().to_vec())
}

/// Messages per archive object at most (`redrive export`, a discard): an object is written
/// (and its messages may be deleted) as soon as it is full.
pub const OBJECT_MESSAGES: usize = 100;
/// Bytes per archive object at most (lines of up to 1 MiB messages).
pub const OBJECT_BYTES: usize = 16 * 1024 * 1024;

/// Archive lines (the format `redrive import` restores) waiting for their object, each with the
/// message it was made from.
#[derive(Debug, Default)]
pub struct ArchiveLines {
    lines: Vec<(String, Received)>,
    bytes: usize,
}

impl ArchiveLines {
    /// The line of `m`, received from `queue_url` with `system`, archived at `now`.
    pub fn push(&mut self, queue_url: &str, now: i64, m: Received, system: SystemAttributes) {
        let line = to_line(&ArchivedMessage {
            queue: queue_url.to_string(),
            archived_at_ms: now,
            message_id: m.message_id.clone(),
            body: m.body.clone(),
            attributes: m.attributes.clone(),
            system,
        });
        self.bytes += line.len() + 1;
        self.lines.push((line, m));
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// As many messages or bytes as one object takes.
    pub fn is_full(&self) -> bool {
        self.lines.len() >= OBJECT_MESSAGES || self.bytes >= OBJECT_BYTES
    }

    /// The lines, one per message and each ending in a newline, and the messages, in order.
    pub fn take(&mut self) -> (String, Vec<Received>) {
        let text = self.text();
        (text, self.take_messages())
    }

    /// The pending lines, each ending in a newline.
    fn text(&self) -> String {
        let mut text = String::with_capacity(self.bytes);
        for (line, _) in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    fn take_messages(&mut self) -> Vec<Received> {
        self.bytes = 0;
        std::mem::take(&mut self.lines)
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    /// Writes the pending lines as one object of `queue`'s under `location` ([`put_verified`])
    /// and takes them only once S3 acknowledged it: the object's `s3://` address and its
    /// messages. On an error nothing is taken.
    pub async fn put(
        &mut self,
        client: &aws_sdk_s3::Client,
        location: &S3Location,
        queue: &QueueUrl,
    ) -> Result<(String, Vec<Received>), PortError> {
        let first = &self.lines[0].1.message_id;
        let key = object_key(
            &location.prefix,
            queue.name(),
            now_ms(),
            first,
            self.lines.len(),
        );
        let body = self.text();
        put_verified(client, &location.bucket, &key, body.into_bytes()).await?;
        Ok((
            format!("s3://{}/{key}", location.bucket),
            self.take_messages(),
        ))
    }
}
