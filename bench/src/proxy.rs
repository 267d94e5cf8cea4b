//! A loopback HTTP proxy in front of the emulator: the functions reach it through
//! `AWS_ENDPOINT_URL` (or an SDK config's endpoint) and it forwards to moto.
//!
//! - **Counts** every call by operation (`X-Amz-Target`, or the `Action` of a query-protocol
//!   body), empty receives, and SDK retries (`amz-sdk-request: attempt=N`, N > 1).
//! - **Adds latency**: a per-call round trip (default 20 ms, SQS's documented per-call
//!   latency), and optionally a connection set-up cost on a connection's first request.
//! - **Injects faults** into SQS and DynamoDB calls by a [`FaultPlan`]: throttling, 500s,
//!   connection resets before or after the call took effect, answers later than the client's
//!   timeout, and SendMessageBatch / DeleteMessageBatch entries reported in `Failed` (those
//!   entries are removed from the request, so they really did not happen).
//! - **Kills** on demand: [`Proxy::arm_kill`] holds the n-th call of an operation forever and
//!   tells the harness, which then drops the caller mid-call (a process killed there).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use hyper::http::request::Parts;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use redrive_shared::backoff::{JitterRng, seeded_rng};
use redrive_shared::sync::lock;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::faults::{FaultKind, FaultLayer, FaultPlan, FaultStats, KillSwitch, failing_entries};
use crate::loopback::{Answer, Call, Server, respond};

/// Which service a call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Sqs,
    DynamoDb,
    CloudWatch,
    Other,
}

/// What the proxy saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProxyStats {
    /// Calls, retries, faults and kills (a kill holds its call forever).
    #[serde(flatten)]
    pub layer: FaultStats,
    /// ReceiveMessage calls answered with no message.
    pub empty_receives: u64,
    /// Time the upstream (the emulator) took to answer, by operation, in seconds: the
    /// emulator's own cost, which the real service does not have.
    pub upstream_seconds: BTreeMap<String, f64>,
    /// Seconds during which at least one caller waited on a call, from the request read to the
    /// answer written (latency, connection set-up, the upstream): concurrent calls count once,
    /// so this is the wall time the callers spent waiting on the network.
    pub held_seconds: f64,
}

impl ProxyStats {
    pub fn calls_of(&self, operation: &str) -> u64 {
        self.layer.calls.get(operation).copied().unwrap_or(0)
    }

    pub fn total_calls(&self) -> u64 {
        self.layer.calls.values().sum()
    }

    /// Calls of the given operations.
    pub fn sum_of(&self, operations: &[&str]) -> u64 {
        operations.iter().map(|o| self.calls_of(o)).sum()
    }
}

struct Shared {
    upstream: SocketAddr,
    latency: Mutex<Duration>,
    connect_latency: Mutex<Duration>,
    faults: Mutex<Option<FaultPlan>>,
    rng: Mutex<JitterRng>,
    stats: Mutex<ProxyStats>,
    kill: KillSwitch,
    /// Calls being held now, and since when at least one was.
    waiting: Mutex<(u32, Option<std::time::Instant>)>,
}

impl Shared {
    fn wait_begins(&self, at: std::time::Instant) {
        let mut w = lock(&self.waiting);
        if w.0 == 0 {
            w.1 = Some(at);
        }
        w.0 += 1;
    }

    fn wait_ends(&self) {
        let mut w = lock(&self.waiting);
        w.0 = w.0.saturating_sub(1);
        if w.0 == 0
            && let Some(since) = w.1.take()
        {
            lock(&self.stats).held_seconds += since.elapsed().as_secs_f64();
        }
    }
}

