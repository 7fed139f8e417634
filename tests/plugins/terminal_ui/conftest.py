"""Shared pieces: a harness with a scripted model, a tool and a policy that asks before every
tool call, and argument parsing for the two commands."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
import structlog

from dsh import Harness, ToolExecution, ToolOutcome, tool
from dsh.loop._loop import LoopAgent
from dsh.testing import MemoryStore, ScriptedAdapter, ScriptEntry
from dsh_plugins.terminal_ui import TerminalUi, console, headless


@tool(concurrency_safe=True)
async def word_count(text: str) -> str:
    """Count the words in a text.

    Args:
        text: The text to count.
    """
    return str(len(text.split()))


class Kit:
    """A scripted model ``scripted``, the ``word_count`` tool and (``ask``) a policy that asks
    ``dsh_tools_approve`` before every tool call and refuses it when nobody says yes."""

    def __init__(self, script: Sequence[ScriptEntry] = (), *, ask: bool = True) -> None:
        self.adapter = ScriptedAdapter(script)
        self.ask = ask

    def dsh_register_llm_adapters(self, register: Any) -> None:
        register(["scripted", "other"], self.adapter)

    def dsh_register_tools(self, register: Any) -> None:
        register(word_count)

    async def dsh_tools_execute(
        self, execution: ToolExecution, call_next: Callable[[ToolExecution], Awaitable[Any]]
    ) -> Any:
        if self.ask:
            assert isinstance(execution.agent, LoopAgent)  # the loop's agent knows its harness
            hooks = execution.agent.harness.hooks
            if not await hooks.tools_approve(execution, "the test policy asks"):
                return ToolOutcome.error("DENIED", "the user said no")
        return await call_next(execution)


def make_harness(
    kit: Kit,
    config: dict[str, Any] | None = None,
    *,
    store: MemoryStore | None = None,
    extra: Sequence[object] = (),
) -> Harness:
    """A loaded (not started) harness with the terminal UI, a memory store, ``kit`` and
    ``extra`` plugins."""
    settings: dict[str, Any] = {"terminal_ui": {"model": "scripted"}, **(config or {})}
    plugins = [TerminalUi(), store or MemoryStore(), kit, *extra]
    harness = Harness(load_entrypoints=False, plugins=plugins, config=settings)
    harness.load()
    return harness


def run_args(*argv: str) -> argparse.Namespace:
    return _parse(headless.configure, argv)


def chat_args(*argv: str) -> argparse.Namespace:
    return _parse(console.configure, argv)


def _parse(
    configure: Callable[[argparse.ArgumentParser], None], argv: Sequence[str]
) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield
    structlog.reset_defaults()
