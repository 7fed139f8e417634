"""What the ``otel`` plugin costs: ``bench/run.py`` W2 (one agent, 200 tool steps over HTTP
against the mock server in its own process) with

- ``off``: the plugin disabled;
- ``no-sdk``: the plugin loaded with the API installed and no SDK configured (the API's own
  providers: what every default install runs);
- ``null``: providers that say they record but do nothing (the API's no-op spans and
  instruments): the plugin does all its own work, and each SDK call costs nothing;
- ``spans``, ``metrics``: the SDK recording that signal only (the other one null);
- ``in-memory``: the SDK recording every span into an in-memory exporter (a synchronous
  ``SimpleSpanProcessor``, the worst case) and every metric into an in-memory reader.

So ``null - off`` is the plugin's own cost and ``in-memory - null`` the SDK's, split between
spans and metrics by the two variants between. Then, for
scale, the SDK calls the plugin makes per step, timed alone in a tight loop.

Run ``python bench/bench_otel.py [--runs N]`` (needs ``opentelemetry-sdk``). The variants run
interleaved, in an order that rotates from one round to the next, each after a full garbage
collection; each figure is the median of the runs, of
this process's wall time and CPU time (the mock server's CPU is its own). CPU is the headline:
on a shared machine wall time also measures the neighbours. Every run checks the answer, the
tool calls and the span count.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh import Harness
from dsh_plugins.otel import OtelPlugin

STEPS = 200
RUNS = 11
VARIANTS = ("off", "no-sdk", "null", "spans", "metrics", "in-memory")
RECORDING = VARIANTS[2:]
TARGET = 1.10


class NullTracerProvider(trace.NoOpTracerProvider):
    """Says it records (it is not the API's own) and hands out the API's no-op spans."""


class NullMeterProvider(metrics.NoOpMeterProvider):
    """Says it records and hands out the API's no-op instruments."""


def providers(variant: str, exporter: InMemorySpanExporter) -> tuple[Any, Any]:
    """The tracer and meter providers of a recording variant: the SDK's where it records that
    signal in memory, else one that records nothing."""
    tracer_provider: Any = NullTracerProvider()
    meter_provider: Any = NullMeterProvider()
    if variant in ("spans", "in-memory"):
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    if variant in ("metrics", "in-memory"):
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return tracer_provider, meter_provider


async def w2(url: str, variant: str) -> tuple[float, float]:
    """One W2 run; returns (wall seconds, CPU seconds) from the first message to idle."""
    import run  # bench/ is on sys.path (main put it there)

    bench = run.Bench()
    config = {"llm_deepseek": {"base_url": url, "api_key": "bench"}}
    exporter = InMemorySpanExporter()
    plugins: list[object] = [bench]
    disabled = list(run.NOT_BENCHED)
    if variant in RECORDING:
        plugins.append(OtelPlugin(*providers(variant, exporter)))
        disabled.append("otel")  # the entry-point instance: the one above replaces it
    elif variant == "off":
        disabled.append("otel")
    async with Harness(plugins=plugins, config=config, disabled=disabled) as h:
        otel = h.plugins.get("otel") if variant == "no-sdk" else plugins[-1]
        recording = isinstance(otel, OtelPlugin) and otel.active
        run.check(recording == (variant in RECORDING), f"W2 {variant}: recording")
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        agent = h.agent_loop.create("w2", run.dsh_options())
        agent.send("go")
        await agent.wait_idle()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        text = run.assistant_text(agent)
    run.check(text == f"finished after {STEPS} steps", f"W2 {variant}: wrong answer {text!r}")
    run.check(len(bench.executed) == STEPS, f"W2 {variant}: tool calls")
    spans = len(exporter.get_finished_spans())
    expected = 1 + (STEPS + 1) + STEPS if variant in ("spans", "in-memory") else 0
    run.check(spans == expected, f"W2 {variant}: {spans} spans, expected {expected}")
    return wall, cpu


def sdk_alone(number: int = 5000) -> dict[str, float]:
    """Microseconds per call of what the plugin asks of the SDK in one W2 step, in a tight loop
    (warm caches: the loop's own figure is higher, as every step runs the whole stack between
    two calls)."""
    exporter = InMemorySpanExporter()
    tracer_provider, meter_provider = providers("in-memory", exporter)
    tracer = tracer_provider.get_tracer("bench")
    histogram = meter_provider.get_meter("bench").create_histogram("h")
    parent = trace.set_span_in_context(tracer.start_span("turn"))
    start = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "deepseek", "m": "x"}
    end = {f"gen_ai.usage.{n}": 1 for n in range(6)}
    common = {**start, "gen_ai.response.model": "x"}

    def span() -> None:
        s = tracer.start_span("chat x", parent, attributes=start)
        s.set_attributes(end)
        s.end()

    def span_and_event() -> None:
        s = tracer.start_span("chat x", parent, attributes=start)
        s.set_attributes(end)
        s.add_event("dsh.llm.first_chunk", {"dsh.llm.time_to_first_chunk": 0.1})
        s.end()

    spans = timeit.timeit(span, number=number)
    found = {
        "span (starts with 3 attributes, ends with 6)": spans,
        "event": timeit.timeit(span_and_event, number=number) - spans,
        "measurement (4 attributes)": timeit.timeit(
            lambda: histogram.record(0.5, common), number=number
        ),
    }
    exporter.clear()
    return {name: seconds / number * 1e6 for name, seconds in found.items()}


def main(runs: int) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run

    server = run.Server()
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for n in range(runs):
            for variant in VARIANTS[n % len(VARIANTS) :] + VARIANTS[: n % len(VARIANTS)]:
                server.queue([{"name": "tool-loop", "steps": STEPS}] * (STEPS + 1))
                w, c = asyncio.run(w2(server.url, variant))
                wall[variant].append(w)
                cpu[variant].append(c)
    finally:
        server.close()
    medians = {v: (statistics.median(wall[v]), statistics.median(cpu[v])) for v in VARIANTS}
    off_wall, off_cpu = medians["off"]
    print(f"W2, {STEPS} tool steps over HTTP, median of {runs} (ratio to the plugin off):")
    for variant in VARIANTS:
        w, c = medians[variant]
        print(
            f"  {variant:10} wall {w * 1e3:7.1f} ms  ratio {w / off_wall:.3f}   "
            f"CPU {c * 1e3:7.1f} ms  ratio {c / off_cpu:.3f}"
        )
    per_step = {v: (medians[v][1] - off_cpu) / STEPS * 1e6 for v in VARIANTS}
    plugin = per_step["null"]
    print(
        f"CPU per step over the plugin off: no SDK {per_step['no-sdk']:.1f} µs; recording "
        f"{per_step['in-memory']:.1f} µs = the plugin {plugin:.1f} µs + the SDK "
        f"{per_step['in-memory'] - plugin:.1f} µs (spans alone {per_step['spans'] - plugin:.1f}"
        f" µs: 2 spans and 1 event a step; metrics alone {per_step['metrics'] - plugin:.1f} µs:"
        " 5 measurements a step)"
    )
    print("the SDK alone, in a tight loop, µs per call:")
    for name, micros in sdk_alone().items():
        print(f"  {name:45} {micros:6.1f}")
    ratio = medians["in-memory"][1] / off_cpu
    verdict = "met" if ratio <= TARGET else "not met"
    print(f"otel overhead target (in-memory, CPU) <= {TARGET:.2f}: {ratio:.3f}, {verdict}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="runs of each variant")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        import os

        os.environ["XDG_DATA_HOME"] = data
        code = main(arguments.runs)
    sys.exit(code)
