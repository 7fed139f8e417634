"""MCP tool calls nest under the tool's ``execute_tool`` span: the ``mcp`` SDK opens its client
span (and injects the W3C trace context into the request) where the tool span is current.

The SDK's spans go to the *global* tracer provider, which can be set once per process, so the
turn runs in a child process that sets it and prints the finished spans."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from dsh.testing import text_response, tool_call_response
from dsh_plugins.otel import OtelPlugin
from tests.plugins.mcp.support import agent, harness, stdio

async def main():
    async with harness({"local": stdio()}, hosts=[OtelPlugin()]) as h:
        script = [tool_call_response("c1", "mcp__local__echo", {"text": "hi"}), text_response("ok")]
        a, _ = agent(h, script)
        a.send("go")
        await a.wait_idle()
    spans = [
        [s.name, s.context.span_id, s.parent.span_id if s.parent else None]
        for s in exporter.get_finished_spans()
    ]
    print(json.dumps(spans))

asyncio.run(main())
"""


async def test_an_mcp_tool_call_is_a_child_of_its_execute_tool_span() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    spans = {name: (span_id, parent) for name, span_id, parent in json.loads(stdout)}
    tool_id, turn_id = spans["execute_tool mcp__local__echo"][0], spans["invoke_agent main"][0]
    assert spans["execute_tool mcp__local__echo"][1] == turn_id
    [mcp_call] = [name for name in spans if name.startswith("MCP send tools/call")]
    assert spans[mcp_call][1] == tool_id
