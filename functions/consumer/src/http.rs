//! The shipped processing step: POST the body to `DOWNSTREAM_URL` with the idempotency key in
//! an `Idempotency-Key` header, and classify the answer.
//!
//! - 2xx: success.
//! - 408, 429, 5xx, timeouts, connection and other transport errors: transient; a
//!   `Retry-After` header (seconds or HTTP-date) is honoured, capped at 900 s.
//! - Any other 4xx: permanent.
//! - Anything else (1xx, 3xx: redirects are not followed, since a redirected POST would lose
//!   its body): transient, so that a misrouted endpoint never dead-letters good messages.
//! - A key that cannot be an `Idempotency-Key` header value (control characters): permanent,
//!   since no retry can change it.
//!
//! The answer's body is read up to [`MAX_ANSWER_BYTES`] and dropped (never logged: it may echo
//! the message). Errors never carry the URL's userinfo or query string, which may hold secrets.

use std::time::{Duration, UNIX_EPOCH};

use redrive_shared::backoff::MAX_DELAY_SECONDS;
use redrive_shared::config::DownstreamConfig;

use crate::engine::now_ms;
use crate::process::{ProcessError, Processor, RawBody};
use crate::record::Record;

/// The header carrying the idempotency key to the downstream.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// How much of an answer's body is read; the rest is dropped with the connection, so that a
/// downstream answering with a huge body cannot exhaust the function's memory or time.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Error code of a key that cannot be sent as a header value.
pub const KEY_NOT_HEADER_VALUE: &str = "KEY_NOT_HEADER_VALUE";

/// Delivers each body to one HTTP endpoint. Build once at init: the client pools connections.
#[derive(Debug, Clone)]
pub struct HttpProcessor {
    client: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpInitError {
    /// `url` has its userinfo and query string redacted.
    #[error("DOWNSTREAM_URL {url:?} is not a valid URL: {reason}")]
    Url { url: String, reason: String },
    #[error("building the HTTP client: {0}")]
    Client(reqwest::Error),
}

impl HttpProcessor {
    pub fn new(config: &DownstreamConfig) -> Result<Self, HttpInitError> {
        let url = reqwest::Url::parse(&config.url).map_err(|e| HttpInitError::Url {
            url: redact_url_text(&config.url),
            reason: e.to_string(),
        })?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(HttpInitError::Client)?;
        Ok(Self {
            client,
            url,
            timeout: config.timeout,
        })
    }
}

/// The body as it is (not necessarily JSON); nothing is stored with the COMPLETED record.
impl Processor<RawBody> for HttpProcessor {
    type Output = ();

    async fn process(&self, body: RawBody, record: &Record) -> Result<(), ProcessError> {
        let key = record.key();
        let content_type = if serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        let Ok(key_header) = reqwest::header::HeaderValue::from_str(key.as_str()) else {
            return Err(ProcessError::permanent(
                KEY_NOT_HEADER_VALUE,
                "the idempotency key has control characters, which an HTTP header value cannot carry",
            ));
        };
        let response = self
            .client
            .post(self.url.clone())
            .header(IDEMPOTENCY_KEY_HEADER, key_header)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.into_string())
            .send()
            .await;
        match response {
            Ok(response) => {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, now_ms()));
                let status = response.status().as_u16();
                // Read (and drop) a short answer so that the connection goes back to the pool;
                // it is never logged, since it may echo the body. The status alone decides.
                drain_bounded(response).await;
                classify_status(status, retry_after)
            }
            Err(e) => Err(classify_transport_error(e, &self.url)),
        }
    }

    /// The request timeout (`DOWNSTREAM_TIMEOUT_SECONDS`): no record is started with less
    /// than this (plus the engine's margin) left before the deadline.
    fn time_limit(&self) -> Option<Duration> {
        Some(self.timeout)
    }
}

