//! Logs, one line per event. Never message bodies: no code path of this project logs one.
//!
//! The Lambdas honour Lambda's advanced logging controls as the runtime's own subscriber
//! (`lambda_runtime::tracing::init_default_subscriber`) does ([`LogSettings::lambda`]):
//! `AWS_LAMBDA_LOG_LEVEL` (`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`, `FATAL`; any case) wins
//! over `RUST_LOG`, which is read only when it is unset; `AWS_LAMBDA_LOG_FORMAT` chooses `JSON`
//! or `Text` lines. Unset, a Lambda logs JSON lines at `info`. The CLI logs JSON lines filtered
//! by `RUST_LOG` ([`init_json_logging`]).
//!
//! Inside a Lambda invocation every line also carries the invocation's `requestId` and
//! `xrayTraceId`, in both formats, so that CloudWatch Logs Insights can filter one invocation
//! (`filter requestId = "..."`) and X-Ray can be joined to its lines. lambda_runtime (feature
//! `tracing`) opens one span per invocation carrying both; [`InvocationIdsLayer`] reads them when
//! that span opens and [`WithInvocationIds`] writes them onto every line inside it, whatever
//! span the line is in below it (an SDK call's, ours). Lines outside an invocation (init, the
//! CLI) carry neither; a runtime that was handed no trace header gives no `xrayTraceId`.
//!
//! A JSON line (the ids are top-level fields):
//! ```json
//! {"requestId":"8f2c…","xrayTraceId":"Root=1-…;Parent=…;Sampled=1","timestamp":"…","level":"INFO","fields":{"message":"…","message_id":"…"}}
//! ```
//! A text line (the ids lead it):
//! ```text
//! requestId=8f2c… xrayTraceId=Root=1-…;Parent=…;Sampled=1 2026-11-21T10:00:00.000000Z  INFO in the handler message_id="…"
//! ```

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, format};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::ConfigError;

/// The target of lambda_runtime's per-invocation span (`Lambda runtime invoke`, an INFO span in
/// its module `layers::trace`).
const RUNTIME_SPAN_TARGET: &str = "lambda_runtime::layers::trace";

/// The runtime span's field names, and the top-level names our lines give them.
const REQUEST_ID: &str = "requestId";
const XRAY_TRACE_ID: &str = "xrayTraceId";

/// The variable of Lambda's advanced logging controls that sets the application log level.
pub const LAMBDA_LOG_LEVEL: &str = "AWS_LAMBDA_LOG_LEVEL";
/// The variable of Lambda's advanced logging controls that sets the log format.
pub const LAMBDA_LOG_FORMAT: &str = "AWS_LAMBDA_LOG_FORMAT";

/// The shape of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, the invocation's ids as top-level fields.
    Json,
    /// tracing's plain text line, no colours, led by the invocation's ids.
    Text,
}

/// What a Lambda logs and how, chosen from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// The filter, in the syntax of `RUST_LOG` (tracing's `EnvFilter`).
    pub directives: String,
    /// The variable the filter came from (`AWS_LAMBDA_LOG_LEVEL`, `RUST_LOG`), `None` for the
    /// default.
    pub level_from: Option<&'static str>,
    pub format: LogFormat,
}

