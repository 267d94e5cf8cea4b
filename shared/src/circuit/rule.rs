//! The rule itself: what a run may do, the passing of time, bounces and redriven copies
//! counted over the window, and the operator's override, as transitions of a [`CircuitRecord`].

use crate::meta::RedriveMeta;
use crate::timefmt::millis_from_rfc3339;

use super::{
    BUCKETS_PER_WINDOW, Bounce, Canary, CircuitRecord, CircuitSettings, Event, HISTORY_LEN,
    Override, Plan, Sample, State, Transition,
};

/// The bounced copy `meta` describes, if it is one: redriven (`attempt >= 1`) with a readable
/// `lastRedrivenAt` no longer than the window before `now_ms` (and not in the future beyond
/// the one-second precision of the stamp).
pub fn bounce_of(meta: &RedriveMeta, now_ms: i64, settings: &CircuitSettings) -> Option<Bounce> {
    // A message waiting on the DLQ was put there by a drain's hop, not by a failed delivery.
    if meta.attempt == 0 || meta.not_before_ms().is_some() {
        return None;
    }
    let at = millis_from_rfc3339(meta.last_redriven_at.as_deref()?)?;
    let age = now_ms - at;
    ((-1000..=settings.window_ms).contains(&age)).then(|| Bounce {
        original_message_id: meta.original_message_id.clone(),
        last_redriven_at: at,
    })
}

fn sum(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| u64::from(s.n)).sum()
}

fn add(samples: &mut Vec<Sample>, at: i64, n: u32, bucket_ms: i64) {
    if n == 0 {
        return;
    }
    let at = at - at.rem_euclid(bucket_ms);
    match samples.iter_mut().find(|s| s.at == at) {
        Some(s) => s.n = s.n.saturating_add(n),
        None => {
            samples.push(Sample { at, n });
            samples.sort_by_key(|s| s.at);
        }
    }
}

impl CircuitRecord {
    /// Bounced / redriven over the window (1 when copies bounced but none are known redriven:
    /// another tool redrove them).
    pub fn bounce_rate(&self) -> f64 {
        let bounced = sum(&self.bounced);
        if bounced == 0 {
            return 0.0;
        }
        (bounced as f64 / sum(&self.redriven).max(1) as f64).min(1.0)
    }

    /// Copies redriven and bounced within the window.
    pub fn counts(&self) -> (u64, u64) {
        (sum(&self.redriven), sum(&self.bounced))
    }

    /// What a run may do now (call [`Self::tick`] first).
    pub fn plan(&self, settings: &CircuitSettings) -> Plan {
        match (self.operator, self.state) {
            (Override::Open, _) => Plan::Hold,
            (Override::Closed, _) => Plan::Drain { budget: None },
            (Override::Auto, State::Closed) => Plan::Drain { budget: self.ramp },
            (Override::Auto, State::Open) => Plan::Hold,
            (Override::Auto, State::HalfOpen) => match self.canary {
                None => Plan::Canary {
                    size: settings.canary_size,
                },
                Some(_) => Plan::Watch,
            },
        }
    }

    fn go(&mut self, now_ms: i64, to: State, reason: String) -> Transition {
        let t = Transition {
            at: now_ms,
            from: self.state,
            to,
            reason,
        };
        self.state = to;
        self.since = now_ms;
        self.history.push(t.clone());
        if self.history.len() > HISTORY_LEN {
            let excess = self.history.len() - HISTORY_LEN;
            self.history.drain(..excess);
        }
        t
    }

    fn bucket_ms(settings: &CircuitSettings) -> i64 {
        (settings.window_ms / BUCKETS_PER_WINDOW).max(1)
    }

    /// Drops samples older than the window.
    fn prune(&mut self, settings: &CircuitSettings, now_ms: i64) {
        let horizon = now_ms - settings.window_ms - Self::bucket_ms(settings);
        self.redriven.retain(|s| s.at >= horizon);
        self.bounced.retain(|s| s.at >= horizon);
    }

    fn open(&mut self, now_ms: i64, reason: String) -> Transition {
        self.canary = None;
        self.ramp = None;
        // Copies counted before the open must not reopen the circuit after it closes.
        self.redriven.clear();
        self.bounced.clear();
        self.go(now_ms, State::Open, reason)
    }

