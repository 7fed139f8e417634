"""MCP servers' tools in an agent: real servers (stdio subprocesses and streamable HTTP on
loopback) written with the SDK's server API, a scripted model, every fault by name."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

pytest.importorskip("mcp")

from dsh import hookimpl
from dsh.cli import main
from dsh.testing import hang, text_response, tool_call_response, tool_calls_response
from dsh.tools._define import tool
from dsh.values._content import Image, Text
from dsh.values._events import TurnAborted, TurnCompleted, TurnDisposed, TurnEnd
from dsh_plugins.mcp import McpServers
from tests.helpers import data_as
from tests.plugins.mcp.server_app import PIXEL
from tests.plugins.mcp.support import (
    Approver,
    agent,
    call,
    gone,
    harness,
    results,
    stdio,
    text,
    web_server,
)


async def test_an_agent_uses_a_stdio_and_an_http_server_in_one_conversation() -> None:
    async with web_server() as url:
        h = harness({"local": stdio(), "web": {"url": url}})
        async with h:
            a, adapter = agent(
                h,
                [
                    tool_calls_response(
                        [
                            ("c1", "mcp__local__echo", {"text": "hi"}),
                            ("c2", "mcp__web__echo", {"text": "there"}),
                        ]
                    ),
                    text_response("both answered"),
                ],
            )
            a.send("use both")
            await a.wait_idle()
            events = a.session.events
        offered = {t.name for t in adapter.requests[0].tools}
    assert {"mcp__local__echo", "mcp__web__echo", "mcp__local__grow"} <= offered
    echo = next(t for t in adapter.requests[0].tools if t.name == "mcp__local__echo")
    assert echo.description == "Echo the text back."
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]
    outcomes = [(r.content, r.is_error) for r in results(events)]
    assert outcomes == [((Text("echo: hi"),), False), ((Text("echo: there"),), False)]
    assert isinstance(events[-1].data, TurnEnd) and events[-1].data.reason.type == "completed"


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    """The file every test server appends its process id to."""
    return tmp_path / "pids"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file the ``hang`` tool notes ``started`` and ``cancelled`` in."""
    return tmp_path / "marker"


def server_env(pids: Path, marker: Path | None = None) -> dict[str, str]:
    env = {"MCP_TEST_PIDS": str(pids)}
    return env if marker is None else {**env, "MCP_TEST_MARKER": str(marker)}


def noted_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def started_pids(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()]


def has_line(path: Path, line: str) -> bool:
    return path.exists() and line in path.read_text().split()