impl LogSettings {
    /// The rules of the runtime's own subscriber, read through `lookup` (blank is unset):
    /// - `AWS_LAMBDA_LOG_LEVEL` when set, one of Lambda's application log levels in any case
    ///   (`FATAL`, which tracing has not, logs errors only); `RUST_LOG` is then not read;
    /// - else `RUST_LOG` (any `EnvFilter` directives, such as `warn,redrive_engine=debug`);
    /// - else `default_level`.
    ///
    /// `AWS_LAMBDA_LOG_FORMAT` is `JSON` or `Text` in any case; unset, JSON. Any other value of
    /// either Lambda variable is an error naming it, so that init fails rather than log at a
    /// level nobody chose.
    pub fn lambda(
        lookup: impl Fn(&str) -> Option<String>,
        default_level: &str,
    ) -> Result<Self, ConfigError> {
        let get = |variable: &str| lookup(variable).filter(|v| !v.trim().is_empty());
        let invalid = |variable: &'static str, value: String, problem: &str| ConfigError {
            variable,
            value: Some(value),
            problem: problem.to_string(),
        };
        let format = match get(LAMBDA_LOG_FORMAT) {
            None => LogFormat::Json,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "json" => LogFormat::Json,
                "text" => LogFormat::Text,
                _ => return Err(invalid(LAMBDA_LOG_FORMAT, v, "must be JSON or Text")),
            },
        };
        let (directives, level_from) = if let Some(v) = get(LAMBDA_LOG_LEVEL) {
            let level = match v.trim().to_ascii_lowercase().as_str() {
                "trace" => "trace",
                "debug" => "debug",
                "info" => "info",
                "warn" => "warn",
                "error" | "fatal" => "error",
                _ => {
                    return Err(invalid(
                        LAMBDA_LOG_LEVEL,
                        v,
                        "must be TRACE, DEBUG, INFO, WARN, ERROR or FATAL",
                    ));
                }
            };
            (level.to_string(), Some(LAMBDA_LOG_LEVEL))
        } else if let Some(v) = get("RUST_LOG") {
            (v.trim().to_string(), Some("RUST_LOG"))
        } else {
            (default_level.to_string(), None)
        };
        Ok(Self {
            directives,
            level_from,
            format,
        })
    }

    /// The filter: the directives (`RUST_LOG` that does not parse falls back to
    /// `default_level`, as tracing's own `from_default_env` does), plus the runtime's invocation
    /// span, always on so that a line at any level carries the invocation's ids.
    pub fn filter(&self, default_level: &str) -> EnvFilter {
        with_invocation_span(
            EnvFilter::try_new(&self.directives).unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
    }
}

/// Installs the Lambda subscriber on stdout (once; later calls do nothing), as
/// [`LogSettings::lambda`] chooses from the process environment. An invalid
/// `AWS_LAMBDA_LOG_LEVEL` or `AWS_LAMBDA_LOG_FORMAT` installs the JSON subscriber at
/// `default_level`, logs the error and returns it: init fails, naming the variable.
pub fn init_lambda_logging(default_level: &str) -> Result<LogFormat, ConfigError> {
    let writer = BoxMakeWriter::new(std::io::stdout);
    match LogSettings::lambda(|k| std::env::var(k).ok(), default_level) {
        Ok(settings) => {
            let filter = settings.filter(default_level);
            let _ = match settings.format {
                LogFormat::Json => json_subscriber(filter, writer).try_init(),
                LogFormat::Text => text_subscriber(filter, writer).try_init(),
            };
            Ok(settings.format)
        }
        Err(e) => {
            let _ = json_subscriber(with_invocation_span(EnvFilter::new(default_level)), writer)
                .try_init();
            tracing::error!(error = %e, "invalid logging configuration");
            Err(e)
        }
    }
}

/// Installs the JSON subscriber (once; later calls do nothing), filtered by `RUST_LOG`, else
/// `default_level`; `to_stderr` keeps stdout free for a command's own output. The CLI's.
pub fn init_json_logging(default_level: &str, to_stderr: bool) {
    let writer = if to_stderr {
        BoxMakeWriter::new(std::io::stderr)
    } else {
        BoxMakeWriter::new(std::io::stdout)
    };
    let _ = json_subscriber(env_filter(default_level), writer).try_init();
}

/// `RUST_LOG`, else `default_level`; the runtime's invocation span is always on, so that a
/// `RUST_LOG=warn` line still carries the invocation's ids.
pub fn env_filter(default_level: &str) -> EnvFilter {
    with_invocation_span(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
    )
}

