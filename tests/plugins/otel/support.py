"""Helpers for the otel plugin tests: fresh SDK providers with in-memory exporters."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh import AgentOptions, Harness
from dsh.testing import ScriptedAdapter
from dsh.values._agent import Agent
from dsh_plugins.otel import OtelPlugin


class Telemetry:
    """What the plugin exported: finished spans and metric points."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def plugin(self) -> OtelPlugin:
        return OtelPlugin(self.tracer_provider, self.meter_provider)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def one(self, prefix: str) -> ReadableSpan:
        found = self.named(prefix)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def points(self, metric: str) -> list[Any]:
        """Every data point of ``metric`` (cumulative since the provider was made)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += list(m.data.data_points)
        return found


class Clock:
    """The loop's retry waits, recorded instead of slept."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def sleep(self, delay_s: float) -> None:
        self.waits.append(delay_s)


def agent_on(harness: Harness, *script: Any, agent_id: str = "a") -> Agent:
    harness.llm.register_adapter(["scripted"], ScriptedAdapter(list(script)))
    return harness.agent_loop.create(agent_id, AgentOptions(model="scripted"))


async def run_turn(agent: Agent, prompt: str = "hi") -> None:
    agent.send(prompt)
    await agent.wait_idle()
