"""Documentation stays true: the hook reference matches hookspecs, every hook fires."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from dsh import AgentOptions, Command, Harness, PromptSection, Retry, Tool
from dsh.app._hookdoc import render_hook_reference
from dsh.hooks._caller import HOOK_STYLES
from dsh.testing import ScriptedAdapter, error_response, text_response, tool_call_response
from dsh.tools._registry import ToolExecution
from dsh.values._request import ToolSchema

DOCS = Path(__file__).parent.parent / "docs"


def test_hook_reference_is_generated_from_hookspecs() -> None:
    committed = (DOCS / "hooks.md").read_text()
    assert committed == render_hook_reference(), "run: python -m dsh.app._hookdoc > docs/hooks.md"
    for name in HOOK_STYLES:
        assert f"## {name}\n" in committed


class Recorder:
    """Implements every hook and records which fired."""

    def __init__(self) -> None:
        self.fired: set[str] = set()
        for name in HOOK_STYLES:
            if not hasattr(type(self), name):
                setattr(self, name, self._observer(name))

    def _observer(self, name: str) -> Any:
        def observe() -> None:
            self.fired.add(name)

        return observe

    def dsh_register_config(self, register: Any) -> None:
        self.fired.add("dsh_register_config")

    def dsh_register_event_types(self, register: Any) -> None:
        self.fired.add("dsh_register_event_types")

    def dsh_register_llm_adapters(self, register: Any) -> None:
        self.fired.add("dsh_register_llm_adapters")
        self.adapter = ScriptedAdapter(
            [
                error_response("RATE_LIMIT", "slow down"),
                tool_call_response("c1", "echo", {"x": 1}),
                text_response("done"),
                error_response("SERVER", "down"),
                error_response("SERVER", "still down"),  # second attempt: the turn fails
            ]
        )
        register(["recorded"], self.adapter)

    def dsh_register_tools(self, register: Any) -> None:
        self.fired.add("dsh_register_tools")

        async def echo(args: Any, execution: Any) -> str:
            return "ok"

        register(Tool(ToolSchema("echo", "echo"), echo))

    def dsh_register_prompt_sections(self, register: Any) -> None:
        self.fired.add("dsh_register_prompt_sections")
        register(PromptSection("recorded", "hello"))

    def dsh_register_commands(self, register: Any) -> None:
        self.fired.add("dsh_register_commands")
        register(Command("recorded", "a command", lambda args: 0))

    def dsh_agent_request_error(self, attempt: int) -> Retry | None:
        self.fired.add("dsh_agent_request_error")
        return Retry(0) if attempt == 1 else None

    async def dsh_llm_stream(self, request: Any, call_next: Any) -> Any:
        self.fired.add("dsh_llm_stream")
        return await call_next(request)

    async def dsh_tools_execute(self, execution: Any, call_next: Any) -> Any:
        self.fired.add("dsh_tools_execute")
        return await call_next(execution)


async def test_every_hook_fires_in_an_ordinary_session() -> None:
    recorder = Recorder()
    async with Harness(load_entrypoints=False, plugins=[recorder]) as h:
        agent = h.agent_loop.create("a", AgentOptions(model="recorded"))
        agent.send("go")
        await agent.wait_idle()
        agent.send("again")
        await agent.wait_idle()
        await h.sessions.load("missing")
        assert await h.sessions.stored() == []
        # Asked by permission policies (dsh_plugins.permissions); nobody answering (None) is no.
        assert await h.hooks.tools_approve(ToolExecution("c", "echo", "{}"), "asks") is None
    assert recorder.fired == set(HOOK_STYLES)


def test_import_dsh_loads_no_plugin_and_no_http_client() -> None:
    code = (
        "import sys, dsh; "
        "print(sorted(m for m in sys.modules if m.startswith(('dsh_plugins', 'aiohttp', 'dsh.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['dsh._lazy']"  # the lazy-name helper, nothing else


#: Model names DeepSeek retired (or keeps only as aliases of a newer name).
RETIRED = re.compile(r"\bdeepseek-(?:v4-flash(?!-vision)|chat|reasoner)\b")


def _code_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced code block."""
    found: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            found.append((number, line))
    return found


def test_the_docs_examples_use_todays_model_names() -> None:
    """Prose may name a retired model to say it is retired; an example a user copies may not
    (``docs/structured-output.md`` used ``deepseek-v4-flash`` a release after it retired). A
    line that shows what a retired name maps to says so with ``wire_name``."""
    pages = [*DOCS.glob("*.md"), *DOCS.glob("plugins/*.md"), DOCS.parent / "README.md"]
    stale = [
        f"{page.name}:{number}: {line.strip()}"
        for page in pages
        if page.name not in ("changelog.md", "configuration.md")
        for number, line in _code_blocks(page.read_text())
        if RETIRED.search(line) and "wire_name(" not in line
    ]
    assert stale == []
