//! Runs the workspace's Lambdas under `cargo lambda watch` and invokes them.
//!
//! How cargo-lambda 1.9.2 behaves here (checked against its source and by experiment):
//! - `cargo lambda watch -A 127.0.0.1 -P PORT --ignore-changes` serves the Lambda invoke API
//!   on `http://127.0.0.1:PORT/2015-03-31/functions/<bin>/invocations`; `--ignore-changes`
//!   stops it from rebuilding and restarting a function when a file changes.
//! - It starts a function on its first invoke with `cargo run --manifest-path Cargo.toml
//!   --bin <bin>` (dev profile, no extra flags; the function process gets cargo-lambda's
//!   own environment plus AWS_LAMBDA_RUNTIME_API and friends). It needs a fixed port: with
//!   `-P 0` the function would be told port 0.
//! - A function error comes back as HTTP 500 with the runtime's error document
//!   `{"errorType": "...", "errorMessage": "..."}`; a panic too ("Lambda panicked: ...").
//! - A function process that exits (a failed init, a build error) is logged as
//!   "command exited" and its pending invokes are never answered: `invoke` watches for
//!   that and fails at once with the log's tail instead of hanging.
//! - Every invocation's deadline (`lambda-runtime-deadline-ms`) is the constant 600000, i.e.
//!   1970-01-01T00:10:00Z: a handler that budgets its time from `Context::deadline` sees none.
//!
//! Cost: `cargo run --bin X` resolves features without dev-dependencies, while
//! `cargo test --workspace` resolves them with (aws-smithy-mocks, proptest, ... turn on
//! features of serde_json, aws-smithy-http-client, ...). The functions therefore build as a
//! second variant of most of the dependency graph, once per target dir; it is the variant
//! that `cargo lambda build` ships, features-wise. `start` builds it up front with
//! `cargo build --bin X` (identical selection, so the later `cargo run` finds it fresh),
//! with cargo's progress on stderr.
//!
//! Lifetime: cargo lambda watch runs under a guard (see `process`) in its own process group;
//! dropping the `LambdaWatch`, or the test process dying in any way, stops it, and its
//! functions exit with it (they lose their runtime API).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::{Guarded, free_port};
use crate::{unique_name, venv_bin, workspace_root};

/// Options for `LambdaWatch::start_with`; `Default` gives what `LambdaWatch::start` uses.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// The binaries (function names) the test will invoke; built before the server starts
    /// so that a compile error fails `start` with cargo's output. Empty: every binary of
    /// the workspace. Any workspace binary can be invoked either way.
    pub bins: Vec<String>,
    /// Environment of the functions (e.g. `moto().env()` plus their configuration). Every
    /// inherited `AWS_*` variable (but the build's `AWS_LC_*`) is removed first, so nothing
    /// reaches real AWS by accident.
    pub env: Vec<(String, String)>,
    /// Function instances per function (`--concurrency`), for concurrent invokes.
    pub concurrency: usize,
    /// How long one `invoke` waits for its answer.
    pub invoke_timeout: Duration,
    /// How long `start` waits for the server to listen (the build before it has no limit).
    pub startup_timeout: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            bins: Vec::new(),
            env: Vec::new(),
            concurrency: 1,
            invoke_timeout: Duration::from_secs(120),
            startup_timeout: Duration::from_secs(1800),
        }
    }
}

/// A running `cargo lambda watch`, stopped (with the functions it started) when dropped.
#[derive(Debug)]
pub struct LambdaWatch {
    guard: Guarded,
    port: u16,
    log_path: PathBuf,
    invoke_timeout: Duration,
}