/// Classifies an HTTP status (see the module documentation). `retry_after` is already parsed
/// and capped; it only matters for transient answers.
pub fn classify_status(status: u16, retry_after: Option<Duration>) -> Result<(), ProcessError> {
    let code = format!("HTTP_{status}");
    let message = format!("downstream answered {status}");
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(ProcessError::Transient {
            code,
            message,
            retry_after,
        }),
        400..=499 => Err(ProcessError::Permanent { code, message }),
        _ => Err(ProcessError::Transient {
            code,
            message: format!("{message}, which is neither success nor a client error"),
            retry_after,
        }),
    }
}

/// Reads at most [`MAX_ANSWER_BYTES`] of the body; a longer answer is dropped unread with its
/// connection.
async fn drain_bounded(mut response: reqwest::Response) {
    let mut read = 0;
    while read < MAX_ANSWER_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) | Err(_) => return,
        }
    }
}

fn classify_transport_error(e: reqwest::Error, url: &reqwest::Url) -> ProcessError {
    // reqwest's errors name the URL, userinfo and query string included: drop it, and redact
    // any secret a cause may still quote.
    let e = e.without_url();
    let code = if e.is_timeout() {
        "HTTP_TIMEOUT"
    } else if e.is_connect() {
        "HTTP_CONNECT"
    } else {
        "HTTP_TRANSPORT"
    };
    ProcessError::transient(code, redact_secrets(&error_chain(&e), url))
}

/// Replaces the URL's password, username and query string wherever they occur in `text`.
fn redact_secrets(text: &str, url: &reqwest::Url) -> String {
    let mut text = text.to_string();
    let secrets = [url.password(), Some(url.username()), url.query()];
    for secret in secrets.into_iter().flatten().filter(|s| !s.is_empty()) {
        text = text.replace(secret, "[redacted]");
    }
    text
}

/// A URL's text without its userinfo and query string, for messages about a URL that may not
/// even parse.
pub fn redact_url_text(url: &str) -> String {
    let (url, had_query) = match url.split_once(['?', '#']) {
        Some((before, _)) => (before, true),
        None => (url, false),
    };
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("[redacted]@{host}"),
        None => authority.to_string(),
    };
    let query = if had_query { "?[redacted]" } else { "" };
    format!("{scheme}{host}{path}{query}")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Parses a `Retry-After` value, delay-seconds or HTTP-date (IMF-fixdate, RFC 850 or asctime
/// form), relative to `now_ms`. A date in the past is zero; every value is capped at 900 s (the
/// longest delay SQS and the contract allow). Unreadable values are `None`.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let value = value.trim();
    let cap = u64::from(MAX_DELAY_SECONDS);
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Any run of digits is a delay, however long: cap rather than reject it.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs.min(cap)));
    }
    let at_ms = parse_http_date(value)?;
    let wait_ms = at_ms.saturating_sub(now_ms).max(0) as u64;
    Some(Duration::from_secs(wait_ms.div_ceil(1000).min(cap)))
}

