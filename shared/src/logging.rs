//! JSON logs, one line per event, level from `RUST_LOG`. Never message bodies: no code path of
//! this project logs one.

/// Installs the JSON subscriber (once; later calls do nothing). `default_level` applies when
/// `RUST_LOG` is unset; `to_stderr` keeps stdout free for a command's own output.
pub fn init_json_logging(default_level: &str, to_stderr: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false);
    let _ = if to_stderr {
        builder.with_writer(std::io::stderr).try_init()
    } else {
        builder.try_init()
    };
}