/// The running proxy. Stops accepting when dropped.
pub struct Proxy {
    server: Server,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Binds 127.0.0.1:0 on the current tokio runtime, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr, latency: Duration) -> io::Result<Proxy> {
        let shared = Arc::new(Shared {
            upstream,
            latency: Mutex::new(latency),
            connect_latency: Mutex::new(Duration::ZERO),
            faults: Mutex::new(None),
            rng: Mutex::new(seeded_rng(0x5eed)),
            stats: Mutex::new(ProxyStats::default()),
            kill: KillSwitch::default(),
            waiting: Mutex::new((0, None)),
        });
        let server = Server::start({
            let shared = shared.clone();
            move |call| serve(call, shared.clone())
        })
        .await?;
        Ok(Proxy { server, shared })
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    pub fn set_latency(&self, latency: Duration) {
        *lock(&self.shared.latency) = latency;
    }

    /// Extra delay on the first request of each client connection (TCP and TLS set-up).
    pub fn set_connect_latency(&self, latency: Duration) {
        *lock(&self.shared.connect_latency) = latency;
    }

    /// Starts (or, with `None`, stops) injecting faults, with a seeded random source.
    pub fn set_faults(&self, plan: Option<FaultPlan>, seed: u64) {
        *lock(&self.shared.rng) = seeded_rng(seed);
        *lock(&self.shared.faults) = plan;
    }

    pub fn stats(&self) -> ProxyStats {
        lock(&self.shared.stats).clone()
    }

    /// Returns the counts so far and starts again from zero.
    pub fn take_stats(&self) -> ProxyStats {
        std::mem::take(&mut *lock(&self.shared.stats))
    }

    /// Holds the `nth` (1-based) next call of one of `operations` forever, never forwarding
    /// it, and resolves the returned receiver when it arrives: the caller is to be killed there.
    pub fn arm_kill(&self, operations: &[&str], nth: u32) -> oneshot::Receiver<()> {
        self.shared.kill.arm(operations, nth)
    }

    pub fn disarm_kill(&self) {
        self.shared.kill.disarm();
    }
}

impl FaultLayer for Proxy {
    fn kill_switch(&self) -> &KillSwitch {
        &self.shared.kill
    }

    fn fault_stats(&self) -> FaultStats {
        self.stats().layer
    }
}

/// The service and operation of a request.
pub fn operation(head: &Parts, body: &[u8]) -> (Service, String) {
    if let Some(target) = header(head, "x-amz-target") {
        let (prefix, op) = target.rsplit_once('.').unwrap_or(("", target));
        let service = if prefix.starts_with("AmazonSQS") {
            Service::Sqs
        } else if prefix.starts_with("DynamoDB") {
            Service::DynamoDb
        } else if prefix.contains("CloudWatch") || prefix.starts_with("GraniteServiceVersion") {
            Service::CloudWatch
        } else {
            Service::Other
        };
        return (service, op.to_string());
    }
    // Query protocol: Action=...&Version=...
    let text = String::from_utf8_lossy(body);
    let field = |name: &str| {
        text.split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .map(str::to_string)
    };
    match field("Action") {
        Some(action) => {
            let service = match field("Version").as_deref() {
                Some("2010-08-01") => Service::CloudWatch,
                Some("2012-11-05") => Service::Sqs,
                _ => Service::Other,
            };
            (service, action)
        }
        None => (Service::Other, format!("{} {}", head.method, head.uri)),
    }
}

fn header<'a>(head: &'a Parts, name: &str) -> Option<&'a str> {
    head.headers.get(name).and_then(|v| v.to_str().ok())
}

