//! A minimal Lambda Runtime API on loopback, for cold starts: it serves
//! `GET /2018-06-01/runtime/invocation/next` from a queue of events and records when each
//! request and answer arrived, so that the harness can time a bootstrap binary from its exec to
//! its first `next` (its init), and each invocation from the event served to the response.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_shared::sync::lock;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::loopback::{Answer, Call, Server, respond};

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
    server: Server,
    shared: Arc<Shared>,
}

impl RuntimeApi {
    pub async fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let server = Server::start({
            let shared = shared.clone();
            move |call| serve(call, shared.clone())
        })
        .await?;
        Ok(Self { server, shared })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.server.addr().to_string()
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
    u64::try_from(redrive_shared::clock::now_ms()).unwrap_or(0)
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

async fn serve(call: Call, shared: Arc<Shared>) -> Answer {
    let path = call.head.uri.path().strip_prefix(PREFIX).unwrap_or("");
    let post = call.head.method == "POST";
    if call.head.method == "GET" && path == "/invocation/next" {
        shared.record(Seen::Next { at: Instant::now() });
        let (request_id, event) = next_event(&shared).await;
        shared.record(Seen::Served {
            request_id: request_id.clone(),
            at: Instant::now(),
        });
        let deadline = (wall_ms() + 30_000).to_string();
        return respond(
            200,
            &[
                ("content-type", "application/json"),
                ("lambda-runtime-aws-request-id", &request_id),
                ("lambda-runtime-deadline-ms", &deadline),
                (
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:123456789012:function:bench",
                ),
                (
                    "lambda-runtime-trace-id",
                    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0",
                ),
            ],
            event.to_string(),
        );
    }
    let (at, body) = (Instant::now(), call.body.to_vec());
    if post && path == "/init/error" {
        shared.record(Seen::InitError { at, body });
    } else if let Some(rest) = path.strip_prefix("/invocation/")
        && post
    {
        let (request_id, what) = rest.rsplit_once('/').unwrap_or((rest, ""));
        let request_id = request_id.to_string();
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
    } else {
        return respond(404, &[], "{}");
    }
    respond(202, &[], "{}")
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
        // Static keys and no session token: moto authorizes every call, and it takes a
        // session token for one of its own STS sessions (the bench passes a role's user keys).
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
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
    use tokio::net::TcpStream;

    /// One request on a connection of its own, as raw HTTP/1; the whole answer.
    async fn request(addr: &str, raw: String) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn serves_events_in_order_and_records_the_answers() {
        let api = RuntimeApi::start().await.unwrap();
        api.push_event("req-1", serde_json::json!({"a": 1}));
        let answer = request(
            &api.address(),
            "GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("lambda-runtime-aws-request-id: req-1"));
        assert!(answer.ends_with(r#"{"a":1}"#));
        assert!(api.first_next(Duration::from_secs(1)).await.is_some());

        let answer = request(
            &api.address(),
            "POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok".into(),
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
