"""What starting dsh costs before it does anything: CLI commands and the pytest plugin.

Each case is a fresh child process, run interleaved with the others ``--runs`` times; the CPU
time (user + system, the kernel's accounting of the finished child) and the wall time are
medians. Each case is printed against its baseline, run in the same rounds: the interpreter
alone for the CLI commands and for importing aiohttp (what an adapter needs), pytest alone for
pytest with dsh's fixtures loaded (pytest loads them in every project where dsh is installed).

Usage: ``python bench/bench_startup.py [--runs N]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (the code a child runs with ``python -c``, the name of its baseline or ``None``).
CASES: dict[str, tuple[str, str | None]] = {
    "python": ("pass", None),
    "import aiohttp": ("import aiohttp", "python"),
    "dsh --help": ("from dsh.cli import main; main(['--help'])", "python"),
    "dsh plugins": ("from dsh.cli import main; main(['plugins'])", "python"),
    "dsh models": ("from dsh.cli import main; main(['models'])", "python"),
    "pytest": ("import pytest", "python"),
    "pytest + dsh fixtures": ("import pytest, dsh.testing.pytest_plugin", "pytest"),
}


def child_times(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child running ``code`` (its output thrown away); a child
    that fails is an error, never a figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(runs: int, cases: Sequence[str] = tuple(CASES)) -> dict[str, tuple[float, float]]:
    """The median wall and CPU seconds of each case, every case run once per round."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSH_DISABLE_PLUGINS": ""}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for name in cases:  # a warm-up: the page cache, the bytecode
        child_times(CASES[name][0], env)
    for _ in range(runs):
        for name in cases:
            samples[name].append(child_times(CASES[name][0], env))
    return {
        name: (
            statistics.median(wall for wall, _ in taken),
            statistics.median(cpu for _, cpu in taken),
        )
        for name, taken in samples.items()
    }


def report(medians: dict[str, tuple[float, float]]) -> list[str]:
    """One line per case: wall and CPU, and the CPU it adds to its baseline."""
    lines = [f"{'case':<24} {'wall':>8} {'cpu':>8}   cpu beyond its baseline"]
    for name, (wall, cpu) in medians.items():
        base = CASES[name][1]
        beyond = ""
        if base is not None and base in medians:
            added = cpu - medians[base][1]
            beyond = f"{added * 1000:+.0f} ms over {base} ({cpu / medians[base][1]:.2f}x)"
        lines.append(f"{name:<24} {wall:>7.3f}s {cpu:>7.3f}s   {beyond}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="rounds (default 11)")
    args = parser.parse_args(argv)
    version, load = sys.version.split()[0], os.getloadavg()[0]
    print(f"dsh start-up — Python {version}, load {load:.1f}; medians of {args.runs} rounds")
    for line in report(measure(args.runs)):
        print(line)


if __name__ == "__main__":
    main()
