//! What the circuit simulation reports: each side's figures and their reconciliation against
//! the downstream's own records.

use std::collections::{BTreeMap, HashMap};

use redrive_tests::Downstream;
use serde::Serialize;

use super::SimSettings;
use crate::soak::Parked;

/// Which re-driver a side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The re-driver without `CIRCUIT_TABLE`: backoff only.
    Without,
    /// The re-driver with the adaptive circuit (`CIRCUIT_TABLE` set).
    With,
}

impl Side {
    pub fn label(self) -> &'static str {
        match self {
            Self::Without => "without circuit",
            Self::With => "with circuit",
        }
    }
}

/// What one side came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideReport {
    pub side: Option<Side>,
    pub messages: u64,
    /// Messages in the poison queue when the downstream recovered.
    pub parked_during_outage: u64,
    /// Seconds into the outage at which the poison queue held every message (`None`: never).
    pub all_parked_after_seconds: Option<f64>,
    /// Messages on the DLQ (visible, in flight, delayed) when the downstream recovered.
    pub dlq_at_recovery: u64,
    /// Seconds from the downstream's recovery to the DLQ and the source queue being empty
    /// (`None`: not within `max_recovery`).
    pub recovery_to_empty_seconds: Option<f64>,
    /// Keys the downstream applied exactly once.
    pub delivered_once: u64,
    /// Keys the downstream applied more than once.
    pub delivered_twice: u64,
    /// Keys neither delivered nor in any queue.
    pub lost: Vec<String>,
    /// Keys parked at the end, by `queue:reason`.
    pub parked: BTreeMap<String, u64>,
    /// Anything that breaks the contract: a key delivered and still parked, a copy that was
    /// never produced, more than one copy of a key.
    pub violations: Vec<String>,
    /// Requests the downstream answered with an error (the outage's load on it).
    pub downstream_failures: u64,
    pub redriver_invocations: u64,
    /// Re-driver responses by `stoppedBecause`.
    pub stopped_because: BTreeMap<String, u64>,
    pub redriven: u64,
    pub isolated: u64,
    pub redriver_errors: u64,
}

impl SideReport {
    pub fn parked_total(&self) -> u64 {
        self.parked.values().sum()
    }

    /// No loss, no double delivery, no violation, and the DLQ emptied after the recovery.
    pub fn sound(&self) -> bool {
        self.lost.is_empty()
            && self.delivered_twice == 0
            && self.violations.is_empty()
            && self.recovery_to_empty_seconds.is_some()
    }
}

/// Both sides of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub settings: SimSettings,
    pub backoff_schedule_seconds: u64,
    pub consumer_schedule_seconds: u64,
    pub outage_seconds: u64,
    pub without: SideReport,
    /// `None` when the adaptive circuit could not be configured.
    pub with: Option<SideReport>,
}

impl SimReport {
    /// Without the circuit every message is parked during the outage (the outage is long
    /// enough); with it none is; both sides lose nothing and deliver nothing twice.
    pub fn passed(&self) -> bool {
        let all = self.settings.messages;
        let with_ok = self
            .with
            .as_ref()
            .is_some_and(|w| w.sound() && w.parked_during_outage == 0 && w.parked_total() == 0);
        self.without.sound() && self.without.parked_during_outage == all && with_ok
    }
}

