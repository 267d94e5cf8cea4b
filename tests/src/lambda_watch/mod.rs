//! Runs the workspace's Lambdas under `cargo lambda watch` and invokes them.
//!
//! One build serves the tests, the demo and the functions. `make test` builds with
//! `cargo test --workspace --lib --tests --benches --examples`, whose feature resolution includes the
//! dev-dependencies (aws-smithy-mocks, proptest, ... turn on features of serde, hyper,
//! getrandom, ...); `cargo run --bin X`, which `cargo lambda watch` issues to start a function,
//! resolves without them and so builds a second variant of most of the dependency graph
//! (2 min 48 s on a fresh clone). So the runner does not let cargo-lambda build anything:
//! - `build_lambdas` runs `cargo build --workspace --examples --bin X ...` (see `BUILD_ARGS`):
//!   the whole workspace selected and an example target requested is what makes cargo resolve
//!   features exactly as `make test`'s `cargo test --workspace` does, while it builds only the
//!   binaries (and the small examples). After `make test`'s build it compiles no dependency;
//!   on a fresh clone `make demo` (scripts/demo.sh, same arguments) compiles the graph once.
//!   The test `first_ten_minutes_the_lambda_build_reuses_the_test_build` holds this.
//! - `cargo lambda watch --only-lambda-apis` serves the Lambda invoke and runtime APIs only;
//!   the runner starts the built executables itself with the environment cargo-lambda would
//!   give them (`AWS_LAMBDA_RUNTIME_API=http://127.0.0.1:PORT/.rt/<function>`,
//!   `AWS_LAMBDA_FUNCTION_NAME`, version and memory), `concurrency` instances of a function at
//!   its first invoke, and again after they ended.
//!
//! The functions thus run with the dev-dependency feature set; `cargo lambda build` ships them
//! without it (features only add code: nothing the handlers use changes).
//!
//! How cargo-lambda 1.9.2 behaves here (checked against its source and by experiment):
//! - `cargo lambda watch -A 127.0.0.1 -P PORT --only-lambda-apis` serves the Lambda invoke API
//!   on `http://127.0.0.1:PORT/2015-03-31/functions/<bin>/invocations` and queues each invoke
//!   until an instance of that function asks `/.rt/<bin>/2018-06-01/runtime/invocation/next`.
//!   A name that is no binary of the workspace is answered with 404 at once.
//! - A function error comes back as HTTP 500 with the runtime's error document
//!   `{"errorType": "...", "errorMessage": "..."}`; a panic too ("Lambda panicked: ...").
//! - Every invocation's deadline (`lambda-runtime-deadline-ms`) is the constant 600000, i.e.
//!   1970-01-01T00:10:00Z: a handler that budgets its time from `Context::deadline` sees none.
//!
//! IAM: a function whose binary has a role in `infra/templates/` runs with the credentials of
//! that role's policy, rendered for the resources its environment names (`crate::iam`).
//!
//! A function process that exits (a failed init) would leave its invokes unanswered: `invoke`
//! watches the instances and fails at once with the log's tail instead of hanging.
//!
//! Lifetime: cargo lambda watch and every function instance run under a guard (see `process`)
//! in their own process groups; dropping the `LambdaWatch`, or the test process dying in any
//! way, stops them.

mod build;
mod http;

use build::workspace_bins;
pub(crate) use build::{build_lambdas, target_dir};
pub use http::invocation_ids;
use http::post;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redrive_shared::sync::lock;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::process::{Guarded, free_port};
use crate::{unique_name, venv_bin, workspace_root};

/// Options for `LambdaWatch::start_with`; `Default` gives what `LambdaWatch::start` uses.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// The binaries (function names) the test will invoke; built before the server starts
    /// so that a compile error fails `start` with cargo's output. Empty: every binary of
    /// the workspace. Another workspace binary is built at its first invoke.
    pub bins: Vec<String>,
    /// Environment of the functions (e.g. `moto().env()` plus their configuration). Every
    /// inherited `AWS_*` variable (but the build's `AWS_LC_*`) is removed first, so nothing
    /// reaches real AWS by accident. On a moto of this process, a function with a role runs
    /// with that role's credentials instead of these (`crate::iam::env_for_binary`).
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
    /// Function instances by function name; stopped before the server.
    instances: Mutex<HashMap<String, Vec<Guarded>>>,
    guard: Guarded,
    port: u16,
    log_path: PathBuf,
    log_file: File,
    invoke_timeout: Duration,
    concurrency: usize,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    executables: Mutex<HashMap<String, PathBuf>>,
    compiled_dependencies: BTreeSet<String>,
}

