"""Soak test: many concurrent agents, several rounds, faults mixed in; then check everything.

Run ``python bench/soak.py`` (1,000 agents, 4 rounds; ``--agents``/``--rounds`` to change). The
mock DeepSeek server runs in its own process; around 5% of its answers are faults — HTTP 429
with ``Retry-After``, 500/503, disconnects mid-stream, stalls, malformed chunks. dsh runs in its
default configuration (DeepSeek adapter, retry plugin, JSONL persistence) with a 5 s idle
timeout so stalls end. Every round creates fresh agents and disposes them at its end, as a
long-running host does. Afterwards it checks that every turn ended with a reason, that no
exception escaped, that every stored session reloads to exactly the events in memory and
replays (its chunks assemble to its messages), and that memory after the last round is within
10% of memory after the first (no leak); it prints turns/second and what the faults became.
``tests/test_soak.py`` runs a short version in the normal test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attrs import define, field

FAULTS: tuple[Any, ...] = (
    "rate-limit",
    "server-error",
    "overloaded",
    "disconnect",
    "stall",
    "malformed-json",
)
STEPS_PER_ROUND = 2
KNOWN_REASONS = {"completed", "aborted", "error", "max-tokens", "disposed", "interrupted"}


@define
class SoakReport:
    agents: int
    rounds: int
    turns: int = 0
    seconds: float = 0.0
    faults_queued: int = 0
    retries: int = 0
    outcomes: collections.Counter[str] = field(factory=collections.Counter)
    escaped: list[str] = field(factory=list)
    problems: list[str] = field(factory=list)
    rss_kb: list[float] = field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.escaped


def rss_kb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return 0.0


def round_queue(
    requests: int, fault_rate: float, rng: random.Random, retry_after: str
) -> list[Any]:
    """The scenarios of one round: the tool loop for every request, faults mixed in."""
    normal = {"name": "tool-loop", "steps": STEPS_PER_ROUND}
    specs: list[Any] = []
    for _ in range(requests):
        if rng.random() < fault_rate:
            fault = rng.choice(FAULTS)
            specs.append(
                {"name": fault, "retry_after": retry_after} if fault == "rate-limit" else fault
            )
        specs.append(normal)
    return specs


class Escapes:
    """A host plugin that records anything a plugin could not contain."""

    def __init__(self, report: SoakReport) -> None:
        self.report = report

    def dsh_agent_error(self, error: BaseException) -> None:
        if type(error).__name__ not in ("StepFailed",):
            self.report.escaped.append(f"{type(error).__name__}: {error}")

    def dsh_register_tools(self, register: Any) -> None:
        from dsh import Tool
        from dsh.values._request import ToolSchema

        async def echo(args: Any, execution: Any) -> str:
            return f"echo: {args['text']}"

        parameters = {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }
        register(Tool(ToolSchema("echo", "Echo the text.", parameters), echo))


async def soak(
    url: str,
    queue: Any,
    *,
    agents: int,
    rounds: int,
    fault_rate: float = 0.05,
    seed: int = 7,
    idle_timeout_s: float = 5.0,
    retry_after: str = "1",
) -> SoakReport:
    """Run the soak against the mock server at ``url``; ``queue(specs)`` queues scenarios."""
    from dsh import AgentOptions, Harness

    report = SoakReport(agents, rounds)
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: report.escaped.append(str(context)))
    config = {
        "llm_deepseek": {"base_url": url, "api_key": "soak", "idle_timeout_s": idle_timeout_s},
        "retry": {"base_delay_s": 0.01, "max_delay_s": 0.05},
    }
    start = time.perf_counter()
    async with Harness(plugins=[Escapes(report)], config=config) as h:
        options = AgentOptions(model="deepseek-v4-flash", thinking=False)
        for round_no in range(rounds):
            # Fresh agents every round, disposed at its end: what a long-running host does.
            # Memory after the last round must match the first (nothing kept per agent).
            crowd = [h.agent_loop.create(f"soak-{round_no}-{i}", options) for i in range(agents)]
            requests = agents * (STEPS_PER_ROUND + 1)
            specs = round_queue(requests, fault_rate, rng, retry_after)
            report.faults_queued += sum(spec != specs[-1] for spec in specs)
            await queue(specs)
            for agent in crowd:
                agent.send("work")
            await asyncio.gather(*(agent.wait_idle() for agent in crowd))
            await asyncio.gather(*(agent.dispose() for agent in crowd))
            await check(h, crowd, report)
            del crowd
            gc.collect()
            report.rss_kb.append(rss_kb())
        report.seconds = time.perf_counter() - start
    first, last = report.rss_kb[0], report.rss_kb[-1]
    if rounds > 1 and last > first * 1.10:
        report.problems.append(f"memory grew {last / first - 1:.0%} from round 1 to the last")
    return report


async def check(h: Any, crowd: list[Any], report: SoakReport) -> None:
    """Every turn ended with a reason; the stored log equals the log in memory and replays."""
    from dsh.session._verify import verify

    for agent in crowd:
        events = agent.session.events
        starts = [e for e in events if e.type == "turn/start"]
        ends = [e for e in events if e.type == "turn/end"]
        report.turns += len(ends)
        report.retries += sum(e.type == "llm/retry" for e in events)
        if len(starts) != 1 or len(ends) != 1:
            report.problems.append(f"{agent.id}: {len(starts)} turns started, {len(ends)} ended")
        for end in ends:
            reason = end.data.reason
            if reason.type not in KNOWN_REASONS:
                report.problems.append(f"{agent.id}: unknown turn end {reason!r}")
            code = getattr(getattr(reason, "failure", None), "code", None)
            report.outcomes[reason.type + (f" {code}" if code else "")] += 1
        stored = await h.sessions.load(agent.session.id)
        if stored is None or list(stored) != list(events):
            report.problems.append(f"{agent.id}: the stored session differs from memory")
        replay = verify(stored or [])
        if not replay.ok:
            report.problems.append(f"{agent.id}: replay: {replay.mismatches[0]}")


def print_report(report: SoakReport) -> None:
    rate = report.turns / report.seconds
    print(f"soak: {report.agents:,} agents x {report.rounds} rounds, ", end="")
    print(f"{report.turns:,} turns in {report.seconds:.1f} s = {rate:.0f} turns/s")
    print(f"faults queued: {report.faults_queued}; retries: {report.retries}")
    for outcome, count in sorted(report.outcomes.items()):
        print(f"  turn ended {outcome}: {count}")
    rounds = ", ".join(f"{kb / 1024:.1f}" for kb in report.rss_kb)
    print(f"resident memory after each round (MB): {rounds}")
    for line in [*report.problems, *report.escaped][:20]:
        print(f"PROBLEM: {line}")
    print("soak: OK" if report.ok else "soak: FAILED")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import Server

    from dsh._log import configure_logging

    configure_logging(level="error")  # each failed turn would log a warning
    with tempfile.TemporaryDirectory() as data:
        os.environ["XDG_DATA_HOME"] = data
        server = Server()

        async def queue(specs: list[Any]) -> None:
            server.queue(specs)

        try:
            report = asyncio.run(
                soak(
                    server.url,
                    queue,
                    agents=args.agents,
                    rounds=args.rounds,
                    fault_rate=args.fault_rate,
                )
            )
        finally:
            server.close()
    print_report(report)
    print(json.dumps({"turns_per_s": report.turns / report.seconds, "ok": report.ok}))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
