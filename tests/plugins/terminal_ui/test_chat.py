"""The agent side of ``dsh chat``: messages, steering, approvals and slash commands."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from dsh import DshError, Harness, ToolExecution
from dsh.loop import _recovery as recovery
from dsh.loop._loop import LoopAgent
from dsh.testing import MemoryStore, hang, text_response, tool_call_response
from dsh.values._events import SessionEvent, TurnStart
from dsh_plugins.compaction import CompactionPlugin
from dsh_plugins.terminal_ui.chat import ChatSession
from dsh_plugins.terminal_ui.render import Lines
from dsh_plugins.terminal_ui.style import Style
from dsh_plugins.terminal_ui.threads import Approval, Draft, Idle, Message
from tests.plugins.terminal_ui.conftest import Kit, chat_args, make_harness


class Chat:
    """A started chat session, what it printed and what it posted to the terminal."""

    def __init__(self, harness: Harness, *argv: str, terminal: bool = True) -> None:
        self.harness = harness
        self.out = io.StringIO()
        self.posted: list[Message] = []
        self.idle = asyncio.Event()
        self.asked = asyncio.Event()
        self.session = ChatSession(
            harness, chat_args(*argv), Lines(self.out, Style(False)), self._post, terminal=terminal
        )

    def _post(self, message: Message) -> None:
        self.posted.append(message)
        if isinstance(message, Idle):
            self.idle.set()
        if isinstance(message, Approval):
            self.asked.set()

    def printed(self) -> list[str]:
        return self.out.getvalue().splitlines()

    async def say(self, line: str) -> None:
        """Send a message and wait until the agent is idle again."""
        self.idle.clear()
        assert await self.session.submit(line) == "busy"
        await self.idle.wait()


@pytest.fixture
async def chats() -> AsyncIterator[list[Chat]]:
    made: list[Chat] = []
    yield made
    for chat in made:
        await chat.session.close()


async def start(
    chats: list[Chat], kit: Kit, *argv: str, terminal: bool = True, **harness: Any
) -> Chat:
    chat = Chat(make_harness(kit, **harness), *argv, terminal=terminal)
    chats.append(chat)
    await chat.session.start()
    return chat


async def test_start_says_hello_and_a_message_streams_with_usage(chats: list[Chat]) -> None:
    chat = await start(chats, Kit([text_response("Hi there")]))
    banner = chat.printed()
    assert banner[0] == f"dsh chat · scripted · session {chat.session.agent.session.id}"
    assert banner[1] == "/help for commands · Ctrl-C interrupts · Ctrl-D quits"
    await chat.say("hello")
    assert chat.printed()[2] == "Hi there"
    assert chat.printed()[3].startswith("── 10 in (0% cached) · 8 out · ")
    assert await chat.session.submit("   ") == "idle"


async def test_resuming_recaps_the_conversation(chats: list[Chat]) -> None:
    store = MemoryStore()
    first = await start(chats, Kit([text_response("Paris.")]), store=store)
    await first.say("capital of France?")
    await first.session.close()
    again = await start(chats, Kit(), "--continue", store=store)
    assert again.printed()[1:4] == [
        f"resumed {first.session.agent.session.id} · 1 turn",
        "  you: capital of France?",
        "  assistant: Paris.",
    ]


async def test_a_resumed_session_with_waiting_messages_is_answered_first(
    chats: list[Chat],
) -> None:
    store = MemoryStore()
    first = await start(chats, Kit([hang()]), store=store)
    agent = first.session.agent
    assert await first.session.submit("one") == "busy"
    await first.session.harness.llm.adapter_for("scripted").started.wait()  # type: ignore[attr-defined]
    agent.send("two")  # queued while busy: logged, so a resume finds it
    await agent.session.checkpoint()
    await first.session.close()
    kit = Kit([text_response("answer to two")])
    again = Chat(make_harness(kit, store=store), "--resume", agent.session.id)
    chats.append(again)
    assert await again.session.start() == "busy"
    await again.idle.wait()
    assert "answer to two" in again.printed()


async def test_steering_while_busy(chats: list[Chat]) -> None:
    kit = Kit([hang()])
    chat = await start(chats, kit)
    session = chat.session
    assert await session.submit("work") == "busy"
    await kit.adapter.started.wait()
    assert await session.steer("") == "busy"
    assert await session.steer("and also this") == "busy"
    assert chat.printed()[-1] == "↪ queued: and also this"  # acknowledged on its own line
    assert cast(LoopAgent, session.agent).inbox.has_steering
    assert await session.steer("/sessions") == "busy"
    assert chat.printed()[-1] == "⧗ /sessions: runs when the agent is done (Ctrl-C interrupts it)"
    assert await session.steer("/reasoning") == "busy"
    assert await session.steer("/exit") == "quit"
    await session.abort()
    await chat.idle.wait()
    assert "⏹ aborted (interrupted)" in chat.printed()
    # The steering left over does not start a turn: it goes back to the user as a draft, and
    # a resume would not restore it either.
    assert chat.printed()[-3:-1] == [
        "↩ and also this: not sent; it is back at the prompt: Enter sends it, Ctrl-C drops it",
        "▸ /sessions (queued while the agent worked)",  # and then it runs
    ]
    assert chat.printed()[-1].startswith(f"* {session.agent.session.id}  ")
    assert Draft("and also this") in chat.posted
    events = session.agent.session.events
    assert sum(e.type == "turn/start" for e in events) == 1
    assert [e.type for e in events if e.type.startswith("inbox/")] == [
        "inbox/queued",
        "inbox/withdrawn",
    ]
    assert recovery.pending_messages(events) == []


async def test_a_piped_chat_drops_steering_left_by_an_abort(chats: list[Chat]) -> None:
    kit = Kit([hang(), text_response("next")])
    chat = await start(chats, kit, terminal=False)
    assert not any("Ctrl-C" in line for line in chat.printed())  # no key hints for a pipe
    await chat.session.command("/help")
    assert not any("Ctrl-C" in line for line in chat.printed())
    assert await chat.session.submit("work") == "busy"
    await kit.adapter.started.wait()
    await chat.session.steer("and this")
    await chat.session.abort()
    await chat.idle.wait()
    assert chat.printed()[-1] == "↩ not sent: and this"
    assert not any(isinstance(m, Draft) for m in chat.posted)


async def test_only_the_users_abort_withdraws_steering(chats: list[Chat]) -> None:
    kit = Kit([hang(), text_response("answered the steering"), hang()])
    chat = await start(chats, kit)
    assert await chat.session.submit("work") == "busy"
    await kit.adapter.started.wait()
    await chat.session.steer("then this")
    chat.session.agent.abort("a budget ran out")  # not the user: the steering still runs
    await chat.idle.wait()
    assert "answered the steering" in chat.printed()
    chat.idle.clear()
    assert await chat.session.submit("more") == "busy"
    while len(kit.adapter.requests) < 3:  # noqa: ASYNC110 - a count, not an event, says it
        await asyncio.sleep(0.001)
    await chat.session.abort()  # the user's, with nothing left over: no draft to give back
    await chat.idle.wait()
    assert not any(isinstance(m, Draft) for m in chat.posted)


async def test_approvals_are_asked_through_the_terminal(chats: list[Chat]) -> None:
    script = [tool_call_response("c1", "word_count", {"text": "a b"}), text_response("ok")]
    chat = await start(chats, Kit(script))
    assert await chat.session.submit("count") == "busy"
    await chat.asked.wait()
    (approval,) = [m for m in chat.posted if isinstance(m, Approval)]
    assert approval.question == 'allow word_count {"text": "a b"}? [y/N] '
    approval.answer.set_result(True)
    await chat.idle.wait()
    assert "approval needed: the test policy asks" in chat.printed()
    assert "  ← 2" in chat.printed()


async def test_yes_approves_without_asking(chats: list[Chat]) -> None:
    script = [tool_call_response("c1", "word_count", {"text": "a b"}), text_response("ok")]
    chat = await start(chats, Kit(script), "--yes")
    await chat.say("count")
    assert "  ← 2" in chat.printed() and not any(isinstance(m, Approval) for m in chat.posted)


async def test_help_quit_unknown_and_reasoning(chats: list[Chat]) -> None:
    chat = await start(chats, Kit())
    session = chat.session
    assert await session.submit("/help") == "idle"
    assert "  /model [NAME]    show or switch the model" in chat.printed()
    assert "  /compact         summarise the older conversation to free context" in chat.printed()
    assert await session.submit("/quit") == "quit"
    assert await session.submit("/exit") == "quit"
    assert await session.submit("/nope x") == "idle"
    assert chat.printed()[-1] == "unknown command /nope; /help lists the commands"
    await session.submit("/reasoning")
    assert chat.printed()[-1] == "reasoning hidden" and not session.renderer.show_reasoning
    await session.submit("/reasoning")
    assert chat.printed()[-1] == "reasoning shown"


async def test_hide_reasoning_from_the_option_or_the_config(chats: list[Chat]) -> None:
    assert not (await start(chats, Kit(), "--hide-reasoning")).session.renderer.show_reasoning
    config = {"terminal_ui": {"model": "scripted", "show_reasoning": False}}
    assert not (await start(chats, Kit(), config=config)).session.renderer.show_reasoning


async def test_model_shows_and_switches(chats: list[Chat]) -> None:
    chat = await start(chats, Kit([text_response("hi")]))
    await chat.session.submit("/model")
    assert chat.printed()[-1] == "model: scripted (available: other, scripted)"
    await chat.session.submit("/model gpt-9")
    assert chat.printed()[-1].startswith("no adapter serves model 'gpt-9'")
    await chat.session.submit("/model other")
    assert chat.printed()[-1] == "model: other"
    await chat.say("hello")
    assert chat.harness.llm.adapter_for("other").requests[-1].model == "other"  # type: ignore[attr-defined]


async def test_sessions_lists_the_stored_ones(chats: list[Chat]) -> None:
    store = MemoryStore()
    chat = await start(chats, Kit([text_response("hi")]), store=store)
    await chat.session.submit("/sessions")
    assert chat.printed()[-1].startswith("no stored sessions")
    await chat.say("hello there")
    await chat.session.submit("/sessions")
    line = chat.printed()[-1]
    assert line.startswith(f"* {chat.session.agent.session.id}  ") and line.endswith("hello there")


async def test_resume_switches_sessions_and_back(chats: list[Chat]) -> None:
    store = MemoryStore()
    old = await start(chats, Kit([text_response("old answer")]), store=store)
    await old.say("old question")
    old_id = old.session.agent.session.id
    await old.session.close()
    chat = await start(chats, Kit([text_response("new answer")]), store=store)
    new_id = chat.session.agent.session.id
    session = chat.session
    await chat.say("new question")
    assert await session.submit("/resume") == "idle"
    assert chat.printed()[-1] == "usage: /resume SESSION_ID (/sessions lists them)"
    await session.submit(f"/resume {new_id}")
    assert chat.printed()[-1] == f"already in session {new_id}"
    await session.submit("/resume nope")
    assert chat.printed()[-1] == "no stored session 'nope' (/sessions lists them)"
    assert await session.submit(f"/resume {old_id}") == "idle"
    assert chat.printed()[-2:] == ["  you: old question", "  assistant: old answer"]
    assert session.agent.session.id == old_id
    await session.submit(f"/resume {new_id}")  # and back
    assert session.agent.session.id == new_id
    assert chat.printed()[-1] == "  assistant: new answer"


async def test_a_session_that_cannot_be_resumed_keeps_the_current_one(
    chats: list[Chat],
) -> None:
    store = MemoryStore()
    # seq must start at 0
    store.stored["broken"] = [SessionEvent("turn/start", 5, 0.0, TurnStart(1))]
    chat = await start(chats, Kit([text_response("hi")]), store=store)
    current = chat.session.agent.session.id
    await chat.session.submit("/resume broken")  # nothing stored yet: started afresh
    assert any(line.startswith("cannot resume 'broken': ") for line in chat.printed())
    assert chat.session.agent.session.id == current
    await chat.say("hello")
    await chat.session.submit("/resume broken")  # stored now: resumed
    assert chat.session.agent.session.id == current
    assert len(chat.session.agent.session.derive_messages()) == 2


async def test_compact(chats: list[Chat]) -> None:
    chat = await start(chats, Kit([text_response("a " * 50), text_response("summary")]))
    await chat.session.submit("/compact")
    assert chat.printed()[-1] == "compaction is not available: the compaction plugin is not loaded"

    class Broken:
        async def compact(self, agent: Any) -> bool:
            raise DshError("no model to summarise with")

    chat.harness.add_service("compaction", Broken())
    await chat.session.submit("/compact")
    assert chat.printed()[-1] == "compaction failed: no model to summarise with"


async def test_compact_with_the_compaction_plugin(chats: list[Chat]) -> None:
    answers = ["a long answer " * 40, "more", "the summary"]
    kit = Kit([text_response(answer) for answer in answers])
    config = {"compaction": {"keep_recent_tokens": 1}}
    chat = await start(chats, kit, config=config, extra=[CompactionPlugin()])
    await chat.session.submit("/compact")
    assert chat.printed()[-2:] == [
        "compacting the conversation (0 tokens)…",
        "nothing to compact: the conversation (0 tokens) is all recent enough to keep as it is",
    ]
    await chat.say("tell me a lot")
    await chat.say("and more")
    await chat.session.submit("/compact")
    before, after = chat.printed()[-2:]
    assert before.startswith("compacting the conversation (")
    assert re.fullmatch(
        r"compacted: ([\d,]+) → about ([\d,]+) tokens \(summarised the older conversation\)",
        after,
    )
    figures = re.findall(r"[\d,]+", after)
    assert int(figures[1].replace(",", "")) < int(figures[0].replace(",", ""))


async def test_an_approval_without_a_reason_just_asks(chats: list[Chat]) -> None:
    chat = await start(chats, Kit())
    asking = asyncio.ensure_future(
        chat.session.approve(ToolExecution("c1", "word_count", "{}", chat.session.agent), "")
    )
    await chat.asked.wait()
    (approval,) = chat.posted
    assert isinstance(approval, Approval)
    approval.answer.set_result(False)
    assert await asking is False
    assert not any("approval needed" in line for line in chat.printed())


async def test_the_recap_shows_the_words_not_the_tool_results(chats: list[Chat]) -> None:
    store = MemoryStore()
    script = [tool_call_response("c1", "word_count", {"text": "a b"}), text_response("Two.")]
    first = await start(chats, Kit(script), "--yes", store=store)
    await first.say("count a b")
    await first.session.close()
    again = await start(chats, Kit(), "--continue", store=store)
    assert again.printed()[2:] == ["  assistant: Two.", again.printed()[-1]]