impl Drop for LambdaWatch {
    fn drop(&mut self) {
        let instances = std::mem::take(self.instances.get_mut().unwrap_or_else(|e| e.into_inner()));
        for mut instance in instances.into_values().flatten() {
            instance.stop(Duration::from_secs(10));
        }
        self.guard.stop(Duration::from_secs(10));
        // Keep the log of a failing test (and say where it is); drop a passing test's.
        if std::thread::panicking() {
            eprintln!("cargo lambda watch log: {}", self.log_path.display());
            return;
        }
        // A call the function's role does not allow fails the test even where the function
        // carries on (a fail-soft path that logs it): on AWS it would be refused the same way.
        let log = self.log();
        let refused: Vec<&str> = log
            .lines()
            .filter(|line| line.contains(ACCESS_DENIED))
            .take(3)
            .collect();
        if !refused.is_empty() {
            panic!(
                "a function's call was refused by its role's policy (infra/templates/): grant it there. Log {}:\n{}",
                self.log_path.display(),
                refused.join("\n")
            );
        }
        let _ = std::fs::remove_file(&self.log_path);
    }
}

/// What moto's (and AWS's) refusal of a call says in the functions' logs.
const ACCESS_DENIED: &str = "is not authorized to perform";

/// Lines of the log quoted in an error.
const LOG_TAIL_LINES: usize = 40;

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
        let bins = options.bins.clone();
        let build = tokio::task::spawn_blocking(move || build_lambdas(&bins))
            .await
            .expect("the build task does not panic")
            .unwrap_or_else(|e| panic!("building the Lambdas failed: {e}"));
        let (env, env_remove) = child_environment(&options.env);
        let (server_env, _) = child_environment(&[]);

        let log_dir = target_dir().join("lambda-watch");
        std::fs::create_dir_all(&log_dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_dir.display()));
        let mut last_failure = String::new();
        // The port is chosen before cargo-lambda binds it; another process could take it
        // in between, so a bind failure is retried on a fresh port.
        for _ in 0..3 {
            let port = free_port();
            let log_path = log_dir.join(format!("{}.log", unique_name("watch")));
            // Appending: the server and every function instance write to it.
            let log_file = File::options()
                .create(true)
                .append(true)
                .open(&log_path)
                .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
            let args: Vec<String> = [
                "lambda",
                "watch",
                "--only-lambda-apis",
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
                &port.to_string(),
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
                &server_env,
                &env_remove,
                &log_file,
            )
            .unwrap_or_else(|e| panic!("starting {}: {e}", cargo_lambda.display()));
            let watch = LambdaWatch {
                instances: Mutex::new(HashMap::new()),
                guard,
                port,
                log_path,
                log_file,
                invoke_timeout: options.invoke_timeout,
                concurrency: options.concurrency.max(1),
                env: env.clone(),
                env_remove: env_remove.clone(),
                executables: Mutex::new(build.executables.clone()),
                compiled_dependencies: build.compiled_dependencies.clone(),
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

    /// The packages outside the workspace that `start`'s build compiled: none after
    /// `make test`'s build or an earlier `make demo`.
    pub fn compiled_dependencies(&self) -> &BTreeSet<String> {
        &self.compiled_dependencies
    }

    /// The Lambda Invoke API address of one function.
    pub fn invoke_url(&self, function: &str) -> String {
        format!(
            "{}/2015-03-31/functions/{function}/invocations",
            self.endpoint()
        )
    }

    /// Everything cargo lambda watch and the functions printed so far (the functions'
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
        let started = self.ensure_instances(function).await?;
        let outcome = tokio::select! {
            response = post(self.port, &path, &body) => response,
            ended = self.function_ended(function, started) => Err(ended),
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

    /// [`invoke`](Self::invoke), plus the functions' JSON log lines (objects with a `level`)
    /// written while it ran, in order: with one instance and one invoke at a time, the lines of
    /// this invocation, preceded at a cold start by the instance's init lines.
    pub async fn invoke_logged(
        &self,
        function: &str,
        event: &Value,
    ) -> (Result<Value, String>, Vec<Value>) {
        let from = std::fs::metadata(&self.log_path).map_or(0, |m| m.len() as usize);
        let outcome = self.invoke(function, event).await;
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        let written = String::from_utf8_lossy(log.get(from..).unwrap_or_default()).into_owned();
        let lines = written
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line.get("level").is_some())
            .collect();
        (outcome, lines)
    }

    /// Starts the instances of `function` now; `invoke` otherwise starts them at the first
    /// invoke. For invokes that do not come through `invoke`: a state machine's Lambda tasks
    /// that `moto_sfn` routes to this server (`Moto::route_lambda` calls it). Instances that
    /// end are started again only by the next `invoke` or `start_function`.
    pub async fn start_function(&self, function: &str) -> Result<(), String> {
        if self.ensure_instances(function).await? {
            Ok(())
        } else {
            Err(format!(
                "start_function {function}: not a binary of the workspace"
            ))
        }
    }

    /// Starts `concurrency` instances of `function` unless they run: at its first invoke,
    /// and again after they ended (as cargo-lambda starts a function again). Returns whether
    /// it has instances (false: not a binary of the workspace; cargo-lambda answers 404).
    async fn ensure_instances(&self, function: &str) -> Result<bool, String> {
        let mut executable = self.executable(function);
        if executable.is_none() {
            // A workspace binary that `bins` did not list is built now; any other name is
            // left to cargo-lambda (404).
            let name = function.to_string();
            let built = tokio::task::spawn_blocking(move || {
                workspace_bins()
                    .contains(&name)
                    .then(|| build_lambdas(&[name]))
            })
            .await
            .expect("the build task does not panic");
            if let Some(built) = built {
                let built = built.map_err(|e| format!("building the function failed: {e}"))?;
                lock(&self.executables).extend(built.executables);
                executable = self.executable(function);
            }
        }
        let Some(executable) = executable else {
            return Ok(false);
        };
        let mut instances = lock(&self.instances);
        let running = instances.entry(function.to_string()).or_default();
        if running.len() == self.concurrency && running.iter().all(Guarded::is_running) {
            return Ok(true);
        }
        for mut ended in running.drain(..) {
            ended.stop(Duration::from_secs(1));
        }
        let mut env = self.env.clone();
        env.extend([
            ("AWS_LAMBDA_FUNCTION_VERSION".to_string(), "1".to_string()),
            (
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".to_string(),
                "4096".to_string(),
            ),
            (
                "AWS_LAMBDA_RUNTIME_API".to_string(),
                format!("http://127.0.0.1:{}/.rt/{function}", self.port),
            ),
            ("AWS_LAMBDA_FUNCTION_NAME".to_string(), function.to_string()),
        ]);
        // The function's role, as on AWS: a call its template does not allow is refused.
        let env = crate::iam::env_for_binary(&env, function);
        for _ in 0..self.concurrency {
            let instance = Guarded::spawn(
                &executable,
                &[],
                workspace_root(),
                &env,
                &self.env_remove,
                &self.log_file,
            )
            .map_err(|e| format!("invoke {function}: starting {}: {e}", executable.display()))?;
            running.push(instance);
        }
        Ok(true)
    }

    fn executable(&self, function: &str) -> Option<PathBuf> {
        lock(&self.executables).get(function).cloned()
    }

    /// Resolves (with a description) once an instance of `function` ended, or cargo lambda
    /// watch itself exits; never resolves otherwise.
    async fn function_ended(&self, function: &str, has_instances: bool) -> String {
        loop {
            if !self.guard.is_running() {
                return "cargo lambda watch exited".to_string();
            }
            if has_instances {
                let instances = lock(&self.instances);
                if let Some(ended) = instances
                    .get(function)
                    .into_iter()
                    .flatten()
                    .find(|i| !i.is_running())
                {
                    return format!("the function process ended (pid {})", ended.pid());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

/// The environment of cargo-lambda and the functions: ours, without the SDK's `AWS_*`
/// settings, with `.venv/bin` first on PATH, plus `extra`.
fn child_environment(extra: &[(String, String)]) -> (Vec<(String, String)>, Vec<String>) {
    let remove: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("AWS_") && !k.starts_with("AWS_LC_"))
        .collect();
    let venv = venv_bin();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut entries: Vec<PathBuf> = std::env::split_paths(&path).collect();
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