fn sdk_attempt(head: &Parts) -> u32 {
    header(head, "amz-sdk-request")
        .and_then(|v| {
            v.split(';')
                .find_map(|p| p.trim().strip_prefix("attempt="))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(1)
}

fn is_batch(op: &str) -> bool {
    matches!(op, "SendMessageBatch" | "DeleteMessageBatch")
}

/// An idempotency record write of the consumer: `PutItem` of `(status, id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RecordWrite {
    Claim(String),
    Completion(String),
}

fn record_write(service: Service, op: &str, body: &[u8]) -> Option<RecordWrite> {
    if service != Service::DynamoDb || op != "PutItem" {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let item = v.get("Item")?;
    let key = item.pointer("/id/S")?.as_str()?.to_string();
    match item.pointer("/status/S")?.as_str()? {
        "COMPLETED" => Some(RecordWrite::Completion(key)),
        "IN_PROGRESS" => Some(RecordWrite::Claim(key)),
        _ => None,
    }
}

fn error_response(service: Service, kind: FaultKind) -> Answer {
    let (status, code, message) = match (service, kind) {
        (Service::DynamoDb, FaultKind::Throttle) => (
            400,
            "ThrottlingException",
            "Rate of requests exceeds the allowed throughput.",
        ),
        (Service::DynamoDb, _) => (500, "InternalServerError", "Internal server error"),
        (_, FaultKind::Throttle) => (400, "ThrottlingException", "Rate exceeded"),
        (_, _) => (
            500,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
    };
    let namespace = match service {
        Service::DynamoDb => "com.amazonaws.dynamodb.v20120810",
        _ => "com.amazonaws.sqs",
    };
    let body = json!({ "__type": format!("{namespace}#{code}"), "message": message }).to_string();
    let fault = if status == 400 { "Sender" } else { "Receiver" };
    let query_error = format!("{code};{fault}");
    respond(
        status,
        &[
            ("content-type", JSON_1_0),
            ("x-amzn-requestid", "injected-fault"),
            ("x-amzn-query-error", &query_error),
        ],
        body,
    )
}

const JSON_1_0: &str = "application/x-amz-json-1.0";

enum Decision {
    Forward,
    Fault(FaultKind),
    /// An armed kill landed on this call (already reported to the harness).
    Kill,
}

impl Shared {
    fn decide(&self, service: Service, op: &str, write: Option<&RecordWrite>) -> Decision {
        if self.kill.lands(op) {
            *lock(&self.stats)
                .layer
                .kills
                .entry(op.to_string())
                .or_default() += 1;
            return Decision::Kill;
        }
        if !matches!(service, Service::Sqs | Service::DynamoDb) {
            return Decision::Forward;
        }
        let drawn = {
            let plan = lock(&self.faults);
            let Some(plan) = plan.as_ref() else {
                return Decision::Forward;
            };
            plan.draw(&mut *lock(&self.rng), is_batch(op))
        };
        match drawn {
            None => Decision::Forward,
            Some(kind) => {
                let mut stats = lock(&self.stats);
                stats.layer.faults.add(kind);
                match write {
                    Some(RecordWrite::Completion(key)) => {
                        stats.layer.completion_faulted.insert(key.clone());
                    }
                    Some(RecordWrite::Claim(key)) if kind.applies() => {
                        stats.layer.claim_lost.insert(key.clone());
                    }
                    _ => {}
                }
                Decision::Fault(kind)
            }
        }
    }

    fn timeout_hold(&self) -> Duration {
        lock(&self.faults)
            .as_ref()
            .map_or(Duration::from_secs(5), |p| p.timeout_hold)
    }
}

type Forwarded = Result<Response<Bytes>, Box<dyn std::error::Error + Send + Sync>>;

/// Sends one request to the upstream on a fresh connection and reads the whole answer.
async fn forward(upstream: SocketAddr, head: &Parts, body: Bytes) -> Forwarded {
    let stream = TcpStream::connect(upstream).await?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let mut request = Request::from_parts(head.clone(), Full::new(body));
    // Framed anew from the body, which a batch fault may have shortened.
    let headers = request.headers_mut();
    headers.remove(CONTENT_LENGTH);
    headers.remove(TRANSFER_ENCODING);
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    let (head, body) = sender.send_request(request).await?.into_parts();
    Ok(Response::from_parts(head, body.collect().await?.to_bytes()))
}

/// The answer to the caller: the upstream's, with the framing hyper sets from the body.
fn relay(forwarded: Forwarded) -> Answer {
    match forwarded {
        Ok(response) => {
            let (mut head, body) = response.into_parts();
            for framing in [CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING] {
                head.headers.remove(framing);
            }
            Answer::Respond(Response::from_parts(head, Full::new(body)))
        }
        Err(e) => respond(
            502,
            &[("content-type", "text/plain")],
            format!("proxy: upstream failed: {e}"),
        ),
    }
}

/// Removes the failing entries from a batch request. Returns the request body to forward
/// (`None` when no entry is left) and the ids reported failed.
fn split_batch(body: &[u8], rng: &mut JitterRng) -> Option<(Option<Vec<u8>>, Vec<String>)> {
    let mut request: Value = serde_json::from_slice(body).ok()?;
    let entries = request.get_mut("Entries")?.as_array_mut()?;
    let failing = failing_entries(entries.len(), rng);
    let mut failed_ids = Vec::new();
    let mut kept = Vec::new();
    for (i, entry) in entries.drain(..).enumerate() {
        if failing.contains(&i) {
            failed_ids.push(entry.get("Id")?.as_str()?.to_string());
        } else {
            kept.push(entry);
        }
    }
    if kept.is_empty() {
        return Some((None, failed_ids));
    }
    *entries = kept;
    Some((Some(request.to_string().into_bytes()), failed_ids))
}

fn merge_failed(response_body: &[u8], failed_ids: &[String]) -> Bytes {
    let mut response: Value =
        serde_json::from_slice(response_body).unwrap_or_else(|_| json!({"Successful": []}));
    let failed = failed_ids.iter().map(|id| {
        json!({
            "Id": id,
            "SenderFault": false,
            "Code": "InternalError",
            "Message": "injected by the fault proxy",
        })
    });
    match response.get_mut("Failed").and_then(Value::as_array_mut) {
        Some(list) => list.extend(failed),
        None => response["Failed"] = Value::Array(failed.collect()),
    }
    response.to_string().into()
}

async fn serve(call: Call, shared: Arc<Shared>) -> Answer {
    let received = std::time::Instant::now();
    let (service, op) = operation(&call.head, &call.body);
    let write = record_write(service, &op, &call.body);
    {
        let mut stats = lock(&shared.stats);
        *stats.layer.calls.entry(op.clone()).or_default() += 1;
        if sdk_attempt(&call.head) > 1 {
            stats.layer.sdk_retries += 1;
        }
    }
    let mut delay = *lock(&shared.latency);
    if call.nth == 0 {
        delay += *lock(&shared.connect_latency);
    }
    let fault = match shared.decide(service, &op, write.as_ref()) {
        // Never forwarded, held until the killed caller's connection goes away.
        Decision::Kill => return Answer::Hold,
        Decision::Forward => None,
        Decision::Fault(kind) => Some(kind),
    };
    shared.wait_begins(received);
    // On a task of its own: a call takes effect even when its caller gives up meanwhile.
    let answer = tokio::spawn(async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let answer = handle(&shared, call, &op, service, fault).await;
        shared.wait_ends();
        answer
    });
    answer.await.unwrap_or(Answer::Reset)
}

/// A ReceiveMessage answered with no message.
fn is_empty_receive(response: &Response<Bytes>) -> bool {
    response.status() == 200
        && serde_json::from_slice::<Value>(response.body())
            .ok()
            .and_then(|v| v.get("Messages").and_then(Value::as_array).map(Vec::len))
            .unwrap_or(0)
            == 0
}

/// What the proxy does with a call, after the latency.
async fn handle(
    shared: &Shared,
    call: Call,
    op: &str,
    service: Service,
    fault: Option<FaultKind>,
) -> Answer {
    let upstream = shared.upstream;
    match fault {
        None => {
            let started = std::time::Instant::now();
            let forwarded = forward(upstream, &call.head, call.body).await;
            let mut stats = lock(&shared.stats);
            *stats.upstream_seconds.entry(op.to_string()).or_default() +=
                started.elapsed().as_secs_f64();
            if op == "ReceiveMessage" && forwarded.as_ref().is_ok_and(is_empty_receive) {
                stats.empty_receives += 1;
            }
            drop(stats);
            relay(forwarded)
        }
        Some(kind @ (FaultKind::Throttle | FaultKind::ServerError)) => {
            error_response(service, kind)
        }
        Some(FaultKind::ResetBefore) => Answer::Reset,
        Some(FaultKind::ResetAfter) => {
            let _ = forward(upstream, &call.head, call.body).await;
            Answer::Reset
        }
        Some(FaultKind::Timeout) => {
            tokio::time::sleep(shared.timeout_hold()).await;
            // Applied late; the client gave up meanwhile, so its connection is done.
            let _ = forward(upstream, &call.head, call.body).await;
            Answer::Reset
        }
        Some(FaultKind::BatchEntries) => {
            let split = split_batch(&call.body, &mut lock(&shared.rng));
            let Some((rest, failed_ids)) = split else {
                return relay(forward(upstream, &call.head, call.body).await);
            };
            lock(&shared.stats).layer.failed_entries += failed_ids.len() as u64;
            let Some(rest) = rest else {
                let body = merge_failed(b"{\"Successful\":[]}", &failed_ids);
                return respond(200, &[("content-type", JSON_1_0)], body);
            };
            relay(
                forward(upstream, &call.head, rest.into())
                    .await
                    .map(|response| match response.status().as_u16() {
                        200 => response.map(|body| merge_failed(&body, &failed_ids)),
                        _ => response,
                    }),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of a `POST /` with these headers.
    fn post(headers: &[(&str, &str)]) -> Parts {
        let mut request = Request::post("/");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn operations_are_named_from_the_target_or_the_action() {
        let h = post(&[("X-Amz-Target", "AmazonSQS.ReceiveMessage")]);
        assert_eq!(operation(&h, b""), (Service::Sqs, "ReceiveMessage".into()));
        let h = post(&[("x-amz-target", "DynamoDB_20120810.PutItem")]);
        assert_eq!(operation(&h, b"{}"), (Service::DynamoDb, "PutItem".into()));
        assert_eq!(
            operation(&post(&[]), b"{}"),
            (Service::Other, "POST /".into())
        );
        let h = post(&[]);
        assert_eq!(
            operation(&h, b"Action=PutMetricData&Version=2010-08-01&Namespace=x"),
            (Service::CloudWatch, "PutMetricData".into())
        );
    }

    #[test]
    fn sdk_attempts_are_read_from_the_header() {
        assert_eq!(
            sdk_attempt(&post(&[("amz-sdk-request", "attempt=2; max=3")])),
            2
        );
        assert_eq!(sdk_attempt(&post(&[])), 1);
    }

    #[test]
    fn a_split_batch_forwards_the_rest_and_reports_the_failed() {
        let body = json!({"QueueUrl": "q", "Entries": (0..10).map(|i| json!({"Id": i.to_string(), "MessageBody": "b"})).collect::<Vec<_>>()});
        let mut rng = seeded_rng(9);
        let (rest, failed) = split_batch(body.to_string().as_bytes(), &mut rng).unwrap();
        let rest: Value = serde_json::from_slice(&rest.unwrap()).unwrap();
        let kept: Vec<&str> = rest["Entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["Id"].as_str().unwrap())
            .collect();
        assert_eq!(kept.len() + failed.len(), 10);
        assert!(kept.iter().all(|k| !failed.contains(&k.to_string())));
        assert_eq!(rest["QueueUrl"], "q");

        let merged: Value =
            serde_json::from_slice(&merge_failed(br#"{"Successful":[{"Id":"x"}]}"#, &failed))
                .unwrap();
        assert_eq!(merged["Successful"].as_array().unwrap().len(), 1);
        assert_eq!(merged["Failed"].as_array().unwrap().len(), failed.len());
        assert_eq!(merged["Failed"][0]["SenderFault"], false);
    }

    #[test]
    fn idempotency_record_writes_are_recognised() {
        let body = br#"{"TableName":"t","Item":{"id":{"S":"k-1"},"status":{"S":"COMPLETED"}}}"#;
        assert_eq!(
            record_write(Service::DynamoDb, "PutItem", body),
            Some(RecordWrite::Completion("k-1".into()))
        );
        let claim = br#"{"TableName":"t","Item":{"id":{"S":"k-1"},"status":{"S":"IN_PROGRESS"}}}"#;
        assert_eq!(
            record_write(Service::DynamoDb, "PutItem", claim),
            Some(RecordWrite::Claim("k-1".into()))
        );
        assert_eq!(record_write(Service::Sqs, "PutItem", body), None);
        assert_eq!(record_write(Service::DynamoDb, "DeleteItem", body), None);
    }
}
