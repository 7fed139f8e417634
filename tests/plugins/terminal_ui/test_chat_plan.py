"""``/plan`` and ``/approve`` in ``dsh chat``."""

from __future__ import annotations

from dsh.testing import text_response
from dsh.values._rare_events import PermissionModeChange
from tests.helpers import data_of
from tests.plugins.terminal_ui.conftest import Kit
from tests.plugins.terminal_ui.test_chat import Chat, chats, start

__all__ = ["chats"]  # the fixture, imported for the tests below


async def test_plan_then_approve(chats: list[Chat]) -> None:
    kit = Kit([text_response("1. do it"), text_response("done")])
    chat = await start(chats, kit)
    assert await chat.session.submit("/plan") == "idle"
    assert chat.printed()[-1].startswith("plan mode: only read-only tools run")
    await chat.say("make a plan")
    chat.idle.clear()
    assert await chat.session.submit("/approve") == "busy"
    await chat.idle.wait()
    events = chat.session.agent.session.events
    modes = data_of(events, PermissionModeChange)
    assert modes == [PermissionModeChange("plan"), PermissionModeChange("workspace-write")]
    assert "The plan is approved: carry it out." in str(kit.adapter.requests[-1].messages[-1])


async def test_a_sub_agents_tool_calls_show_under_the_task_call(chats: list[Chat]) -> None:
    from dsh.testing import tool_call_response
    from dsh_plugins.subagents import SubagentsPlugin

    task = {"description": "count", "prompt": "count the words of 'a b c'"}
    kit = Kit(
        [
            tool_call_response("t1", "task", task),  # the chat's agent delegates
            tool_call_response("w1", "word_count", {"text": "a b c"}),  # the sub-agent works
            text_response("3 words"),  # the sub-agent's answer
            text_response("There are 3 words."),  # the chat's agent answers
        ],
        ask=False,
    )
    chat = await start(chats, kit, extra=[SubagentsPlugin()])
    await chat.say("how many words?")
    printed = chat.printed()
    nested = [line for line in printed if line.startswith("  ↳ ")]
    assert nested == ['  ↳ word_count {"text": "a b c"}']
    assert printed[-2] == "There are 3 words."
