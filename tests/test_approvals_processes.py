"""Deferred approvals across real processes, on the JSONL, SQLite and PostgreSQL stores.

A headless agent (this file run as a script, on the DeepSeek adapter against the test's mock
server) parks a call that needs approval and exits; another process lists and decides it, and
the turn completes with the tool run exactly once — also when the decider is SIGKILLed between
the decision and the dispatch, and when two deciders race (the ``dsh approvals`` command).

The ``touch`` tool comes from a plugin installed for the children as a distribution with a
``dsh`` entry point: it records each run in a file (``APPROVALS_RUNS``) before it returns, or
before it blocks (``APPROVALS_BLOCK``), so a test counts runs by reading that file. The test
moves on only on a line a child printed or its exit: no sleeps.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.mockserver import MockServer
from dsh.values._events import SessionEvent, ToolResultEvent, TurnCompleted, TurnEnd
from dsh.values._rare_events import ApprovalDecided, ApprovalRequested

SESSION = "parked-session"
MODEL = "deepseek-v4-flash"
TIMEOUT_S = 30
DSN = os.environ.get("DSH_TEST_POSTGRES_DSN", "")
KINDS = [
    "jsonl",
    "sqlite",
    pytest.param(
        "postgres",
        marks=pytest.mark.skipif(
            not DSN, reason="DSH_TEST_POSTGRES_DSN is unset: the PostgreSQL store is not tested"
        ),
    ),
]

TOUCH = """
import asyncio, os
from dsh import Tool, hookimpl
from dsh.plugin import ToolSchema

class Touch:
    @hookimpl
    def dsh_register_tools(self, register):
        async def touch(args, execution):
            with open(os.environ["APPROVALS_RUNS"], "a") as runs:
                runs.write(execution.call_id + "\\n")
            if os.environ.get("APPROVALS_BLOCK"):
                print("tool-started", flush=True)
                await asyncio.Event().wait()
            return "touched"

        register(Tool(ToolSchema("touch", "Touch a file.", {"type": "object"}), touch,
                      effect="execute"))
"""


class World:
    """One test's store, mock model, tool plugin and children."""

    def __init__(self, tmp_path: Path, server: MockServer, kind: str, schema: str) -> None:
        self.tmp_path = tmp_path
        self.server = server
        self.kind = kind
        self.schema = schema
        self.runs = tmp_path / "runs.txt"
        self.runs.touch()
        dist = tmp_path / "dist"
        info = dist / "approvals_touch-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: approvals_touch\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text("[dsh]\napprovals_touch = approvals_touch:Touch\n")
        (dist / "approvals_touch.py").write_text(TOUCH)
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(dist), *filter(None, [os.environ.get("PYTHONPATH", "")])]
            ),
            "APPROVALS_RUNS": str(self.runs),
            # The mock model calls the tool the user names; only the test's own is offered.
            "DSH_DISABLE_PLUGINS": ",".join(
                filter(
                    None,
                    [os.environ.get("DSH_DISABLE_PLUGINS", ""), "tools_fs,tools_shell,subagents"],
                )
            ),
        }
        self.config = tmp_path / "dsh.toml"
        self.config.write_text(self._toml())

    def separate_owners(self) -> None:
        """Give each child its own PostgreSQL owner label (the store's default: host and
        process), so that a second process is refused the lease a live one holds rather than
        taking it over as a restarted host does."""
        self.config.write_text(self._toml(shared_owner=False))

    def _toml(self, shared_owner: bool = True) -> str:
        store = {
            "jsonl": f'[persistence_jsonl]\ndir = "{self.tmp_path / "sessions"}"\n',
            "sqlite": "[persistence_jsonl]\nenabled = false\n\n[persistence_sqlite]\n"
            f'enabled = true\npath = "{self.tmp_path / "sessions.db"}"\n',
            "postgres": "[persistence_jsonl]\nenabled = false\n\n[persistence_postgres]\n"
            f'enabled = true\ndsn = "{DSN}"\nschema = "{self.schema}"\n'
            # One owner label for every child, as for one host restarted: a SIGKILLed child's
            # lease is taken over at once instead of when it expires.
            + ('owner = "approvals-test"\n' if shared_owner else ""),
        }[self.kind]
        return (
            f'[llm_deepseek]\nbase_url = "{self.server.url}"\napi_key = "k"\n\n'
            '[permissions]\napproval = "defer"\n\n' + store
        )

    async def child(self, *args: str, block: bool = False) -> Child:
        log = (self.tmp_path / f"child-{len(list(self.tmp_path.glob('child-*')))}.log").open("w")
        env = {**self.env, **({"APPROVALS_BLOCK": "1"} if block else {})}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
        )
        log.close()
        return Child(process, log.name)

    async def agent(self, action: str, *args: str, block: bool = False) -> Child:
        return await self.child(__file__, str(self.config), action, *args, block=block)

    async def cli(self, *args: str) -> Child:
        return await self.child("-m", "dsh", "--config", str(self.config), "approvals", *args)

    def ran(self) -> list[str]:
        return self.runs.read_text().split()

    async def stored(self) -> list[SessionEvent]:
        from dsh import Harness

        async with Harness(config=str(self.config)) as harness:
            events = await harness.sessions.load(SESSION)
        assert events is not None
        return events

    async def park(self) -> str:
        """Run the headless agent until it parks and exits; the parked call's id."""
        parker = await self.agent("park")
        lines = await parker.all_lines()
        assert await parker.exit_code() == 0, parker.stderr()
        assert lines[0] == "status waiting"
        [call_id] = [line.split()[1] for line in lines if line.startswith("pending ")]
        assert self.ran() == []
        return call_id


