"""Error texts are content: without ``capture_content`` a span's status descriptions, events and
attributes carry codes and names only, never what a tool, a policy, a model or a compaction
wrote (issue #33, point 5). Read from the real SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import StatusCode

from dsh import Harness, Tool
from dsh.hooks._markers import hookimpl
from dsh.testing import raise_error, tool_call_response
from dsh.tools._registry import ToolExecution
from dsh.values._agent import Agent
from dsh.values._chunks import Finish, FinishError, LlmFailure
from dsh.values._rare_events import HistoryRewriteEnd, HistoryRewriteStart
from dsh.values._request import LlmRequest, ToolSchema
from dsh_plugins.retry import RetryPlugin
from tests.plugins.otel.support import Clock, Telemetry, agent_on, run_turn
from tests.plugins.otel.test_spans import AskingPolicy

#: What the tool, the policy, the model's failures and the compaction write: paths, passwords.
PATH = "/home/alice/.netrc"
PASSWORD = "hunter2-secret"


async def login(args: Any, execution: ToolExecution) -> str:
    raise PermissionError(f"cannot open {args['path']}: password {PASSWORD!r} was refused")


class Compacting:
    """A failed compaction whose error text quotes the conversation."""

    @hookimpl
    def dsh_agent_request(self, agent: Agent, step: int, request: LlmRequest) -> None:
        if step == 1:
            agent.session.append(HistoryRewriteStart(1, "threshold", 9000))
            agent.session.append(HistoryRewriteEnd(2000, f"the summary of {PATH} failed"))


async def traced_turn(telemetry: Telemetry, capture: bool) -> None:
    """A turn whose every error text holds ``PATH`` or ``PASSWORD``: a retried model call, a
    failing tool call a policy asked about, a compaction that failed, and a model failure that
    ends the turn."""
    config = {"otel": {"capture_content": capture}}
    plugins = [Compacting(), telemetry.plugin(), RetryPlugin(random=lambda: 0.0)]
    async with Harness(
        load_entrypoints=False, plugins=plugins, config=config, sleep=Clock().sleep
    ) as h:
        h.plugins.register(AskingPolicy(h, True), "asking")
        h.tools.register(Tool(ToolSchema("login", "Log in."), login))
        ending = LlmFailure(f"the request quoted {PASSWORD}", "INVALID_REQUEST", 400)
        agent = agent_on(
            h,
            raise_error("RATE_LIMIT", f"slow down, {PATH}"),
            tool_call_response("c1", "login", {"path": PATH}),
            [Finish(FinishError(ending))],
        )
        await run_turn(agent)


def recorded(telemetry: Telemetry) -> list[str]:
    """Every text the spans hold: names, status descriptions, attributes, events."""
    texts: list[str] = []
    for span in telemetry.spans():
        texts += [span.name, str(span.status.description)]
        texts += [f"{k}={v!r}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            texts.append(event.name)
            texts += [f"{k}={v!r}" for k, v in (event.attributes or {}).items()]
    return texts


async def test_without_content_capture_errors_are_codes_and_names_only(
    telemetry: Telemetry,
) -> None:
    await traced_turn(telemetry, capture=False)
    texts = "\n".join(recorded(telemetry))
    assert PATH not in texts and PASSWORD not in texts, texts
    tool = telemetry.one("execute_tool login")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "TOOL_ERROR"
    assert (tool.attributes or {})["error.type"] == "TOOL_ERROR"
    assert [(e.name, dict(e.attributes or {})) for e in tool.events] == [
        ("dsh.tool.approval_requested", {})
    ]
    failed, _, ended = telemetry.named("chat scripted")
    assert (failed.status.description, ended.status.description) == (
        "RATE_LIMIT",
        "INVALID_REQUEST",
    )
    turn = telemetry.one("invoke_agent a")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.status.description == "INVALID_REQUEST"
    end = {e.name: dict(e.attributes or {}) for e in turn.events}["dsh.compaction.end"]
    assert end == {"dsh.compaction.tokens_after": 2000, "error.type": "COMPACTION_FAILED"}


async def test_with_content_capture_the_error_texts_are_kept(telemetry: Telemetry) -> None:
    await traced_turn(telemetry, capture=True)
    tool = telemetry.one("execute_tool login")
    assert PATH in str(tool.status.description)
    assert PASSWORD in str(tool.status.description)
    asked = {e.name: dict(e.attributes or {}) for e in tool.events}
    assert asked["dsh.tool.approval_requested"] == {"dsh.tool.approval_reason": "it writes files"}
    failed, _, ended = telemetry.named("chat scripted")
    assert failed.status.description == f"slow down, {PATH}"
    assert ended.status.description == f"the request quoted {PASSWORD}"
    turn = telemetry.one("invoke_agent a")
    assert turn.status.description == f"the request quoted {PASSWORD}"
    end = {e.name: dict(e.attributes or {}) for e in turn.events}["dsh.compaction.end"]
    assert end["dsh.compaction.error"] == f"the summary of {PATH} failed"
