"""Run the fuzz targets, each in a child process for a given time, and report what they did.

``python fuzz/run_fuzz.py [--seconds N] [TARGET ...]``: each target runs ``N`` seconds (default 60)
with a fresh corpus; the summary gives its executions and whether it found a crash. Exit 1 when
any did; the crashing inputs are kept in ``fuzz/findings/<target>/``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = ("sse", "jsonl", "config", "toolschema", "mcp_framing")
_EXECS = re.compile(rb"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)")


def run(target: str, seconds: int) -> tuple[int, bool]:
    """(executions, crashed) of one target run for ``seconds``."""
    findings = HERE / "findings" / target
    findings.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"dsh-fuzz-{target}-") as corpus:
        command = [
            sys.executable,
            str(HERE / f"{target}.py"),
            corpus,
            f"-max_total_time={seconds}",
            f"-artifact_prefix={findings}/",
            "-print_final_stats=1",
            "-rss_limit_mb=4096",
        ]
        done = subprocess.run(command, cwd=HERE, capture_output=True, check=False)
    output = done.stdout + done.stderr
    counts = [int(found) for found in _EXECS.findall(output)]
    if done.returncode != 0:
        sys.stdout.write(output.decode("utf-8", "replace")[-4000:])
    return (max(counts) if counts else 0), done.returncode != 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("targets", nargs="*", choices=[*TARGETS, []], default=list(TARGETS))
    args = parser.parse_args(argv)
    failed = False
    for target in args.targets or TARGETS:
        executions, crashed = run(target, args.seconds)
        failed |= crashed
        verdict = "CRASH (input kept in fuzz/findings/)" if crashed else "no finding"
        print(f"{target}: {executions} inputs in {args.seconds} s: {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