impl Drop for LambdaWatch {
    fn drop(&mut self) {
        self.guard.stop(Duration::from_secs(10));
        // Keep the log of a failing test (and say where it is); drop a passing test's.
        if std::thread::panicking() {
            eprintln!("cargo lambda watch log: {}", self.log_path.display());
        } else {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// Lines of the log quoted in an error.
const LOG_TAIL_LINES: usize = 40;
/// Lines that cargo-lambda logs when a function process ends; its invokes then never return.
const FUNCTION_ENDED: [&str; 4] = [
    "command exited",
    "command killed",
    "command stopped",
    "command ended by exception",
];

impl LambdaWatch {
    /// Builds `bins`, starts `cargo lambda watch` serving them with `env`, and waits until
    /// it listens. See `WatchOptions` for the details.
    pub async fn start(bins: &[&str], env: &[(String, String)]) -> LambdaWatch {
        LambdaWatch::start_with(WatchOptions {
            bins: bins.iter().map(|b| b.to_string()).collect(),
            env: env.to_vec(),
            ..WatchOptions::default()
        })
        .await
    }

    pub async fn start_with(options: WatchOptions) -> LambdaWatch {
        let cargo_lambda = venv_bin().join("cargo-lambda");
        if !cargo_lambda.exists() {
            panic!(
                "{} is missing: run `make setup` (it installs cargo-lambda==1.9.2 into .venv)",
                cargo_lambda.display()
            );
        }
        let (env, env_remove) = child_environment(&options.env);
        prebuild(&options, &env, &env_remove).await;

        let log_dir = target_dir().join("lambda-watch");
        std::fs::create_dir_all(&log_dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_dir.display()));
        let mut last_failure = String::new();
        // The port is chosen before cargo-lambda binds it; another process could take it
        // in between, so a bind failure is retried on a fresh port.
        for _ in 0..3 {
            let port = free_port();
            let log_path = log_dir.join(format!("{}.log", unique_name("watch")));
            let log = File::create(&log_path)
                .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
            let args: Vec<String> = [
                "lambda",
                "watch",
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
                "--ignore-changes",
                "--concurrency",
                &options.concurrency.to_string(),
                "--manifest-path",
                "Cargo.toml",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let guard = Guarded::spawn(
                &cargo_lambda,
                &args,
                workspace_root(),
                &env,
                &env_remove,
                &log,
            )
            .unwrap_or_else(|e| panic!("starting {}: {e}", cargo_lambda.display()));
            let watch = LambdaWatch {
                guard,
                port,
                log_path,
                invoke_timeout: options.invoke_timeout,
            };
            match watch.wait_until_listening(options.startup_timeout).await {
                Ok(()) => return watch,
                Err(failure) => last_failure = failure,
            }
            if !last_failure.contains("in use") {
                break;
            }
        }
        panic!("cargo lambda watch did not start: {last_failure}");
    }

    async fn wait_until_listening(&self, timeout: Duration) -> Result<(), String> {
        let started = Instant::now();
        let announced = format!("runtime_addr=127.0.0.1:{}", self.port);
        loop {
            if !self.guard.is_running() {
                return Err(format!("it exited. Its log:\n{}", self.log_tail()));
            }
            if self.log().contains(&announced)
                && TcpStream::connect(("127.0.0.1", self.port)).await.is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "not listening on {} after {timeout:?}. Its log:\n{}",
                    self.port,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Process id of the guard running `cargo lambda watch`; it leads the process group
    /// and exits only after cargo lambda watch has.
    pub fn pid(&self) -> u32 {
        self.guard.pid()
    }

    /// The Lambda Invoke API address of one function.
    pub fn invoke_url(&self, function: &str) -> String {
        format!(
            "{}/2015-03-31/functions/{function}/invocations",
            self.endpoint()
        )
    }

    /// Everything cargo lambda watch and its functions printed so far (the functions'
    /// stdout and stderr included, so tests can read their JSON log lines).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Invokes `function` (a binary name) with `event` and returns its JSON answer.
    ///
    /// `Err` holds, for a function error or panic, the runtime's error document verbatim
    /// (`{"errorType":"…","errorMessage":"…"}`, parseable JSON); for anything else (an
    /// unknown function, the function process exiting, a timeout) a sentence that starts
    /// with `invoke <function>:` and quotes the tail of the log.
    pub async fn invoke(&self, function: &str, event: &Value) -> Result<Value, String> {
        let body = serde_json::to_vec(event).expect("a JSON value serializes");
        let path = format!("/2015-03-31/functions/{function}/invocations");
        let log_offset = self.log_len();
        let outcome = tokio::select! {
            response = post(self.port, &path, &body) => response,
            ended = self.function_ended(log_offset) => Err(ended),
            _ = tokio::time::sleep(self.invoke_timeout) => {
                Err(format!("no answer within {:?}", self.invoke_timeout))
            }
        };
        let (status, text) =
            outcome.map_err(|e| format!("invoke {function}: {e}. Log:\n{}", self.log_tail()))?;
        if (200..300).contains(&status) {
            let value: Value = if text.trim().is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).map_err(|e| {
                    format!("invoke {function}: the answer is not JSON ({e}): {text}")
                })?
            };
            return Ok(value);
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(document) if document.get("errorType").is_some() => Err(text),
            _ => Err(format!(
                "invoke {function}: HTTP {status}: {text}. Log:\n{}",
                self.log_tail()
            )),
        }
    }

    /// Resolves (with a description) once the log shows a function process ending after
    /// `offset`, or cargo lambda watch itself exits; never resolves otherwise.
    async fn function_ended(&self, offset: u64) -> String {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if !self.guard.is_running() {
                return "cargo lambda watch exited".to_string();
            }
            let new = self.log_since(offset);
            if let Some(line) = new
                .lines()
                .find(|line| FUNCTION_ENDED.iter().any(|m| line.contains(m)))
            {
                return format!("the function process ended ({})", line.trim());
            }
        }
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    fn log_since(&self, offset: u64) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.log_path)
            && file.seek(SeekFrom::Start(offset)).is_ok()
        {
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

/// The environment of cargo-lambda (and so of cargo and the functions): ours, without the
/// SDK's `AWS_*` settings, with `.venv/bin` first on PATH, plus `extra`.
fn child_environment(extra: &[(String, String)]) -> (Vec<(String, String)>, Vec<String>) {
    let remove: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        // AWS_LC_* configure the aws-lc-sys build (its build script tracks them): keep them,
        // or the nested cargo would rebuild the TLS stack.
        .filter(|k| k.starts_with("AWS_") && !k.starts_with("AWS_LC_"))
        .collect();
    let venv = venv_bin();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut entries: Vec<PathBuf> = std::env::split_paths(&path).collect();
    // Only prepend when missing, so that cargo sees the same PATH as the outer build did
    // under `make test` (a changed PATH can invalidate build scripts that track it).
    if entries.first() != Some(&venv) {
        entries.insert(0, venv);
    }
    let path = std::env::join_paths(entries).expect("PATH entries contain no separator");
    let mut env = vec![(
        "PATH".to_string(),
        path.into_string().expect("PATH is UTF-8"),
    )];
    env.extend(extra.iter().cloned());
    (env, remove)
}

/// `cargo build --bin …` with the same package selection, profile and environment as the
/// `cargo run --bin …` that cargo lambda watch will issue, so that run finds everything fresh.
async fn prebuild(options: &WatchOptions, env: &[(String, String)], env_remove: &[String]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args(["build", "--manifest-path", "Cargo.toml"]);
    if options.bins.is_empty() {
        command.arg("--bins");
    }
    for bin in &options.bins {
        command.args(["--bin", bin]);
    }
    for name in env_remove {
        command.env_remove(name);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    // cargo's progress goes straight to our stderr (libtest does not capture a child's
    // output): the first build of a variant can take minutes and should say so.
    command.stdout(Stdio::null()).stderr(Stdio::inherit());
    let description = format!("{command:?}");
    let status = tokio::task::spawn_blocking(move || command.status())
        .await
        .expect("the build task does not panic")
        .unwrap_or_else(|e| panic!("running {description}: {e}"));
    if !status.success() {
        panic!(
            "building the Lambdas failed ({status}): see cargo's output above. Command: {description}"
        );
    }
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

/// A one-shot HTTP/1.1 POST (`Connection: close`); returns the status and the body.
async fn post(port: u16, path: &str, body: &[u8]) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream
        .write_all(&request)
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("incomplete HTTP answer: {:?}", String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {head:?}"))?;
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunked body")?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err("truncated chunk".to_string());
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_answers() {
        let plain = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(plain).unwrap(), (500, "{}".to_string()));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked).unwrap(),
            (200, "{\"a\":1}".to_string())
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
