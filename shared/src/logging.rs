//! JSON logs, one line per event, level from `RUST_LOG`. Never message bodies: no code path of
//! this project logs one.
//!
//! Inside a Lambda invocation every line also carries the invocation's `requestId` and
//! `xrayTraceId` as top-level fields, so that CloudWatch Logs Insights can filter one invocation
//! (`filter requestId = "..."`) and X-Ray can be joined to its lines. lambda_runtime (feature
//! `tracing`) opens one span per invocation carrying both; [`InvocationIdsLayer`] reads them when
//! that span opens and [`WithInvocationIds`] writes them onto every line inside it, whatever
//! span the line is in below it (an SDK call's, ours). Lines outside an invocation (init, the
//! CLI) carry neither; a runtime that was handed no trace header gives no `xrayTraceId`.
//!
//! A line:
//! ```json
//! {"requestId":"8f2c…","xrayTraceId":"Root=1-…;Parent=…;Sampled=1","timestamp":"…","level":"INFO","fields":{"message":"…","message_id":"…"}}
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

/// The target of lambda_runtime's per-invocation span (`Lambda runtime invoke`, an INFO span in
/// its module `layers::trace`).
const RUNTIME_SPAN_TARGET: &str = "lambda_runtime::layers::trace";

/// The runtime span's field names, and the top-level names our lines give them.
const REQUEST_ID: &str = "requestId";
const XRAY_TRACE_ID: &str = "xrayTraceId";

/// Installs the JSON subscriber (once; later calls do nothing). `default_level` applies when
/// `RUST_LOG` is unset; `to_stderr` keeps stdout free for a command's own output.
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
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_level))
        .add_directive(
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
        ))
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

/// A JSON event format with the enclosing invocation's ids put first on the line.
struct WithInvocationIds<F>(F);

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
        // The inner format writes one JSON object; anything else goes out untouched.
        let Some(rest) = line.strip_prefix('{') else {
            return writer.write_str(&line);
        };
        writer.write_char('{')?;
        let mut first = true;
        for (name, value) in [
            (REQUEST_ID, &ids.request_id),
            (XRAY_TRACE_ID, &ids.xray_trace_id),
        ] {
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
    }
}
