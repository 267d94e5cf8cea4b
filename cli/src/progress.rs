//! Progress bars on stderr (indicatif), drawn only when stderr is a terminal: `redrive drain`'s,
//! fed by a tap on the engine's queue port that counts what it receives, sends and deletes, and
//! the one of the commands that count what they did themselves (`export`, `import`).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use redrive_engine::ports::BatchOutcome;
use redrive_engine::tap::Tap;

#[derive(Debug, Default)]
pub struct Counters {
    pub received: AtomicU64,
    pub to_source: AtomicU64,
    pub to_poison: AtomicU64,
    pub deleted: AtomicU64,
}

/// Counts what passes through the drain's queue port: received from and deleted on the DLQ,
/// sent to the poison queue or to a source.
pub struct Counting {
    pub dlq: String,
    pub poison: String,
    pub counters: Arc<Counters>,
}

impl Tap for Counting {
    fn received(&self, queue_url: &str, count: usize) {
        if queue_url == self.dlq {
            self.counters
                .received
                .fetch_add(count as u64, Ordering::Relaxed);
        }
    }

    fn sent(&self, queue_url: &str, outcome: &BatchOutcome) {
        let counter = if queue_url == self.poison {
            &self.counters.to_poison
        } else {
            &self.counters.to_source
        };
        counter.fetch_add(outcome.succeeded.len() as u64, Ordering::Relaxed);
    }

    fn deleted(&self, queue_url: &str, outcome: &BatchOutcome) {
        if queue_url == self.dlq {
            self.counters
                .deleted
                .fetch_add(outcome.succeeded.len() as u64, Ordering::Relaxed);
        }
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
