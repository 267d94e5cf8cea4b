//! The command line of `make bench`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) struct Options {
    pub(crate) only: Option<HashSet<String>>,
    pub(crate) moto_messages: u64,
    /// The side by side with StartMessageMoveTask on LocalStack: ordinary messages, poison
    /// messages, and the re-driver's BACKOFF_BASE_SECONDS.
    pub(crate) localstack_messages: u64,
    pub(crate) localstack_poison: u64,
    pub(crate) localstack_backoff_base: u64,
    pub(crate) fake_messages: u64,
    pub(crate) latency: Duration,
    pub(crate) pipelines: u32,
    /// K, the drains of the scale-out section (a Step Functions Map of K drain tasks).
    pub(crate) scale_drains: u32,
    /// The global MAX_MESSAGES_PER_SECOND the K drains split.
    pub(crate) scale_cap: u64,
    /// The triage pass: messages, the one-by-one baseline's messages, receives at once.
    pub(crate) triage_messages: u64,
    pub(crate) triage_baseline_messages: u64,
    pub(crate) triage_concurrency: usize,
    pub(crate) cold_runs: usize,
    pub(crate) lambda_dir: PathBuf,
    pub(crate) arm64_dir: PathBuf,
    pub(crate) criterion_dir: PathBuf,
    pub(crate) out: PathBuf,
}

impl Options {
    pub(crate) fn parse() -> Result<Self, String> {
        let root = redrive_tests::workspace_root();
        let mut o = Options {
            only: None,
            moto_messages: 1000,
            localstack_messages: 1000,
            localstack_poison: 5,
            localstack_backoff_base: 60,
            fake_messages: 20_000,
            latency: Duration::from_millis(20),
            pipelines: 4,
            scale_drains: 10,
            scale_cap: 6_000,
            triage_messages: 100_000,
            triage_baseline_messages: 10_000,
            triage_concurrency: redrive_cli::scan::DEFAULT_CONCURRENCY,
            cold_runs: 10,
            lambda_dir: root.join("target/lambda"),
            arm64_dir: root.join("target/lambda-arm64"),
            criterion_dir: root.join("target/criterion"),
            out: root.join("target/bench"),
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag} needs a value"))?
                .clone();
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{flag} takes a whole number, not {value:?}"))
            };
            match flag.as_str() {
                "--only" => o.only = Some(value.split(',').map(str::to_string).collect()),
                "--moto-messages" => o.moto_messages = number()?,
                "--localstack-messages" => o.localstack_messages = number()?,
                "--localstack-poison" => o.localstack_poison = number()?,
                "--localstack-backoff-base" => o.localstack_backoff_base = number()?,
                "--fake-messages" => o.fake_messages = number()?,
                "--latency-ms" => o.latency = Duration::from_millis(number()?),
                "--pipelines" => o.pipelines = number()? as u32,
                "--scale-drains" => o.scale_drains = number()?.max(1) as u32,
                "--scale-cap" => o.scale_cap = number()?,
                "--triage-messages" => o.triage_messages = number()?.max(1),
                "--triage-baseline-messages" => o.triage_baseline_messages = number()?.max(1),
                "--triage-concurrency" => {
                    o.triage_concurrency =
                        (number()? as usize).clamp(1, redrive_cli::scan::MAX_CONCURRENCY)
                }
                "--cold-runs" => o.cold_runs = number()? as usize,
                "--lambda-dir" => o.lambda_dir = PathBuf::from(value),
                "--arm64-dir" => o.arm64_dir = PathBuf::from(value),
                "--criterion-dir" => o.criterion_dir = PathBuf::from(value),
                "--out" => o.out = PathBuf::from(value),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(o)
    }

    pub(crate) fn wants(&self, section: &str) -> bool {
        self.only.as_ref().is_none_or(|s| s.contains(section))
    }
}
