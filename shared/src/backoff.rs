//! Exponential backoff with jitter, shared by the re-driver (DelaySeconds) and the consumer
//! (visibility timeout of a transient failure).
//!
//! For attempt n >= 1: `d = min(max, base * multiplier^(n-1))`, then the jitter strategy. The
//! result is whole seconds, rounded up, never negative and never above `max` or 900.

use std::fmt;
use std::str::FromStr;

/// SQS's DelaySeconds limit, and the ceiling of every delay this crate computes.
pub const MAX_DELAY_SECONDS: u32 = 900;

/// The longest wait of the Step Functions orchestrator ([`Backoff::new_long`]): 12 h, SQS's
/// longest visibility timeout, which hides a waiting message on the DLQ.
pub const MAX_WAIT_SECONDS: u32 = 43_200;

/// A source of uniform numbers in `[0, 1)`. Injectable so that tests are deterministic.
pub trait RandomSource {
    fn next_unit(&mut self) -> f64;
}

/// Every `rand` generator is a source: 53 random bits as an `f64` in `[0, 1)`.
impl<R: rand::Rng + ?Sized> RandomSource for R {
    fn next_unit(&mut self) -> f64 {
        rand::RngExt::random::<f64>(self)
    }
}

/// The generator behind jitter (and the bench's fault draws): `rand`'s `SmallRng`, small and
/// fast, not for cryptography (claim tokens are `uuid` v4).
pub type JitterRng = rand::rngs::SmallRng;

/// A generator whose draws are fixed by `seed` (tests, the soak, the bench).
pub fn seeded_rng(seed: u64) -> JitterRng {
    rand::SeedableRng::seed_from_u64(seed)
}

/// A generator seeded from the operating system's entropy (the Lambdas).
pub fn os_seeded_rng() -> JitterRng {
    rand::make_rng()
}

/// A constant "random" value, for tests and for reasoning about bounds.
#[derive(Debug, Clone, Copy)]
pub struct Fixed(pub f64);

impl RandomSource for Fixed {
    fn next_unit(&mut self) -> f64 {
        self.0.clamp(0.0, 1.0)
    }
}

/// How randomness spreads the exponential delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// `d`
    None,
    /// uniform `[0, d]`
    Full,
    /// `d/2 + uniform [0, d/2]`
    Equal,
    /// `d + uniform [0, d*P]`, capped at max
    Proportional(f64),
    /// `min(max, uniform [base, prev*3])`
    Decorrelated,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a jitter strategy: expected none, full, equal, proportional:P (P a number >= 0, e.g. proportional:0.25) or decorrelated"
)]
pub struct JitterParseError {
    pub value: String,
}

impl FromStr for Jitter {
    type Err = JitterParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || JitterParseError {
            value: s.to_string(),
        };
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Self::None),
            "full" => Ok(Self::Full),
            "equal" => Ok(Self::Equal),
            "decorrelated" => Ok(Self::Decorrelated),
            other => {
                let p = other.strip_prefix("proportional:").ok_or_else(err)?;
                let p: f64 = p.trim().parse().map_err(|_| err())?;
                if p.is_finite() && p >= 0.0 {
                    Ok(Self::Proportional(p))
                } else {
                    Err(err())
                }
            }
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Full => f.write_str("full"),
            Self::Equal => f.write_str("equal"),
            Self::Proportional(p) => write!(f, "proportional:{p}"),
            Self::Decorrelated => f.write_str("decorrelated"),
        }
    }
}

/// A validated backoff policy. Construct with [`Backoff::new`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base: f64,
    multiplier: f64,
    max: u32,
    jitter: Jitter,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackoffError {
    #[error("base {0} must be a finite number of seconds >= 0")]
    Base(f64),
    #[error("multiplier {0} must be a finite number >= 1")]
    Multiplier(f64),
    #[error(
        "max {0} must be between 0 and {MAX_DELAY_SECONDS} seconds (the SQS DelaySeconds limit)"
    )]
    Max(u64),
    #[error(
        "max {0} must be between 0 and {MAX_WAIT_SECONDS} seconds (12 h, the SQS visibility limit)"
    )]
    LongMax(u64),
}

