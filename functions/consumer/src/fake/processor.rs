//! [`ScriptedProcessor`]: a processing step scripted per key, counting calls and side effects.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use crate::process::{ProcessError, Processor, RawBody};

use super::lock;

/// What a [`ScriptedProcessor`] does for one call.
#[derive(Debug, Clone)]
pub enum Step {
    /// Success with no output (nothing stored).
    Succeed,
    /// Success with this output (stored with the COMPLETED record).
    Return(Value),
    Fail(ProcessError),
    /// Never returns: an invocation that crashed or timed out mid-way.
    Hang,
    Panic,
}

/// A processing step scripted per key (in call order), with a default for unscripted calls.
/// Counts calls and successful side effects per key.
#[derive(Debug)]
pub struct ScriptedProcessor {
    script: Mutex<HashMap<String, VecDeque<Step>>>,
    default: Mutex<Step>,
    /// Added before every step: lets concurrent invocations overlap.
    pub delay: Duration,
    /// What [`Processor::time_limit`] reports.
    pub time_limit: Option<Duration>,
    calls: Mutex<HashMap<String, u32>>,
    effects: Mutex<HashMap<String, u32>>,
    duplicates: Mutex<Vec<(String, Option<Value>)>>,
}

impl Default for ScriptedProcessor {
    fn default() -> Self {
        Self::new(Step::Succeed)
    }
}

impl ScriptedProcessor {
    pub fn new(default: Step) -> Self {
        Self {
            script: Mutex::default(),
            default: Mutex::new(default),
            delay: Duration::ZERO,
            time_limit: None,
            calls: Mutex::default(),
            effects: Mutex::default(),
            duplicates: Mutex::default(),
        }
    }

    pub fn with_delay(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    pub fn with_time_limit(self, limit: Duration) -> Self {
        Self {
            time_limit: Some(limit),
            ..self
        }
    }

    /// The next unscripted calls for `key` do `steps`, in order.
    pub fn script(&self, key: &str, steps: impl IntoIterator<Item = Step>) {
        lock(&self.script)
            .entry(key.to_string())
            .or_default()
            .extend(steps);
    }

    pub fn set_default(&self, step: Step) {
        *lock(&self.default) = step;
    }

    /// Calls for `key`, whatever their result.
    pub fn calls(&self, key: &str) -> u32 {
        lock(&self.calls).get(key).copied().unwrap_or(0)
    }

    /// Successful calls for `key`: the side effects.
    pub fn effects(&self, key: &str) -> u32 {
        lock(&self.effects).get(key).copied().unwrap_or(0)
    }

    pub fn total_calls(&self) -> u32 {
        lock(&self.calls).values().sum()
    }

    /// Every [`Processor::duplicate`] call, in order: (message id, the stored output).
    pub fn duplicates(&self) -> Vec<(String, Option<Value>)> {
        lock(&self.duplicates).clone()
    }

    async fn run(&self, key: &str) -> Result<Value, ProcessError> {
        *lock(&self.calls).entry(key.to_string()).or_default() += 1;
        let step = lock(&self.script)
            .get_mut(key)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| lock(&self.default).clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let output = match step {
            Step::Succeed => Value::Null,
            Step::Return(value) => value,
            Step::Fail(e) => return Err(e),
            Step::Hang => std::future::pending().await,
            Step::Panic => panic!("scripted panic in the processing step"),
        };
        *lock(&self.effects).entry(key.to_string()).or_default() += 1;
        Ok(output)
    }
}

/// The output is a JSON value: `null` ([`Step::Succeed`]) stores nothing.
impl Processor<RawBody> for ScriptedProcessor {
    type Output = Value;

    async fn process(&self, _body: RawBody, record: &crate::Record) -> Result<Value, ProcessError> {
        self.run(record.key().as_str()).await
    }

    async fn duplicate(&self, stored: Option<Value>, record: &crate::Record) {
        lock(&self.duplicates).push((record.message_id().to_string(), stored));
    }

    fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }
}

/// So that a test keeps the processor to count its calls.
impl Processor<RawBody> for &ScriptedProcessor {
    type Output = Value;

    async fn process(&self, body: RawBody, record: &crate::Record) -> Result<Value, ProcessError> {
        (**self).process(body, record).await
    }

    async fn duplicate(&self, stored: Option<Value>, record: &crate::Record) {
        (**self).duplicate(stored, record).await
    }

    fn time_limit(&self) -> Option<Duration> {
        self.time_limit
    }
}
