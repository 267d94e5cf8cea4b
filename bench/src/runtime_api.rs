//! A minimal Lambda Runtime API on loopback, for cold starts: it serves
//! `GET /2018-06-01/runtime/invocation/next` from a queue of events and records when each
//! request and answer arrived, so that the harness can time a bootstrap binary from its exec to
//! its first `next` (its init), and each invocation from the event served to the response.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::http1::{Head, accept_loop, read_head, read_request_body, response_head, write_message};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const PREFIX: &str = "/2018-06-01/runtime";

/// Something the runtime client did.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// A `next` request arrived.
    Next {
        at: Instant,
    },
    /// An event was handed out.
    Served {
        request_id: String,
        at: Instant,
    },
    Response {
        request_id: String,
        at: Instant,
        body: Vec<u8>,
    },
    Error {
        request_id: String,
        at: Instant,
        body: Vec<u8>,
    },
    InitError {
        at: Instant,
        body: Vec<u8>,
    },
}

#[derive(Default)]
struct Shared {
    events: Mutex<VecDeque<(String, Value)>>,
    seen: Mutex<Vec<Seen>>,
    changed: Notify,
}

impl Shared {
    fn record(&self, seen: Seen) {
        lock(&self.seen).push(seen);
        self.changed.notify_waiters();
    }
}

/// The running Runtime API. Stops accepting when dropped.
pub struct RuntimeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl RuntimeApi {
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept_loop = accept_loop(listener, shared.clone(), serve);
        Ok(Self {
            addr,
            shared,
            accept_loop,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues an invocation; `next` hands events out in order.
    pub fn push_event(&self, request_id: &str, event: Value) {
        lock(&self.shared.events).push_back((request_id.to_string(), event));
        self.shared.changed.notify_waiters();
    }

    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }

    /// Waits until `found` picks something out of what was seen, or `timeout` passes.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        found: impl Fn(&[Seen]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let changed = self.shared.changed.notified();
            if let Some(v) = found(&lock(&self.shared.seen)) {
                return Some(v);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return found(&lock(&self.shared.seen));
            }
        }
    }

    /// When the first `next` arrived.
    pub async fn first_next(&self, timeout: Duration) -> Option<Instant> {
        self.wait_for(timeout, |seen| {
            seen.iter().find_map(|s| match s {
                Seen::Next { at } => Some(*at),
                _ => None,
            })
        })
        .await
    }

    /// The time from serving `request_id` to its response (or error), and whether it succeeded.
    pub async fn invocation(
        &self,
        request_id: &str,
        timeout: Duration,
    ) -> Option<(Duration, bool)> {
        self.wait_for(timeout, |seen| {
            let served = seen.iter().find_map(|s| match s {
                Seen::Served { request_id: id, at } if id == request_id => Some(*at),
                _ => None,
            })?;
            seen.iter().find_map(|s| match s {
                Seen::Response {
                    request_id: id, at, ..
                } if id == request_id => Some((at.duration_since(served), true)),
                Seen::Error {
                    request_id: id, at, ..
                } if id == request_id => Some((at.duration_since(served), false)),
                _ => None,
            })
        })
        .await
    }

    /// The body of an init error, if the function reported one.
    pub fn init_error(&self) -> Option<String> {
        self.seen().into_iter().find_map(|s| match s {
            Seen::InitError { body, .. } => Some(String::from_utf8_lossy(&body).into_owned()),
            _ => None,
        })
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn next_event(shared: &Shared) -> (String, Value) {
    loop {
        let changed = shared.changed.notified();
        if let Some(e) = lock(&shared.events).pop_front() {
            return e;
        }
        changed.await;
    }
}

async fn serve(stream: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let Some(head) = read_head(&mut rd).await? else {
            return Ok(());
        };
        let body = read_request_body(&mut rd, &head).await?;
        let target = head.target().to_string();
        let path = target.strip_prefix(PREFIX).unwrap_or("");
        let (response, response_body): (Head, Vec<u8>) =
            if head.method() == "GET" && path == "/invocation/next" {
                shared.record(Seen::Next { at: Instant::now() });
                let (request_id, event) = next_event(&shared).await;
                shared.record(Seen::Served {
                    request_id: request_id.clone(),
                    at: Instant::now(),
                });
                let head = response_head(200)
                .with_header("content-type", "application/json")
                .with_header("lambda-runtime-aws-request-id", &request_id)
                .with_header(
                    "lambda-runtime-deadline-ms",
                    (wall_ms() + 30_000).to_string(),
                )
                .with_header(
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:123456789012:function:bench",
                )
                .with_header(
                    "lambda-runtime-trace-id",
                    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0",
                );
                (head, event.to_string().into_bytes())
            } else if head.method() == "POST" && path == "/init/error" {
                shared.record(Seen::InitError {
                    at: Instant::now(),
                    body,
                });
                (response_head(202), b"{}".to_vec())
            } else if let Some(rest) = path.strip_prefix("/invocation/")
                && head.method() == "POST"
            {
                let (request_id, what) = rest.rsplit_once('/').unwrap_or((rest, ""));
                let request_id = request_id.to_string();
                let at = Instant::now();
                match what {
                    "response" => shared.record(Seen::Response {
                        request_id,
                        at,
                        body,
                    }),
                    "error" => shared.record(Seen::Error {
                        request_id,
                        at,
                        body,
                    }),
                    _ => {}
                }
                (response_head(202), b"{}".to_vec())
            } else {
                (response_head(404), b"{}".to_vec())
            };
        write_message(&mut wr, &response, &response_body).await?;
    }
}

