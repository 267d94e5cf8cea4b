//! The soak's flaky downstream: decides per delivery whether it succeeds, fails transiently
//! (503, 429 with `Retry-After`, a reset connection) or permanently (400), and counts the side
//! effects per idempotency key. One decision function serves the HTTP server of the moto
//! soak and the in-process processing step of the port-fake soak.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_consumer::{ProcessError, Processor, RawBody, Record};
use redrive_shared::backoff::{JitterRng, RandomSource, seeded_rng};
use redrive_shared::sync::lock;

use crate::loopback::{Answer, Server, respond};

/// Marks a message the downstream always rejects (400): a poison payload.
pub const POISON_MARKER: &str = "\"kind\":\"poison\"";
/// Marks a message the downstream never accepts (503 every time): it must end in the poison
/// queue with `max-attempts`.
pub const DOOMED_MARKER: &str = "\"kind\":\"doomed\"";

/// What the downstream does with one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 200: the side effect happens.
    Apply,
    /// 503.
    Unavailable,
    /// 429 with `Retry-After: 1`.
    TooManyRequests,
    /// The connection is reset before anything happens.
    Reset,
    /// 400: the payload can never succeed.
    Reject,
}

/// The downstream's behaviour and its ledger of side effects.
pub struct Flaky {
    rng: Mutex<JitterRng>,
    /// Share of deliveries of ordinary messages that fail transiently.
    pub failure_rate: f64,
    effects: Mutex<HashMap<String, u32>>,
    verdicts: Mutex<HashMap<&'static str, u64>>,
}

impl Flaky {
    pub fn new(failure_rate: f64, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            rng: Mutex::new(seeded_rng(seed)),
            failure_rate,
            effects: Mutex::new(HashMap::new()),
            verdicts: Mutex::new(HashMap::new()),
        })
    }

    /// Decides one delivery and, when it succeeds, records the side effect under `key`.
    pub fn deliver(&self, body: &str, key: Option<&str>, can_reset: bool) -> Verdict {
        let verdict = if body.contains(POISON_MARKER) {
            Verdict::Reject
        } else if body.contains(DOOMED_MARKER) {
            Verdict::Unavailable
        } else {
            let mut rng = lock(&self.rng);
            if rng.next_unit() >= self.failure_rate {
                Verdict::Apply
            } else {
                let r = rng.next_unit();
                if r < 0.6 {
                    Verdict::Unavailable
                } else if r < 0.85 || !can_reset {
                    Verdict::TooManyRequests
                } else {
                    Verdict::Reset
                }
            }
        };
        if verdict == Verdict::Apply {
            *lock(&self.effects)
                .entry(key.map_or("<no key>", chain_of).to_string())
                .or_default() += 1;
        }
        *lock(&self.verdicts)
            .entry(match verdict {
                Verdict::Apply => "200",
                Verdict::Unavailable => "503",
                Verdict::TooManyRequests => "429",
                Verdict::Reset => "reset",
                Verdict::Reject => "400",
            })
            .or_default() += 1;
        verdict
    }

    /// Successful deliveries per key: the side effects a non-idempotent downstream would
    /// have performed.
    pub fn effects(&self) -> HashMap<String, u32> {
        lock(&self.effects).clone()
    }

    /// Answers given, by status.
    pub fn verdicts(&self) -> HashMap<&'static str, u64> {
        lock(&self.verdicts).clone()
    }
}

/// The processing step of the port-fake soak: the flaky downstream, in process.
pub struct FlakyProcessor(pub Arc<Flaky>);

impl Processor for FlakyProcessor {
    type Output = ();

    async fn process(&self, body: RawBody, record: &Record) -> Result<(), ProcessError> {
        match self.0.deliver(&body, Some(record.key().as_str()), false) {
            Verdict::Apply => Ok(()),
            Verdict::Unavailable | Verdict::Reset => Err(ProcessError::transient(
                "HTTP_503",
                "downstream unavailable",
            )),
            Verdict::TooManyRequests => Err(ProcessError::retry_after(
                "HTTP_429",
                "downstream throttled",
                Duration::from_secs(1),
            )),
            Verdict::Reject => Err(ProcessError::permanent("HTTP_400", "downstream rejected")),
        }
    }
}

/// The flaky downstream as an HTTP server, for the shipped `HttpProcessor`.
pub struct FlakyServer(Server);

impl FlakyServer {
    pub async fn start(flaky: Arc<Flaky>) -> io::Result<Self> {
        let server = Server::start(move |call| {
            let text = String::from_utf8_lossy(&call.body);
            let answer = match flaky.deliver(&text, call.header("idempotency-key"), true) {
                Verdict::Apply => respond(200, &[], ""),
                Verdict::Unavailable => respond(503, &[], ""),
                Verdict::TooManyRequests => respond(429, &[("retry-after", "1")], ""),
                Verdict::Reject => respond(400, &[], ""),
                Verdict::Reset => Answer::Reset,
            };
            std::future::ready(answer)
        })
        .await?;
        Ok(Self(server))
    }

    pub fn url(&self) -> String {
        format!("http://{}/deliver", self.0.addr())
    }
}

/// The chain a key belongs to: the default `message` key is `<originalMessageId>:<32 hex
/// digits of the body's digest>`, and the soak reconciles by originalMessageId.
pub fn chain_of(key: &str) -> &str {
    match key.rsplit_once(':') {
        Some((chain, digest))
            if digest.len() == 32 && digest.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            chain
        }
        _ => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_and_doomed_payloads_never_succeed() {
        let flaky = Flaky::new(0.0, 1);
        for _ in 0..100 {
            assert_eq!(
                flaky.deliver(r#"{"kind":"poison"}"#, Some("p"), true),
                Verdict::Reject
            );
            assert_eq!(
                flaky.deliver(r#"{"kind":"doomed"}"#, Some("d"), true),
                Verdict::Unavailable
            );
        }
        assert!(flaky.effects().is_empty());
        assert_eq!(
            flaky.deliver(r#"{"kind":"normal"}"#, Some("n"), true),
            Verdict::Apply
        );
        assert_eq!(flaky.effects()["n"], 1);
    }

    #[test]
    fn ordinary_deliveries_fail_at_the_configured_rate() {
        let flaky = Flaky::new(0.2, 7);
        let n = 20_000;
        let failed = (0..n)
            .filter(|i| flaky.deliver("{}", Some(&i.to_string()), false) != Verdict::Apply)
            .count();
        let share = failed as f64 / n as f64;
        assert!((0.18..0.22).contains(&share), "{share}");
        assert!(
            !flaky.verdicts().contains_key("reset"),
            "no resets in process"
        );
    }
}
