"""``dsh approvals``: list the calls parked for approval, allow or deny one (the JSONL default
store; the command runs in this process, its harness given a scripted model and the tool)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh import AgentOptions, Harness, Tool, hookimpl
from dsh.cli import main
from dsh.testing import ScriptedAdapter, text_response, tool_calls_response
from dsh.values._events import SessionEvent, ToolResultEvent, TurnEnd
from dsh.values._rare_events import ApprovalDecided
from dsh.values._request import ToolSchema
from dsh_plugins.persistence_jsonl import default_dir

RUNS: list[str] = []
DEFER = {"permissions": {"approval": "defer"}}


async def touch(args: Any, execution: Any) -> str:
    RUNS.append(execution.call_id)
    return "touched"


class Tools:
    @hookimpl
    def dsh_register_tools(self, register: Any) -> None:
        register(Tool(ToolSchema("touch", "t"), touch, effect="execute"))


pytestmark = pytest.mark.usefixtures("cli_workdir")


@pytest.fixture(autouse=True)
def _no_runs() -> None:
    RUNS.clear()


def the_cli_gets(monkeypatch: pytest.MonkeyPatch, script: list[Any]) -> ScriptedAdapter:
    """Give the CLI's harness the ``touch`` tool and a model ``m`` playing ``script``."""
    adapter = ScriptedAdapter(script)

    class Models:
        @hookimpl
        def dsh_register_llm_adapters(self, register: Any) -> None:
            register(["m"], adapter)

    from dsh.app import _harness as harness_module

    original = harness_module.Harness.__init__

    def with_plugins(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["plugins"] = [Models(), Tools()]
        original(self, *args, **kwargs)

    monkeypatch.setattr(harness_module.Harness, "__init__", with_plugins)
    return adapter


async def park(agent_id: str, *tools: str) -> None:
    """Store session ``<agent_id>-session`` parked on calls ``c0``, ``c1``... of ``tools``."""
    async with Harness(config=DEFER, plugins=[Tools()]) as h:
        calls: list[tuple[str, str, dict[str, Any]]] = [
            (f"c{n}", name, {}) for n, name in enumerate(tools)
        ]
        h.llm.register_adapter(["m"], ScriptedAdapter([tool_calls_response(calls)]))
        agent = h.agent_loop.create(
            agent_id, AgentOptions(model="m"), session_id=f"{agent_id}-session"
        )
        agent.send("go")
        await agent.wait_idle()
        assert agent.status == "waiting"


async def stored(session_id: str) -> list[SessionEvent]:
    async with Harness() as h:
        events = await h.sessions.load(session_id)
    assert events is not None
    return events


def out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_lists_the_parked_calls_of_every_session_or_of_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["approvals"]) == 0
    assert out(capsys) == ["no calls wait for approval"]
    asyncio.run(park("a", "touch"))
    asyncio.run(park("b", "touch", "touch"))
    assert main(["approvals"]) == 0
    lines = out(capsys)
    assert lines[0].split() == ["SESSION", "CALL", "TOOL", "REQUESTED", "BY", "ARGUMENTS"]
    rows = [line.split()[:3] for line in lines[1::2]]
    assert sorted(rows) == [
        ["a-session", "c0", "touch"],
        ["b-session", "c0", "touch"],
        ["b-session", "c1", "touch"],
    ]
    assert lines[2].strip() == 'touch runs commands and the permissions mode is "workspace-write"'
    assert main(["approvals", "a-session"]) == 0
    assert [line.split()[:2] for line in out(capsys)[1::2]] == [["a-session", "c0"]]
    assert RUNS == []


def test_allow_runs_the_call_and_the_turn_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch"))
    adapter = the_cli_gets(monkeypatch, [text_response("done")])
    assert main(["approvals", "allow", "a-session", "c0"]) == 0
    lines = out(capsys)
    assert lines[0] == "allowed c0 of a-session"
    assert lines[-1].split()[1:] == ["turn/end", "turn", "1", "completed"]
    assert RUNS == ["c0"]
    assert len(adapter.requests) == 1
    assert main(["approvals", "a-session"]) == 0
    assert out(capsys) == ["no calls wait for approval in a-session"]


def test_deny_tells_the_model_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch"))
    adapter = the_cli_gets(monkeypatch, [text_response("ok, not then")])
    assert main(["approvals", "deny", "a-session", "c0", "--reason", "not today"]) == 0
    assert out(capsys)[0] == "denied c0 of a-session"
    assert RUNS == []
    [request] = adapter.requests
    result = request.messages[-1].content[0]
    assert "not today" in result.content[0].text  # type: ignore[union-attr]


