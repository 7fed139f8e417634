"""Where dsh's time per chunk goes: W1 and W2 under cProfile, self time grouped by layer.

Run ``python bench/breakdown.py [--chunks N] [--steps N]``. Each side of each workload (the
floor, the logged floor, dsh) runs once unprofiled (the real CPU time) and once under
:mod:`cProfile` (timing CPU, over the section the suite's clock measures), against the same
pre-encoded mock server as ``bench/run.py``. A sampling profiler has no cost per call, so it
checks the shares: ``py-spy record -r 500 --format raw -o dsh.txt -- python bench/breakdown.py
--spin dsh``, then ``python bench/breakdown.py --spy dsh.txt`` tabulates the samples by the
same layers. Timings move with the machine's load; instruction counts do not:
``python bench/breakdown.py --cachegrind`` (needs valgrind) runs each side of W1 and W2 under
``valgrind --tool=cachegrind`` at two sizes (:data:`CACHEGRIND_SIZES`) and divides the
difference by the extra chunks or steps: instructions per chunk and per step, without the
start, the imports and the warm-up; and each side of W3 (spawn to first token) whole, imports
and all, as the suite runs it. ``--cachegrind --layers`` counts ``bench/run.py --layers``'
sides the same way, per W2 step and per W4 agent (:data:`LAYER_SIZES`).

Every function's *self* time is put in one layer by the file that defines it (attrs' and cattrs'
generated code by the class it was generated for), and the table shows each layer in µs per
chunk (W1) or per step (W2) for each side, and dsh's difference to the floor. cProfile adds a
roughly constant cost per Python call, so code that makes many small calls looks dearer than it
is: read the shares, and the unprofiled totals for the real size.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # the workloads live in the suite's script

#: (layer, substrings of a code location that put a function in it), first match wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SSE parsing", ("dsh/llm/_sse.py", "dsh.llm._sse.")),
    ("JSON decoding", ("json/decoder.py", "json/__init__.py:", "'loads'", "orjson.loads")),
    ("JSON encoding (requests, JSONL)", ("json/encoder.py", "'dumps'", "'encode'", "orjson.dumps")),
    # The floors' own code: SSE split, translation, assembly and tool loop in a few functions.
    ("the floors' loop (bench/run.py)", ("bench/run.py",)),
    ("translation (adapter)", ("dsh_plugins/llm_deepseek", "dsh/llm/_service.py")),
    ("chunk objects", ("dsh/values/_chunks.py", "dsh.values._chunks.")),
    ("assembler", ("dsh/llm/_assembler.py", "dsh/assembly.py")),
    ("hook calls (pluggy)", ("pluggy/", "dsh/hooks/_caller.py", "dsh/hooks/_specs.py")),
    (
        "session append, events, JSONL",
        (
            "dsh/session/_session.py",
            "dsh/values/_events.py",
            "dsh/session/_store.py",
            "dsh/values/_content.py",
            "dsh/session/_codec.py",
            "dsh_plugins/persistence_jsonl",
            "cattrs",
            "dsh.values._events.",
            "dsh.values._content.",
        ),
    ),
    ("agent loop, step, dispatch", ("dsh/",)),
    ("otel plugin (no exporter)", ("dsh_plugins/otel", "opentelemetry/")),
    ("other plugins", ("dsh_plugins/",)),
    ("attrs (other)", ("attrs", "attr/")),
    ("HTTP client (aiohttp, yarl, multidict)", ("aiohttp/", "yarl/", "multidict/")),
    ("event loop, sockets (asyncio)", ("asyncio/", "selectors.py", "socket.py", "ssl.py")),
    ("structlog, logging", ("structlog/", "logging/")),
)
OTHER = "other (stdlib, builtins)"


def layer(location: str) -> str:
    """The layer of one profiled function, from ``file:line(name)`` as pstats prints it."""
    for name, needles in LAYERS:
        if any(needle in location for needle in needles):
            return name
    return OTHER


def profiled(call: Callable[[], object]) -> pstats.Stats:
    """Run ``call`` with cProfile on while the suite's clock runs (the measured section only:
    no harness start, no server programming), timing CPU, not wall: on a loaded machine a
    function that was merely descheduled would otherwise look expensive."""
    profiler = cProfile.Profile(time.process_time)
    run.PROFILER = profiler
    try:
        call()
    finally:
        run.PROFILER = None
    return pstats.Stats(profiler)


Func = tuple[str, int, str]


def location(func: Func) -> str:
    filename, line, function = func
    return f"{filename}:{line}({function!r})"


def profile_layers(call: Callable[[], object]) -> dict[str, float]:
    """Run ``call`` profiled; self seconds per layer. A built-in (``dict.get``,
    ``isinstance``, ``socket.send``) that names no layer itself is charged to the layers of
    its callers, each with the time spent in it from there: it is their work."""
    stats = profiled(call)
    by_layer: dict[str, float] = defaultdict(float)
    raw: dict[Func, tuple[int, int, float, float, dict[Func, tuple[int, int, float, float]]]]
    raw = stats.stats  # type: ignore[attr-defined]
    for func, (_, _, tottime, _, callers) in raw.items():
        own = layer(location(func))
        if own != OTHER or func[0] != "~" or not callers:
            by_layer[own] += tottime
            continue
        for caller, (_, _, from_there, _) in callers.items():
            by_layer[layer(location(caller))] += from_there
    return by_layer


def breakdown(name: str, unit: str, units: int, measure: Callable[[str], run.Sample]) -> str:
    """The Markdown table for one workload: per layer, µs per unit, for the floor, the logged
    floor and dsh."""
    plain = {side: measure(side) for side in run.SIDES}
    profiled = {side: profile_layers(partial(measure, side)) for side in plain}
    order = [n for n, _ in LAYERS] + [OTHER]
    per_unit = {side: plain[side].cpu * 1e6 / units for side in plain}
    lines = [
        f"{name}: unprofiled CPU floor {per_unit['floor']:.1f} µs/{unit}, logged floor "
        f"{per_unit['logged']:.1f} µs/{unit}, dsh {per_unit['dsh']:.1f} µs/{unit} "
        f"({per_unit['dsh'] - per_unit['floor']:+.1f} over the floor, "
        f"{per_unit['dsh'] - per_unit['logged']:+.1f} over the logged floor)",
        "",
        f"| layer (cProfile self time; built-ins charged to callers) | floor µs/{unit} "
        f"| logged floor | dsh | dsh - floor | dsh, scaled to its unprofiled CPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals = {side: sum(profiled[side].values()) * 1e6 / units for side in profiled}
    # cProfile's cost per call inflates every layer; scaling dsh's layers to its real total
    # gives an estimate of their real size (rough: layers of many small calls inflate more).
    scale = per_unit["dsh"] / totals["dsh"] if totals["dsh"] else 0.0
    for layer_name in order:
        floor, logged, dsh = (profiled[side].get(layer_name, 0.0) * 1e6 / units for side in plain)
        if floor or logged or dsh:
            lines.append(
                f"| {layer_name} | {floor:.1f} | {logged:.1f} | {dsh:.1f} | {dsh - floor:+.1f} "
                f"| {dsh * scale:.2f} |"
            )
    lines.append(
        f"| **total (profiled)** | {totals['floor']:.1f} | {totals['logged']:.1f} | "
        f"{totals['dsh']:.1f} | {totals['dsh'] - totals['floor']:+.1f} | "
        f"{totals['dsh'] * scale:.2f} |"
    )
    return "\n".join(lines)


def top_functions(measure: Callable[[str], run.Sample], limit: int) -> str:
    """The dsh side's costliest functions by self time, to name what a layer spends on."""
    stats = profiled(partial(measure, "dsh"))
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    ranked = sorted(raw.items(), key=lambda item: -item[1][2])[:limit]
    return "\n".join(
        f"{tottime * 1e3:9.1f} ms {calls:>9} calls  {Path(filename).name}:{line}({function})"
        for (filename, line, function), (calls, _, tottime, _, _) in ranked
    )