/// Enables the runtime's invocation span (an INFO span; its target logs no event) whatever
/// the level.
fn with_invocation_span(filter: EnvFilter) -> EnvFilter {
    filter.add_directive(
        format!("{RUNTIME_SPAN_TARGET}=info")
            .parse()
            .expect("a target directive parses"),
    )
}

/// The subscriber [`init_json_logging`] installs, writing to `writer` (tests capture it).
pub fn json_subscriber(
    filter: EnvFilter,
    writer: BoxMakeWriter,
) -> impl Subscriber + Send + Sync + 'static {
    let lines = tracing_subscriber::fmt::layer()
        .fmt_fields(JsonFields::new())
        .event_format(WithInvocationIds(
            format()
                .json()
                .with_current_span(false)
                .with_span_list(false)
                .with_target(false),
            LogFormat::Json,
        ))
        .with_writer(writer);
    tracing_subscriber::registry()
        .with(filter)
        .with(InvocationIdsLayer)
        .with(lines)
}

/// The text subscriber (`AWS_LAMBDA_LOG_FORMAT=Text`), writing to `writer`: tracing's full
/// line without colours or target, led by the invocation's ids.
pub fn text_subscriber(
    filter: EnvFilter,
    writer: BoxMakeWriter,
) -> impl Subscriber + Send + Sync + 'static {
    let lines = tracing_subscriber::fmt::layer()
        .event_format(WithInvocationIds(
            format().with_ansi(false).with_target(false),
            LogFormat::Text,
        ))
        .with_ansi(false)
        .with_writer(writer);
    tracing_subscriber::registry()
        .with(filter)
        .with(InvocationIdsLayer)
        .with(lines)
}

/// The ids of one invocation, kept in the runtime span's extensions.
#[derive(Debug, Clone, Default)]
struct InvocationIds {
    request_id: Option<String>,
    xray_trace_id: Option<String>,
}

impl Visit for InvocationIds {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            REQUEST_ID => self.request_id = Some(value.to_string()),
            XRAY_TRACE_ID => self.xray_trace_id = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if matches!(field.name(), REQUEST_ID | XRAY_TRACE_ID) {
            self.record_str(field, &format!("{value:?}"));
        }
    }
}

/// Reads `requestId` and `xrayTraceId` off the runtime's invocation span when it opens.
struct InvocationIdsLayer;

impl<S> Layer<S> for InvocationIdsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attrs.metadata();
        if !metadata.target().starts_with("lambda_runtime")
            || metadata.fields().field(REQUEST_ID).is_none()
        {
            return;
        }
        let mut ids = InvocationIds::default();
        attrs.record(&mut ids);
        if ids.request_id.is_some()
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(ids);
        }
    }
}

/// An event format with the enclosing invocation's ids put first on the line: top-level fields
/// of a JSON line, `name=value` pairs before a text line.
struct WithInvocationIds<F>(F, LogFormat);

