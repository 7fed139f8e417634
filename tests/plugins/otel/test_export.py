"""``--otel``: OTLP/HTTP export configured from the ``OTEL_*`` environment variables, received
by a loopback collector; a clear message when a package is missing."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dsh import Harness
from dsh.app._otlp import SERVICE_NAME, start_export
from dsh.testing.mockserver import MockServer
from dsh_plugins.terminal_ui import headless, startup
from tests.helpers import disabled_plugins


class Collector:
    """A loopback OTLP/HTTP endpoint that keeps what it is sent, by path."""

    def __init__(self) -> None:
        self.received: dict[str, list[bytes]] = {}
        self.url = ""

    async def receive(self, request: web.Request) -> web.Response:
        self.received.setdefault(request.path, []).append(await request.read())
        return web.Response(content_type="application/x-protobuf", body=b"")

    def spans(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(service name, span name, attributes)`` of every span received."""
        found = []
        for body in self.received.get("/v1/traces", []):
            export = ExportTraceServiceRequest.FromString(body)
            for resource in export.resource_spans:
                service = {a.key: a.value.string_value for a in resource.resource.attributes}
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: a.value for a in span.attributes}
                        found.append((service["service.name"], span.name, attributes))
        return found


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/{signal}", found.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}"
    yield found
    await runner.cleanup()


async def test_start_export_sends_spans_and_metrics_over_otlp_http(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    installed: list[Any] = []
    assert start_export(installed.append, installed.append) is None
    tracer_provider, meter_provider = installed
    with tracer_provider.get_tracer("t").start_as_current_span("exported"):
        meter_provider.get_meter("t").create_counter("things").add(1)
    await asyncio.to_thread(tracer_provider.shutdown)
    await asyncio.to_thread(meter_provider.shutdown)
    assert collector.spans() == [(SERVICE_NAME, "exported", {})]
    assert collector.received["/v1/metrics"]


async def test_the_service_name_of_the_environment_wins(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector.url}/v1/traces")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-agents")
    installed: list[Any] = []
    assert start_export(installed.append, installed.append) is None
    tracer_provider, meter_provider = installed
    tracer_provider.get_tracer("t").start_span("named").end()
    await asyncio.to_thread(tracer_provider.shutdown)
    meter_provider.shutdown(timeout_millis=1)
    assert collector.spans() == [("my-agents", "named", {})]


def test_a_signal_set_to_none_is_not_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", " None ")
    installed: list[Any] = []
    assert start_export(installed.append, installed.append) is None
    assert installed == []


def run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    headless.configure(parser)
    return parser.parse_args(argv)


def test_otel_without_the_exporter_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    module = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    monkeypatch.setitem(sys.modules, module, None)
    harness = Harness(load_entrypoints=False)
    problem = startup.options_problem(harness, run_args("--otel", "hi"))
    assert problem is not None
    assert f"({module} is not installed)" in problem
    assert "pip install 'dsh-harness[otel]' opentelemetry-sdk " in problem


async def test_dsh_run_otel_exports_the_turn_to_the_endpoint_of_the_environment(
    collector: Collector, tmp_path: Path
) -> None:
    """End to end: a real ``dsh run --otel`` process, a real model call to the mock server,
    the spans received by the loopback collector when the process exits."""
    async with MockServer() as server:
        (tmp_path / "dsh.toml").write_text(
            f'[llm_deepseek]\nbase_url = "{server.url}"\napi_key = "sk-mock"\n'
        )
        env = {
            **os.environ,
            "DSH_DISABLE_PLUGINS": disabled_plugins("tools_fs", "tools_shell"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "dsh-e2e",
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh", "run", "--otel", "hi", cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert "I am the dsh mock model" in stdout.decode()
    names = {name for service, name, _ in collector.spans() if service == "dsh-e2e"}
    assert {"invoke_agent run", "chat deepseek-flash"} <= names
    chat = next(a for _, name, a in collector.spans() if name.startswith("chat"))
    assert chat["gen_ai.provider.name"].string_value == "deepseek"
    assert chat["gen_ai.usage.output_tokens"].int_value > 0
