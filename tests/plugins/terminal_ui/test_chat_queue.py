"""Slash commands typed while the agent works (issue #34): ``/plan`` takes effect at once, the
others are queued and run in order when the turn ends, and the screen says which."""

from __future__ import annotations

from dsh.testing import hang, text_response
from dsh.values._rare_events import PermissionModeChange
from tests.helpers import data_of
from tests.plugins.terminal_ui.conftest import Kit
from tests.plugins.terminal_ui.test_chat import Chat, chats, start

__all__ = ["chats"]  # the fixture, imported for the tests below

QUEUED = "runs when the agent is done (Ctrl-C interrupts it)"


async def test_plan_at_once_model_when_the_turn_ends(chats: list[Chat]) -> None:
    kit = Kit([hang(), text_response("answered by other")])
    chat = await start(chats, kit)
    session = chat.session
    assert await session.submit("work") == "busy"
    await kit.adapter.started.wait()

    assert await session.steer("/plan") == "busy"
    assert data_of(session.agent.session.events, PermissionModeChange) == [
        PermissionModeChange("plan")
    ]  # logged now: the agent's next tool call is judged in plan mode
    assert chat.printed()[-1] == (
        "plan mode: only read-only tools run, from the agent's next tool call on; "
        "/approve carries out the plan"
    )
    assert await session.steer("/model other") == "busy"
    assert chat.printed()[-1] == f"⧗ /model other: {QUEUED}"
    assert session.agent.options.model == "scripted"  # not yet: the turn still runs
    assert await session.steer("/nope") == "busy"  # told at once, not queued
    assert chat.printed()[-1] == "unknown command /nope; /help lists the commands"

    await session.abort()
    await chat.idle.wait()
    assert chat.printed()[-2:] == ["▸ /model other (queued while the agent worked)", "model: other"]
    assert session.agent.options.model == "other"
    await chat.say("again")
    assert kit.adapter.requests[-1].model == "other"


async def test_queued_commands_run_in_order_and_a_turn_one_starts_comes_first(
    chats: list[Chat],
) -> None:
    """A queued ``/approve`` starts a turn: the commands queued after it wait for that turn."""
    kit = Kit([hang(), text_response("carried out"), text_response("by other")])
    chat = await start(chats, kit)
    session = chat.session
    assert await session.submit("/plan") == "idle"
    assert (
        chat.printed()[-1] == "plan mode: only read-only tools run; /approve carries out the plan"
    )
    assert await session.submit("make a plan") == "busy"
    await kit.adapter.started.wait()
    await session.steer("/approve")
    await session.steer("/model other")
    assert chat.printed()[-2:] == [f"⧗ /approve: {QUEUED}", f"⧗ /model other: {QUEUED}"]

    await session.abort()
    await chat.idle.wait()
    printed = chat.printed()
    start_at = printed.index("▸ /approve (queued while the agent worked)")
    assert printed[start_at:] == [
        "▸ /approve (queued while the agent worked)",
        "plan approved: workspace-write mode",
        "carried out",
        printed[start_at + 3],  # the usage line of the turn /approve started
        "▸ /model other (queued while the agent worked)",
        "model: other",
    ]
    assert [request.model for request in kit.adapter.requests] == ["scripted", "scripted"]
    assert "The plan is approved: carry it out." in str(kit.adapter.requests[-1].messages[-1])
    assert not session.queued
