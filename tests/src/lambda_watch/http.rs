//! Talking to `cargo lambda watch`: one POST on its invoke API, and the ids an invocation's
//! log lines carry.

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// A one-shot HTTP/1.1 POST (hyper's client on one connection); returns the status and the
/// body.
pub(super) async fn post(port: u16, path: &str, body: &[u8]) -> Result<(u16, String), String> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("opening HTTP/1 to 127.0.0.1:{port}: {e}"))?;
    tokio::spawn(connection);
    let request = Request::post(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| format!("building the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The `requestId` and `xrayTraceId` of one invocation's log lines (from
/// [`LambdaWatch::invoke_logged`]), checked: every line carries both, the same pair, as
/// top-level fields. Lines without either may only come first (a cold start's init lines);
/// `Err` quotes the first line that breaks the rule, or says that no line carried them.
pub fn invocation_ids(lines: &[Value]) -> Result<(String, String), String> {
    let ids = |line: &Value| {
        (
            line.get("requestId")
                .and_then(Value::as_str)
                .map(str::to_string),
            line.get("xrayTraceId")
                .and_then(Value::as_str)
                .map(str::to_string),
        )
    };
    let mut invocation: Option<(String, String)> = None;
    for line in lines {
        match (ids(line), &invocation) {
            ((None, None), None) => continue,
            ((Some(request), Some(trace)), None) => invocation = Some((request, trace)),
            ((Some(request), Some(trace)), Some((r, t))) if request == *r && trace == *t => {}
            (_, expected) => {
                return Err(format!(
                    "a line of the invocation {expected:?} does not carry its requestId and xrayTraceId: {line}"
                ));
            }
        }
    }
    invocation.ok_or_else(|| format!("no line carries a requestId and an xrayTraceId: {lines:?}"))
}