impl Backoff {
    pub fn new(base: f64, multiplier: f64, max: u64, jitter: Jitter) -> Result<Self, BackoffError> {
        if !(base.is_finite() && base >= 0.0) {
            return Err(BackoffError::Base(base));
        }
        if !(multiplier.is_finite() && multiplier >= 1.0) {
            return Err(BackoffError::Multiplier(multiplier));
        }
        if max > u64::from(MAX_DELAY_SECONDS) {
            return Err(BackoffError::Max(max));
        }
        Ok(Self {
            base,
            multiplier,
            max: max as u32,
            jitter,
        })
    }

    // Step Functions orchestrator
    /// A policy for the Step Functions orchestrator, whose waits are not SQS delays: `max` up
    /// to [`MAX_WAIT_SECONDS`] (12 h, SQS's longest visibility timeout, which holds a waiting
    /// message on the DLQ). Same formula and jitter as [`Backoff::new`].
    pub fn new_long(
        base: f64,
        multiplier: f64,
        max: u64,
        jitter: Jitter,
    ) -> Result<Self, BackoffError> {
        if max > u64::from(MAX_WAIT_SECONDS) {
            return Err(BackoffError::LongMax(max));
        }
        let capped = Self::new(
            base,
            multiplier,
            max.min(u64::from(MAX_DELAY_SECONDS)),
            jitter,
        )?;
        Ok(Self {
            max: max as u32,
            ..capped
        })
    }

    pub fn base(&self) -> f64 {
        self.base
    }
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }
    pub fn max(&self) -> u32 {
        self.max
    }
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The exponential delay before jitter, in (fractional) seconds: `min(max, base * m^(n-1))`.
    /// Attempt 0 is treated as attempt 1. Cannot overflow: powers saturate to infinity in f64
    /// and the `min` brings them back to `max`.
    pub fn exponential(&self, attempt: u32) -> f64 {
        let exp = attempt.max(1) - 1;
        let raw = self.base * self.multiplier.powi(exp.min(i32::MAX as u32) as i32);
        if raw.is_nan() {
            f64::from(self.max)
        } else {
            raw.min(f64::from(self.max))
        }
    }

    /// The delay in whole seconds for `attempt`, drawing from `rng`.
    ///
    /// `decorrelated` needs the previous delay; a stateless caller passes `None`, and the
    /// previous attempt's exponential delay (or `base` for the first attempt) stands in for it.
    pub fn delay_seconds(
        &self,
        attempt: u32,
        previous: Option<f64>,
        rng: &mut impl RandomSource,
    ) -> u32 {
        let max = f64::from(self.max);
        let d = self.exponential(attempt);
        let u = rng.next_unit();
        let raw = match self.jitter {
            Jitter::None => d,
            Jitter::Full => u * d,
            Jitter::Equal => d / 2.0 + u * d / 2.0,
            Jitter::Proportional(p) => (d + u * d * p).min(max),
            Jitter::Decorrelated => {
                let prev = previous.unwrap_or_else(|| {
                    if attempt <= 1 {
                        self.base
                    } else {
                        self.exponential(attempt - 1)
                    }
                });
                let hi = (prev * 3.0).max(self.base);
                (self.base + u * (hi - self.base)).min(max)
            }
        };
        // `max` was bounded at construction: 900 by `new`, 12 h by `new_long`.
        round_up_within(raw, self.max)
    }
}

/// Rounds up to whole seconds and clamps to `[0, min(max, 900)]`.
pub fn whole_seconds(raw: f64, max: u32) -> u32 {
    round_up_within(raw, max.min(MAX_DELAY_SECONDS))
}

