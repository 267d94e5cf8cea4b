//! Minimal HTTP/1.1 framing for the harness's loopback servers (the proxy, the flaky downstream,
//! the Lambda Runtime API): a start line, headers, and a body framed by `Content-Length`,
//! `Transfer-Encoding: chunked` or, for a response, the end of the connection. Enough for the
//! AWS SDK, reqwest, lambda_runtime and moto's werkzeug server; not a general HTTP library.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Accepts connections until the returned task is aborted, serving each on a task of its own
/// with `serve(stream, shared)`; a broken connection only ends that connection.
pub fn accept_loop<S, F, Fut>(listener: TcpListener, shared: Arc<S>, serve: F) -> JoinHandle<()>
where
    S: Send + Sync + 'static,
    F: Fn(TcpStream, Arc<S>) -> Fut + Send + 'static,
    Fut: Future<Output = io::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream, shared.clone()));
        }
    })
}

const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A start line and headers, in the order received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    pub start_line: String,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn new(start_line: impl Into<String>) -> Self {
        Self {
            start_line: start_line.into(),
            headers: Vec::new(),
        }
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.set_header(name, value);
        self
    }

    /// Replaces every value of a header with one.
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.remove_header(name);
        self.headers.push((name.to_string(), value.into()));
    }

    pub fn remove_header(&mut self, name: &str) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    }

    /// Request method (first word of a request line).
    pub fn method(&self) -> &str {
        self.start_line.split(' ').next().unwrap_or("")
    }

    /// Request target (second word of a request line).
    pub fn target(&self) -> &str {
        self.start_line.split(' ').nth(1).unwrap_or("")
    }

    /// Status code of a response line.
    pub fn status(&self) -> u16 {
        self.start_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn is_chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    fn content_length(&self) -> io::Result<Option<usize>> {
        match self.header("content-length") {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<usize>()
                .map(Some)
                .map_err(|_| invalid(format!("bad Content-Length {v:?}"))),
        }
    }

    /// True when the peer asked to close the connection after this message.
    pub fn wants_close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Reads a start line and headers. `Ok(None)` on a clean end of stream before the first byte.
pub async fn read_head<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Option<Head>> {
    let mut head = Head::default();
    let mut total = 0;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await?;
        if n == 0 {
            if total == 0 {
                return Ok(None);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        total += n;
        if total > MAX_HEAD_BYTES {
            return Err(invalid("head too large".into()));
        }
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if head.start_line.is_empty() {
            if trimmed.is_empty() {
                // Tolerate stray blank lines between messages.
                continue;
            }
            head.start_line = trimmed.to_string();
            continue;
        }
        if trimmed.is_empty() {
            return Ok(Some(head));
        }
        let (name, value) = trimmed
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {trimmed:?}")))?;
        head.headers
            .push((name.trim().to_string(), value.trim().to_string()));
    }
}

/// Reads a request body: `Content-Length`, chunked, or none.
pub async fn read_request_body<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    head: &Head,
) -> io::Result<Vec<u8>> {
    if head.is_chunked() {
        return read_chunked(reader).await;
    }
    match head.content_length()? {
        Some(n) => read_exact_body(reader, n).await,
        None => Ok(Vec::new()),
    }
}

/// Reads a response body. Returns the body and whether the connection is spent (the body was
/// framed by the end of the stream, or the server asked to close).
pub async fn read_response_body<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    head: &Head,
    request_method: &str,
) -> io::Result<(Vec<u8>, bool)> {
    let status = head.status();
    if request_method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        return Ok((Vec::new(), head.wants_close()));
    }
    if head.is_chunked() {
        return Ok((read_chunked(reader).await?, head.wants_close()));
    }
    match head.content_length()? {
        Some(n) => Ok((read_exact_body(reader, n).await?, head.wants_close())),
        None => {
            let mut body = Vec::new();
            reader
                .take(MAX_BODY_BYTES as u64)
                .read_to_end(&mut body)
                .await?;
            Ok((body, true))
        }
    }
}

async fn read_exact_body<R: AsyncBufRead + Unpin>(reader: &mut R, n: usize) -> io::Result<Vec<u8>> {
    if n > MAX_BODY_BYTES {
        return Err(invalid(format!("body of {n} bytes is too large")));
    }
    let mut body = vec![0u8; n];
    reader.read_exact(&mut body).await?;
    Ok(body)
}

async fn read_chunked<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await?;
        let size_text = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size {size_text:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                line.clear();
                let n = reader.read_line(&mut line).await?;
                if n == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("chunked body too large".into()));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).await?;
        line.clear();
        reader.read_line(&mut line).await?;
    }
}

/// Writes a message with a `Content-Length` body (any framing headers of `head` are replaced).
pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    head: &Head,
    body: &[u8],
) -> io::Result<()> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(head.start_line.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &head.headers {
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    writer.write_all(&out).await?;
    writer.flush().await
}

/// A response head with a reason phrase.
pub fn response_head(status: u16) -> Head {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    Head::new(format!("HTTP/1.1 {status} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn reads_content_length_and_chunked_bodies() {
        let raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloPOST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let mut r = BufReader::new(&raw[..]);
        let head = read_head(&mut r).await.unwrap().unwrap();
        assert_eq!((head.method(), head.target()), ("POST", "/"));
        assert_eq!(head.header("HOST"), Some("x"));
        assert_eq!(read_request_body(&mut r, &head).await.unwrap(), b"hello");
        let head = read_head(&mut r).await.unwrap().unwrap();
        assert_eq!(head.target(), "/b");
        assert_eq!(read_request_body(&mut r, &head).await.unwrap(), b"abcde");
        assert!(read_head(&mut r).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_response_without_length_runs_to_the_end() {
        let raw = b"HTTP/1.1 200 OK\r\nServer: w\r\n\r\n{\"a\":1}";
        let mut r = BufReader::new(&raw[..]);
        let head = read_head(&mut r).await.unwrap().unwrap();
        assert_eq!(head.status(), 200);
        let (body, spent) = read_response_body(&mut r, &head, "POST").await.unwrap();
        assert_eq!((body.as_slice(), spent), (&b"{\"a\":1}"[..], true));
    }

    #[tokio::test]
    async fn written_messages_read_back_with_one_length() {
        let head = Head::new("HTTP/1.1 200 OK")
            .with_header("Content-Length", "99")
            .with_header("Transfer-Encoding", "chunked")
            .with_header("x-a", "b");
        let mut out = Vec::new();
        write_message(&mut out, &head, b"body").await.unwrap();
        let mut r = BufReader::new(&out[..]);
        let back = read_head(&mut r).await.unwrap().unwrap();
        assert_eq!(back.header("content-length"), Some("4"));
        assert_eq!(back.header("transfer-encoding"), None);
        let (body, _) = read_response_body(&mut r, &back, "GET").await.unwrap();
        assert_eq!(body, b"body");
    }
}
