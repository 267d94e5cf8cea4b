//! Progress bars on stderr (indicatif), drawn only when stderr is a terminal: `redrive drain`'s,
//! fed by the engine's queue port wrapped to count what it receives, sends and deletes, and the
//! one of the commands that count what they did themselves (`export`, `import`).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use redrive_engine::ports::{
    BatchOutcome, Depth, HandleEntry, PortError, Queue, Received, SendEntry,
};

#[derive(Debug, Default)]
pub struct Counters {
    pub received: AtomicU64,
    pub to_source: AtomicU64,
    pub to_poison: AtomicU64,
    pub deleted: AtomicU64,
}

/// A [`Queue`] that counts what passes through it.
pub struct Counting<Q> {
    pub inner: Q,
    pub dlq: String,
    pub poison: String,
    pub counters: Arc<Counters>,
}

impl<Q: Queue> Queue for Counting<Q> {
    async fn receive(
        &self,
        queue_url: &str,
        max_messages: i32,
        wait_seconds: i32,
        visibility_seconds: i32,
    ) -> Result<Vec<Received>, PortError> {
        let got = self
            .inner
            .receive(queue_url, max_messages, wait_seconds, visibility_seconds)
            .await?;
        if queue_url == self.dlq {
            self.counters
                .received
                .fetch_add(got.len() as u64, Ordering::Relaxed);
        }
        Ok(got)
    }

    async fn send_batch(
        &self,
        queue_url: &str,
        entries: &[SendEntry],
    ) -> Result<BatchOutcome, PortError> {
        let out = self.inner.send_batch(queue_url, entries).await?;
        let counter = if queue_url == self.poison {
            &self.counters.to_poison
        } else {
            &self.counters.to_source
        };
        counter.fetch_add(out.succeeded.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    async fn delete_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
    ) -> Result<BatchOutcome, PortError> {
        let out = self.inner.delete_batch(queue_url, entries).await?;
        if queue_url == self.dlq {
            self.counters
                .deleted
                .fetch_add(out.succeeded.len() as u64, Ordering::Relaxed);
        }
        Ok(out)
    }

    async fn change_visibility_batch(
        &self,
        queue_url: &str,
        entries: &[HandleEntry],
        visibility_seconds: i32,
    ) -> Result<BatchOutcome, PortError> {
        self.inner
            .change_visibility_batch(queue_url, entries, visibility_seconds)
            .await
    }

    async fn depth(&self, queue_url: &str) -> Result<Depth, PortError> {
        self.inner.depth(queue_url).await
    }

    async fn max_message_size(&self, queue_url: &str) -> Result<Option<usize>, PortError> {
        self.inner.max_message_size(queue_url).await
    }

    async fn tags(
        &self,
        queue_url: &str,
    ) -> Result<std::collections::HashMap<String, String>, PortError> {
        self.inner.tags(queue_url).await
    }

    async fn dead_letter_sources(&self, dlq_url: &str) -> Result<Vec<String>, PortError> {
        self.inner.dead_letter_sources(dlq_url).await
    }

    async fn retention_seconds(&self, queue_url: &str) -> Result<u64, PortError> {
        self.inner.retention_seconds(queue_url).await
    }
}

/// The bar (indicatif: position, rate and ETA) and the task that feeds it the counters;
/// `None` when stderr is not a terminal.
pub struct Bar {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Bar {
    pub fn start(counters: Arc<Counters>, max: u32, dry_run: bool) -> Option<Bar> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::with_draw_target(
            Some(u64::from(max.max(1))),
            ProgressDrawTarget::stderr(),
        );
        let style = ProgressStyle::with_template(
            "[{bar:30}] {pos}/{len} received ({per_sec}, ETA {eta}); {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("#>-");
        bar.set_style(style);
        let fed = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                fed.set_position(counters.received.load(Ordering::Relaxed));
                fed.set_message(detail(&counters, dry_run));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Some(Bar { bar, task })
    }

    pub fn finish(self) {
        self.task.abort();
        // The summary follows on stdout.
        self.bar.finish_and_clear();
    }
}

fn detail(c: &Counters, dry_run: bool) -> String {
    if dry_run {
        "dry run: planning only".to_string()
    } else {
        format!(
            "to source {}, to poison {}, deleted {}",
            c.to_source.load(Ordering::Relaxed),
            c.to_poison.load(Ordering::Relaxed),
            c.deleted.load(Ordering::Relaxed)
        )
    }
}

/// A one-line progress bar on stderr (indicatif: position, rate and, with a total, ETA),
/// drawn only when stderr is a terminal and the output is not JSON.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    verb: &'static str,
}

impl Progress {
    pub fn new(json: bool, verb: &'static str) -> Self {
        let on = !json && std::io::stderr().is_terminal();
        Self {
            bar: on.then(|| {
                indicatif::ProgressBar::with_draw_target(
                    None,
                    indicatif::ProgressDrawTarget::stderr(),
                )
            }),
            verb,
        }
    }

    pub fn show(&self, done: usize, total: Option<usize>, detail: &str) {
        let Some(bar) = &self.bar else {
            return;
        };
        let template = match total {
            Some(total) if total > 0 => {
                bar.set_length(total as u64);
                format!(
                    "[{{bar:30}}] {{pos}}/{{len}} {} ({{per_sec}}, ETA {{eta}}); {{msg}}",
                    self.verb
                )
            }
            _ => format!("{{pos}} {} ({{per_sec}}); {{msg}}", self.verb),
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("#>-"));
        }
        bar.set_position(done as u64);
        bar.set_message(detail.to_string());
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