#: Frames of a sampled stack that mark work outside the measured section: imports, harness
#: start, the warm-up turn, programming the server, building the expected text.
SETUP_FRAMES = (
    "_find_and_load",
    "__aenter__",
    "warm_up (",
    "program (",
    "delta_text",
    "urlopen",
)


def sampled_layers(raw: str) -> tuple[dict[str, int], int]:
    """Samples per layer from ``py-spy record --format raw`` output (``frame;frame;... count``,
    each frame ``function (file:line)``), by the innermost frame, which is where a sampling
    profiler saw the time (a built-in's time is its caller's). Stacks inside set-up frames are
    left out; returns the layers and how many samples that left out."""
    by_layer: dict[str, int] = defaultdict(int)
    left_out = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if any(marker in frame for frame in frames for marker in SETUP_FRAMES):
            left_out += int(count)
            continue
        function, _, where = frames[-1].rpartition(" (")
        filename, _, line_no = where.rstrip(")").rpartition(":")
        by_layer[layer(f"{filename}:{line_no}({function!r})")] += int(count)
    return dict(by_layer), left_out


def spy_table(raw: str, per_sample_us: float) -> str:
    """The Markdown table of :func:`sampled_layers`: samples, share, µs per unit."""
    by_layer, left_out = sampled_layers(raw)
    total = sum(by_layer.values())
    lines = [
        f"{total} samples in the measured work ({left_out} in set-up left out)",
        "",
        "| layer (py-spy, innermost frame) | samples | share | µs per unit |",
        "|---|---:|---:|---:|",
    ]
    for name, samples in sorted(by_layer.items(), key=lambda item: -item[1]):
        share = samples / total
        lines.append(f"| {name} | {samples} | {share:.1%} | {samples * per_sample_us:.2f} |")
    return "\n".join(lines)