def test_a_turn_waiting_on_another_call_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch", "touch"))
    the_cli_gets(monkeypatch, [])
    assert main(["approvals", "allow", "a-session", "c1"]) == 0
    assert out(capsys)[-1] == "the turn still waits for a decision on c0"
    assert RUNS == []
    assert main(["approvals", "allow", "a-session", "c1"]) == 1
    assert capsys.readouterr().err == (
        "dsh approvals: call 'c1' of session 'a-session' was already decided: allowed by "
        "approver (allowed)\n"
    )


def test_a_turn_that_fails_after_the_decision_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch"))
    the_cli_gets(monkeypatch, [])  # the model has nothing more to say: the turn fails
    assert main(["approvals", "allow", "a-session", "c0"]) == 1
    assert RUNS == ["c0"]
    events = asyncio.run(stored("a-session"))
    assert [e.data.reason.type for e in events if isinstance(e.data, TurnEnd)] == ["error"]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["approvals", "nope"], 2, "no stored session 'nope'"),
        (["approvals", "allow", "nope", "c0"], 2, "no stored session 'nope'"),
        (
            ["approvals", "allow", "a-session", "c9"],
            2,
            "no call 'c9' waits for approval in session 'a-session' (waiting: c0; see "
            "'dsh approvals a-session')",
        ),
        (["approvals", "allow", "a-session"], 2, "usage: dsh approvals [SESSION]"),
        (["approvals", "a-session", "c0"], 2, "usage: dsh approvals [SESSION]"),
        (
            ["approvals", "allow", "a-session", "c0", "--model", "gone"],
            1,
            "goes on with model 'gone', which no adapter serves: pass --model",
        ),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    message: str,
) -> None:
    asyncio.run(park("a", "touch"))
    before = asyncio.run(stored("a-session"))
    the_cli_gets(monkeypatch, [])
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert asyncio.run(stored("a-session")) == before
    assert RUNS == []


def test_a_session_another_process_holds_is_refused_clearly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch"))
    the_cli_gets(monkeypatch, [])

    async def held() -> int:
        async with Harness() as other:
            await other.agent_loop.resume("a-session", AgentOptions(model="m"))
            return await asyncio.to_thread(main, ["approvals", "allow", "a-session", "c0"])

    assert asyncio.run(held()) == 1
    err = capsys.readouterr().err
    assert "another process holds the session" in err
    assert RUNS == []


def test_a_session_written_meanwhile_is_read_again(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(park("a", "touch"))
    the_cli_gets(monkeypatch, [text_response("done")])
    from dsh.app import _harness as harness_module

    loads = 0
    original = harness_module.Harness.start

    async def start(self: Any) -> None:
        await original(self)
        real = self.sessions.load

        async def load(session_id: str) -> Any:
            nonlocal loads
            loads += 1
            events = await real(session_id)
            if loads == 2:  # another decider wins between the resume's read and its claim
                async with Harness(config=DEFER, plugins=[Tools()]) as other:
                    other.llm.register_adapter(["m2"], ScriptedAdapter([text_response("x")]))
                    agent = await other.agent_loop.resume("a-session", AgentOptions(model="m2"))
                    await agent.decide("c0", allow=False, reason="the other one")
                    await agent.wait_idle()
            return events

        self.sessions.load = load

    monkeypatch.setattr(harness_module.Harness, "start", start)
    assert main(["approvals", "allow", "a-session", "c0"]) == 1
    assert capsys.readouterr().err == (
        "dsh approvals: call 'c0' of session 'a-session' was already decided: denied by "
        "approver (the other one)\n"
    )
    events = asyncio.run(stored("a-session"))
    assert [e.data.by for e in events if isinstance(e.data, ApprovalDecided)] == ["approver"]
    assert [e.data.code for e in events if isinstance(e.data, ToolResultEvent)] == ["DENIED"]
    assert RUNS == []


def test_a_damaged_session_is_named_and_the_others_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(park("a", "touch"))
    asyncio.run(park("b", "touch"))
    damaged = default_dir() / "b-session.jsonl"
    damaged.write_text(damaged.read_text().replace('"type"', '"tipe"', 3))
    assert main(["approvals"]) == 0
    captured = capsys.readouterr()
    assert [line.split()[0] for line in captured.out.splitlines()[1::2]] == ["a-session"]
    assert captured.err.startswith("dsh approvals: b-session: ")