/// Rounds up to whole seconds and clamps to `[0, cap]`.
fn round_up_within(raw: f64, cap: u32) -> u32 {
    if !raw.is_finite() {
        return if raw == f64::INFINITY { cap } else { 0 };
    }
    let up = raw.ceil();
    if up <= 0.0 {
        0
    } else if up >= f64::from(cap) {
        cap
    } else {
        up as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_seeded_generators_differ() {
        // Two Lambdas (or two engines in one process) must not jitter in lockstep.
        let firsts: std::collections::HashSet<u64> = (0..1_000)
            .map(|_| rand::Rng::next_u64(&mut os_seeded_rng()))
            .collect();
        assert_eq!(firsts.len(), 1_000);
    }
    use proptest::prelude::*;

    fn policy(jitter: Jitter) -> Backoff {
        Backoff::new(60.0, 2.0, 900, jitter).unwrap()
    }

    #[test]
    fn exponential_doubles_then_caps() {
        let b = policy(Jitter::None);
        let got: Vec<u32> = (1..=6)
            .map(|n| b.delay_seconds(n, None, &mut Fixed(0.5)))
            .collect();
        assert_eq!(got, [60, 120, 240, 480, 900, 900]);
        assert_eq!(
            b.delay_seconds(0, None, &mut Fixed(0.5)),
            60,
            "attempt 0 acts as attempt 1"
        );
    }

    #[test]
    fn each_strategy_follows_its_formula() {
        // attempt 2: d = 120
        let cases = [
            (Jitter::None, 0.0, 120),
            (Jitter::Full, 0.0, 0),
            (Jitter::Full, 0.5, 60),
            (Jitter::Full, 0.999, 120), // 119.88 rounds up
            (Jitter::Equal, 0.0, 60),
            (Jitter::Equal, 0.5, 90),
            (Jitter::Proportional(0.25), 0.0, 120),
            (Jitter::Proportional(0.25), 1.0, 150),
            (Jitter::Decorrelated, 0.0, 60), // uniform [base=60, prev*3], prev = d(1) = 60
            (Jitter::Decorrelated, 0.5, 120), // 60 + 0.5 * (180 - 60)
        ];
        for (jitter, u, want) in cases {
            assert_eq!(
                policy(jitter).delay_seconds(2, None, &mut Fixed(u)),
                want,
                "{jitter} u={u}"
            );
        }
    }

    #[test]
    fn proportional_and_decorrelated_are_capped_at_max() {
        let b = Backoff::new(500.0, 2.0, 700, Jitter::Proportional(1.0)).unwrap();
        assert_eq!(b.delay_seconds(1, None, &mut Fixed(1.0)), 700);
        let b = Backoff::new(500.0, 2.0, 700, Jitter::Decorrelated).unwrap();
        assert_eq!(b.delay_seconds(1, Some(600.0), &mut Fixed(1.0)), 700);
    }

    #[test]
    fn decorrelated_uses_the_given_previous_delay() {
        let b = Backoff::new(10.0, 2.0, 900, Jitter::Decorrelated).unwrap();
        // uniform [10, 100*3] at u = 0.5 -> 155
        assert_eq!(b.delay_seconds(7, Some(100.0), &mut Fixed(0.5)), 155);
    }

    #[test]
    fn fractions_round_up() {
        let b = Backoff::new(1.5, 1.0, 900, Jitter::None).unwrap();
        assert_eq!(b.delay_seconds(3, None, &mut Fixed(0.0)), 2);
        assert_eq!(whole_seconds(0.0001, 900), 1);
        assert_eq!(whole_seconds(-3.0, 900), 0);
        assert_eq!(whole_seconds(f64::NAN, 900), 0);
        assert_eq!(whole_seconds(f64::INFINITY, 900), 900);
        assert_eq!(whole_seconds(5000.0, 900), 900);
    }

    #[test]
    fn invalid_policies_are_rejected() {
        assert_eq!(
            Backoff::new(-1.0, 2.0, 900, Jitter::Full),
            Err(BackoffError::Base(-1.0))
        );
        assert_eq!(
            Backoff::new(1.0, 0.5, 900, Jitter::Full),
            Err(BackoffError::Multiplier(0.5))
        );
        assert!(matches!(
            Backoff::new(f64::NAN, 2.0, 900, Jitter::Full),
            Err(BackoffError::Base(_))
        ));
        assert_eq!(
            Backoff::new(1.0, 2.0, 901, Jitter::Full),
            Err(BackoffError::Max(901))
        );
    }

    #[test]
    fn jitter_parses_from_config_strings() {
        assert_eq!("none".parse(), Ok(Jitter::None));
        assert_eq!("FULL".parse(), Ok(Jitter::Full));
        assert_eq!("equal".parse(), Ok(Jitter::Equal));
        assert_eq!("decorrelated".parse(), Ok(Jitter::Decorrelated));
        assert_eq!("proportional:0.25".parse(), Ok(Jitter::Proportional(0.25)));
        for bad in [
            "",
            "ful",
            "proportional",
            "proportional:",
            "proportional:-1",
            "proportional:nan",
            "proportional:x",
        ] {
            let err = bad.parse::<Jitter>().unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("proportional:P"), "{err}");
        }
        for j in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Proportional(0.5),
            Jitter::Decorrelated,
        ] {
            assert_eq!(j.to_string().parse::<Jitter>(), Ok(j));
        }
    }

    #[test]
    fn seeded_source_is_deterministic_and_uniform_enough() {
        let draws = |seed| -> Vec<f64> {
            let mut rng = seeded_rng(seed);
            (0..10_000).map(|_| rng.next_unit()).collect()
        };
        let xs = draws(42);
        assert_eq!(xs, draws(42), "the same seed draws the same numbers");
        assert_ne!(xs, draws(43), "another seed draws others");
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        // Uniform: every tenth of [0, 1) holds about a tenth of the draws (expected 1,000 each,
        // standard deviation 30), and the mean is about 1/2.
        let mut deciles = [0u32; 10];
        for x in &xs {
            deciles[(x * 10.0) as usize] += 1;
        }
        assert!(
            deciles.iter().all(|&n| (850..1150).contains(&n)),
            "{deciles:?}"
        );
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }

    #[test]
    fn seeded_full_jitter_spreads_over_the_whole_delay() {
        // attempt 2: d = 120; full jitter draws uniform [0, 120] whole seconds.
        let b = policy(Jitter::Full);
        let mut rng = seeded_rng(7);
        let delays: Vec<u32> = (0..2_000)
            .map(|_| b.delay_seconds(2, None, &mut rng))
            .collect();
        assert!(delays.iter().all(|&d| d <= 120));
        assert!(delays.iter().any(|&d| d <= 12), "reaches the lowest tenth");
        assert!(
            delays.iter().any(|&d| d >= 108),
            "reaches the highest tenth"
        );
        let mean = delays.iter().map(|&d| f64::from(d)).sum::<f64>() / delays.len() as f64;
        assert!((mean - 60.5).abs() < 4.0, "mean {mean}");
        let mut again = seeded_rng(7);
        let replay: Vec<u32> = (0..2_000)
            .map(|_| b.delay_seconds(2, None, &mut again))
            .collect();
        assert_eq!(delays, replay, "a seed replays the same delays");
    }

    fn arb_jitter() -> impl Strategy<Value = Jitter> {
        prop_oneof![
            Just(Jitter::None),
            Just(Jitter::Full),
            Just(Jitter::Equal),
            (0.0f64..10.0).prop_map(Jitter::Proportional),
            Just(Jitter::Decorrelated),
        ]
    }

    proptest! {
        #[test]
        fn bounds_hold_for_every_strategy_and_attempt(
            jitter in arb_jitter(),
            base in 0.0f64..2000.0,
            multiplier in 1.0f64..100.0,
            max in 0u64..=900,
            attempt in 0u32..=1000,
            seed in any::<u64>(),
            previous in proptest::option::of(0.0f64..1e6),
        ) {
            let b = Backoff::new(base, multiplier, max, jitter).unwrap();
            let mut rng = seeded_rng(seed);
            let d = b.delay_seconds(attempt, previous, &mut rng);
            prop_assert!(d <= max as u32 && d <= MAX_DELAY_SECONDS);
            // Without jitter the delay never decreases as attempts grow.
            let nb = Backoff::new(base, multiplier, max, Jitter::None).unwrap();
            prop_assert!(nb.delay_seconds(attempt, None, &mut rng) <= nb.delay_seconds(attempt.saturating_add(1), None, &mut rng));
            // Full jitter never exceeds the un-jittered delay.
            let fb = Backoff::new(base, multiplier, max, Jitter::Full).unwrap();
            prop_assert!(fb.delay_seconds(attempt, None, &mut rng) <= nb.delay_seconds(attempt, None, &mut rng));
        }

        #[test]
        fn jitter_parser_never_panics(s in "\\PC{0,30}") {
            let _ = s.parse::<Jitter>();
        }
    }
}
