//! `redrive export`: messages of a queue to a JSON Lines file or to S3, in the archive format
//! ([`redrive_shared::archive`]).
//!
//! Without `--delete` nothing is consumed: the messages are held while the export runs and
//! released when it ends, as `peek` does. With `--delete` a message is deleted only after its
//! line is on disk (written, flushed and fsync'd, batch by batch) or in S3 (the object's put
//! acknowledged against its SHA-256). A crash between the two leaves the message on its queue
//! and its line in the export: at worst a duplicate, never a loss.
//!
//! SQS answers a delete with a stale receipt handle (the message's hold ran out and it was
//! received again) with success, and deletes nothing. So before a delete the export renews the
//! hold of each stored message with the scan's latest handle: SQS refuses that for a stale
//! handle or a message no longer in flight, and those messages are reported as not deleted
//! (still on the queue) instead of deleted.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::queues::QueueRef;
use clap::Args;
use redrive_shared::archive::S3Location;
use redrive_shared::config::QueueUrl;
use serde_json::json;

use crate::context::{CliError, Ctx, Outcome};
use crate::filter::{FilterArgs, MessageFilter};
use crate::progress::Progress;
use crate::scan::{HOLD_SECONDS, Reach, Scanner, Status, Stop};
use redrive_engine::engine::delete_held;
use redrive_engine::now_ms;
use redrive_engine::ports::{PortError, Queue, Received};
use redrive_engine::s3::ArchiveLines;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The queue to export from: name, ARN or URL.
    #[arg(long, value_name = "QUEUE", value_parser = crate::queues::parse_queue)]
    pub queue: QueueRef,
    /// A new file (an existing one is never overwritten) or s3://bucket/prefix (objects
    /// <prefix>/<queue>/<yyyy>/<mm>/<dd>/<hhmmss>Z-<first id>-<n>.jsonl).
    #[arg(long, value_name = "FILE.jsonl | s3://BUCKET/PREFIX")]
    pub to: String,
    /// Delete each exported message from the queue once its line is stored.
    #[arg(long)]
    pub delete: bool,
    /// Export this many messages at most.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Only these MessageIds (a triage plan).
    #[arg(skip)]
    pub plan: Option<std::collections::BTreeSet<String>>,
}

/// Where the lines go.
pub enum Destination {
    File(PathBuf),
    S3(S3Location),
}

impl Destination {
    pub fn parse(text: &str) -> Result<Self, CliError> {
        match S3Location::parse(text) {
            Some(Ok(loc)) => Ok(Self::S3(loc)),
            Some(Err(e)) => Err(CliError::Config(e)),
            None if text.is_empty() => Err(CliError::Config("the path is empty".into())),
            None => Ok(Self::File(PathBuf::from(text))),
        }
    }
}

enum Sink {
    File {
        file: std::fs::File,
    },
    S3 {
        client: aws_sdk_s3::Client,
        location: S3Location,
        /// Lines and the messages they hold, not yet written: an object is written (and, with
        /// `--delete`, its messages deleted) as soon as it is full, well within the scan's hold.
        pending: ArchiveLines,
    },
}

#[derive(Debug, Default)]
pub struct Report {
    pub exported: Vec<String>,
    pub deleted: usize,
    /// Exported (the line is stored) but not deleted: still on the queue.
    pub delete_failed: Vec<(String, String)>,
    pub objects: Vec<String>,
}

pub async fn run(ctx: &Ctx, args: ExportArgs) -> Result<Outcome, CliError> {
    let (target, report, reach) = execute(ctx, &args).await?;
    print(ctx, &args, &target, &report, &reach);
    Ok(match reach.status {
        Status::Failed => Outcome::Failed,
        Status::Incomplete => Outcome::Incomplete,
        _ if !report.delete_failed.is_empty() => Outcome::Incomplete,
        _ => Outcome::Done,
    })
}