/// The environment Lambda sets for a custom runtime (`provided.al2023`), for a function of
/// `memory_mb` with these extra variables (its configuration, `AWS_ENDPOINT_URL`...).
pub fn lambda_env(
    runtime_api: &str,
    function_name: &str,
    task_root: &Path,
    memory_mb: u32,
) -> Vec<(String, String)> {
    let root = task_root.display().to_string();
    [
        ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_string()),
        ("AWS_LAMBDA_FUNCTION_NAME", function_name.to_string()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_string()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{function_name}"),
        ),
        (
            "AWS_LAMBDA_LOG_STREAM_NAME",
            "2026/11/21/[$LATEST]bench".to_string(),
        ),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_string()),
        (
            "AWS_EXECUTION_ENV",
            "AWS_Lambda_provided.al2023".to_string(),
        ),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_DEFAULT_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
        ("AWS_SESSION_TOKEN", "testing".to_string()),
        ("_HANDLER", "bootstrap".to_string()),
        ("LAMBDA_TASK_ROOT", root.clone()),
        ("LAMBDA_RUNTIME_DIR", root),
        ("TZ", ":UTC".to_string()),
        ("LANG", "en_US.UTF-8".to_string()),
        ("PATH", "/usr/local/bin:/usr/bin/:/bin:/opt/bin".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Starts a bootstrap binary with exactly `env`, output discarded (Lambda would ship it to
/// CloudWatch Logs). Returns the child and the instant just before its exec.
pub fn exec(binary: &Path, env: &[(String, String)]) -> io::Result<(Child, Instant)> {
    let mut command = Command::new(binary);
    command
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(binary.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let child = command.spawn()?;
    Ok((child, started))
}

/// Peak resident memory of a live process (`VmHWM`), in kilobytes.
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn request(addr: &str, raw: String) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn serves_events_in_order_and_records_the_answers() {
        let api = RuntimeApi::start().await.unwrap();
        api.push_event("req-1", serde_json::json!({"a": 1}));
        let answer = request(
            &api.address(),
            "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: x\r\n\r\n".into(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("lambda-runtime-aws-request-id: req-1"));
        assert!(answer.ends_with(r#"{"a":1}"#));
        assert!(api.first_next(Duration::from_secs(1)).await.is_some());

        let answer = request(
            &api.address(),
            "POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\nContent-Length: 2\r\n\r\nok".into(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
        let (took, ok) = api
            .invocation("req-1", Duration::from_secs(1))
            .await
            .expect("answered");
        assert!(ok && took < Duration::from_secs(1));
        assert_eq!(api.init_error(), None);
    }

    #[test]
    fn the_environment_is_lambdas() {
        let env = lambda_env("127.0.0.1:9", "f", Path::new("/var/task"), 128);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("AWS_LAMBDA_RUNTIME_API"), Some("127.0.0.1:9"));
        assert_eq!(get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"), Some("128"));
        assert_eq!(get("LAMBDA_TASK_ROOT"), Some("/var/task"));
    }

    #[test]
    fn peak_memory_of_this_process_is_readable() {
        let kb = peak_rss_kb(std::process::id()).expect("VmHWM on Linux");
        assert!(kb > 100, "{kb}");
    }
}
