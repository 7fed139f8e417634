"""The options people reach for in ``dsh run`` and ``dsh chat``: thinking, effort, temperature,
output limit, system prompt, a configured agent, model aliases; and ``/model`` offering only
models that can run here."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.app import _aliases as aliases
from dsh.testing import ScriptedAdapter, text_response
from dsh.testing.mockserver import MockServer
from dsh_plugins.llm_openai_sdk import OpenAISdkPlugin
from dsh_plugins.terminal_ui import headless, startup
from dsh_plugins.terminal_ui.chat import ChatSession
from dsh_plugins.terminal_ui.render import Lines
from dsh_plugins.terminal_ui.style import Style
from tests.helpers import disabled_plugins
from tests.plugins.terminal_ui.conftest import Kit, chat_args, make_harness, run_args


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def run(kit: Kit, *argv: str, **harness: Any) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(make_harness(kit, **harness), run_args(*argv), Terminal(), out, err)
    return code, err.getvalue()


async def test_request_options_reach_the_model() -> None:
    kit = Kit([text_response("ok")])
    argv = ("--no-thinking", "--temperature", "0.3", "--max-tokens", "50", "--system", "terse")
    assert await run(kit, *argv, "hi") == (0, "")
    [request] = kit.adapter.requests
    assert (request.thinking, request.temperature, request.max_tokens) == (False, 0.3, 50)
    assert request.reasoning_effort is None
    assert request.system is not None and "terse" in request.system
    kit = Kit([text_response("ok")])
    assert await run(kit, "--thinking", "--effort", "max", "hi") == (0, "")
    [request] = kit.adapter.requests
    assert (request.thinking, request.reasoning_effort, request.temperature) == (True, "max", None)


async def test_bad_values_are_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (("--temperature", "3"), ("--temperature", "warm"), ("--max-tokens", "0")):
        with pytest.raises(SystemExit):
            run_args(*argv, "hi")
    assert "is not a number from 0 to 2" in capsys.readouterr().err
    kit = Kit([text_response("never")])
    code, err = await run(kit, "--no-thinking", "--effort", "high", "hi")
    assert (code, err) == (2, "dsh run: --effort sets how hard the model reasons: drop "
                              "--no-thinking, or drop --effort\n")  # fmt: skip
    assert kit.adapter.requests == []


AGENTS = {
    "agent_loop": {
        "agents": [{"id": "reviewer", "model": "other", "system_prompt": "You review code."}]
    }
}


async def test_agent_starts_from_a_configured_agent() -> None:
    kit = Kit([text_response("ok"), text_response("ok")])
    assert await run(kit, "--agent", "reviewer", "hi", config=AGENTS) == (0, "")
    request = kit.adapter.requests[-1]
    assert request.model == "other"
    assert request.system is not None and "You review code." in request.system
    assert await run(kit, "--agent", "reviewer", "-m", "scripted", "--system", "x", "hi",
                     config=AGENTS) == (0, "")  # fmt: skip
    request = kit.adapter.requests[-1]
    assert request.model == "scripted" and request.system is not None
    assert "You review code." not in request.system


async def test_an_unknown_agent_is_a_usage_error() -> None:
    code, err = await run(Kit(), "--agent", "nope", "hi", config=AGENTS)
    assert (code, err) == (2, "dsh run: no configured agent 'nope' ([[agent_loop.agents]]: "
                              "reviewer)\n")  # fmt: skip
    code, err = await run(Kit(), "--agent", "nope", "hi")
    assert (
        err == "dsh run: no configured agent 'nope' ([[agent_loop.agents]]: none is configured)\n"
    )


async def test_model_aliases_work_in_model_options() -> None:
    kit = Kit([text_response("ok")])
    served = ["scripted", "other"]
    aliases.store("o", "other", served.__contains__, served)
    assert await run(kit, "-m", "o", "hi") == (0, "")
    assert kit.adapter.requests[-1].model == "other"


class Unusable(ScriptedAdapter):
    def unavailable(self, model: str) -> str:
        return f"{model} needs the frobnicator: pip install frobnicator"


class WithUnusable(Kit):
    def dsh_register_llm_adapters(self, register: Any) -> None:
        super().dsh_register_llm_adapters(register)
        register(["sdk/x"], Unusable([]))


async def test_a_model_that_cannot_run_here_is_refused_and_not_offered() -> None:
    harness = make_harness(WithUnusable())
    assert startup.usable_models(harness) == ["other", "scripted"]
    assert startup.model_problem(harness, "sdk/x") == (
        "sdk/x needs the frobnicator: pip install frobnicator"
    )
    assert startup.model_problem(harness, "gpt-9") == (
        "no adapter serves model 'gpt-9'; known models: other, scripted"
    )


@pytest.fixture
async def chat() -> AsyncIterator[tuple[ChatSession, io.StringIO]]:
    out = io.StringIO()
    harness = make_harness(WithUnusable([text_response("hi")]))
    session = ChatSession(harness, chat_args(), Lines(out, Style(False)), lambda message: None)
    await session.start()
    yield session, out
    await session.close()


async def test_chat_model_offers_only_usable_models_and_takes_aliases(
    chat: tuple[ChatSession, io.StringIO],
) -> None:
    session, out = chat
    await session.submit("/model")
    assert out.getvalue().splitlines()[-1] == "model: scripted (available: other, scripted)"
    await session.submit("/model sdk/x")
    assert out.getvalue().splitlines()[-1] == "sdk/x needs the frobnicator: pip install frobnicator"
    llm = session.harness.llm
    aliases.store("o", "other", llm.serves, llm.models())
    await session.submit("/model o")
    assert out.getvalue().splitlines()[-1] == "model: other"
    assert session.agent.options.model == "other"


async def test_options_reach_the_wire_through_dsh_run(tmp_path: Path) -> None:
    """End to end: a real ``dsh run`` process, a real HTTP request to the mock server."""
    aliases.store("pro", "deepseek-v4-pro", "deepseek-v4-pro".__eq__, ["deepseek-v4-pro"])
    async with MockServer() as server:
        (tmp_path / "dsh.toml").write_text(
            f'[llm_deepseek]\nbase_url = "{server.url}"\napi_key = "sk-mock"\n'
        )
        argv = ["-m", "pro", "--thinking", "--effort", "max", "--temperature", "0.5",
                "--max-tokens", "99", "--system", "Answer in French."]  # fmt: skip
        env = {**os.environ, "DSH_DISABLE_PLUGINS": disabled_plugins("tools_fs", "tools_shell")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh", "run", *argv, "hi", cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        body = server.requests[0].body
    assert body["model"] == "deepseek-v4-pro"
    assert body["thinking"] == {"type": "enabled"} and body["reasoning_effort"] == "max"
    assert (body["temperature"], body["max_tokens"]) == (0.5, 99)
    assert "Answer in French." in body["messages"][0]["content"]
    assert "I am the dsh mock model" in stdout.decode()


def test_sdk_models_are_not_offered_without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = make_harness(Kit(), extra=[OpenAISdkPlugin()])
    assert "deepseek-sdk/deepseek-v4-pro" in startup.usable_models(harness)  # installed here
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now fails
    assert startup.usable_models(harness) == ["other", "scripted"]
    problem = startup.model_problem(harness, "deepseek-sdk/deepseek-v4-pro")
    assert problem is not None and "pip install 'dsh-harness[openai]'" in problem
