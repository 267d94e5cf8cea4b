//! The shipped processing step: POST the body to `DOWNSTREAM_URL` with the idempotency key in
//! an `Idempotency-Key` header, and classify the answer.
//!
//! - 2xx: success.
//! - 408, 429, 5xx, timeouts, connection and other transport errors: transient; a
//!   `Retry-After` header (seconds or HTTP-date) is honoured, capped at 900 s.
//! - Any other 4xx: permanent.
//! - Anything else (1xx, 3xx: redirects are not followed, since a redirected POST would lose
//!   its body): transient, so that a misrouted endpoint never dead-letters good messages.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive_shared::backoff::MAX_DELAY_SECONDS;
use redrive_shared::config::DownstreamConfig;
use redrive_shared::key::IdempotencyKey;
use redrive_shared::timefmt::millis_from_rfc3339;

use crate::message::Message;
use crate::process::{ProcessError, Processor};

/// The header carrying the idempotency key to the downstream.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// Delivers each body to one HTTP endpoint. Build once at init: the client pools connections.
#[derive(Debug, Clone)]
pub struct HttpProcessor {
    client: reqwest::Client,
    url: reqwest::Url,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpInitError {
    #[error("DOWNSTREAM_URL {url:?} is not a valid URL: {reason}")]
    Url { url: String, reason: String },
    #[error("building the HTTP client: {0}")]
    Client(reqwest::Error),
}

impl HttpProcessor {
    pub fn new(config: &DownstreamConfig) -> Result<Self, HttpInitError> {
        let url = reqwest::Url::parse(&config.url).map_err(|e| HttpInitError::Url {
            url: config.url.clone(),
            reason: e.to_string(),
        })?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(HttpInitError::Client)?;
        Ok(Self { client, url })
    }
}

impl Processor for HttpProcessor {
    async fn process(&self, message: &Message, key: &IdempotencyKey) -> Result<(), ProcessError> {
        let content_type = if serde_json::from_str::<serde::de::IgnoredAny>(&message.body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        let response = self
            .client
            .post(self.url.clone())
            .header(IDEMPOTENCY_KEY_HEADER, key.as_str())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(message.body.clone())
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
                // Read (and drop) the answer so that the connection goes back to the pool; it
                // is never logged, since it may echo the body. The status alone decides.
                let _ = response.bytes().await;
                classify_status(status, retry_after)
            }
            Err(e) => Err(classify_transport_error(&e)),
        }
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

fn classify_transport_error(e: &reqwest::Error) -> ProcessError {
    let code = if e.is_timeout() {
        "HTTP_TIMEOUT"
    } else if e.is_connect() {
        "HTTP_CONNECT"
    } else {
        "HTTP_TRANSPORT"
    };
    // The error's text names the URL and the cause, never the body.
    ProcessError::transient(code, error_chain(e))
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

/// HTTP-date (RFC 9110 section 5.6.7) to epoch milliseconds.
fn parse_http_date(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = |m: &str| MONTHS.iter().position(|x| *x == m).map(|i| i + 1);
    let parts: Vec<&str> = s.split_ascii_whitespace().collect();
    let (year, mon, day, time) = match parts.as_slice() {
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        [wd, d, m, y, t, "GMT"] if wd.ends_with(',') && y.len() == 4 => (
            y.parse::<i64>().ok()?,
            month(m)?,
            d.parse::<u32>().ok()?,
            *t,
        ),
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
        [wd, dmy, t, "GMT"] if wd.ends_with(',') => {
            let mut it = dmy.split('-');
            let (d, m, y) = (it.next()?, it.next()?, it.next()?);
            if it.next().is_some() || y.len() != 2 {
                return None;
            }
            let yy = y.parse::<i64>().ok()?;
            // RFC 9110: a two-digit year more than 50 years ahead is in the past century.
            let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
            (year, month(m)?, d.parse::<u32>().ok()?, *t)
        }
        // asctime: Sun Nov  6 08:49:37 1994
        [_wd, m, d, t, y] if y.len() == 4 => (
            y.parse::<i64>().ok()?,
            month(m)?,
            d.parse::<u32>().ok()?,
            *t,
        ),
        _ => return None,
    };
    if time.len() != 8 || !(1..=31).contains(&day) || !(0..=9999).contains(&year) {
        return None;
    }
    // Reuse the shared RFC 3339 reader for the calendar arithmetic and range checks.
    millis_from_rfc3339(&format!("{year:04}-{mon:02}-{day:02}T{time}Z"))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("900", now),
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            parse_retry_after("901", now),
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(900))
        );
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
        }
    }

    fn key(k: &str) -> IdempotencyKey {
        IdempotencyKey::try_from(k.to_string()).unwrap()
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
        http.process(&message("{\"a\":1}"), &key("k-1"))
            .await
            .unwrap();
        let sent = &downstream.requests()[0];
        assert_eq!(sent.method, "POST");
        assert_eq!(sent.body_text(), "{\"a\":1}");
        assert_eq!(sent.header("idempotency-key"), Some("k-1"));
        assert_eq!(sent.header("content-type"), Some("application/json"));

        downstream.set_mode(Mode::TooManyRequests {
            retry_after_secs: 7,
        });
        assert_eq!(
            http.process(&message("x"), &key("k-2")).await,
            Err(ProcessError::Transient {
                code: "HTTP_429".into(),
                message: "downstream answered 429".into(),
                retry_after: Some(Duration::from_secs(7)),
            })
        );
        downstream.set_mode(Mode::Status(503));
        let err = http.process(&message("x"), &key("k-3")).await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_503", false));
        downstream.set_mode(Mode::Status(400));
        let err = http.process(&message("x"), &key("k-4")).await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_400", true));

        // Slower than the timeout: transient.
        downstream.set_mode(Mode::Slow(Duration::from_secs(3)));
        let err = http.process(&message("x"), &key("k-5")).await.unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_TIMEOUT", false));

        // Nobody listening: transient.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/deliver", closed.local_addr().unwrap());
        drop(closed);
        let err = processor(url, 1)
            .process(&message("x"), &key("k-6"))
            .await
            .unwrap_err();
        assert_eq!((err.code(), err.is_permanent()), ("HTTP_CONNECT", false));
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
