//! Messages kept as JSON Lines (`redrive export`, the archiver, `triage discard --archive`): one
//! file, or every `.jsonl` object under an S3 prefix in key order, read whole before anything
//! is done with them.

use redrive_shared::archive::{ArchivedMessage, S3Location, parse_jsonl};

use crate::context::{CliError, Ctx};

/// One message of the input, and where it was read.
pub struct Line {
    /// The file, or `s3://bucket/key` of the object.
    pub source: String,
    /// Its line number there (1-based).
    pub line: usize,
    pub message: ArchivedMessage,
}

/// Every line of `from` (a file, or `s3://BUCKET/PREFIX`), parsed; the first bad line (or
/// unreadable source) is the error, which ends with `consequence` ("nothing was sent").
pub async fn read(ctx: &Ctx, from: &str, consequence: &str) -> Result<Vec<Line>, CliError> {
    let sources: Vec<(String, Vec<u8>)> = match S3Location::parse(from) {
        Some(Err(e)) => return Err(CliError::Config(e)),
        Some(Ok(location)) => {
            let client = redrive_engine::s3::client(&ctx.sdk);
            let keys = redrive_engine::s3::list_keys(
                &client,
                &location.bucket,
                &location.prefix,
                ".jsonl",
            )
            .await?;
            if keys.is_empty() {
                return Err(CliError::Config(format!(
                    "no .jsonl objects under {from}; {consequence}"
                )));
            }
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let bytes = redrive_engine::s3::get_bytes(&client, &location.bucket, &key).await?;
                out.push((format!("s3://{}/{key}", location.bucket), bytes));
            }
            out
        }
        None => {
            let bytes = std::fs::read(from)
                .map_err(|e| CliError::Config(format!("cannot read {from}: {e}")))?;
            vec![(from.to_string(), bytes)]
        }
    };
    let mut lines = Vec::new();
    for (source, bytes) in sources {
        let text = String::from_utf8(bytes).map_err(|e| {
            let upto = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..upto].iter().filter(|&&b| b == b'\n').count() + 1;
            CliError::Config(format!(
                "{source}: line {line}: not UTF-8 (byte {upto}); {consequence}"
            ))
        })?;
        let parsed = parse_jsonl(&text)
            .map_err(|e| CliError::Config(format!("{source}: {e}; {consequence}")))?;
        lines.extend(parsed.into_iter().enumerate().map(|(i, message)| Line {
            source: source.clone(),
            line: i + 1,
            message,
        }));
    }
    Ok(lines)
}
