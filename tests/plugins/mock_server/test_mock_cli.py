"""The plugin's commands: ``dsh mock-server`` and ``dsh demo``."""

from __future__ import annotations

import argparse
import asyncio
import io
import re

import aiohttp
import pytest

from dsh import Harness
from dsh_plugins.mock_server import DEMO_HELP, MockServerPlugin, cli, demo


def parse(configure: object, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)  # type: ignore[operator]
    return parser.parse_args(argv)


async def test_the_plugin_registers_both_commands_and_imports_them_when_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(demo, "run", ran.append)
    monkeypatch.setattr(demo, "configure", ran.append)
    async with Harness(load_entrypoints=False, plugins=[MockServerPlugin]) as harness:
        assert sorted(harness.commands) == ["demo", "mock-server"]
        command = harness.commands["demo"]
        assert command.help == DEMO_HELP
        assert command.configure is not None
        command.run("args")
        command.configure("parser")
    assert ran == ["args", "parser"]


def test_the_package_exports_load_on_first_use() -> None:
    import dsh_plugins.mock_server as package

    assert package.MockServer.__name__ == "MockServer"
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = package.nope


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
    out = io.StringIO()
    assert await cli.run(parse(cli.configure, "--scenario", "nope"), out) == 2
    assert "unknown mock scenario 'nope'" in out.getvalue()


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
    assert re.fullmatch(
        r"usage: 2 model calls · input \d+ \(\+\d+ cached\) · output \d+ \(\d+ reasoning\)",
        lines[-1],
    )
    assert "\x1b[" not in out.getvalue()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_demo_dims_reasoning_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Terminal()
    assert await demo.run(parse(demo.configure, "--prompt", "hello"), out) == 0
    assert "\x1b[2mthinking: To answer this I should call word_count.\x1b[0m\n" in out.getvalue()


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