def spin(side: str, size: int, times: int, workload: str = "W1") -> None:
    """W1 (``size`` chunks), W2 (``size`` steps) or W4 (``size`` agents of the suite's
    :data:`run.AGENT_STEPS` tool steps, in this process) ``times`` times on one side, for a profiler
    from outside: a sampling one, or an instruction count (``valgrind --tool=cachegrind``) of
    two sizes, whose difference is the cost of the extra steps without the start-up's."""
    with tempfile.TemporaryDirectory() as data:
        os.environ["XDG_DATA_HOME"] = data
        server = run.FastServer()
        try:
            for _ in range(times):
                if workload == "W4":
                    server.program({"name": "tool-loop", "steps": run.AGENT_STEPS})
                    asyncio.run(run.w4_run(side, server.url, size, run.AGENT_STEPS))
                else:
                    measure = run.w1 if workload == "W1" else run.w2
                    run.measuring(measure, server, size)(side)
        finally:
            server.close()


#: Cachegrind's sizes (small, large) of each workload: the instructions of the large run less
#: those of the small one, over the difference in size, are the cost of one more chunk (W1)
#: or step (W2) without the process's start, imports and warm-up.
CACHEGRIND_SIZES = {"W1": (2_000, 12_000), "W2": (50, 250)}


#: The start of every counting command: this Python under cachegrind, instructions only.
CACHEGRIND = [
    "valgrind",
    "--tool=cachegrind",
    "--cache-sim=no",
    "--cachegrind-out-file=/dev/null",
    sys.executable,
]


def cachegrind_command(side: str, workload: str, size: int) -> list[str]:
    """The command that counts the instructions of one :func:`spin` of ``side``."""
    return [
        *CACHEGRIND,
        str(Path(__file__).resolve()),
        "--spin",
        side,
        "--workload",
        workload,
        "--times",
        "1",
        {"W1": "--chunks", "W2": "--steps", "W4": "--agents"}[workload],
        str(size),
    ]


def first_token_command(side: str, url: str) -> list[str]:
    """The command that counts the instructions of one W3 process of ``side`` (its script, as
    ``bench/run.py`` spawns it, against the mock server at ``url``)."""
    return [
        *CACHEGRIND,
        "-c",
        run.FIRST_TOKEN[side],
        url,
        ",".join(run.bench_disabled()),
    ]


def first_token_row(count: Callable[[list[str]], int], url: str) -> str:
    """The table's W3 row: each side's instructions from spawn to the first token."""
    whole = {side: count(first_token_command(side, url)) for side in run.SIDES}
    return (
        f"| W3 spawn to first token (whole process) | {whole['floor']:,} | {whole['logged']:,} "
        f"| {whole['dsh']:,} | {whole['dsh'] / whole['floor']:.2f}x "
        f"| {whole['dsh'] / whole['logged']:.2f}x |"
    )


