"""One-call runs: ``dsh.run`` and ``dsh.run_sync`` (also from a plain script, in a subprocess)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

import dsh
from dsh import DshError, Harness, hookimpl
from dsh.llm._service import ModelInfo
from dsh.loop._output import FINAL_RESULT
from dsh.testing import (
    ScriptedAdapter,
    ScriptEntry,
    error_response,
    text_response,
    tool_call_response,
)
from dsh.testing.mockserver import MockServer
from dsh.values._chunks import TokenUsage
from dsh.values._config import find_config
from dsh.values._events import TurnCompleted
from dsh.values._tokens import Price
from tests.helpers import make_dist


@attrs.frozen
class Verdict:
    ok: bool
    why: str


class Priced(ScriptedAdapter):
    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(pricing=Price(input=1.0, output=2.0))


class Model:
    """A plugin serving ``adapter`` as model ``m``."""

    def __init__(self, adapter: ScriptedAdapter) -> None:
        self.adapter = adapter

    @hookimpl
    def dsh_register_llm_adapters(self, register: object) -> None:
        register(["m"], self.adapter)  # type: ignore[operator]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_a_run_with_a_plain_function_tool(harness: Harness) -> None:
    adapter = ScriptedAdapter(
        [tool_call_response("c1", "add", {"a": 2, "b": 3}), text_response("5")]
    )
    harness.llm.register_adapter(["m"], adapter)
    result = await dsh.run(
        "2+3?", model="m", tools=[add], harness=harness, system_prompt="Be terse."
    )
    assert result.text == "5" and result.output is None and result.ok
    assert isinstance(result.reason, TurnCompleted)
    assert result.usage == TokenUsage(20, 6)
    assert result.cost is None  # the scripted model publishes no price
    assert "Be terse." in (adapter.requests[0].system or "")
    assert [t.name for t in adapter.requests[0].tools] == ["add"]
    assert harness.tools.get("add") is None  # offered for the run only
    assert harness.agents.list() == []  # the run's agent is disposed
    assert harness.started  # a harness the caller started stays started


async def test_a_typed_run_and_its_cost(harness: Harness) -> None:
    adapter = Priced([tool_call_response("c1", FINAL_RESULT, {"ok": True, "why": "fine"})])
    harness.llm.register_adapter(["m"], adapter)
    result = await dsh.run("judge", model="m", output_type=Verdict, harness=harness)
    assert result.output == Verdict(True, "fine") and result.ok
    assert result.cost == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


async def test_a_typed_run_that_fails_says_why(harness: Harness) -> None:
    script: list[ScriptEntry] = [text_response("no") for _ in range(3)]
    harness.llm.register_adapter(["m"], ScriptedAdapter(script))
    result = await dsh.run("judge", model="m", output_type=Verdict, harness=harness)
    assert result.output is None and not result.ok
    assert result.error is not None and "final_result" in result.error


async def test_a_failed_turn(harness: Harness) -> None:
    harness.llm.register_adapter(["m"], ScriptedAdapter([error_response("BOOM", "down")]))
    result = await dsh.run("hi", model="m", harness=harness, output_type=Verdict)
    assert result.reason.type == "error" and result.error == "BOOM: down"
    assert result.text == "" and result.cost is None and not result.ok


async def test_runs_share_a_harness_and_continue_a_session() -> None:
    from dsh.testing import MemoryStore

    adapter = ScriptedAdapter([text_response("one"), text_response("two"), text_response("3")])
    async with Harness([Model(adapter), MemoryStore()], load_entrypoints=False) as h:
        first = await dsh.run("a", model="m", harness=h, session_id="chat-1")
        blocker = h.agent_loop.create("run")  # the next run takes another id
        second = await dsh.run("b", model="m", harness=h, session_id="chat-1")
        third = await dsh.run("c", model="m", harness=h)
        await blocker.dispose()
    assert (first.session_id, second.session_id) == ("chat-1", "chat-1")
    assert second.text == "two" and third.text == "3"
    assert third.session_id.startswith("run-2-")
    assert len(adapter.requests[1].messages) == 3  # the second run saw the first exchange


async def test_an_unstarted_harness_is_started_and_closed() -> None:
    adapter = ScriptedAdapter([text_response("hi")])
    h = Harness([Model(adapter)], load_entrypoints=False)
    result = await dsh.run("hello", model="m", harness=h)
    assert result.text == "hi" and not h.started and adapter.closed


async def test_run_sync_refuses_inside_an_event_loop() -> None:
    with pytest.raises(DshError, match=r"use 'await dsh.run\(...\)'"):
        dsh.run_sync("hi", model="m")


PLUGIN = """
from dsh import hookimpl
from dsh.testing import ScriptedAdapter, text_response, tool_call_response

