//! A scriptable downstream HTTP server for the consumer Lambda: counts deliveries per
//! `Idempotency-Key` and answers according to a switchable mode.
//!
//! A plain tokio `TcpListener` with a minimal HTTP/1.1 parser (Content-Length bodies,
//! keep-alive, `Connection: close`), so that the harness needs no HTTP framework.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How the downstream answers every request (unless a body rule matches first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 200.
    Healthy,
    /// This status, e.g. 503 (transient for the consumer) or 400 (permanent).
    Status(u16),
    /// 429 with `Retry-After: <retry_after_secs>`.
    TooManyRequests { retry_after_secs: u64 },
    /// Sleeps this long, then 200. The delivery counts even when the client gave up
    /// meanwhile: the side effect happened, as with a real slow service.
    Slow(Duration),
}

/// One request as the downstream saw it, with the status it answered.
#[derive(Clone, Debug)]
pub struct ReceivedRequest {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub idempotency_key: Option<String>,
    pub body: Vec<u8>,
    pub status: u16,
}

impl ReceivedRequest {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct State {
    mode: Mode,
    /// (marker, status): a POST whose body contains the marker gets the status, whatever
    /// the mode. The first matching rule wins.
    body_rules: Vec<(String, u16)>,
    log: Vec<ReceivedRequest>,
}

/// The running server. Stops accepting when dropped.
#[derive(Debug)]
pub struct Downstream {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept_loop: JoinHandle<()>,
}

impl Downstream {
    /// Binds 127.0.0.1:0 and serves on the current tokio runtime, in `Mode::Healthy`.
    pub async fn start() -> Downstream {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("binding the downstream test server on 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("a bound socket has an address");
        let state = Arc::new(Mutex::new(State {
            mode: Mode::Healthy,
            body_rules: Vec::new(),
            log: Vec::new(),
        }));
        let accept_state = state.clone();
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    // A connection error only ends that connection.
                    let _ = serve_connection(stream, state).await;
                });
            }
        });
        Downstream {
            addr,
            state,
            accept_loop,
        }
    }

    /// `http://127.0.0.1:PORT/deliver` (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/deliver", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    pub fn mode(&self) -> Mode {
        self.lock().mode.clone()
    }

    /// Any POST whose body contains `marker` gets `status` (e.g. 400 for a malformed order)
    /// from now on, whatever the mode.
    pub fn reject_bodies_containing(&self, marker: &str, status: u16) {
        self.lock().body_rules.push((marker.to_string(), status));
    }

    /// Successful (2xx) deliveries that carried this `Idempotency-Key`: the side effects.
    /// `key` may also be a chain id: the default key is `<originalMessageId>:<body digest>`.
    pub fn deliveries(&self, key: &str) -> usize {
        self.count(|r| r.is_success() && keyed_by(r, key))
    }

    /// Every request that carried this `Idempotency-Key` (or chain id), whatever the answer.
    pub fn attempts(&self, key: &str) -> usize {
        self.count(|r| keyed_by(r, key))
    }

    /// All successful (2xx) deliveries.
    pub fn total(&self) -> usize {
        self.count(ReceivedRequest::is_success)
    }

    /// All requests, whatever the answer.
    pub fn total_attempts(&self) -> usize {
        self.count(|_| true)
    }

    /// The distinct keys delivered successfully at least once, sorted.
    pub fn keys(&self) -> Vec<String> {
        let keys: BTreeSet<String> = self
            .lock()
            .log
            .iter()
            .filter(|r| r.is_success())
            .filter_map(|r| r.idempotency_key.clone())
            .collect();
        keys.into_iter().collect()
    }

    /// Every request so far, in arrival order of their answers.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.lock().log.clone()
    }

    fn count(&self, predicate: impl Fn(&ReceivedRequest) -> bool) -> usize {
        self.lock().log.iter().filter(|r| predicate(r)).count()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock must not hide this test's own failure.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

struct Head {
    method: String,
    path: String,
    version: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn keep_alive(&self) -> bool {
        let connection = self.header("connection").map(str::to_ascii_lowercase);
        match connection.as_deref() {
            Some(c) if c.contains("close") => false,
            Some(c) if c.contains("keep-alive") => true,
            _ => self.version == "HTTP/1.1",
        }
    }
}

async fn serve_connection(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(8 * 1024);
    loop {
        // Head: read until the blank line.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i;
            }
            if buf.len() > MAX_HEAD_BYTES {
                return respond(&mut stream, 431, &[], b"", false).await;
            }
            if read_more(&mut stream, &mut buf).await? == 0 {
                return Ok(()); // client closed between requests
            }
        };
        let Some(head) = parse_head(&buf[..head_end]) else {
            return respond(&mut stream, 400, &[], b"{\"error\":\"bad request\"}", false).await;
        };
        buf.drain(..head_end + 4);

        if head.header("transfer-encoding").is_some() {
            return respond(
                &mut stream,
                411,
                &[],
                b"{\"error\":\"length required\"}",
                false,
            )
            .await;
        }
        let length = match head.header("content-length").map(str::parse::<usize>) {
            None => 0,
            Some(Ok(n)) if n <= MAX_BODY_BYTES => n,
            Some(_) => return respond(&mut stream, 413, &[], b"", false).await,
        };
        if head
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
        {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        while buf.len() < length {
            if read_more(&mut stream, &mut buf).await? == 0 {
                return Ok(()); // truncated body: the client went away
            }
        }
        let body: Vec<u8> = buf.drain(..length).collect();
        let keep_alive = head.keep_alive();

        let (status, extra_headers) = answer(&state, &head, body).await;
        let payload: &[u8] = if status == 204 || status == 304 {
            b"" // these statuses carry no body
        } else if (200..300).contains(&status) {
            b"{\"ok\":true}"
        } else {
            b"{\"error\":\"downstream test server says no\"}"
        };
        respond(&mut stream, status, &extra_headers, payload, keep_alive).await?;
        if !keep_alive {
            return Ok(());
        }
    }
}

