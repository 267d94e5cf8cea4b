//! Cold starts of the Lambda bootstrap binaries against the minimal [`RuntimeApi`]: the time
//! from exec to the first `next` request (the init), the first and second invocations (what
//! the first invocation pays for connections and lazy set-up), and the peak resident memory.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::proxy::Proxy;
use crate::runtime_api::{RuntimeApi, exec, lambda_env, peak_rss_kb};

/// What runs of one function measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ColdStart {
    pub function: String,
    pub binary: PathBuf,
    pub init_ms: Vec<f64>,
    /// Of each init, the time its calls waited on the network (the proxy's answered calls
    /// while the Lambda initialised): the init-time connection warm-up.
    pub init_network_ms: Vec<f64>,
    pub first_invocation_ms: Vec<f64>,
    pub second_invocation_ms: Vec<f64>,
    pub peak_rss_kb: Vec<u64>,
    /// Runs that did not complete, and why.
    pub failures: Vec<String>,
}

/// The median of some figures (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

impl ColdStart {
    pub fn init(&self) -> f64 {
        median(&self.init_ms)
    }

    /// Init without the time it waited on the network: what the Lambda itself costs.
    pub fn init_local(&self) -> f64 {
        let local: Vec<f64> = self
            .init_ms
            .iter()
            .zip(&self.init_network_ms)
            .map(|(init, net)| init - net)
            .collect();
        median(&local)
    }

    pub fn init_network(&self) -> f64 {
        median(&self.init_network_ms)
    }

    pub fn first_invocation(&self) -> f64 {
        median(&self.first_invocation_ms)
    }

    pub fn second_invocation(&self) -> f64 {
        median(&self.second_invocation_ms)
    }

    pub fn peak_mb(&self) -> f64 {
        let kb: Vec<f64> = self.peak_rss_kb.iter().map(|&k| k as f64).collect();
        median(&kb) / 1024.0
    }
}

/// Runs `binary` `runs` times. Before each run, `prepare(run)` returns the run's two events
/// (and sets up what they need); `extra_env` is the function's own configuration; `network`
/// is the proxy its AWS calls go through, if any (for the init's network time).
pub async fn measure<F, Fut>(
    function: &str,
    binary: &Path,
    extra_env: &[(String, String)],
    network: Option<&Proxy>,
    runs: usize,
    mut prepare: F,
) -> ColdStart
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Vec<Value>>,
{
    let mut result = ColdStart {
        function: function.to_string(),
        binary: binary.to_path_buf(),
        ..ColdStart::default()
    };
    for run in 0..runs {
        if let Err(why) = one_run(
            function,
            binary,
            extra_env,
            network,
            run,
            &mut prepare,
            &mut result,
        )
        .await
        {
            result.failures.push(format!("run {run}: {why}"));
        }
    }
    result
}

async fn one_run<F, Fut>(
    function: &str,
    binary: &Path,
    extra_env: &[(String, String)],
    network: Option<&Proxy>,
    run: usize,
    prepare: &mut F,
    result: &mut ColdStart,
) -> Result<(), String>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Vec<Value>>,
{
    let api = RuntimeApi::start().await.map_err(|e| e.to_string())?;
    let events = prepare(run).await;
    let ids: Vec<String> = (0..events.len())
        .map(|i| format!("run{run}-inv{i}"))
        .collect();
    for (id, event) in ids.iter().zip(events) {
        api.push_event(id, event);
    }
    let mut env = lambda_env(
        &api.address(),
        function,
        binary.parent().unwrap_or(Path::new("/")),
        128,
    );
    env.extend(extra_env.iter().cloned());
    let held = || network.map_or(0.0, |p| p.stats().held_seconds);
    let held_before = held();
    let (mut child, started) = exec(binary, &env).map_err(|e| format!("exec: {e}"))?;
    let outcome = async {
        // The first `next` is timestamped when it arrives; the loop only notices early
        // a process that died instead.
        let first = loop {
            if let Some(at) = api.first_next(Duration::from_millis(100)).await {
                break at;
            }
            let init_error = api
                .init_error()
                .map(|e| format!(": init error {e}"))
                .unwrap_or_default();
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "exited ({status}) before asking for work{init_error}"
                ));
            }
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!("no `next` within 20 s{init_error}"));
            }
        };
        let init = first.duration_since(started);
        let init_network = held() - held_before;
        let mut invocations = Vec::new();
        for id in &ids {
            let (took, ok) = api
                .invocation(id, Duration::from_secs(60))
                .await
                .ok_or_else(|| format!("{id}: no answer within 60 s"))?;
            if !ok {
                return Err(format!("{id} answered with an error"));
            }
            invocations.push(took);
        }
        // The runtime is back on `next`: its peak so far is the invocation's peak.
        let rss = peak_rss_kb(child.id()).ok_or("no /proc status")?;
        Ok::<_, String>((init, init_network, invocations, rss))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let (init, init_network, invocations, rss) = outcome?;
    result.init_ms.push(init.as_secs_f64() * 1000.0);
    result.init_network_ms.push(init_network * 1000.0);
    if let Some(d) = invocations.first() {
        result.first_invocation_ms.push(d.as_secs_f64() * 1000.0);
    }
    if let Some(d) = invocations.get(1) {
        result.second_invocation_ms.push(d.as_secs_f64() * 1000.0);
    }
    result.peak_rss_kb.push(rss);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
