"""What the ``otel`` plugin costs: ``bench/run.py`` W2 (one agent, 200 tool steps over HTTP
against the mock server in its own process) with the plugin off, on with no SDK configured (the
API's no-op providers: what every install without a configured SDK runs), and on with the SDK
recording every span into an in-memory exporter and every metric into an in-memory reader.

Run ``python bench/bench_otel.py`` (needs ``opentelemetry-sdk``). The variants run interleaved;
each figure is the median of the runs, wall time and CPU time of this process (the mock server's
CPU is its own). Every run checks the answer, the tool calls and the span count.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh import Harness
from dsh_plugins.otel import OtelPlugin

STEPS = 200
RUNS = 11
VARIANTS = ("off", "no-op", "in-memory")
TARGET = 1.10


async def w2(url: str, variant: str) -> tuple[float, float]:
    """One W2 run; returns (wall seconds, CPU seconds) from the first message to idle."""
    import run  # bench/ is on sys.path (main put it there)

    bench = run.Bench()
    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    exporter = InMemorySpanExporter()
    plugins: list[object] = [bench]
    disabled = list(run.NOT_BENCHED)
    if variant == "in-memory":
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        plugins.append(OtelPlugin(tracer_provider, meter_provider))
        disabled.append("otel")  # the entry-point instance: the one above replaces it
    elif variant == "off":
        disabled.append("otel")
    async with Harness(plugins=plugins, config=config, disabled=disabled) as h:
        wall, cpu = time.perf_counter(), time.process_time()
        agent = h.agent_loop.create("w2", run.dsh_options())
        agent.send("go")
        await agent.wait_idle()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        text = run.assistant_text(agent)
    run.check(text == f"finished after {STEPS} steps", f"W2 {variant}: wrong answer {text!r}")
    run.check(len(bench.executed) == STEPS, f"W2 {variant}: tool calls")
    spans = len(exporter.get_finished_spans())
    expected = 1 + (STEPS + 1) + STEPS if variant == "in-memory" else 0
    run.check(spans == expected, f"W2 {variant}: {spans} spans, expected {expected}")
    return wall, cpu


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run

    server = run.Server()
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for _ in range(RUNS):
            for variant in VARIANTS:
                server.queue([{"name": "tool-loop", "steps": STEPS}] * (STEPS + 1))
                w, c = asyncio.run(w2(server.url, variant))
                wall[variant].append(w)
                cpu[variant].append(c)
    finally:
        server.close()
    off_wall, off_cpu = statistics.median(wall["off"]), statistics.median(cpu["off"])
    print(f"W2, {STEPS} tool steps over HTTP, median of {RUNS} (ratio to the plugin off):")
    ratios = []
    for variant in VARIANTS:
        w, c = statistics.median(wall[variant]), statistics.median(cpu[variant])
        print(
            f"  {variant:10} wall {w * 1e3:7.1f} ms  ratio {w / off_wall:.3f}   "
            f"CPU {c * 1e3:7.1f} ms  ratio {c / off_cpu:.3f}"
        )
        ratios.append(w / off_wall)
    met = ratios[-1] <= TARGET
    print(f"otel overhead target (in-memory, wall) <= {TARGET:.2f}: {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as data:
        import os

        os.environ["XDG_DATA_HOME"] = data
        code = main()
    sys.exit(code)
