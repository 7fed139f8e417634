"""``dsh sessions``: list, show, resume, fork and replay stored sessions (the JSONL default)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.cli import main
from dsh.request import ToolSchema
from dsh.testing import ScriptedAdapter, hang, raise_error, text_response, tool_call_response
from dsh.testing.stores import crash
from dsh_plugins.persistence_jsonl import default_dir


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    yield
    structlog.reset_defaults()  # the CLI configures logging process-wide


async def echo(args: Any, execution: Any) -> str:
    return "echoed"


async def run_agent(agent_id: str, script: list[Any], *messages: str) -> None:
    """Store a session ``<agent_id>-session`` through the default store."""
    async with Harness() as h:
        # effect="read": harmless, so the permissions plugin lets it run without asking.
        h.tools.register(Tool(ToolSchema("echo", "e"), echo, effect="read"))
        h.llm.register_adapter(["m"], ScriptedAdapter(script))
        agent = h.agent_loop.create(
            agent_id, AgentOptions(model="m"), session_id=f"{agent_id}-session"
        )
        for message in messages:
            agent.send(message)
            await agent.wait_idle()


async def crash_in_a_turn(agent_id: str, queued: str | None = None) -> None:
    """Store a session left with an open turn (and a queued message) by a crash."""
    h = Harness()
    await h.start()
    adapter = ScriptedAdapter([hang(text_response("partial")[:3])])
    h.llm.register_adapter(["m"], adapter)
    agent = h.agent_loop.create(agent_id, AgentOptions(model="m"), session_id=f"{agent_id}-session")
    agent.send("before the crash")
    await adapter.started.wait()
    if queued is not None:
        agent.send(queued)
    await agent.session.checkpoint()
    await crash(h)


def scripted_models(monkeypatch: pytest.MonkeyPatch, script: list[Any]) -> ScriptedAdapter:
    """Give the CLI's harness a ``scripted`` model."""
    adapter = ScriptedAdapter(script)

    class Models:
        @hookimpl
        def dsh_register_llm_adapters(self, register: Any) -> None:
            register(["scripted"], adapter)

    from dsh import harness as harness_module

    original = harness_module.Harness.__init__

    def with_models(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [Models()]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", with_models)
    return adapter


def out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_list_filters_and_limits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "list"]) == 0
    assert out(capsys) == ["no stored sessions"]
    asyncio.run(run_agent("alpha", [text_response("a")], "Hello there\nsecond line"))
    asyncio.run(run_agent("beta", [text_response("b")], "find me"))
    assert main(["sessions", "list"]) == 0
    lines = out(capsys)
    assert [line.split()[0] for line in lines] == ["beta-session", "alpha-session"]
    assert lines[1].endswith("11 events  Hello there")
    assert main(["sessions", "list", "--query", "find", "--limit", "5"]) == 0
    assert [line.split()[0] for line in out(capsys)] == ["beta-session"]
    assert main(["sessions", "list", "--query", "nope"]) == 0
    assert out(capsys) == ["no stored sessions match 'nope'"]


def test_show_prints_one_line_per_event_and_per_chunk_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = [tool_call_response("c1", "echo", {"x": 1}), raise_error("AUTH", "bad key")]
    asyncio.run(run_agent("a", script, "go"))
    assert main(["sessions", "show", "a-session"]) == 0
    lines = out(capsys)
    assert lines[0].startswith("session a-session: ") and lines[0].endswith(" events, 1 turns")
    assert lines[1].split() == ["0", "user/message", "go"]
    assert lines[4].split() == ["3", "assistant/chunk", "x6"]
    assert lines[6].split() == ["10", "tool/call", 'echo({"x":', "1})"]
    assert lines[7].split()[:2] == ["11", "approval/decided"]  # the permissions plugin's
    assert lines[8].split() == ["12", "tool/result", "echoed"]
    assert "error" in lines[-2] and "bad key" in lines[-2]
    assert "TurnError" in lines[-1]


