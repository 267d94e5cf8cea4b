//! CloudWatch alarms and metrics in memory: alarm states the test sets, and what the engine
//! did to them (re-arms, published metrics).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::ports::{AlarmInfo, AlarmState, Alarms, MetricValue, Metrics, PortError, RunMetrics};

/// Alarm states and what the engine did to them.
#[derive(Default)]
pub struct FakeCloudWatch {
    pub states: Mutex<HashMap<String, String>>,
    pub set_ok_calls: Mutex<Vec<String>>,
    /// Each run's metrics ([`Metrics::publish`]).
    pub published: Mutex<Vec<(String, String, RunMetrics)>>,
    /// Every other PutMetricData ([`Metrics::put`]): namespace, queue name, values.
    pub put: Mutex<Vec<(String, String, Vec<MetricValue>)>>,
    pub fail_metrics: Mutex<bool>,
    pub fail_alarms: Mutex<bool>,
    /// `Period` x `EvaluationPeriods` per alarm, in seconds (60 when not set).
    pub periods: Mutex<HashMap<String, u64>>,
    pub describe_calls: Mutex<u64>,
}

impl FakeCloudWatch {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn set_state(&self, name: &str, state: &str) {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), state.to_string());
    }
}

fn unavailable(operation: &'static str) -> PortError {
    PortError::new(operation, "ServiceUnavailable", "injected", false)
}

impl Alarms for Arc<FakeCloudWatch> {
    async fn describe(&self, names: &[String]) -> Result<Vec<AlarmInfo>, PortError> {
        *self
            .describe_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
        if *self.fail_alarms.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(unavailable("DescribeAlarms"));
        }
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        Ok(names
            .iter()
            .filter_map(|n| {
                let state = match states.get(n)?.as_str() {
                    "ALARM" => AlarmState::Alarm,
                    "OK" => AlarmState::Ok,
                    _ => AlarmState::InsufficientData,
                };
                Some(AlarmInfo {
                    name: n.clone(),
                    state,
                    period_seconds: Some(periods.get(n).copied().unwrap_or(60)),
                })
            })
            .collect())
    }

    async fn set_ok(&self, name: &str, _reason: &str) -> Result<(), PortError> {
        self.set_ok_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_string());
        self.set_state(name, "OK");
        Ok(())
    }
}

impl Metrics for Arc<FakeCloudWatch> {
    async fn put(
        &self,
        namespace: &str,
        queue_name: &str,
        values: &[MetricValue],
    ) -> Result<(), PortError> {
        if *self.fail_metrics.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(unavailable("PutMetricData"));
        }
        self.put.lock().unwrap_or_else(|e| e.into_inner()).push((
            namespace.to_string(),
            queue_name.to_string(),
            values.to_vec(),
        ));
        Ok(())
    }

    async fn publish(
        &self,
        namespace: &str,
        queue_name: &str,
        metrics: RunMetrics,
    ) -> Result<(), PortError> {
        if *self.fail_metrics.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(unavailable("PutMetricData"));
        }
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((namespace.to_string(), queue_name.to_string(), metrics));
        Ok(())
    }
}
