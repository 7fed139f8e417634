"""``dsh sessions``: list, show, resume, fork and replay stored sessions (the JSONL default)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.cli import main
from dsh.testing import (
    MemoryStore,
    ScriptedAdapter,
    hang,
    raise_error,
    text_response,
    tool_call_response,
)
from dsh.testing.stores import crash
from dsh.values._content import Text
from dsh.values._events import UserMessage
from dsh.values._request import ToolSchema
from dsh_plugins.persistence_jsonl import default_dir
from dsh_plugins.terminal_ui import headless
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args
from tests.test_recovery import FullDisk

pytestmark = pytest.mark.usefixtures("cli_workdir")


async def echo(args: Any, execution: Any) -> str:
    return "echoed"


async def run_agent(
    agent_id: str, script: list[Any], *messages: str, config: Path | None = None
) -> None:
    """Store a session ``<agent_id>-session`` through the default store (or ``config``'s)."""
    async with Harness(config=config) as h:
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

    from dsh.app import _harness as harness_module

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
    header, *lines = out(capsys)
    assert header.split() == ["SESSION", "UPDATED", "EVENTS", "MODEL", "LAST", "TURN", "TITLE"]
    assert [line.split()[0] for line in lines] == ["beta-session", "alpha-session"]
    assert lines[1].split()[3:] == ["11", "m", "completed", "Hello", "there"]
    assert main(["sessions", "list", "--query", "find", "--limit", "5"]) == 0
    assert [line.split()[0] for line in out(capsys)[1:]] == ["beta-session"]
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
    assert lines[-1].split()[1:] == ["turn/end", "turn", "1", "error:", "AUTH:", "bad", "key"]
    assert not any("(" in line and "=" in line for line in lines)  # no Python reprs


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
    assert out(capsys)[1].split()[3] == "13"


def test_resume_closes_a_crashed_turn_and_runs_what_was_queued(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(crash_in_a_turn("a", queued="after the crash"))
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "terminal_ui")  # no default model
    assert main(["sessions", "resume", "a-session"]) == 1
    assert "runs 1 queued message(s): pass --model" in capsys.readouterr().err
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    adapter = scripted_models(monkeypatch, [text_response("answered")])
    args = ["sessions", "resume", "a-session", "--model", "scripted", "--prompt", "and now?"]
    assert main(args) == 0
    lines = out(capsys)
    assert lines[0] == "resumed a-session: 7 stored events; recovered:"
    assert [line.split()[1] for line in lines[1:4]] == ["session/end-seed", "step/end", "turn/end"]
    assert lines[3].split()[1:] == ["turn/end", "turn", "1", "interrupted"]
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
    assert "runs the prompt with model 'm', which no adapter serves: pass --model" in (
        capsys.readouterr().err
    )
    scripted_models(monkeypatch, [raise_error("AUTH", "bad key")])
    args = ["sessions", "resume", "a-session", "--model", "scripted", "--prompt", "hi"]
    assert main(args) == 1
    assert out(capsys)[-1].endswith("turn/end             turn 2 error: AUTH: bad key")


# -- one writer, forks that do not overwrite, turns that were not saved ------------------------


async def load(session_id: str) -> Any:
    async with Harness() as h:
        return await h.sessions.load(session_id)


def test_fork_refuses_an_existing_id_unless_forced(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(run_agent("a", [text_response("one")], "first"))
    asyncio.run(run_agent("b", [text_response("two")], "second"))
    before = asyncio.run(load("b-session"))
    assert main(["sessions", "fork", "a-session", "--id", "b-session"]) == 1
    assert "session 'b-session' already exists: pick another --id, or pass --force" in (
        capsys.readouterr().err
    )
    assert asyncio.run(load("b-session")) == before
    assert main(["sessions", "fork", "a-session", "--id", "b-session", "--force"]) == 0
    assert out(capsys) == ["forked a-session at seq 12 as b-session"]
    assert asyncio.run(load("b-session")) == asyncio.run(load("a-session"))


def test_a_fork_that_cannot_be_written_fails_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(run_agent("a", [text_response("one")], "first"))
    (default_dir() / "broken.jsonl").mkdir()  # in the way of the fork's file
    assert main(["sessions", "fork", "a-session", "--id", "broken"]) == 1
    error = capsys.readouterr().err
    assert "cannot open session 'broken' for writing" in error and "Is a directory" in error


async def test_a_session_another_process_writes_can_be_forked_not_resumed_nor_replaced(
    capsys: pytest.CaptureFixture[str],
) -> None:
    await run_agent("a", [text_response("one")], "first")
    await run_agent("b", [text_response("two")], "second")
    async with Harness() as holder:  # the other process: its own store, its own lock
        await holder.agent_loop.resume("a-session")
        assert await asyncio.to_thread(main, ["sessions", "resume", "a-session"]) == 1
        error = capsys.readouterr().err
        assert f"session 'a-session' is open for writing by process {os.getpid()} " in error
        assert "stop that process (or let it finish) and resume the session again" in error
        fork = ["sessions", "fork", "a-session", "--id", "copy"]
        assert await asyncio.to_thread(main, fork) == 0  # reading it is fine
        replace = ["sessions", "fork", "b-session", "--id", "a-session", "--force"]
        assert await asyncio.to_thread(main, replace) == 1
        assert "is open for writing by process" in capsys.readouterr().err
    resume = ["sessions", "resume", "a-session"]
    assert await asyncio.to_thread(main, resume) == 0  # the holder is gone


class FillingDisk(ScriptedAdapter):
    """A model whose answer fills the disk of ``store`` (at ``full``) while it streams."""

    def __init__(self, store: FullDisk, full: set[str], script: list[Any]) -> None:
        super().__init__(script)
        self.store, self.full = store, full

    async def stream(self, request: Any) -> Any:
        self.store.full = self.full
        async for chunk in super().stream(request):
            yield chunk


@pytest.mark.parametrize("full", [{"checkpoint", "flush"}, {"flush"}])
async def test_dsh_run_exits_1_when_the_turn_could_not_be_saved(full: set[str]) -> None:
    store = FullDisk()
    kit = Kit()
    kit.adapter = FillingDisk(store, full, [text_response("the answer")])
    harness = make_harness(kit, store=store)
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(harness, run_args("hello"), io.StringIO(), out, err)
    assert code == 1
    assert out.getvalue() == "the answer\n"  # printed, yet not a success
    [stored] = store.stored.values()
    assert [e.type for e in stored][:1] == ["user/message"]  # the rest waited for space


def test_resume_exits_1_when_the_turn_could_not_be_saved(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FullDisk()
    store.stored["s"] = asyncio.run(store_elsewhere())
    adapter = FillingDisk(store, {"flush"}, [text_response("the answer")])

    class Models:
        @hookimpl
        def dsh_register_llm_adapters(self, register: Any) -> None:
            register(["scripted"], adapter)

    with_plugins(monkeypatch, Models(), store)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "persistence_jsonl")
    store.full = {"flush"}  # a fork whose flush fails is not a stored fork
    assert main(["sessions", "fork", "s", "--id", "t"]) == 1
    assert "cannot store the fork 't': plugin 'FullDisk' failed" in capsys.readouterr().err
    store.full = set()
    args = ["sessions", "resume", "s", "--model", "scripted", "--prompt", "hi"]
    assert main(args) == 1
    assert out(capsys)[-1].split()[1] == "error"


def with_plugins(monkeypatch: pytest.MonkeyPatch, *plugins: object) -> None:
    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = list(plugins)
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", init)


async def store_elsewhere() -> list[Any]:
    store = MemoryStore()
    async with Harness(load_entrypoints=False, plugins=[store]) as h:
        h.sessions.create("s").append(UserMessage((Text("before"),)))
    return store.stored["s"]


# -- damaged session files (issue #33, point 7) ------------------------------------------------


def damage_header(session_id: str, **fields: Any) -> Path:
    """Replace header fields of the stored session ``session_id`` (as the fuzzer did)."""
    path = default_dir() / f"{session_id}.jsonl"
    header, rest = path.read_text().split("\n", 1)
    path.write_text(json.dumps({**json.loads(header), **fields}) + "\n" + rest)
    return path


def what_to_do(path: Path) -> str:
    return (
        f"fix it, or move {path.name} out of {path.parent} to set the session aside "
        "(the other sessions are not affected)"
    )


def test_list_shows_the_good_sessions_and_reports_the_damaged_beside_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(run_agent("good", [text_response("fine")], "all is well"))
    for name in ("version", "null", "string", "line"):
        asyncio.run(run_agent(name, [text_response("soon damaged")], "hello"))
    paths = {
        "version": damage_header("version-session", version="x"),
        "null": damage_header("null-session", events=None),
        "string": damage_header("string-session", events="1"),
    }
    line = default_dir() / "line-session.jsonl"
    lines = line.read_text().splitlines()
    line.write_text("\n".join([*lines[:2], "{oops", *lines[3:]]) + "\n")
    assert main(["sessions", "list"]) == 1
    captured = capsys.readouterr()
    header, *rows = captured.out.splitlines()
    assert header.split()[0] == "SESSION"
    listed = {row.split()[0]: row.split()[3:] for row in rows}
    assert listed["good-session"][1:] == ["m", "completed", "all", "is", "well"]
    for name in ("version", "null", "string"):
        assert listed[f"{name}-session"] == ["0", "-", "damaged", "(what", "is", "wrong:", "below)"]
    assert listed["line-session"][0] != "0"  # its header is fine: its events are not
    assert listed["line-session"][1:3] == ["-", "damaged"]
    said = {
        "version": """the header's 'version' is "x", not a whole number from 1""",
        "null": "the header's 'events' is null, not a whole number from 0",
        "string": """the header's 'events' is "1", not a whole number from 0""",
    }
    errors = captured.err.splitlines()
    for name, path in paths.items():
        expected = f"dsh sessions list: {name}-session: {path}:1: {said[name]}: {what_to_do(path)}"
        assert expected in errors
    assert (
        f"dsh sessions list: line-session: {line}:3: corrupt session event line: Expecting "
        f"property name enclosed in double quotes: line 1 column 2 (char 1): {what_to_do(line)}"
    ) in errors
    assert len(errors) == 4 and "Traceback" not in captured.err and "plugin" not in captured.err


def test_show_resume_fork_and_replay_of_a_damaged_session_say_what_to_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(run_agent("a", [text_response("one")], "first"))
    path = default_dir() / "a-session.jsonl"
    count = json.loads(path.read_text().split("\n")[0])["events"]
    damage_header("a-session", events="1")
    said = (
        f"{path}:1: the header's 'events' is \"1\", not a whole number from 0: {what_to_do(path)}"
    )
    for action in ("show", "resume", "fork", "replay"):
        assert main(["sessions", action, "a-session"]) == 1
        assert capsys.readouterr().err == f"dsh sessions {action}: {said}\n"
    damage_header("a-session", events=count)  # fixed as the message says: all is there again
    assert main(["sessions", "show", "a-session"]) == 0
    assert out(capsys)[0] == f"session a-session: {count} events, 1 turns"


def test_the_real_command_lists_past_a_damaged_file() -> None:
    asyncio.run(run_agent("good", [text_response("fine")], "all is well"))
    (default_dir() / "junk.jsonl").write_text('{"format": "dsh-session", "version": []}\n')
    env = {**os.environ, "DSH_DISABLE_PLUGINS": ""}
    listed = subprocess.run(
        [sys.executable, "-m", "dsh", "sessions", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert listed.returncode == 1
    rows = {row.split()[0]: row.split()[4:6] for row in listed.stdout.splitlines()[1:]}
    assert rows == {"good-session": ["m", "completed"], "junk": ["-", "damaged"]}
    junk = default_dir() / "junk.jsonl"
    assert listed.stderr == (
        f"dsh sessions list: junk: {junk}:1: the header's 'version' is a list, not a whole "
        f"number from 1: {what_to_do(junk)}\n"
    )


def test_a_damaged_sqlite_session_is_listed_beside_the_good_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SQLite store lists from its table, not from files: the damage the listing finds is
    what loading a session finds, reported the same way."""
    database = tmp_path / "sessions.db"
    (tmp_path / "dsh.toml").write_text(
        f'[persistence_sqlite]\nenabled = true\npath = "{database}"\n'
        "[persistence_jsonl]\nenabled = false\n"
    )
    config = tmp_path / "dsh.toml"
    asyncio.run(run_agent("good", [text_response("fine")], "all is well", config=config))
    asyncio.run(run_agent("bad", [text_response("soon damaged")], "hello", config=config))
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM events WHERE session_id = 'bad-session' AND seq = 3")
        db.execute("UPDATE sessions SET updated = 'soon' WHERE id = 'bad-session'")
    db.close()
    assert main(["sessions", "list"]) == 1
    captured = capsys.readouterr()
    rows = {row.split()[0]: row.split()[1:] for row in captured.out.splitlines()[1:]}
    assert rows["bad-session"][0] == "?"  # an odd record, shown as is
    assert rows["bad-session"][2:4] == ["-", "damaged"]
    assert rows["good-session"][3:5] == ["m", "completed"]
    assert captured.err == (
        f"dsh sessions list: bad-session: {database}: session 'bad-session' misses the event "
        "with seq 3\n"
    )