def test_replay_exits_1_with_the_mismatches_of_a_damaged_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(run_agent("a", [text_response("hello")], "go"))
    assert main(["sessions", "replay", "a-session"]) == 0
    assert out(capsys) == ["ok: 1 message(s) verified, 0 step(s) without a message"]
    path = default_dir() / "a-session.jsonl"
    lines = path.read_text().splitlines()
    # The block-end chunk carries the authoritative block: damage what it says.
    end = next(i for i, line in enumerate(lines) if '"block-end"' in line)
    lines[end] = lines[end].replace('"hello"', '"hXllo"')
    path.write_text("\n".join(lines) + "\n")
    assert main(["sessions", "replay", "a-session"]) == 1
    report = out(capsys)
    assert "block 0: logged Text(text='hello'), replayed Text(text='hXllo')" in report[0]
    assert report[1] == "1 mismatch(es): 0 message(s) verified, 0 step(s) without a message"


def test_unknown_sessions_and_no_action_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("show", "replay", "fork", "resume"):
        assert main(["sessions", action, "nope"]) == 2
        assert "no stored session 'nope'" in capsys.readouterr().err
    assert main(["sessions"]) == 2
    assert "usage: dsh sessions" in capsys.readouterr().out


def test_fork_stores_a_child_and_refuses_an_open_turn(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(run_agent("a", [text_response("one"), text_response("two")], "first", "second"))
    assert main(["sessions", "fork", "a-session", "--at-seq", "12"]) == 0
    assert out(capsys) == ["forked a-session at seq 12 as a-session-fork-1"]
    assert main(["sessions", "fork", "a-session"]) == 0
    assert out(capsys) == ["forked a-session at seq 25 as a-session-fork-2"]
    assert main(["sessions", "fork", "a-session", "--id", "mine"]) == 0
    assert out(capsys) == ["forked a-session at seq 25 as mine"]
    assert main(["sessions", "fork", "a-session", "--at-seq", "3"]) == 1
    assert "turn 1 is still open there" in capsys.readouterr().err
    assert main(["sessions", "list", "--query", "fork-1"]) == 0
    assert out(capsys)[0].split()[3:5] == ["13", "events"]


def test_resume_closes_a_crashed_turn_and_runs_what_was_queued(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(crash_in_a_turn("a", queued="after the crash"))
    assert main(["sessions", "resume", "a-session"]) == 1
    assert "runs 1 queued message(s): pass --model" in capsys.readouterr().err
    adapter = scripted_models(monkeypatch, [text_response("answered")])
    args = ["sessions", "resume", "a-session", "--model", "scripted", "--prompt", "and now?"]
    assert main(args) == 0
    lines = out(capsys)
    assert lines[0] == "resumed a-session: 7 stored events; recovered:"
    assert [line.split()[1] for line in lines[1:4]] == ["session/end-seed", "step/end", "turn/end"]
    assert "TurnInterrupted" in lines[3]
    # The restored message and the prompt ran as one turn, with the whole history.
    [request] = adapter.requests
    texts = [m.content[0].text for m in request.messages]  # type: ignore[union-attr]
    assert texts == ["before the crash", "after the crash", "and now?"]


def test_resume_needs_a_model_for_a_prompt_and_fails_with_the_turn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(run_agent("a", [text_response("one")], "first"))
    assert main(["sessions", "resume", "a-session"]) == 0  # nothing to run: no model needed
    assert out(capsys)[1].split()[1] == "session/end-seed"
    assert main(["sessions", "resume", "a-session", "--prompt", "hi"]) == 1
    assert "runs the prompt: pass --model" in capsys.readouterr().err
    scripted_models(monkeypatch, [raise_error("AUTH", "bad key")])
    args = ["sessions", "resume", "a-session", "--model", "scripted", "--prompt", "hi"]
    assert main(args) == 1
    assert "TurnError" in out(capsys)[-1]