    /// The passing of time: an open circuit whose cool-down is over goes half-open; a canary
    /// that stayed away for the whole window closes the circuit. Only in `auto`.
    pub fn tick(&mut self, settings: &CircuitSettings, now_ms: i64) -> Vec<Transition> {
        self.prune(settings, now_ms);
        if self.operator != Override::Auto {
            return Vec::new();
        }
        match self.state {
            State::Open if now_ms >= self.since + self.cooldown_ms => {
                let reason = format!("cool-down of {} s over", self.cooldown_ms / 1000);
                vec![self.go(now_ms, State::HalfOpen, reason)]
            }
            State::HalfOpen => match &self.canary {
                Some(c) if now_ms >= c.sent_at + settings.window_ms => {
                    let reason = format!(
                        "canary held: {} of {} copies came back within {} s",
                        c.bounced.len(),
                        c.sent,
                        settings.window_ms / 1000
                    );
                    self.ramp = Some(c.sent.max(1).saturating_mul(2));
                    self.canary = None;
                    self.cooldown_ms = settings.cooldown_ms;
                    self.redriven.clear();
                    self.bounced.clear();
                    vec![self.go(now_ms, State::Closed, reason)]
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// Bounced copies seen by a run (see [`bounce_of`]). Closed and automatic: opens the
    /// circuit when the rate over the window reaches the threshold. Half-open with a canary
    /// out: a copy redriven since the canary was sent is a canary copy; when they reach the
    /// threshold of the canary, the circuit opens again with a doubled cool-down.
    pub fn observe_bounces(
        &mut self,
        settings: &CircuitSettings,
        now_ms: i64,
        bounces: &[Bounce],
    ) -> Vec<Transition> {
        let samples: Vec<Sample> = bounces
            .iter()
            .map(|b| Sample {
                at: b.last_redriven_at,
                n: 1,
            })
            .collect();
        self.observe_bounced(settings, now_ms, &samples, bounces)
    }

    /// [`Self::observe_bounces`] of copies counted by their `lastRedrivenAt` (`samples`), of
    /// which `canary_copies` (counted in `samples` too) are named by their chain: those that
    /// may be copies of the canary out. Several runs that share one plan sum their counts
    /// into one call, so that the bounce-back rate judges them together, once.
    pub fn observe_bounced(
        &mut self,
        settings: &CircuitSettings,
        now_ms: i64,
        samples: &[Sample],
        canary_copies: &[Bounce],
    ) -> Vec<Transition> {
        let bucket = Self::bucket_ms(settings);
        for s in samples {
            if now_ms - s.at <= settings.window_ms {
                add(&mut self.bounced, s.at, s.n, bucket);
            }
        }
        for b in canary_copies {
            if let Some(c) = &mut self.canary {
                // `lastRedrivenAt` has one-second precision.
                let canary_copy = b.last_redriven_at >= c.sent_at - c.sent_at.rem_euclid(1000);
                if canary_copy && !c.bounced.contains(&b.original_message_id) {
                    c.bounced.push(b.original_message_id.clone());
                }
            }
        }
        self.prune(settings, now_ms);
        if self.operator != Override::Auto {
            return Vec::new();
        }
        match self.state {
            State::Closed => {
                let (redriven, bounced) = self.counts();
                let rate = self.bounce_rate();
                if bounced >= u64::from(settings.min_bounces.max(1)) && rate >= settings.threshold {
                    let reason = format!(
                        "bounce-back rate {rate:.2} >= {:.2}: {bounced} of {redriven} copies came back within {} s",
                        settings.threshold,
                        settings.window_ms / 1000
                    );
                    self.cooldown_ms = settings.cooldown_ms;
                    return vec![self.open(now_ms, reason)];
                }
                Vec::new()
            }
            State::HalfOpen => {
                let Some(c) = &self.canary else {
                    return Vec::new();
                };
                let back = c.bounced.len() as u64;
                if back > 0 && back as f64 >= settings.threshold * f64::from(c.sent.max(1)) {
                    let reason = format!("canary bounced: {back} of {} copies came back", c.sent);
                    self.cooldown_ms = self
                        .cooldown_ms
                        .saturating_mul(2)
                        .min(settings.max_cooldown_ms)
                        .max(settings.cooldown_ms);
                    return vec![self.open(now_ms, reason)];
                }
                Vec::new()
            }
            State::Open => Vec::new(),
        }
    }

    /// Copies a run redrove (sent and acknowledged). In half-open with no canary out, they
    /// are the canary.
    pub fn record_redriven(&mut self, settings: &CircuitSettings, now_ms: i64, n: u32) {
        add(&mut self.redriven, now_ms, n, Self::bucket_ms(settings));
        if self.state == State::HalfOpen
            && self.operator == Override::Auto
            && self.canary.is_none()
            && n > 0
        {
            self.canary = Some(Canary {
                sent_at: now_ms,
                sent: n,
                bounced: Vec::new(),
            });
        }
    }

    /// The end of a run that was allowed to drain: a closed circuit ramping up doubles its
    /// budget, which ends once it reaches `max_per_run`.
    pub fn end_run(&mut self, plan: Plan, max_per_run: u32) {
        if let (Plan::Drain { budget: Some(_) }, State::Closed, Some(b)) =
            (plan, self.state, self.ramp)
        {
            let next = b.saturating_mul(2);
            self.ramp = (next < max_per_run).then_some(next);
        }
    }

    /// Applies one event; returns the transitions it made.
    pub fn apply(&mut self, settings: &CircuitSettings, event: &Event) -> Vec<Transition> {
        match event {
            Event::Tick { now } => self.tick(settings, *now),
            Event::Bounces { now, bounces } => self.observe_bounces(settings, *now, bounces),
            Event::Bounced {
                now,
                samples,
                canary_copies,
            } => self.observe_bounced(settings, *now, samples, canary_copies),
            Event::Redriven { now, n } => {
                self.record_redriven(settings, *now, *n);
                Vec::new()
            }
            Event::EndRun { plan, max_per_run } => {
                self.end_run(*plan, *max_per_run);
                Vec::new()
            }
            Event::Override { now, mode } => self.set_override(*now, *mode),
        }
    }

    /// The operator's override. `open` holds the circuit open; `closed` closes it and forgets
    /// the measurements; `auto` hands it back (an open circuit then waits out its cool-down,
    /// counted from when it opened, and sends a canary).
    pub fn set_override(&mut self, now_ms: i64, mode: Override) -> Vec<Transition> {
        let before = self.operator;
        self.operator = mode;
        let why = |s: &str| format!("operator: {s} (was {before})");
        match mode {
            Override::Open if self.state != State::Open => {
                self.canary = None;
                self.ramp = None;
                vec![self.go(now_ms, State::Open, why("open"))]
            }
            Override::Closed if self.state != State::Closed => {
                self.canary = None;
                self.ramp = None;
                self.redriven.clear();
                self.bounced.clear();
                vec![self.go(now_ms, State::Closed, why("closed"))]
            }
            _ => Vec::new(),
        }
    }
}