impl<S, N, F> FormatEvent<S, N> for WithInvocationIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ids = ctx.event_scope().and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<InvocationIds>().cloned())
        });
        let Some(ids) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let ids = [
            (REQUEST_ID, &ids.request_id),
            (XRAY_TRACE_ID, &ids.xray_trace_id),
        ];
        if self.1 == LogFormat::Text {
            for (name, value) in ids {
                if let Some(value) = value {
                    write!(writer, "{name}={value} ")?;
                }
            }
            return writer.write_str(&line);
        }
        // The inner format writes one JSON object; anything else goes out untouched.
        let Some(rest) = line.strip_prefix('{') else {
            return writer.write_str(&line);
        };
        writer.write_char('{')?;
        let mut first = true;
        for (name, value) in ids {
            let Some(value) = value else { continue };
            if !first {
                writer.write_char(',')?;
            }
            first = false;
            let value = serde_json::to_string(value).map_err(|_| fmt::Error)?;
            write!(writer, "\"{name}\":{value}")?;
        }
        if !first && !rest.starts_with('}') {
            writer.write_char(',')?;
        }
        writer.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<Value> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        }
    }

    fn runtime_context(request_id: &str, trace_id: Option<&str>) -> lambda_runtime::Context {
        let mut ctx = lambda_runtime::Context::default();
        ctx.request_id = request_id.to_string();
        ctx.xray_trace_id = trace_id.map(str::to_string);
        ctx
    }

    const TRACE: &str =
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    /// One test, so that no other test's dispatcher races this one's callsite interest.
    #[test]
    fn lines_inside_an_invocation_carry_its_request_and_trace_ids_at_the_top_level() {
        // GIVEN our JSON subscriber at RUST_LOG=warn, every line captured
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = json_subscriber(
            EnvFilter::new("warn")
                .add_directive(format!("{RUNTIME_SPAN_TARGET}=info").parse().unwrap()),
            BoxMakeWriter::new(move || sink.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            // WHEN a line is logged at init, then lines inside two invocations as the runtime
            // opens them (its own span function), one of them inside a nested span, then one
            // inside an invocation the runtime was handed no trace header for
            tracing::warn!(phase = "init", "before any invocation");
            for (request, trace) in [
                ("req-1", TRACE),
                ("req-2", "Root=1-00000000-000000000000000000000002"),
            ] {
                let span = lambda_runtime::layers::trace::request_span(&runtime_context(
                    request,
                    Some(trace),
                ));
                let _invocation = span.enter();
                tracing::warn!(message_id = "m-1", "in the handler");
                let nested = tracing::error_span!("sdk call", operation = "SendMessageBatch");
                let _nested = nested.enter();
                tracing::error!("below another span");
            }
            let span = lambda_runtime::layers::trace::request_span(&runtime_context("req-3", None));
            let _invocation = span.enter();
            tracing::warn!("no trace header");
        });

        // THEN the init line carries no ids and keeps the usual shape
        let lines = captured.lines();
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert!(lines[0].get("requestId").is_none(), "{}", lines[0]);
        assert!(lines[0].get("xrayTraceId").is_none(), "{}", lines[0]);
        assert_eq!(lines[0]["fields"]["phase"], "init");
        // AND every line of an invocation carries that invocation's ids, at the top level,
        // next to the usual fields (and without the span's own fields)
        for (line, request, trace) in [
            (&lines[1], "req-1", TRACE),
            (&lines[2], "req-1", TRACE),
            (
                &lines[3],
                "req-2",
                "Root=1-00000000-000000000000000000000002",
            ),
            (
                &lines[4],
                "req-2",
                "Root=1-00000000-000000000000000000000002",
            ),
        ] {
            assert_eq!(line["requestId"], request, "{line}");
            assert_eq!(line["xrayTraceId"], trace, "{line}");
            assert!(line["timestamp"].is_string(), "{line}");
            assert!(line["level"].is_string(), "{line}");
            assert!(
                line.get("span").is_none() && line.get("spans").is_none(),
                "{line}"
            );
        }
        assert_eq!(lines[1]["fields"]["message_id"], "m-1");
        assert_eq!(lines[2]["fields"]["message"], "below another span");
        // AND without a trace header there is the request id alone
        assert_eq!(lines[5]["requestId"], "req-3");
        assert!(lines[5].get("xrayTraceId").is_none(), "{}", lines[5]);

        the_filter_of_a_lambda_level_drops_lower_lines_and_keeps_the_invocation_ids();
    }

    fn settings(vars: &[(&str, &str)]) -> Result<LogSettings, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LogSettings::lambda(
            move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            "info",
        )
    }

    #[test]
    fn lambda_log_level_wins_over_rust_log_in_any_case_and_fatal_is_error() {
        for (value, level) in [
            ("ERROR", "error"),
            ("error", "error"),
            ("Warn", "warn"),
            ("INFO", "info"),
            ("DEBUG", "debug"),
            ("TRACE", "trace"),
            ("FATAL", "error"),
            (" WARN ", "warn"),
        ] {
            let s = settings(&[
                ("AWS_LAMBDA_LOG_LEVEL", value),
                ("RUST_LOG", "debug,aws_config=trace"),
            ])
            .unwrap();
            assert_eq!(s.directives, level, "{value}");
            assert_eq!(s.level_from, Some("AWS_LAMBDA_LOG_LEVEL"));
        }
    }

    #[test]
    fn rust_log_applies_only_without_the_lambda_level_and_the_default_without_either() {
        let s = settings(&[("RUST_LOG", "warn,redrive_engine=debug")]).unwrap();
        assert_eq!(s.directives, "warn,redrive_engine=debug");
        assert_eq!(s.level_from, Some("RUST_LOG"));
        // A blank AWS_LAMBDA_LOG_LEVEL is unset.
        let s = settings(&[("AWS_LAMBDA_LOG_LEVEL", " "), ("RUST_LOG", "debug")]).unwrap();
        assert_eq!(s.directives, "debug");
        let s = settings(&[]).unwrap();
        assert_eq!((s.directives.as_str(), s.level_from), ("info", None));
        assert_eq!(s.format, LogFormat::Json);
    }

    #[test]
    fn lambda_log_format_is_json_or_text_in_any_case_and_json_when_unset() {
        for (value, format) in [
            ("JSON", LogFormat::Json),
            ("json", LogFormat::Json),
            ("Text", LogFormat::Text),
            ("TEXT", LogFormat::Text),
            ("", LogFormat::Json),
        ] {
            let s = settings(&[("AWS_LAMBDA_LOG_FORMAT", value)]).unwrap();
            assert_eq!(s.format, format, "{value}");
        }
    }

    #[test]
    fn an_unknown_lambda_level_or_format_is_an_error_naming_the_variable_and_value() {
        let e = settings(&[("AWS_LAMBDA_LOG_LEVEL", "loud")]).unwrap_err();
        assert_eq!(e.variable, "AWS_LAMBDA_LOG_LEVEL");
        assert_eq!(
            e.to_string(),
            "invalid AWS_LAMBDA_LOG_LEVEL=\"loud\": must be TRACE, DEBUG, INFO, WARN, ERROR or FATAL"
        );
        let e = settings(&[("AWS_LAMBDA_LOG_FORMAT", "xml")]).unwrap_err();
        assert_eq!(e.variable, "AWS_LAMBDA_LOG_FORMAT");
        assert!(e.to_string().contains("\"xml\""), "{e}");
    }

    /// Run by the one subscriber test above (the runtime span's callsite is shared).
    fn the_filter_of_a_lambda_level_drops_lower_lines_and_keeps_the_invocation_ids() {
        // GIVEN the filter AWS_LAMBDA_LOG_LEVEL=ERROR chooses (over RUST_LOG=debug), text lines
        let s = settings(&[
            ("AWS_LAMBDA_LOG_LEVEL", "ERROR"),
            ("AWS_LAMBDA_LOG_FORMAT", "Text"),
            ("RUST_LOG", "debug"),
        ])
        .unwrap();
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber =
            text_subscriber(s.filter("info"), BoxMakeWriter::new(move || sink.clone()));
        tracing::subscriber::with_default(subscriber, || {
            // WHEN lines at every level are logged inside an invocation
            let span =
                lambda_runtime::layers::trace::request_span(&runtime_context("req-9", Some(TRACE)));
            let _invocation = span.enter();
            tracing::info!("an info line");
            tracing::warn!("a warn line");
            tracing::error!(message_id = "m-9", "an error line");
        });
        // THEN only the error line is written, as text, led by the invocation's ids
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(
            lines[0].starts_with(&format!("requestId=req-9 xrayTraceId={TRACE} ")),
            "{text}"
        );
        assert!(lines[0].contains("ERROR"), "{text}");
        assert!(
            lines[0].contains("an error line message_id=\"m-9\""),
            "{text}"
        );
        assert!(!lines[0].contains('\u{1b}'), "no colours: {text}");
    }
}
