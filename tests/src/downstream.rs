//! A scriptable downstream HTTP server for the consumer Lambda: counts deliveries per
//! `Idempotency-Key` and answers according to a switchable mode. Served by the harness's
//! loopback HTTP/1 server ([`crate::loopback`], hyper), as the bench's servers are.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redrive_shared::sync::lock;

use crate::loopback::{Answer, Call, Server, respond};

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
    server: Server,
    state: Arc<Mutex<State>>,
}

impl Downstream {
    /// Binds 127.0.0.1:0 and serves on the current tokio runtime, in `Mode::Healthy`.
    pub async fn start() -> Downstream {
        let state = Arc::new(Mutex::new(State {
            mode: Mode::Healthy,
            body_rules: Vec::new(),
            log: Vec::new(),
        }));
        let served = state.clone();
        let server = Server::start(move |call| answer(served.clone(), call))
            .await
            .expect("binding the downstream test server on 127.0.0.1:0");
        Downstream { server, state }
    }

    /// `http://127.0.0.1:PORT/deliver` (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/deliver", self.server.addr())
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
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
        lock(&self.state)
    }
}

/// Decides the answer, waits if the mode says so, and records the request.
async fn answer(state: Arc<Mutex<State>>, call: Call) -> Answer {
    let (mode, rule) = {
        let state = lock(&state);
        let rule = state
            .body_rules
            .iter()
            .find(|(marker, _)| contains(&call.body, marker.as_bytes()))
            .map(|(_, status)| *status);
        (state.mode.clone(), rule)
    };
    let post = call.head.method == "POST";
    let (status, retry_after) = match (post, rule, mode) {
        (true, Some(status), _) => (status, None),
        (true, None, Mode::Healthy) => (200, None),
        (true, None, Mode::Status(status)) => (status, None),
        (true, None, Mode::TooManyRequests { retry_after_secs }) => {
            (429, Some(retry_after_secs.to_string()))
        }
        (true, None, Mode::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            (200, None)
        }
        (false, ..) => (405, None),
    };
    let headers: Vec<(String, String)> = call
        .head
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect();
    let request = ReceivedRequest {
        method: call.head.method.to_string(),
        path: call
            .head
            .uri
            .path_and_query()
            .map_or_else(|| call.head.uri.to_string(), |p| p.to_string()),
        idempotency_key: call.header("idempotency-key").map(str::to_string),
        headers,
        body: call.body.to_vec(),
        status,
    };
    lock(&state).log.push(request);

    let mut headers = vec![("content-type", "application/json")];
    if let Some(seconds) = &retry_after {
        headers.push(("retry-after", seconds));
    }
    if status == 405 {
        headers.push(("allow", "POST"));
    }
    let payload: &'static [u8] = if status == 204 || status == 304 {
        b"" // these statuses carry no body
    } else if (200..300).contains(&status) {
        b"{\"ok\":true}"
    } else {
        b"{\"error\":\"downstream test server says no\"}"
    };
    respond(status, &headers, payload)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
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