/// Exports what `args` selects, printing only the progress.
pub async fn execute(ctx: &Ctx, args: &ExportArgs) -> Result<(QueueUrl, Report, Reach), CliError> {
    let target = ctx.resolve(&args.queue).await?;
    let destination = Destination::parse(&args.to)?;
    // Before any queue is touched: the destination must be writable.
    let mut sink = match &destination {
        Destination::File(path) => Sink::File {
            file: create_new(path)?,
        },
        Destination::S3(location) => {
            let client = redrive_engine::s3::client(&ctx.sdk);
            client
                .head_bucket()
                .bucket(&location.bucket)
                .send()
                .await
                .map_err(|e| {
                    CliError::Config(format!(
                        "bucket {} cannot be reached: {}",
                        location.bucket,
                        aws_sdk_s3::error::DisplayErrorContext(&e)
                    ))
                })?;
            Sink::S3 {
                client,
                location: location.clone(),
                pending: ArchiveLines::default(),
            }
        }
    };
    let queue = ctx.queue();
    let url = target.as_str();
    let progress = Progress::new(ctx.json, "exported");
    let mut scan = Scanner::new(&queue, url);
    let mut report = Report::default();
    let walked = walk(
        &queue,
        &mut scan,
        args,
        &target,
        &mut sink,
        &progress,
        &mut report,
    )
    .await;
    progress.finish();
    let limit = args
        .max
        .is_some_and(|max| report.exported.len() >= max as usize);
    let stop = if limit { Stop::Limit } else { Stop::Exhausted };
    let reach = scan.reach(stop, report.exported.len(), &walked).await;
    scan.release().await;
    Ok((target, report, reach))
}

/// Prints what an export did, as text or one JSON document.
pub fn print(ctx: &Ctx, args: &ExportArgs, target: &QueueUrl, report: &Report, reach: &Reach) {
    let url = target.as_str();
    if ctx.json {
        let failed: Vec<_> = report
            .delete_failed
            .iter()
            .map(|(id, e)| json!({"messageId": id, "error": e}))
            .collect();
        crate::output::print_json(&json!({
            "queue": url,
            "to": args.to,
            "delete": args.delete,
            "exported": report.exported.len(),
            "messageIds": report.exported,
            "deleted": report.deleted,
            "deleteFailed": failed,
            "objects": report.objects,
            "status": reach.status,
            "seen": reach.seen,
            "notSelected": reach.not_selected,
            "notReached": reach.not_reached,
            "error": reach.error,
        }));
    } else {
        print_text(ctx, args, target, report, reach);
    }
    if let Some(e) = &reach.error {
        eprintln!("redrive: {e}");
    }
}

/// A file that did not exist, with its directory entry made durable too.
fn create_new(path: &Path) -> Result<std::fs::File, CliError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            CliError::Config(if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} exists; export never overwrites a file: name a new one",
                    path.display()
                )
            } else {
                format!("cannot create {}: {e}", path.display())
            })
        })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(file)
}

async fn walk<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    args: &ExportArgs,
    target: &QueueUrl,
    sink: &mut Sink,
    progress: &Progress,
    report: &mut Report,
) -> Result<(), PortError> {
    let url = target.as_str();
    let filter = MessageFilter::new(&args.filters, now_ms());
    let max = args.max.map(|m| m as usize);
    let full = |report: &Report| max.is_some_and(|m| report.exported.len() >= m);
    while !full(report) {
        let batch = scan.next(10).await?;
        if batch.is_empty() {
            break;
        }
        let now = now_ms();
        let room = max.map_or(usize::MAX, |m| m - report.exported.len());
        let chosen: Vec<Received> = batch
            .into_iter()
            .filter(|m| {
                filter.matches(m) && args.plan.as_ref().is_none_or(|p| p.contains(&m.message_id))
            })
            .take(room)
            .collect();
        if chosen.is_empty() {
            continue;
        }
        match sink {
            Sink::File { file } => {
                let mut lines = ArchiveLines::default();
                for m in chosen {
                    let system = scan.system(&m.message_id);
                    lines.push(url, now, m, system);
                }
                let (text, stored) = lines.take();
                file.write_all(text.as_bytes())
                    .and_then(|()| file.flush())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| PortError {
                        operation: "write",
                        code: "Io".into(),
                        message: format!("writing {}: {e}", args.to),
                        retryable: false,
                        source: None,
                    })?;
                settle(queue, scan, url, args.delete, stored, report).await;
            }
            Sink::S3 {
                client,
                location,
                pending,
            } => {
                for m in chosen {
                    let system = scan.system(&m.message_id);
                    pending.push(url, now, m, system);
                }
                if pending.is_full() {
                    let stored = put_object(client, location, target, pending, report).await?;
                    settle(queue, scan, url, args.delete, stored, report).await;
                }
            }
        }
        progress.show(
            report.exported.len(),
            max,
            &format!("deleted {}", report.deleted),
        );
    }
    if let Sink::S3 {
        client,
        location,
        pending,
    } = sink
        && !pending.is_empty()
    {
        let stored = put_object(client, location, target, pending, report).await?;
        settle(queue, scan, url, args.delete, stored, report).await;
    }
    Ok(())
}