async def until(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds (bounded)."""
    for _ in range(int(within_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never held")


async def noted(path: Path, line: str) -> None:
    """Wait until ``path`` has ``line`` (bounded)."""
    await until(lambda: has_line(path, line))


async def all_gone(pids: Path) -> bool:
    return all([await gone(pid) for pid in started_pids(pids)])


async def test_results_text_structured_images_and_other_content(pids: Path) -> None:
    async with harness({"local": stdio(env=server_env(pids))}) as h:
        structured = await call(h, "mcp__local__stats")
        picture = await call(h, "mcp__local__picture")
        kinds = await call(h, "mcp__local__kinds")
    assert structured.content == (Text('{"count": 2, "ok": true}'),)
    assert picture.content == (
        Text("a pixel"),
        Image(f"data:image/png;base64,{PIXEL}", "image/png"),
    )
    assert text(kinds).split("\n") == [
        "[audio (audio/wav) omitted: dsh passes no audio to models]",
        "[resource readme: file:///readme.md]",
        "the notes",
        "[resource file:///logo.bin (application/octet-stream) omitted: it is not text]",
        "[resource file:///raw (binary data) omitted: it is not text]",
    ]
    assert await all_gone(pids)


async def test_fault_a_tool_returns_is_error() -> None:
    async with harness({"local": stdio()}) as h:
        a, _ = agent(
            h,
            [tool_call_response("c1", "mcp__local__fail", {}), text_response("noted the failure")],
        )
        a.send("try it")
        await a.wait_idle()
        events = a.session.events
    [result] = results(events)
    assert (result.is_error, result.code) == (True, "TOOL_ERROR")
    assert result.content == (Text("Error: the disk is on fire"),)
    assert data_as(events[-1], TurnEnd).reason == TurnCompleted()


async def test_fault_a_server_returns_1_mb() -> None:
    async with harness({"local": stdio()}, max_output_bytes=1000) as h:
        outcome = await call(h, "mcp__local__big")
    assert not outcome.is_error
    assert text(outcome) == ("x" * 500 + "\n[... 999000 bytes (0 lines) elided ...]\n" + "x" * 500)


async def test_fault_servers_that_never_start_or_fail_do_not_stop_the_others(
    pids: Path, tmp_path: Path
) -> None:
    env = server_env(pids)
    servers = {
        # Not under a second: a loaded machine may take that long to start Python.
        "silent": stdio("silent", env=env, start_timeout_s=2),
        "broken": stdio("broken", env=env),
        "missing": {"command": str(tmp_path / "no-such-program")},
        "good": stdio(env=env),
    }
    async with harness(servers) as h:
        mcp: McpServers = h.mcp
        status = {s.name: s for s in mcp.status()}
        assert (await call(h, "mcp__good__echo", text="still here")).content == (
            Text("echo: still here"),
        )
        names = h.tools.names()
    assert [s.state for s in status.values()] == ["failed", "failed", "failed", "running"]
    assert status["silent"].code == "MCP_START_FAILED"
    assert status["silent"].error == "MCP server 'silent' did not start within 2 s"
    broken = status["broken"].error or ""
    assert broken.startswith("MCP server 'broken' failed to start: ")
    assert broken.endswith(
        "its stderr ends with:\nstarting the test server\nfatal: no configuration found"
    )
    assert "FileNotFoundError" in (status["missing"].error or "")
    assert not [n for n in names if not n.startswith("mcp__good__")]
    assert len(started_pids(pids)) == 3
    assert await all_gone(pids)


async def test_fault_a_server_exits_mid_call_and_is_restarted(pids: Path) -> None:
    async with harness({"local": stdio(env=server_env(pids))}) as h:
        a, _ = agent(
            h,
            [
                tool_call_response("c1", "mcp__local__crash", {}),
                tool_call_response("c2", "mcp__local__pid", {}),
                text_response("recovered"),
            ],
        )
        a.send("crash it")
        await a.wait_idle()
        events = a.session.events
        mcp: McpServers = h.mcp
        [status] = mcp.status()
    crashed, after = results(events)
    assert (crashed.is_error, crashed.code) == (True, "MCP_SERVER_CRASHED")
    assert text_of_result(crashed).startswith(
        "Error: MCP server 'local' went away during the call of 'crash' (MCPError: Connection "
        "closed); it is started again on the next call. Its stderr ends with:\n"
    )
    assert text_of_result(crashed).endswith("\ncrashing on purpose")
    first, second = started_pids(pids)
    assert text_of_result(after) == str(second) and first != second
    assert status.state == "running"
    assert data_as(events[-1], TurnEnd).reason == TurnCompleted()
    assert await all_gone(pids)


def text_of_result(result: object) -> str:
    return "".join(b.text for b in getattr(result, "content", ()) if isinstance(b, Text))


async def test_restarts_back_off_after_failures_in_a_row(pids: Path) -> None:
    servers = {"local": stdio(env=server_env(pids))}
    async with harness(servers, restart_backoff_s=60) as h:
        first = await call(h, "mcp__local__crash")
        again = await call(h, "mcp__local__crash")  # restarted at once, crashes again
        waiting = await call(h, "mcp__local__pid")
        mcp: McpServers = h.mcp
        [status] = mcp.status()
    assert first.code == again.code == "MCP_SERVER_CRASHED"
    assert waiting.code == "MCP_UNAVAILABLE"
    assert text(waiting).startswith("Error: MCP server 'local' is unavailable (MCP server ")
    assert text(waiting).endswith("it is started again on a call in 60.0 s")
    assert status.state == "crashed"
    assert len(started_pids(pids)) == 2
    assert await all_gone(pids)


async def test_fault_a_hanging_tool_times_out_and_the_server_goes_on(
    pids: Path, marker: Path
) -> None:
    # Long enough for the echo after it on a loaded machine; the hang never answers anyway.
    servers = {"local": stdio(env=server_env(pids, marker), timeout_s=2)}
    async with harness(servers) as h:
        a, _ = agent(
            h,
            [
                tool_call_response("c1", "mcp__local__hang", {}),
                tool_call_response("c2", "mcp__local__echo", {"text": "after"}),
                text_response("done"),
            ],
        )
        a.send("wait for it")
        await a.wait_idle()
        events = a.session.events
        await noted(marker, "cancelled")
    timed_out, echoed = results(events)
    assert (timed_out.code, text_of_result(timed_out)) == (
        "TOOL_TIMEOUT",
        "Error: tool 'mcp__local__hang' timed out after 2.0 s and was cancelled",
    )
    assert echoed.content == (Text("echo: after"),)
    assert len(started_pids(pids)) == 1
    assert await all_gone(pids)


async def test_abort_cancels_the_mcp_request(pids: Path, marker: Path) -> None:
    async with harness({"local": stdio(env=server_env(pids, marker))}) as h:
        a, _ = agent(h, [tool_call_response("c1", "mcp__local__hang", {})])
        a.send("wait for it")
        await noted(marker, "started")
        a.abort("user")
        await a.wait_idle()
        events = a.session.events
        await noted(marker, "cancelled")
    [result] = results(events)
    assert (result.is_error, result.code) == (True, "ABORTED")
    assert isinstance(data_as(events[-1], TurnEnd).reason, TurnAborted)
    assert await all_gone(pids)


async def test_dispose_mid_call_stops_cleanly(pids: Path, marker: Path) -> None:
    async with harness({"local": stdio(env=server_env(pids, marker))}) as h:
        a, _ = agent(h, [tool_call_response("c1", "mcp__local__hang", {}), hang()])
        a.send("wait for it")
        await noted(marker, "started")
    assert data_as(a.session.events[-1], TurnEnd).reason == TurnDisposed()
    assert await all_gone(pids)


async def test_fault_the_tool_list_changes_during_a_session() -> None:
    async with harness({"local": stdio()}) as h:
        a, adapter = agent(
            h,
            [
                tool_call_response("c1", "mcp__local__grow", {}),
                tool_call_response("c2", "mcp__local__extra", {}),
                tool_call_response("c3", "mcp__local__note", {"text": "x"}),
                text_response("done"),
            ],
        )
        a.send("grow")
        await a.wait_idle()
        events = a.session.events
    before = {t.name for t in adapter.requests[0].tools}
    after = {t.name for t in adapter.requests[1].tools}
    assert after - before == {"mcp__local__extra"}
    assert before - after == {"mcp__local__note"}
    grown, extra, gone_tool = results(events)
    assert (grown.content, extra.content) == ((Text("grown"),), (Text("extra result"),))
    assert gone_tool.code == "UNKNOWN_TOOL"
    assert data_as(events[-1], TurnEnd).reason == TurnCompleted()


async def test_a_tool_list_that_cannot_be_read_keeps_the_tools() -> None:
    async with harness({"local": stdio()}) as h:
        before = h.tools.names()
        outcome = await call(h, "mcp__local__rebuild")
        after = h.tools.names()
        still = await call(h, "mcp__local__echo", text="ok")
    assert text(outcome) == "rebuilding"
    assert before == after
    assert still.content == (Text("echo: ok"),)


async def test_a_refused_call_is_an_error_result_and_the_server_stays() -> None:
    async with harness({"local": stdio()}) as h:
        refused = await call(h, "mcp__local__refuse")
        mcp: McpServers = h.mcp
        [status] = mcp.status()
        after = await call(h, "mcp__local__echo", text="still")
    assert (refused.is_error, refused.code) == (True, "MCP_ERROR")
    assert text(refused) == (
        "Error: MCP server 'local' refused the call of 'refuse': no such record (MCP error -32602)"
    )
    assert status.state == "running"
    assert text(after) == "echo: still"


async def test_annotations_set_the_effect_and_permissions_apply() -> None:
    approver = Approver(True)
    async with harness({"local": stdio()}, mode="workspace-write", hosts=[approver]) as h:
        effects = {n: getattr(h.tools.get(n), "effect", None) for n in h.tools.names()}
        read = await call(h, "mcp__local__echo", text="a")
        destructive = await call(h, "mcp__local__delete", path="x")
        additive = await call(h, "mcp__local__note", text="n")
    assert (effects["mcp__local__echo"], effects["mcp__local__delete"]) == ("read", "execute")
    assert effects["mcp__local__note"] == "other"
    assert [text(read), text(destructive), text(additive)] == [
        "echo: a",
        "deleted x",
        "noted n",
    ]
    assert approver.asked == ["mcp__local__delete"]


async def test_a_read_only_tool_runs_in_read_only_mode_and_a_destructive_one_asks() -> None:
    approver = Approver(None)
    async with harness({"local": stdio()}, mode="read-only", hosts=[approver]) as h:
        read = await call(h, "mcp__local__echo", text="a")
        destructive = await call(h, "mcp__local__delete", path="x")
        echo = h.tools.get("mcp__local__echo")
    assert text(read) == "echo: a"
    assert destructive.code == "DENIED"
    assert text(destructive).startswith(
        "Error: permission denied: mcp__local__delete may change anything (its MCP server does "
        "not mark it read-only or non-destructive)"
    )
    assert approver.asked == []
    assert echo is not None and echo.concurrency_safe


async def test_read_only_tools_of_one_step_run_in_parallel(pids: Path, marker: Path) -> None:
    """Each call answers only once all three have started on the server: one after another,
    the first would wait in vain (and say so)."""
    async with harness({"local": stdio(env=server_env(pids, marker))}) as h:
        a, _ = agent(
            h,
            [
                tool_calls_response(
                    [(f"c{label}", "mcp__local__slow", {"label": label}) for label in "abc"]
                ),
                text_response("done"),
            ],
        )
        a.send("all three")
        await a.wait_idle()
        events = a.session.events
    assert [text_of_result(r) for r in results(events)] == ["slow a", "slow b", "slow c"]
    assert sorted(noted_lines(marker)[:3]) == ["start a", "start b", "start c"]


async def test_servers_start_concurrently() -> None:
    servers = {name: stdio("silent", start_timeout_s=0.5) for name in ("a", "b", "c")}
    h = harness(servers)
    started = time.monotonic()
    async with h:
        elapsed = time.monotonic() - started
        mcp: McpServers = h.mcp
        states = [s.state for s in mcp.status()]
    # Each waits 0.5 s, then its stop waits about 2 s for it to leave: 7.5 s one by one. A
    # loose bound: what it tells apart is concurrent (~2.5 s) from one by one.
    assert elapsed < 7.0
    assert states == ["failed", "failed", "failed"]


async def test_allow_list_disabled_servers_and_environment_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cret")
    async with web_server() as url:
        servers = {
            "local": stdio(tools=["echo", "pid"]),
            "off": stdio(enabled=False),
            "web": {"url": url, "headers": {"X-Token": "Bearer ${MCP_TEST_TOKEN}"}},
        }
        async with harness(servers) as h:
            local = [n for n in h.tools.names() if n.startswith("mcp__local__")]
            header = await call(h, "mcp__web__header", name="x-token")
            mcp: McpServers = h.mcp
            status = {s.name: s.state for s in mcp.status()}
    assert local == ["mcp__local__echo", "mcp__local__pid"]
    assert text(header) == "Bearer s3cret"
    assert status == {"local": "running", "off": "disabled", "web": "running"}


async def test_an_unset_environment_variable_fails_that_server_only() -> None:
    servers = {
        "local": stdio(env={"A": "${MCP_TEST_UNSET_VARIABLE}"}),
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"A": "${MCP_TEST_UNSET_VARIABLE}"}},
    }
    async with harness(servers) as h:
        mcp: McpServers = h.mcp
        status = mcp.status()
    assert [s.error for s in status] == [
        f"MCP server {name!r} failed to start: the {what} of MCP server {name!r} "
        "refers to the environment variable MCP_TEST_UNSET_VARIABLE, which is not set: export "
        "it before starting dsh"
        for name, what in [("local", "env"), ("web", "headers")]
    ]


async def test_a_tool_name_taken_by_another_plugin_is_not_offered() -> None:
    @tool(description="mine")
    async def mcp__local__echo(text: str) -> str:
        return "the host's"

    class Host:
        @hookimpl
        def dsh_register_tools(self, register: Any) -> None:
            register(mcp__local__echo)

    async with harness({"local": stdio()}, hosts=[Host()]) as h:
        outcome = await call(h, "mcp__local__echo", text="x")
        owner = h.tools.owner("mcp__local__echo")
    assert text(outcome) == "the host's"
    assert owner == "Host"


def test_tool_names_are_made_safe_for_model_apis() -> None:
    from dsh_plugins.mcp.tools import dsh_name

    assert dsh_name("files", "read_file-v2") == "mcp__files__read_file-v2"
    assert dsh_name("files", "read.file/v2") == "mcp__files__read_file_v2_467b8cc0"


async def test_structured_json_is_unicode() -> None:
    from mcp.types import CallToolResult

    from dsh_plugins.mcp.tools import content_of

    result = CallToolResult(content=[], structured_content={"name": "Zoë"})
    assert content_of(result, 100) == (Text(json.dumps({"name": "Zoë"}, ensure_ascii=False)),)
    failed = CallToolResult(content=[], is_error=True)
    with pytest.raises(Exception, match="reported an error without a message"):
        content_of(failed, 100)


async def test_a_paged_tool_list_is_read_to_the_end() -> None:
    async with harness({"one": stdio(), "paged": stdio("paged")}) as h:
        one = {n.removeprefix("mcp__one__") for n in h.tools.names() if "__one__" in n}
        paged = {n.removeprefix("mcp__paged__") for n in h.tools.names() if "__paged__" in n}
    assert len(one) > 8
    assert paged == one


async def test_fault_an_http_server_goes_away_and_comes_back_failing() -> None:
    async with web_server() as url:
        h = harness({"web": {"url": url}})
        await h.start()
        try:
            before = await call(h, "mcp__web__echo", text="a")
        except BaseException:
            await h.close()
            raise
    try:
        gone_call = await call(h, "mcp__web__echo", text="b")
        restart = await call(h, "mcp__web__echo", text="c")
    finally:
        await h.close()
    assert text(before) == "echo: a"
    assert gone_call.code == "MCP_SERVER_CRASHED"
    assert text(gone_call) == (
        "Error: MCP server 'web' went away during the call of 'echo' (MCPError: Connection "
        "closed); it is started again on the next call"
    )
    assert restart.code == "MCP_START_FAILED"
    assert text(restart).startswith("Error: MCP server 'web' failed to start: ConnectError")


async def test_fault_parallel_calls_share_one_crash_and_one_restart(pids: Path) -> None:
    async with harness({"local": stdio(env=server_env(pids))}) as h:
        a, _ = agent(
            h,
            [
                tool_calls_response(
                    [("c1", "mcp__local__crash", {}), ("c2", "mcp__local__crash", {})]
                ),
                tool_calls_response([("c3", "mcp__local__pid", {}), ("c4", "mcp__local__pid", {})]),
                text_response("done"),
            ],
        )
        a.send("crash twice")
        await a.wait_idle()
        events = a.session.events
    first, second, pid, same_pid = results(events)
    assert first.code == second.code == "MCP_SERVER_CRASHED"
    # Both calls of the next step wait for the one restart.
    assert text_of_result(pid) == text_of_result(same_pid) == str(started_pids(pids)[1])
    assert len(started_pids(pids)) == 2
    assert await all_gone(pids)


def test_dsh_mcp_list_and_dsh_tools_show_the_servers_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    local = stdio(tools=["echo", "delete"])
    args = ", ".join(json.dumps(a) for a in local["args"])
    (tmp_path / "dsh.toml").write_text(
        f"[mcp.servers.local]\ncommand = {json.dumps(local['command'])}\nargs = [{args}]\n"
        f'tools = ["echo", "delete"]\n'
        f"[mcp.servers.broken]\ncommand = {json.dumps(local['command'])}\n"
        f'args = [{json.dumps(local["args"][0])}, "broken"]\n'
    )
    try:
        assert main(["--log-level", "critical", "mcp", "list"]) == 1
        listed = capsys.readouterr().out.splitlines()
        assert main(["--log-level", "critical", "tools"]) == 0
        tools = capsys.readouterr().out.splitlines()
    finally:
        structlog.reset_defaults()
    assert listed[0] == f"local  running  stdio: {local['command']} {local['args'][0]} stdio"
    assert listed[1:3] == ["    mcp__local__delete", "    mcp__local__echo"]
    assert listed[3].startswith("broken  failed  stdio: ")
    assert listed[4].startswith("    MCP_START_FAILED: MCP server 'broken' failed to start: ")
    assert listed[-2:] == ["    starting the test server", "    fatal: no configuration found"]
    rows = {line.split()[0]: line.split()[1:] for line in tools[1:]}
    assert rows["mcp__local__echo"][:3] == ["built-in", "(mcp)", "read"]
    assert rows["mcp__local__delete"][:4] == ["built-in", "(mcp)", "execute", "ask"]


async def test_a_restart_outlives_a_call_that_timed_out_waiting_for_it(
    pids: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "restart"
    env = {**server_env(pids), "MCP_TEST_RESTART_GATE": str(gate)}
    servers = {"local": stdio(env=env, timeout_s=2)}
    async with harness(servers) as h:
        crashed = await call(h, "mcp__local__crash")
        waited = await call(h, "mcp__local__pid")  # the restart waits for the gate
        gate.touch()
        mcp: McpServers = h.mcp
        await until(lambda: mcp.status()[0].state == "running")
        after = await call(h, "mcp__local__pid")
    assert (crashed.code, waited.code) == ("MCP_SERVER_CRASHED", "TOOL_TIMEOUT")
    first, second = started_pids(pids)
    assert text(after) == str(second) != str(first)
    assert await all_gone(pids)


async def test_a_cancelled_start_leaves_no_process(pids: Path) -> None:
    from dsh_plugins.mcp.client import Connection
    from dsh_plugins.mcp.config import McpConfig, McpServerConfig

    config = McpServerConfig(**stdio("silent", env=server_env(pids)))
    connection = Connection("silent", config, McpConfig(), lambda _: None)
    starting = asyncio.create_task(connection.start())
    await until(lambda: pids.exists() and bool(pids.read_text().strip()))
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    assert connection.state == "stopped"
    assert await all_gone(pids)