def instructions(report: str) -> int:
    """The instructions a cachegrind report (its standard error) counted."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", report)
    if found is None:
        raise RuntimeError(f"no instruction count in cachegrind's report:\n{report[-2000:]}")
    return int(found.group(1).replace(",", ""))


def counted(command: list[str]) -> int:
    """Run ``command`` under cachegrind; the instructions it counted."""
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return instructions(done.stderr)


def instruction_table(
    count: Callable[[list[str]], int] = counted,
    sizes: dict[str, tuple[int, int]] = CACHEGRIND_SIZES,
) -> str:
    """The Markdown table of instructions per chunk (W1) and per step (W2), per side, and
    dsh's ratios to both floors. Instruction counts do not move with the machine's load; they
    count the client process's user-space work only (not the kernel's: socket, write, fsync)."""
    lines = [
        "| instructions (cachegrind) | floor | logged floor | dsh | dsh ÷ floor "
        "| dsh ÷ logged floor |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for workload, (small, large) in sizes.items():
        unit = "chunk" if workload == "W1" else "step"
        per = {
            side: (
                count(cachegrind_command(side, workload, large))
                - count(cachegrind_command(side, workload, small))
            )
            / (large - small)
            for side in run.SIDES
        }
        lines.append(
            f"| {workload} per {unit} ({small:,} → {large:,} {unit}s) | {per['floor']:,.0f} "
            f"| {per['logged']:,.0f} | {per['dsh']:,.0f} | {per['dsh'] / per['floor']:.2f}x "
            f"| {per['dsh'] / per['logged']:.2f}x |"
        )
    return "\n".join(lines)


#: ``--cachegrind --layers``' sizes (small, large): W2 in steps, W4 in agents.
LAYER_SIZES = {"W2": (50, 250), "W4": (50, 250)}


def layer_table(
    count: Callable[[list[str]], int] = counted,
    sizes: dict[str, tuple[int, int]] = LAYER_SIZES,
) -> str:
    """The Markdown table of ``bench/run.py --layers``' sides (:data:`run.LAYERED`) in
    instructions: per W2 step and per W4 agent, each as a multiple of the floor's, and what
    each dsh layer adds (user-space work only: the kernel's file work is not counted)."""
    per = {
        workload: {
            side: (
                count(cachegrind_command(side, workload, large))
                - count(cachegrind_command(side, workload, small))
            )
            / (large - small)
            for side in run.LAYERED
        }
        for workload, (small, large) in sizes.items()
    }
    (w2_small, w2_large), (w4_small, w4_large) = sizes["W2"], sizes["W4"]
    lines = [
        f"| instructions (cachegrind) | W2 per step ({w2_small:,} → {w2_large:,}) | ÷ floor "
        f"| the layer adds | W4 per agent ({w4_small:,} → {w4_large:,}) | ÷ floor "
        "| the layer adds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side in run.LAYERED:
        cells = []
        for workload in ("W2", "W4"):
            n, floor = per[workload][side], per[workload]["floor"]
            below = run.LAYER_BELOW.get(side)
            added = "" if below is None else f"{n - per[workload][below]:+,.0f}"
            cells.append(f"{n:,.0f} | {n / floor:.2f}x | {added}")
        lines.append(f"| {run.LAYER_NAMES[side].strip()} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--top", type=int, default=25, help="list the dsh side's top functions")
    parser.add_argument("--agents", type=int, default=100, help="W4's agents, for --spin")
    parser.add_argument("--spin", choices=run.LAYERED, help="run --workload --times times")
    parser.add_argument(
        "--cachegrind", action="store_true", help="instructions per chunk and step (valgrind)"
    )
    parser.add_argument(
        "--layers", action="store_true", help="with --cachegrind: bench/run.py --layers' sides"
    )
    parser.add_argument(
        "--workload", choices=("W1", "W2", "W4"), default="W1", help="what --spin runs"
    )
    parser.add_argument("--times", type=int, default=8)
    parser.add_argument("--spy", type=Path, help="a py-spy raw file of --spin to tabulate")
    parser.add_argument("--rate", type=int, default=500, help="py-spy's sampling rate (Hz)")
    args = parser.parse_args()
    if args.spin:
        size = {"W1": args.chunks, "W2": args.steps, "W4": args.agents}[args.workload]
        spin(args.spin, size, args.times, args.workload)
        return
    if args.cachegrind:
        if shutil.which("valgrind") is None:
            raise SystemExit("--cachegrind needs valgrind")
        print(f"# instructions — {run.machine()}\n")
        if args.layers:
            print(layer_table())
            return
        print(instruction_table())
        run.compile_bytecode()  # as installing dsh does, and as the suite's W3 does
        with tempfile.TemporaryDirectory() as data:
            os.environ["XDG_DATA_HOME"] = data
            server = run.FastServer()
            try:
                server.program({"name": "deltas", "chunks": 50})
                print(first_token_row(counted, server.url))
            finally:
                server.close()
        return
    if args.spy:
        per_sample_us = 1e6 / args.rate / (args.chunks * args.times)
        print(spy_table(args.spy.read_text(), per_sample_us))
        return
    with tempfile.TemporaryDirectory() as data:
        os.environ["XDG_DATA_HOME"] = data
        server = run.FastServer()
        try:
            w1 = run.measuring(run.w1, server, args.chunks)
            w2 = run.measuring(run.w2, server, args.steps)
            print(f"# breakdown — {run.machine()}\n")
            print(breakdown(f"W1 {args.chunks:,} deltas", "chunk", args.chunks, w1) + "\n")
            print(breakdown(f"W2 {args.steps} steps", "step", args.steps + 1, w2) + "\n")
            if args.top:
                print(f"W1 dsh, top {args.top} functions by self time:")
                print(top_functions(w1, args.top) + "\n")
                print(f"W2 dsh, top {args.top} functions by self time:")
                print(top_functions(w2, args.top))
        finally:
            server.close()


if __name__ == "__main__":
    main()
