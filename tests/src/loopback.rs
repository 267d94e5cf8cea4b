//! The loopback HTTP/1 servers of the harness and the bench (the consumer's test downstream, the
//! proxy, the flaky downstream, the Runtime API), served by hyper. A handler gets each request read whole and gives an [`Answer`]: a response,
//! a TCP reset (a crashed peer, a dropped connection), or no answer until the caller goes away.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::http::request::Parts;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One request, read whole.
pub struct Call {
    pub head: Parts,
    pub body: Bytes,
    /// The 0-based index of this request on its connection (0: the connection is new).
    pub nth: u64,
}

impl Call {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub enum Answer {
    Respond(Response<Full<Bytes>>),
    /// Close the connection with a TCP reset instead of answering.
    Reset,
    /// Never answer: the call is held until the caller closes its connection.
    Hold,
}

/// A response of `status` with these headers and body.
pub fn respond(status: u16, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Answer {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    Answer::Respond(response)
}

/// A server on 127.0.0.1. Stops accepting when dropped.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    accept_loop: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl Server {
    /// Binds 127.0.0.1:0 on the current tokio runtime and serves every connection on a task of
    /// its own; a broken connection only ends that connection.
    pub async fn start<H, F>(handler: H) -> io::Result<Server>
    where
        H: Fn(Call) -> F + Send + Sync + 'static,
        F: Future<Output = Answer> + Send + 'static,
    {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let handler = Arc::new(handler);
        let accept_loop = tokio::spawn(async move {
            loop {
                if let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(connection(stream, handler.clone()));
                }
            }
        });
        Ok(Server { addr, accept_loop })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn connection<H, F>(stream: TcpStream, handler: Arc<H>)
where
    H: Fn(Call) -> F + Send + Sync + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let Ok((stream, twin)) = with_twin(stream) else {
        return;
    };
    let reset = Arc::new(Notify::new());
    let service = {
        let reset = reset.clone();
        let requests = Arc::new(AtomicU64::new(0));
        service_fn(move |request: Request<Incoming>| {
            let (handler, reset) = (handler.clone(), reset.clone());
            let nth = requests.fetch_add(1, Ordering::Relaxed);
            async move {
                let (head, body) = request.into_parts();
                let body = body.collect().await?.to_bytes();
                match handler(Call { head, body, nth }).await {
                    Answer::Respond(response) => Ok::<_, hyper::Error>(response),
                    Answer::Reset => {
                        reset.notify_one();
                        std::future::pending().await
                    }
                    Answer::Hold => std::future::pending().await,
                }
            }
        })
    };
    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    let reset_now = tokio::select! {
        _ = conn => false,
        _ = reset.notified() => true,
    };
    if reset_now && let Ok(twin) = TcpStream::from_std(twin) {
        // The last descriptor closes with SO_LINGER 0: a reset, not a FIN.
        let _ = twin.set_zero_linger();
    }
}

/// The stream and a second descriptor of its socket, to close it with a reset once hyper's
/// descriptor is gone.
fn with_twin(stream: TcpStream) -> io::Result<(TcpStream, std::net::TcpStream)> {
    let stream = stream.into_std()?;
    let twin = stream.try_clone()?;
    Ok((TcpStream::from_std(stream)?, twin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server() -> Server {
        Server::start(|call: Call| async move {
            match call.head.uri.path() {
                "/reset" => Answer::Reset,
                _ => respond(200, &[("x-nth", &call.nth.to_string())], call.body),
            }
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn requests_on_one_connection_are_counted_and_answered_with_their_length() {
        let server = server().await;
        let mut s = TcpStream::connect(server.addr()).await.unwrap();
        s.write_all(b"POST /a HTTP/1.1\r\ncontent-length: 2\r\n\r\nhiPOST /b HTTP/1.1\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        let (first, second) = answer.split_once("hi").unwrap();
        assert!(first.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(first.contains("x-nth: 0") && first.contains("content-length: 2"));
        assert!(second.contains("x-nth: 1") && second.contains("content-length: 3"));
        assert!(second.ends_with("abc"), "{answer}");
    }

    #[tokio::test]
    async fn a_reset_answer_resets_the_connection() {
        let server = server().await;
        let mut s = TcpStream::connect(server.addr()).await.unwrap();
        s.write_all(b"GET /reset HTTP/1.1\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read = s.read_to_end(&mut answer).await;
        assert_eq!(
            read.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset),
            "{answer:?}"
        );
    }
}