class Child:
    def __init__(self, process: asyncio.subprocess.Process, log: str) -> None:
        self.process = process
        self.log = log

    async def line(self) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT_S)
        assert raw, f"the child exited early: {self.stderr()}"
        return raw.decode().rstrip("\n")

    async def all_lines(self) -> list[str]:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.read(), TIMEOUT_S)
        return raw.decode().splitlines()

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), TIMEOUT_S)

    async def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert await self.exit_code() == -signal.SIGKILL

    def stderr(self) -> str:
        return Path(self.log).read_text()


@pytest.fixture
async def server() -> AsyncIterator[MockServer]:
    async with MockServer() as mock:
        yield mock


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"approvals_{secrets.token_hex(4)}"
    yield name
    if DSN:
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        db: Any = await asyncpg.connect(DSN)
        try:
            await db.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        finally:
            await db.close()


@pytest.fixture(params=KINDS)
async def world(
    request: pytest.FixtureRequest, tmp_path: Path, server: MockServer, schema: str
) -> World:
    return World(tmp_path, server, request.param, schema)


def completed(events: list[SessionEvent]) -> bool:
    ends = [e.data for e in events if isinstance(e.data, TurnEnd)]
    return len(ends) == 1 and ends[0].reason == TurnCompleted()


def result_of(events: list[SessionEvent], call_id: str) -> ToolResultEvent:
    [result] = [
        e.data for e in events if isinstance(e.data, ToolResultEvent) and e.data.call_id == call_id
    ]
    return result


async def test_parked_in_one_process_allowed_in_another(world: World) -> None:
    call_id = await world.park()
    parked = await world.stored()
    assert parked[-1].type == ApprovalRequested.type
    decider = await world.agent("decide", call_id)
    lines = await decider.all_lines()
    assert await decider.exit_code() == 0, decider.stderr()
    assert lines == [f"pending {call_id}", "status idle"]
    assert world.ran() == [call_id]
    events = await world.stored()
    assert completed(events)
    assert result_of(events, call_id).content[0].text == "touched"  # type: ignore[union-attr]
    assert [e.data.by for e in events if isinstance(e.data, ApprovalDecided)] == ["approver"]


async def test_a_decider_killed_before_the_dispatch_runs_the_tool_once_on_resume(
    world: World,
) -> None:
    call_id = await world.park()
    decider = await world.agent("decide", call_id, "--kill")
    assert await decider.line() == f"pending {call_id}"
    assert await decider.exit_code() == -signal.SIGKILL  # it killed itself once decided
    decided = await world.stored()
    assert decided[-1].type == ApprovalDecided.type  # durable before the tool would run
    assert world.ran() == []
    resumer = await world.agent("resume")
    assert await resumer.all_lines() == ["status idle"]
    assert await resumer.exit_code() == 0, resumer.stderr()
    assert world.ran() == [call_id]
    events = await world.stored()
    assert completed(events)
    assert result_of(events, call_id).code is None


async def test_a_decider_killed_during_the_tool_leaves_its_outcome_unknown(world: World) -> None:
    call_id = await world.park()
    decider = await world.agent("decide", call_id, block=True)
    assert await decider.line() == f"pending {call_id}"
    assert await decider.line() == "tool-started"
    await decider.kill()
    resumer = await world.agent("resume")
    assert await resumer.all_lines() == ["status idle"]
    assert await resumer.exit_code() == 0, resumer.stderr()
    assert world.ran() == [call_id]  # not run again
    events = await world.stored()
    assert result_of(events, call_id).code == "TOOL_OUTCOME_UNKNOWN"


async def test_two_racing_deciders_give_one_winner(world: World) -> None:
    call_id = await world.park()
    world.separate_owners()
    listing = await world.cli()
    lines = await listing.all_lines()
    assert await listing.exit_code() == 0, listing.stderr()
    assert lines[1].split()[:3] == [SESSION, call_id, "touch"]
    first, second = (
        await world.cli("allow", SESSION, call_id),
        await world.cli("deny", SESSION, call_id, "--reason", "no"),
    )
    codes = [await first.exit_code(), await second.exit_code()]
    assert sorted(codes) == [0, 1], (first.stderr(), second.stderr())
    loser = [first, second][codes.index(1)]
    refusal = loser.stderr()
    # The loser either reads the winner's decision ("already decided") or finds the winner
    # holding the session; the holder's name may not be in the lock file yet ("another process
    # (not yet identified)"), so the refusal is matched up to that point.
    assert "already decided" in refusal or "is open for writing by" in refusal, refusal
    assert "Traceback" not in refusal
    events = await world.stored()
    decisions = [e.data for e in events if isinstance(e.data, ApprovalDecided)]
    assert len(decisions) == 1
    assert world.ran() == ([call_id] if decisions[0].allowed else [])
    assert completed(events)


# -- the child ---------------------------------------------------------------------------------


async def child_main(config: str, action: str, *args: str) -> None:
    from dsh import AgentOptions, Harness

    options = AgentOptions(model=MODEL)
    async with Harness(config=config) as harness:
        if action == "park":
            agent = harness.agent_loop.create("parked", options, session_id=SESSION)
            agent.send("touch it")
            await agent.wait_idle()
            print(f"status {agent.status}")
            for pending in agent.pending_approvals():
                print(f"pending {pending.call_id}")
            return
        agent = await harness.agent_loop.resume(SESSION, options)
        for pending in agent.pending_approvals():
            print(f"pending {pending.call_id}", flush=True)
        if action == "decide":
            await agent.decide(args[0], allow=True)
            if "--kill" in args:  # before the step could take the decision up
                os.kill(os.getpid(), signal.SIGKILL)
        await agent.wait_idle()
        print(f"status {agent.status}")


if __name__ == "__main__":
    asyncio.run(child_main(*sys.argv[1:]))
