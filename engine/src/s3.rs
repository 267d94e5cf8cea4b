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
use redrive_shared::archive::base64_encode;
use sha2::{Digest, Sha256};

use crate::aws::port_error;
use crate::ports::PortError;

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