/// One object of the pending lines; they are taken only once S3 acknowledged it.
async fn put_object(
    client: &aws_sdk_s3::Client,
    location: &S3Location,
    queue: &QueueUrl,
    pending: &mut ArchiveLines,
    report: &mut Report,
) -> Result<Vec<Received>, PortError> {
    let (object, stored) = pending.put(client, location, queue).await?;
    report.objects.push(object);
    Ok(stored)
}

/// Records stored messages and, with `--delete`, deletes the ones whose hold it could renew.
async fn settle<Q: Queue>(
    queue: &Q,
    scan: &mut Scanner<'_, Q>,
    url: &str,
    delete: bool,
    stored: Vec<Received>,
    report: &mut Report,
) {
    report
        .exported
        .extend(stored.iter().map(|m| m.message_id.clone()));
    if !delete {
        return;
    }
    // The scan's latest handle: the message may have come back and been received again by
    // the scan itself since its line was made.
    let deletes = delete_held(queue, scan, url, &stored, HOLD_SECONDS).await;
    report.deleted += deletes.deleted;
    report.delete_failed.extend(deletes.failed);
}

fn print_text(ctx: &Ctx, args: &ExportArgs, target: &QueueUrl, report: &Report, reach: &Reach) {
    let s = &ctx.style;
    let kept = if args.delete {
        format!("{} deleted from the queue", report.deleted)
    } else {
        "the queue is left as it was".to_string()
    };
    println!(
        "{} {} message(s) from {} to {}; {kept}",
        s.good("exported"),
        report.exported.len(),
        target.name(),
        args.to
    );
    for key in &report.objects {
        println!("  {key}");
    }
    if !report.delete_failed.is_empty() {
        println!(
            "{} {} exported but not deleted (still on {}; exporting them again makes a duplicate line):",
            s.warn("warning:"),
            report.delete_failed.len(),
            target.name()
        );
        for (id, why) in &report.delete_failed {
            println!("  {id}  {}", s.dim(why));
        }
    }
    if let Some(short) = reach.shortfall() {
        let label = match reach.status {
            Status::Limit => s.warn("note:"),
            _ => s.bad("not reached:"),
        };
        println!("{label} {short}");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use redrive_engine::ports::HandleEntry;
    use redrive_shared::Attributes;

    use super::*;
    use redrive_engine::fake::FakeSqs;
    use redrive_engine::ports::{BatchOutcome, Depth, ReceiveRequest, SendEntry};

    const Q: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/orders-dlq";

    /// The fake, where the first delete or visibility change after a batch is written comes
    /// only after the scan's hold ran out, and another consumer received the messages in
    /// between (a slow write, a long pause of the process).
    struct LateAfterWrite {
        sqs: Arc<FakeSqs>,
        late: AtomicBool,
        received_again: bool,
    }

    impl LateAfterWrite {
        async fn pause(&self) {
            if !self.late.swap(false, Ordering::SeqCst) {
                return;
            }
            tokio::time::advance(Duration::from_secs(HOLD_SECONDS as u64 + 1)).await;
            if self.received_again {
                self.sqs.receive_now(Q, 10, 300).unwrap();
            }
        }
    }

    impl Queue for LateAfterWrite {
        async fn receive(
            &self,
            url: &str,
            request: ReceiveRequest,
        ) -> Result<Vec<Received>, PortError> {
            self.sqs.receive(url, request).await
        }

        async fn send_batch(
            &self,
            url: &str,
            entries: &[SendEntry],
        ) -> Result<BatchOutcome, PortError> {
            self.sqs.send_batch(url, entries).await
        }

        async fn delete_batch(
            &self,
            url: &str,
            entries: &[HandleEntry],
        ) -> Result<BatchOutcome, PortError> {
            self.pause().await;
            self.sqs.delete_batch(url, entries).await
        }

        async fn change_visibility_batch(
            &self,
            url: &str,
            entries: &[HandleEntry],
            visibility: i32,
        ) -> Result<BatchOutcome, PortError> {
            self.pause().await;
            self.sqs
                .change_visibility_batch(url, entries, visibility)
                .await
        }

        async fn depth(&self, url: &str) -> Result<Depth, PortError> {
            self.sqs.depth(url).await
        }
    }

    /// Exports every message of `Q` with `--delete` to a new file; returns the report.
    async fn export_deleting(queue: &LateAfterWrite, name: &str) -> Report {
        let path = std::env::temp_dir().join(format!("{name}-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let args = ExportArgs {
            queue: QueueRef::Url(QueueUrl::parse(Q).unwrap()),
            to: path.display().to_string(),
            delete: true,
            max: None,
            filters: Default::default(),
            plan: None,
        };
        let mut sink = Sink::File {
            file: create_new(&path).unwrap(),
        };
        let progress = Progress::new(true, "exported");
        let mut scan = Scanner::new(queue, Q);
        let mut report = Report::default();
        walk(
            queue,
            &mut scan,
            &args,
            &QueueUrl::parse(Q).unwrap(),
            &mut sink,
            &progress,
            &mut report,
        )
        .await
        .unwrap();
        scan.release().await;
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, report.exported.len());
        let _ = std::fs::remove_file(&path);
        report
    }

    async fn late_export(received_again: bool, name: &str) -> (Arc<FakeSqs>, Report) {
        let sqs = FakeSqs::new();
        sqs.create_queue(Q);
        for i in 0..10 {
            sqs.push(Q, &format!("m{i}"), Attributes::new(), None);
        }
        let queue = LateAfterWrite {
            sqs: sqs.clone(),
            late: AtomicBool::new(true),
            received_again,
        };
        let report = export_deleting(&queue, name).await;
        (sqs, report)
    }

    /// Every message reported deleted is gone; every one still on the queue is reported.
    fn assert_honest(sqs: &FakeSqs, report: &Report) {
        let left: HashSet<String> = sqs.messages(Q).into_iter().map(|m| m.message_id).collect();
        let failed: HashSet<String> = report
            .delete_failed
            .iter()
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(report.exported.len(), 10);
        assert_eq!(left, failed, "still on the queue = reported not deleted");
        assert_eq!(report.deleted, 10 - left.len(), "{report:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn export_delete_reports_a_message_received_again_during_the_write_as_not_deleted() {
        // GIVEN an export whose hold runs out while its batch is written, and another consumer
        // that receives the messages in that time
        let (sqs, report) = late_export(true, "export-received-again").await;

        // THEN nothing it could not delete is reported deleted: all 10 are still on the queue
        assert_eq!(sqs.len(Q), 10);
        assert_honest(&sqs, &report);
        assert!(
            report.delete_failed[0].1.contains("hold ran out"),
            "{report:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn export_delete_deletes_nothing_it_no_longer_holds() {
        // GIVEN an export whose hold runs out while its batch is written (nobody else receives)
        let (sqs, report) = late_export(false, "export-hold-ran-out").await;

        // THEN what it reports matches the queue
        assert_honest(&sqs, &report);
    }

    #[tokio::test(start_paused = true)]
    async fn export_delete_uses_the_scans_latest_handle() {
        // GIVEN messages whose hold ran out during the scan and that the scan received again
        let sqs = FakeSqs::new();
        sqs.create_queue(Q);
        for i in 0..3 {
            sqs.push(Q, &format!("m{i}"), Attributes::new(), None);
        }
        let mut scan = Scanner::new(&sqs, Q);
        let first = scan.next(10).await.unwrap();
        tokio::time::advance(Duration::from_secs(HOLD_SECONDS as u64 + 1)).await;
        assert!(scan.next(10).await.unwrap().is_empty());

        // WHEN the first batch is settled with --delete
        let mut report = Report::default();
        settle(&sqs, &mut scan, Q, true, first, &mut report).await;

        // THEN all three are deleted, with the handles of the second receive
        assert_eq!(report.deleted, 3, "{report:?}");
        assert!(sqs.is_empty(Q));
    }
}