impl std::fmt::Display for SimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.settings;
        writeln!(
            f,
            "circuit simulation (moto): {}",
            if self.passed() { "PASSED" } else { "FAILED" }
        )?;
        let delays: Vec<String> = (1..=s.max_redrive_attempts)
            .map(|a| s.redrive_delay(a).to_string())
            .collect();
        writeln!(
            f,
            "  schedule           re-driver {} attempts, backoff {} s = {} s; consumer retries {} s (maxReceiveCount {}, {} s per retry); alarm evaluations {} s; whole {} s",
            s.max_redrive_attempts,
            delays.join("+"),
            self.backoff_schedule_seconds,
            self.consumer_schedule_seconds,
            s.max_receive_count,
            s.consumer_retry_seconds,
            s.alarm_schedule().as_secs(),
            s.whole_schedule().as_secs()
        )?;
        writeln!(
            f,
            "  outage             {} s of 503 ({}x the whole schedule), {} messages per side produced as it starts; DLQ alarm evaluated every {} s, safety net every {} s",
            self.outage_seconds,
            s.outage_factor,
            s.messages,
            s.alarm_period.as_secs_f64(),
            s.schedule_period.as_secs_f64()
        )?;
        if self.with.is_some() {
            let tuning: Vec<String> = s
                .circuit_env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            writeln!(
                f,
                "  circuit            {} (the rest at their defaults)",
                tuning.join(" ")
            )?;
        }
        let sides: Vec<&SideReport> = std::iter::once(&self.without)
            .chain(self.with.as_ref())
            .collect();
        write!(f, "  {:<40}", "")?;
        for side in &sides {
            write!(f, "{:>18}", side.side.map_or("?", Side::label))?;
        }
        writeln!(f)?;
        let row = |f: &mut std::fmt::Formatter<'_>,
                   name: &str,
                   cell: &dyn Fn(&SideReport) -> String|
         -> std::fmt::Result {
            write!(f, "  {name:<40}")?;
            for side in &sides {
                write!(f, "{:>18}", cell(side))?;
            }
            writeln!(f)
        };
        row(f, "parked in poison during the outage", &|r| {
            format!("{} of {}", r.parked_during_outage, r.messages)
        })?;
        row(f, "  all of them parked after", &|r| {
            r.all_parked_after_seconds
                .map_or("-".into(), |t| format!("{t:.1} s"))
        })?;
        row(f, "on the DLQ when the downstream recovers", &|r| {
            r.dlq_at_recovery.to_string()
        })?;
        row(f, "recovery -> DLQ and source empty", &|r| {
            r.recovery_to_empty_seconds
                .map_or("not within limit".into(), |t| format!("{t:.1} s"))
        })?;
        row(f, "delivered once", &|r| r.delivered_once.to_string())?;
        row(f, "parked at the end", &|r| r.parked_total().to_string())?;
        row(f, "delivered twice", &|r| r.delivered_twice.to_string())?;
        row(f, "lost", &|r| r.lost.len().to_string())?;
        row(f, "downstream calls that failed", &|r| {
            r.downstream_failures.to_string()
        })?;
        row(f, "re-driver invocations", &|r| {
            r.redriver_invocations.to_string()
        })?;
        row(f, "  stopped by circuit-open", &|r| {
            r.stopped_because
                .get("circuit-open")
                .copied()
                .unwrap_or(0)
                .to_string()
        })?;
        row(f, "redriven / isolated", &|r| {
            format!("{} / {}", r.redriven, r.isolated)
        })?;
        if self.with.is_none() {
            writeln!(
                f,
                "  with circuit: NOT RUN (the re-driver has no adaptive circuit to configure)"
            )?;
        }
        for side in &sides {
            let label = side.side.map_or("?", Side::label);
            for v in &side.violations {
                writeln!(f, "  VIOLATION ({label})  {v}")?;
            }
            for k in side.lost.iter().take(10) {
                writeln!(f, "  LOST ({label})       {k}")?;
            }
        }
        Ok(())
    }
}

/// Every produced message is delivered exactly once by the downstream's own records (by
/// idempotency key, whose chain is the original MessageId), or parked in exactly one copy.
pub(super) fn reconcile(
    report: &mut SideReport,
    produced: &[String],
    inventory: &[Parked],
    downstream: &Downstream,
) {
    let mut copies: HashMap<&str, Vec<&Parked>> = HashMap::new();
    for p in inventory {
        copies.entry(p.key.as_str()).or_default().push(p);
        if !produced.contains(&p.key) {
            report
                .violations
                .push(format!("a queue holds {}, which was never produced", p.key));
        }
    }
    for id in produced {
        let delivered = downstream.deliveries(id);
        let found = copies.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        match (delivered, found.len()) {
            (0, 0) => report.lost.push(id.clone()),
            (0, n) => {
                let first = found[0];
                let label = match &first.reason {
                    Some(r) => format!("{}:{r}", first.place.as_str()),
                    None => first.place.as_str().to_string(),
                };
                *report.parked.entry(label).or_default() += 1;
                if n > 1 {
                    report
                        .violations
                        .push(format!("{id} is parked in {n} copies"));
                }
            }
            (d, n) => {
                if d == 1 {
                    report.delivered_once += 1;
                } else {
                    report.delivered_twice += 1;
                }
                if n > 0 {
                    report
                        .violations
                        .push(format!("{id} was delivered and still sits in a queue"));
                }
            }
        }
    }
    report.downstream_failures = downstream
        .requests()
        .iter()
        .filter(|r| !r.is_success())
        .count() as u64;
}