class Plugin:
    @hookimpl
    def dsh_register_llm_adapters(self, register):
        script = [
            tool_call_response("c1", "add", {"a": 40, "b": 2}),
            tool_call_response("c2", "final_result", {"answer": 42}),
        ]
        register(["scripted"], ScriptedAdapter(script))
"""

SCRIPT = """
import dataclasses
import dsh

@dataclasses.dataclass
class Answer:
    answer: int

def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

result = dsh.run_sync("40 + 2?", model="scripted", tools=[add], output_type=Answer)
print(result.output, result.reason.type, result.usage.input_tokens, result.error)
"""


def test_run_sync_from_a_plain_script(tmp_path: Path) -> None:
    """No harness, no event loop: the script's run makes a harness from the entry points (a
    plugin installed here serves the scripted model) and closes it."""
    make_dist(tmp_path, "scripted_model", {"scripted": "scripted_model:Plugin"}, {})
    (tmp_path / "scripted_model.py").write_text(textwrap.dedent(PLUGIN))
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Answer(answer=42) completed 20 None"


def test_run_sync_runs_to_the_end() -> None:
    adapter = ScriptedAdapter([tool_call_response("c1", FINAL_RESULT, {"ok": False, "why": "-"})])
    harness = Harness([Model(adapter)], load_entrypoints=False)
    result = dsh.run_sync("judge", model="m", output_type=Verdict, harness=harness)
    assert result.output == Verdict(False, "-") and not harness.started


# -- one configuration story: the library finds dsh.toml as the command line does ------------

PROJECT_SCRIPT = """
import dsh

result = dsh.run_sync("hello", model="deepseek-flash")
print(result.reason.type, repr(result.text))
"""


def _project(tmp_path: Path, url: str) -> Path:
    """A project directory with its own ``dsh.toml`` pointing dsh at the mock server."""
    from dsh_plugins.mock_server.cli import setup_block

    project = tmp_path / "project"
    project.mkdir()
    (project / "dsh.toml").write_text(setup_block(url, None) + "\n")
    (project / "script.py").write_text(textwrap.dedent(PROJECT_SCRIPT))
    return project


async def _command(cwd: Path, *argv: str, **env: str) -> tuple[int, str, str]:
    """Run a command in a child process while this test's event loop serves the mock."""
    environment = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=cwd,
        env={**environment, "DSH_CONFIG": "", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_run_sync_reads_the_projects_dsh_toml_as_dsh_run_does(
    tmp_path: Path, mock_server: MockServer
) -> None:
    """The documented snippet, in the directory where ``dsh run`` works: before, the library
    ignored ``./dsh.toml`` and failed with "no DeepSeek API key"."""
    project = _project(tmp_path, mock_server.url)
    code, out, err = await _command(project, "script.py")
    assert code == 0, err
    assert out.startswith("completed ")
    assert mock_server.requests, "the run did not reach the server dsh.toml names"


async def test_dsh_config_names_the_file_for_the_library_and_the_command_line(
    tmp_path: Path, mock_server: MockServer
) -> None:
    project = _project(tmp_path, mock_server.url)
    elsewhere = tmp_path / "elsewhere.toml"
    (project / "dsh.toml").rename(elsewhere)
    code, _, err = await _command(project, "script.py", DSH_CONFIG=str(elsewhere))
    assert code == 0, err
    missing = str(tmp_path / "nope.toml")
    code, _, err = await _command(project, "script.py", DSH_CONFIG=missing)
    assert code != 0
    assert "DSH_CONFIG=" in err and "no such file" in err
    code, _, err = await _command(project, "-m", "dsh", "config", "--dump", DSH_CONFIG=missing)
    assert code == 2
    assert f"DSH_CONFIG={missing}: no such file" in err and "Traceback" not in err


def test_find_config_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    assert find_config() is None
    (tmp_path / "dsh.toml").write_text("")
    assert find_config() == "dsh.toml"
    (tmp_path / "other.toml").write_text("")
    monkeypatch.setenv("DSH_CONFIG", "other.toml")
    assert find_config() == "other.toml"
    assert find_config("given.toml") == "given.toml"
    monkeypatch.setenv("DSH_CONFIG", "")
    assert find_config() == "dsh.toml"


async def test_run_takes_a_config_mapping(mock_server: MockServer) -> None:
    section = {"base_url": mock_server.url, "api_key": "sk-mock"}
    result = await dsh.run("hello", model="deepseek-flash", config={"llm_deepseek": section})
    assert result.reason == TurnCompleted()
