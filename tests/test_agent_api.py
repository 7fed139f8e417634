"""What plugins and hosts see of an agent: the ``Agent`` protocol, the loop's public re-queue,
and the layering that keeps plugins off the driver."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import dsh
import dsh.hooks._specs
from dsh.app._harness import Harness
from dsh.loop._inbox import InboxMessage
from dsh.session._session import Session
from dsh.testing import text_response
from dsh.values._agent import Agent
from dsh.values._content import Image, Reasoning, Text, ToolCall, ToolResult, as_blocks
from dsh.values._events import StepStart, TurnCompleted, TurnEnd, TurnStart, UserMessage
from dsh.values._rare_events import QueuedMessage
from tests.helpers import data_of, kinds, of_type, scripted_agent

ROOT = Path(__file__).resolve().parent.parent


async def test_a_loop_agent_is_an_agent(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [])
    assert isinstance(agent, Agent)
    assert dsh.Agent is Agent
    assert repr(agent) == "<LoopAgent 'main' idle>"


def test_hookspecs_type_agents_against_the_protocol() -> None:
    source = inspect.getsource(dsh.hooks._specs)
    assert "LoopAgent" not in source and "dsh.loop._loop" not in source
    status = inspect.signature(dsh.hooks._specs.dsh_agent_status).parameters["status"]
    assert status.annotation == "AgentStatus"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_plugin_imports_the_loop_driver() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "dsh_plugins").rglob("*.py"))
        if "dsh.loop._loop" in _imports(path)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hi", (Text("hi"),)),
        (Text("t"), (Text("t"),)),
        (Reasoning("r"), (Reasoning("r"),)),
        (ToolCall("c", "n", "{}"), (ToolCall("c", "n", "{}"),)),
        (ToolResult("c", (Text("ok"),)), (ToolResult("c", (Text("ok"),)),)),
        (Image("data:image/png;base64,AA=="), (Image("data:image/png;base64,AA=="),)),
        ([Text("a"), Text("b")], (Text("a"), Text("b"))),
    ],
)
def test_as_blocks_takes_text_a_block_or_blocks(value: object, expected: object) -> None:
    assert as_blocks(value) == expected  # type: ignore[arg-type]


async def test_requeue_starts_a_turn_without_logging_the_message_again(harness: Harness) -> None:
    agent, _ = scripted_agent(harness, [text_response("done")])
    logged = agent.session.append(QueuedMessage((Text("later"),)))
    agent.requeue([InboxMessage((Text("later"),), queued_seq=logged.seq)])
    await agent.wait_idle()
    assert kinds(agent.session.events)[:3] == ["inbox/queued", "user/message", "turn/start"]
    assert len(of_type(agent.session.events, "inbox/queued")) == 1
    assert data_of(agent.session.events, UserMessage)[0].queued_seq == logged.seq
    await agent.dispose()


def test_last_turn_is_the_number_of_the_last_turn_started() -> None:
    session = Session("s")
    assert session.last_turn == 0
    session.append(TurnStart(1))
    session.append(TurnEnd(1, TurnCompleted()))
    assert session.last_turn == 1
    session.append(TurnStart(2))
    session.append(StepStart(2, 1))
    assert session.last_turn == 2
    assert Session("copy", session.events).last_turn == 2