/// Decides the answer, waits if the mode says so, and records the request.
async fn answer(
    state: &Arc<Mutex<State>>,
    head: &Head,
    body: Vec<u8>,
) -> (u16, Vec<(String, String)>) {
    let (mode, rule) = {
        let state = state.lock().unwrap_or_else(|p| p.into_inner());
        let rule = state
            .body_rules
            .iter()
            .find(|(marker, _)| find(&body, marker.as_bytes()).is_some())
            .map(|(_, status)| *status);
        (state.mode.clone(), rule)
    };
    let (status, extra_headers) = match (head.method.as_str(), rule, mode) {
        ("POST", Some(status), _) => (status, vec![]),
        ("POST", None, Mode::Healthy) => (200, vec![]),
        ("POST", None, Mode::Status(status)) => (status, vec![]),
        ("POST", None, Mode::TooManyRequests { retry_after_secs }) => (
            429,
            vec![("Retry-After".to_string(), retry_after_secs.to_string())],
        ),
        ("POST", None, Mode::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            (200, vec![])
        }
        _ => (405, vec![("Allow".to_string(), "POST".to_string())]),
    };
    let request = ReceivedRequest {
        method: head.method.clone(),
        path: head.path.clone(),
        idempotency_key: head.header("idempotency-key").map(str::to_string),
        headers: head.headers.clone(),
        body,
        status,
    };
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .log
        .push(request);
    (status, extra_headers)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 8 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    extra_headers: &[(String, String)],
    body: &[u8],
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    out.push_str("Content-Type: application/json\r\n");
    out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    for (name, value) in extra_headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !keep_alive {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await?;
    stream.flush().await
}

fn parse_head(raw: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let version = request_line.next()?.to_string();
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Head {
        method,
        path,
        version,
        headers,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// True when the request's `Idempotency-Key` is `key`, or is the default `message` key of the
/// chain `key` (`<originalMessageId>:<32 hex digits of the body's digest>`).
fn keyed_by(r: &ReceivedRequest, key: &str) -> bool {
    let Some(sent) = r.idempotency_key.as_deref() else {
        return false;
    };
    sent == key
        || sent
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|digest| {
                digest.len() == 32 && digest.bytes().all(|b| b.is_ascii_hexdigit())
            })
}
