"""The plugin's commands: ``dsh mock-server`` and ``dsh demo``."""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from dsh import Harness
from dsh_plugins.mock_server import DEMO_HELP, MockServerPlugin, cli, demo, options


def parse(configure: object, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)  # type: ignore[operator]
    return parser.parse_args(argv)


async def test_the_plugin_registers_both_commands_and_imports_them_when_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(demo, "run", ran.append)
    async with Harness(load_entrypoints=False, plugins=[MockServerPlugin]) as harness:
        assert sorted(harness.commands) == ["demo", "mock-server"]
        command = harness.commands["demo"]
        assert command.help == DEMO_HELP
        command.run("args")
        # The options come from a module that imports nothing (every dsh parser builds them).
        assert command.configure is options.demo is demo.configure
        assert harness.commands["mock-server"].configure is options.mock_server is cli.configure
        parser = argparse.ArgumentParser()
        command.configure(parser)
        assert parser.parse_args([]).prompt == options.DEMO_PROMPT == demo.DEMO_PROMPT
    assert ran == ["args"]


class Announcements(io.StringIO):
    """Output that tells when the server has printed how to stop it (it is then serving)."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = asyncio.Event()

    def write(self, text: str) -> int:
        if text.startswith("stop:"):
            self.ready.set()
        return super().write(text)


async def test_mock_server_serves_queued_scenarios_until_shut_down() -> None:
    out = Announcements()
    args = parse(cli.configure, "--scenario", "rate-limit", "--api-key", "sk-x")
    running = asyncio.create_task(cli.run(args, out))
    await out.ready.wait()
    url = re.search(r"listening on (\S+)", out.getvalue()).group(1)  # type: ignore[union-attr]
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer sk-x"}) as session:
        body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(f"{url}/chat/completions", json=body) as response:
            assert response.status == 429
        async with session.post(f"{url}/mock/shutdown") as response:
            assert response.status == 200
    assert await running == 0


async def test_mock_server_refuses_unknown_scenarios() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert await cli.run(parse(cli.configure, "--scenario", "nope"), out, err) == 2
    assert "unknown mock scenario 'nope'" in err.getvalue() and out.getvalue() == ""


async def test_a_busy_port_is_a_one_line_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out, err = io.StringIO(), io.StringIO()
        assert await cli.run(parse(cli.configure, "--port", str(port)), out, err) == 1
    assert err.getvalue().startswith(f"dsh mock-server: cannot listen on 127.0.0.1:{port}: ")
    assert err.getvalue().count("\n") == 1 and out.getvalue() == ""


async def serve_and_read_hint(*argv: str) -> tuple[asyncio.Task[int], str, str]:
    """Start ``dsh mock-server``; its URL and the config block it prints."""
    out = Announcements()
    running = asyncio.create_task(cli.run(parse(cli.configure, *argv), out))
    await out.ready.wait()
    text = out.getvalue()
    url = re.search(r"listening on (\S+)", text).group(1)  # type: ignore[union-attr]
    block = text[text.index("[llm_deepseek]") :].split("\n\n")[0]
    return running, url, block


async def shut_down(url: str, running: asyncio.Task[int]) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/mock/shutdown") as response,
    ):
        assert response.status == 200
    assert await running == 0


async def test_the_printed_config_block_runs_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, url, block = await serve_and_read_hint("--api-key", "sk-only-this")
    assert block == cli.setup_block(url, "sk-only-this")
    assert 'api_key = "sk-only-this"' in block
    (tmp_path / "dsh.toml").write_text(block + "\n")
    env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    env["DSH_DISABLE_PLUGINS"] = ""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dsh", "run", "--no-thinking", "hello",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    await shut_down(url, running)
    assert process.returncode == 0, stderr.decode()
    assert "The tool returned:" in stdout.decode()


async def test_without_api_key_the_block_still_has_one() -> None:
    running, url, block = await serve_and_read_hint()
    assert block.splitlines() == ["[llm_deepseek]", f'base_url = "{url}"', 'api_key = "sk-mock"']
    await shut_down(url, running)


async def test_demo_runs_an_agent_with_a_tool_and_prints_usage() -> None:
    out = io.StringIO()
    assert await demo.run(parse(demo.configure), out) == 0
    lines = out.getvalue().splitlines()
    assert lines[3] == f"you: {demo.DEMO_PROMPT}"
    assert lines[4:9] == [
        "thinking: To answer this I should call word_count.",
        '→ word_count({"text": "the quick brown fox jumps over the lazy dog"})',
        "← 9",
        "thinking: The tool answered; I can reply with its result.",
        "assistant: The tool returned: 9",
    ]
    # The usage line of dsh chat and dsh run --usage, then where the session is and how to
    # continue it.
    assert re.fullmatch(
        r"── [\d,]+ in \(\d+% cached\) · [\d,]+ out \([\d,]+ reasoning\) · .*\d+\.\ds", lines[-3]
    )
    session = re.fullmatch(r"session (demo-\S+) stored in (.+\.jsonl)", lines[-2])
    assert session is not None and await asyncio.to_thread(os.path.isfile, session[2])
    assert lines[-1] == (
        f"continue it: dsh chat --resume {session[1]} (against the real API: set "
        "DEEPSEEK_API_KEY first)"
    )
    assert "\x1b[" not in out.getvalue()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_demo_dims_reasoning_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Terminal()
    assert await demo.run(parse(demo.configure, "--prompt", "hello"), out) == 0
    # "hello" names no tool: the mock calls a read-only one, not the first offered.
    assert "\x1b[2mthinking: To answer this I should call list_dir.\x1b[0m\n" in out.getvalue()


async def test_demo_fails_clearly_when_the_turn_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "DEMO_MODEL", "no-such-model")
    out = io.StringIO()
    assert await demo.run(parse(demo.configure), out) == 1
    assert "dsh demo failed: the turn ended" in out.getvalue()
    assert "NO_ADAPTER" in out.getvalue()


async def test_demo_fails_clearly_without_the_deepseek_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "llm_deepseek")
    out = io.StringIO()
    assert await demo.run(parse(demo.configure), out) == 1
    assert "dsh demo failed: invalid configuration" in out.getvalue()


async def test_the_demo_says_where_its_session_is_stored(tmp_path: Path) -> None:
    from dsh import Harness
    from dsh.testing import MemoryStore
    from dsh.values._events import SessionEvent, TurnStart
    from dsh_plugins.persistence_jsonl import JsonlStore

    async with Harness(load_entrypoints=False) as bare:
        hint = demo.stored_hint(bare, "demo-1")
    assert hint == "session demo-1 was not stored: no persistence plugin is enabled"
    async with Harness(load_entrypoints=False, plugins=[MemoryStore()]) as memory:
        assert demo.stored_hint(memory, "demo-1").startswith(
            "session demo-1 stored (dsh sessions list)\ncontinue it: dsh chat --resume demo-1"
        )
    async with Harness(load_entrypoints=False, plugins=[JsonlStore(tmp_path)]) as jsonl:
        first = demo.stored_hint(jsonl, "demo-1").splitlines()[0]
    assert first == f"session demo-1 stored in {tmp_path / 'demo-1.jsonl'}"
    host = demo.DemoHost(io.StringIO(), color=False)
    host.dsh_session_event(SessionEvent("turn/start", 0, 0.0, TurnStart(1)))  # no meter yet
    assert host.usage_line() == "── no usage reported"
