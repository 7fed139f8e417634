"""``dsh run --otel`` / ``dsh chat --otel``: configure the OpenTelemetry SDK to send traces and
metrics over OTLP/HTTP, as the ``OTEL_*`` environment variables say.

A host embedding dsh configures the SDK itself; this is only for the command line, where dsh is
the host. Like :func:`dsh._log.configure_logging` it configures the process, not the harness, so
it is a front door of the core rather than part of a plugin: the command-line front end calls it,
and the ``otel`` plugin, which only ever uses the global providers, records into whatever it
installed.
The exporters read their endpoint, headers, timeouts and protocol options from the environment
(``OTEL_EXPORTER_OTLP_ENDPOINT`` and the rest), the SDK its batching and metric interval
(``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``) and its resource (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``); the service name defaults to ``dsh``. ``OTEL_TRACES_EXPORTER=none``
or ``OTEL_METRICS_EXPORTER=none`` leaves that signal out. The providers flush and shut down when
the process exits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["MISSING", "SERVICE_NAME", "start_export"]

#: What ``--otel`` says when a package it needs is not installed.
MISSING = (
    "--otel needs the OpenTelemetry SDK and its OTLP exporter ({missing} is not installed): "
    "pip install 'dsh-harness[otel]' opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
)
SERVICE_NAME = "dsh"


def start_export(
    set_tracer_provider: Callable[[Any], None] | None = None,
    set_meter_provider: Callable[[Any], None] | None = None,
) -> str | None:
    """Install global tracer and meter providers that export over OTLP/HTTP; returns what to
    install when a package is missing, else ``None``. The setters default to the global ones
    of the OpenTelemetry API (a test passes its own, as the global ones can be set only once
    per process)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        return MISSING.format(missing=exc.name)
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    if _wanted("OTEL_TRACES_EXPORTER"):
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        (set_tracer_provider or trace.set_tracer_provider)(tracer_provider)
    if _wanted("OTEL_METRICS_EXPORTER"):
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        (set_meter_provider or metrics.set_meter_provider)(meter_provider)
    return None


def _wanted(variable: str) -> bool:
    """Whether a signal is exported: ``OTEL_TRACES_EXPORTER=none`` (or
    ``OTEL_METRICS_EXPORTER=none``) switches it off, as for the SDK's own configurator; any
    other value means OTLP, the only exporter ``--otel`` sets up."""
    return os.environ.get(variable, "").strip().lower() != "none"