/// HTTP-date (RFC 9110 section 5.6.7: IMF-fixdate, RFC 850 or asctime) to epoch milliseconds.
fn parse_http_date(s: &str) -> Option<i64> {
    let at = httpdate::parse_http_date(s).ok()?;
    let since_epoch = at.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use redrive_shared::key::IdempotencyKey;

    // 1994-11-06T08:49:37Z
    const RFC_EXAMPLE_MS: i64 = 784_111_777_000;

    #[test]
    fn statuses_are_classified_as_the_contract_says() {
        for ok in [200, 201, 202, 204, 299] {
            assert_eq!(classify_status(ok, None), Ok(()), "{ok}");
        }
        for transient in [408, 429, 500, 502, 503, 504, 599] {
            let err = classify_status(transient, None).unwrap_err();
            assert!(!err.is_permanent(), "{transient}");
            assert_eq!(err.code(), format!("HTTP_{transient}"));
        }
        for permanent in [400, 401, 403, 404, 409, 410, 413, 422, 499] {
            let err = classify_status(permanent, None).unwrap_err();
            assert!(err.is_permanent(), "{permanent}");
            assert_eq!(err.code(), format!("HTTP_{permanent}"));
        }
        for odd in [100, 301, 302, 304, 307, 600] {
            assert!(
                !classify_status(odd, None).unwrap_err().is_permanent(),
                "{odd}"
            );
        }
    }

    #[test]
    fn retry_after_is_kept_on_transient_answers_only() {
        let after = Some(Duration::from_secs(7));
        match classify_status(429, after).unwrap_err() {
            ProcessError::Transient { retry_after, .. } => assert_eq!(retry_after, after),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify_status(400, after),
            Err(ProcessError::Permanent { .. })
        ));
    }

    #[test]
    fn retry_after_seconds() {
        let now = 1_000_000;
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        // Capped at 900 s, the longest visibility delay a retry gets.
        for (text, seconds) in [
            (" 120 ", 120),
            ("900", 900),
            ("901", 900),
            ("99999999999999999999999", 900),
        ] {
            assert_eq!(
                parse_retry_after(text, now),
                Some(Duration::from_secs(seconds)),
                "{text:?}"
            );
        }
        for bad in ["", "-1", "1.5", "soon", "12s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_http_dates() {
        let now = RFC_EXAMPLE_MS - 30_000;
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                parse_retry_after(form, now),
                Some(Duration::from_secs(30)),
                "{form}"
            );
        }
        // A fraction of a second ahead rounds up.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", RFC_EXAMPLE_MS - 1),
            Some(Duration::from_secs(1))
        );
        // In the past: retry now.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", RFC_EXAMPLE_MS + 5_000),
            Some(Duration::ZERO)
        );
        // Far ahead: capped.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 10:49:37 GMT", RFC_EXAMPLE_MS),
            Some(Duration::from_secs(900))
        );
        for bad in [
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "2026-11-21T10:00:00Z",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    fn message(body: &str) -> Message {
        Message {
            message_id: "m-1".into(),
            receipt_handle: "h".into(),
            body: body.into(),
            attributes: Default::default(),
            receive_count: 1,
            group_id: None,
            source: None,
            trace_header: None,
        }
    }

    fn key(k: &str) -> IdempotencyKey {
        IdempotencyKey::try_from(k.to_string()).unwrap()
    }

    async fn deliver(http: &HttpProcessor, body: &str, k: &str) -> Result<(), ProcessError> {
        let record = Record::new(message(body), key(k));
        http.process(RawBody(body.to_string()), &record).await
    }

    fn processor(url: String, timeout_secs: u64) -> HttpProcessor {
        HttpProcessor::new(&DownstreamConfig {
            url,
            timeout: Duration::from_secs(timeout_secs),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn delivers_the_body_with_the_key_and_classifies_real_answers() {
        use redrive_tests::{Downstream, Mode};
        let downstream = Downstream::start().await;
        let http = processor(downstream.url(), 1);

        // 2xx: the body as is, the key in the header.
        deliver(&http, "{\"a\":1}", "k-1").await.unwrap();
        let sent = &downstream.requests()[0];
        assert_eq!(sent.method, "POST");
        assert_eq!(sent.body_text(), "{\"a\":1}");
        assert_eq!(sent.header("idempotency-key"), Some("k-1"));
        assert_eq!(sent.header("content-type"), Some("application/json"));

        downstream.set_mode(Mode::TooManyRequests {
            retry_after_secs: 7,
        });
        assert_eq!(
            deliver(&http, "x", "k-2").await,
            Err(ProcessError::Transient {
                code: "HTTP_429".into(),
                message: "downstream answered 429".into(),
                retry_after: Some(Duration::from_secs(7)),
            })
        );
        downstream.set_mode(Mode::Status(503));
        let err = deliver(&http, "x", "k-3").await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_503", false));
        downstream.set_mode(Mode::Status(400));
        let err = deliver(&http, "x", "k-4").await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_400", true));

        // Slower than the timeout: transient.
        downstream.set_mode(Mode::Slow(Duration::from_secs(3)));
        let err = deliver(&http, "x", "k-5").await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_TIMEOUT", false));

        // Nobody listening: transient.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/deliver", closed.local_addr().unwrap());
        drop(closed);
        let err = deliver(&processor(url, 1), "x", "k-6").await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_CONNECT", false));
    }

    #[tokio::test]
    async fn transport_errors_never_carry_the_urls_userinfo_or_query() {
        // GIVEN a downstream URL with credentials and a token, where nobody listens
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://svc-user:pa55word@{}/deliver?token=t0ken-secret",
            closed.local_addr().unwrap()
        );
        drop(closed);

        // WHEN a delivery fails to connect
        let err = deliver(&processor(url, 1), "x", "k-1").await.unwrap_err();

        // THEN its text (logged, and stamped into lastError) keeps none of them
        let text = err.to_string();
        assert_eq!(err.code(), "HTTP_CONNECT");
        for secret in ["svc-user", "pa55word", "t0ken-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    #[test]
    fn an_unparsable_url_is_named_without_its_secrets() {
        let config = DownstreamConfig {
            url: "http://svc-user:pa55word@exa mple.com/x?token=t0ken-secret".into(),
            timeout: Duration::from_secs(1),
        };
        let text = HttpProcessor::new(&config).unwrap_err().to_string();
        assert!(text.contains("exa mple.com/x"), "{text}");
        for secret in ["svc-user", "pa55word", "t0ken-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            redact_url_text("https://u:p@h:8/a/b?q=1#f"),
            "https://[redacted]@h:8/a/b?[redacted]"
        );
        assert_eq!(redact_url_text("https://h/a"), "https://h/a");
    }

    /// A loopback downstream that answers 200 with a body of `total` bytes (announced by its
    /// Content-Length) and reports how many bytes it managed to write before the client went.
    fn huge_answer_server(total: u64) -> (String, std::thread::JoinHandle<u64>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/deliver", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            // Bounds, not expectations: the server never outlives a stuck client for long.
            stream
                .set_write_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut content_length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    content_length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; content_length];
            let _ = reader.read_exact(&mut body);
            let mut stream = stream;
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
            if stream.write_all(head.as_bytes()).is_err() {
                return 0;
            }
            let chunk = vec![b'x'; 64 * 1024];
            let mut written = 0u64;
            while written < total {
                match stream.write(&chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => written += n as u64,
                }
            }
            written
        });
        (url, server)
    }

    #[tokio::test]
    async fn a_huge_answer_is_read_with_a_bound() {
        // GIVEN a downstream that answers 200 with a 128 MiB body
        let total = 128 * 1024 * 1024;
        let (url, server) = huge_answer_server(total);

        // WHEN a message is delivered
        let result = deliver(&processor(url, 60), "x", "k-1").await;

        // THEN it succeeded on the status, and the client stopped reading early: the server
        // wrote no more than the socket buffers hold beyond the cap
        assert_eq!(result, Ok(()));
        let written = tokio::task::spawn_blocking(move || server.join().unwrap())
            .await
            .unwrap();
        assert!(
            written < total / 4,
            "the client read {written} of {total} bytes"
        );
    }

    #[tokio::test]
    async fn a_key_that_cannot_be_a_header_value_is_a_permanent_failure() {
        use redrive_tests::Downstream;
        let downstream = Downstream::start().await;
        let http = processor(downstream.url(), 1);
        for bad in ["line\nbreak", "carriage\rreturn", "nul\0", "del\u{7f}"] {
            let err = deliver(&http, "x", bad).await.unwrap_err();
            assert_eq!(
                (err.code(), err.is_permanent()),
                (KEY_NOT_HEADER_VALUE, true),
                "{bad:?}"
            );
        }
        assert!(downstream.requests().is_empty(), "nothing was sent");
        // A printable key still goes through.
        deliver(&http, "x", "ok key-1:/+=").await.unwrap();
    }

    #[test]
    fn bad_urls_fail_init() {
        let config = DownstreamConfig {
            url: "http://exa mple.com/x".into(),
            timeout: Duration::from_secs(1),
        };
        let err = HttpProcessor::new(&config).unwrap_err();
        assert!(err.to_string().contains("exa mple"), "{err}");
        let config = DownstreamConfig {
            url: "http://127.0.0.1:9/deliver".into(),
            timeout: Duration::from_secs(1),
        };
        assert!(HttpProcessor::new(&config).is_ok());
    }
}
