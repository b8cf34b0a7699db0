//! Logs and traces: the fmt layer (text, or JSON with `--log-format json` /
//! `QUEEN_LOG_FORMAT=json`) under `RUST_LOG`, and, built with the `otel`
//! feature and given `OTEL_EXPORTER_OTLP_ENDPOINT`, an OpenTelemetry layer
//! that exports every span (one per request, see `queen_server`) over
//! OTLP/HTTP.
//!
//! The export is a cargo feature because its crates double the build of a
//! binary that most users run without a collector.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// What must outlive the program's work for telemetry to be complete.
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered; called once before exit.
    pub fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown() {
                eprintln!("OpenTelemetry: the last spans were not exported: {e}");
            }
        }
    }
}

/// Installs the global subscriber.
pub fn init(json_logs: bool) -> anyhow::Result<Telemetry> {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // tokio_postgres logs every statement's parameters at debug: request
    // bodies, KV keys and values. Those never reach the logs (or traces),
    // whatever RUST_LOG asks for.
    for quiet in ["tokio_postgres=info", "postgres_protocol=info"] {
        if let Ok(directive) = quiet.parse() {
            filter = filter.add_directive(directive);
        }
    }
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if json_logs {
        tracing_subscriber::fmt::layer().json().boxed()
    } else {
        // Colours only for a terminal: a log file gets no escape codes, and
        // each request's span is formatted without them (cheaper, too).
        use std::io::IsTerminal;
        tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal()).boxed()
    };
    #[cfg(feature = "otel")]
    {
        let (otel, provider) = otel_layer()?;
        tracing_subscriber::registry().with(fmt).with(otel).with(filter).try_init()?;
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otel"))]
    {
        tracing_subscriber::registry().with(fmt).with(filter).try_init()?;
        Ok(Telemetry {})
    }
}

/// The OTLP layer when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces-only
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the exporter reads the
/// standard `OTEL_*` variables itself.
#[cfg(feature = "otel")]
#[allow(clippy::type_complexity)]
fn otel_layer<S>() -> anyhow::Result<(
    Option<Box<dyn Layer<S> + Send + Sync>>,
    Option<opentelemetry_sdk::trace::SdkTracerProvider>,
)>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    use anyhow::Context;
    use opentelemetry::trace::TracerProvider as _;

    let configured = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var(v).map(|s| !s.is_empty()).unwrap_or(false));
    if !configured {
        return Ok((None, None));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("building the OTLP span exporter")?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "queen".to_owned());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(opentelemetry_sdk::Resource::builder().with_service_name(service).build())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("queen")).boxed();
    Ok((Some(layer), Some(provider)))
}
