"""``dsh run``: the answer on stdout, the rest on stderr or JSON lines, exit codes, Ctrl-C."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh import AgentOptions, Harness
from dsh.testing import (
    MemoryStore,
    error_response,
    hang,
    max_tokens_response,
    reasoning_response,
    text_response,
    tool_call_response,
)
from dsh.testing.mockserver import MockServer
from dsh.values._content import Text
from dsh_plugins.terminal_ui import headless
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args


class Piped(io.StringIO):
    """Stdin that is not a terminal."""

    def isatty(self) -> bool:
        return False


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def run(
    harness: Harness, *argv: str, stdin: io.StringIO | None = None
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(harness, run_args(*argv), stdin or Terminal(), out, err)
    return code, out.getvalue(), err.getvalue()


async def test_the_answer_goes_to_stdout_the_reasoning_to_stderr() -> None:
    harness = make_harness(Kit([reasoning_response("Easy.", "Hello!")]))
    code, out, err = await run(harness, "hi")
    assert (code, out, err) == (0, "Hello!\n", "thinking: Easy.\n")


async def test_usage_and_hidden_reasoning() -> None:
    harness = make_harness(Kit([reasoning_response("Easy.", "Hello!")]))
    code, out, err = await run(harness, "hi", "--usage", "--hide-reasoning")
    assert (code, out) == (0, "Hello!\n")
    assert err.startswith("── 10 in (0% cached) · 11 out (5 reasoning) · ")


@pytest.mark.parametrize(
    ("script", "code", "note"),
    [
        (
            [error_response("SERVER", "down")],
            1,
            "error: the model's server failed (down) [SERVER]",
        ),
        ([max_tokens_response("Trunc")], 3, "stopped: the answer reached the output token limit"),
    ],
)
async def test_the_exit_code_says_how_the_turn_ended(
    script: list[Any], code: int, note: str
) -> None:
    result, _, err = await run(make_harness(Kit(script)), "hi")
    assert result == code and note in err


async def test_tool_calls_are_denied_without_yes_and_run_with_it() -> None:
    script = [tool_call_response("c1", "word_count", {"text": "a b c"}), text_response("ok")]
    code, out, err = await run(make_harness(Kit(script)), "count")
    assert (code, out) == (0, "ok\n")
    assert err.splitlines() == [
        '→ word_count {"text": "a b c"}',
        'denied: word_count {"text": "a b c"} (the test policy asks); --yes approves',
        "  ✗ Error: the user said no",
    ]
    script = [tool_call_response("c1", "word_count", {"text": "a b c"}), text_response("ok")]
    code, out, err = await run(make_harness(Kit(script)), "count", "--yes")
    assert err.splitlines()[1] == "  ← 3"


async def test_without_yes_the_model_is_told_nobody_could_be_asked() -> None:
    """``dsh run`` asks nobody: the permissions plugin's denial must not say the user declined."""
    from dsh_plugins.permissions import PermissionsPlugin

    script = [tool_call_response("c1", "word_count", {"text": "a b"}), text_response("ok")]
    kit = Kit(script, ask=False)
    config = {"permissions": {"mode": "read-only"}}  # word_count's effect "other" asks
    harness = make_harness(kit, config, extra=[PermissionsPlugin()])
    code, _, _ = await run(harness, "count")
    said = repr(kit.adapter.requests[1].messages[-1])  # the tool's result, sent back
    assert code == 0 and "was not approved: nobody could be asked" in said
    assert "declined" not in said


async def test_with_approval_defer_a_run_parks_and_says_how_to_decide() -> None:
    from dsh_plugins.permissions import PermissionsPlugin

    script = [tool_call_response("c1", "word_count", {"text": "a b"}), text_response("ok")]
    kit = Kit(script, ask=False)
    config = {"permissions": {"mode": "read-only", "approval": "defer"}}
    store = MemoryStore()
    harness = make_harness(kit, config, store=store, extra=[PermissionsPlugin()])
    code, out, err = await run(harness, "count")
    assert code == headless.PARKED == 4 and out == ""
    [session] = store.stored
    assert err.splitlines() == [
        '→ word_count {"text": "a b"}',
        'waiting for approval: word_count {"text": "a b"} (word_count does something dsh '
        'cannot classify and the permissions mode is "read-only")',
        f"  dsh approvals allow|deny {session} c1",
    ]
    assert len(kit.adapter.requests) == 1  # the turn waits: the model was not asked again


async def test_a_run_whose_sub_agent_parks_a_call_parks_too() -> None:
    """The lead's ``task`` call waits for a sub-agent whose call waits for a decision: the run
    stops there (it would wait forever) and says how to decide the child's call."""
    from dsh_plugins.permissions import PermissionsPlugin
    from dsh_plugins.subagents import SubagentsPlugin

    task = {"description": "count", "prompt": "count the words"}
    script = [
        tool_call_response("t1", "task", task),  # the lead's first step
        tool_call_response("c1", "word_count", {"text": "a b"}),  # the child's first step
    ]
    kit = Kit(script, ask=False)
    # The task tool may run; word_count (whose effect dsh cannot classify) asks.
    rules = [{"tool": "task", "action": "allow"}]
    config = {"permissions": {"mode": "read-only", "approval": "defer", "rules": rules}}
    store = MemoryStore()
    extra = [PermissionsPlugin(), SubagentsPlugin()]
    harness = make_harness(kit, config, store=store, extra=extra)
    code, out, err = await run(harness, "count")
    assert code == headless.PARKED and out == ""
    [child] = [s for s in store.stored if ".task-" in s]
    assert err.splitlines()[-4:] == [
        "  ✗ Error: tool call cancelled while running (the agent was disposed)",
        'waiting for approval: word_count {"text": "a b"} (word_count does something dsh '
        'cannot classify and the permissions mode is "read-only")',
        f"  dsh approvals allow|deny {child} c1",
        "  (sub-agent run.task-1's call: deciding it finishes that agent's turn in its own "
        "session; this run's task call for it has ended)",
    ]
    assert len(kit.adapter.requests) == 2


async def test_json_streams_the_session_events() -> None:
    harness = make_harness(Kit([text_response("yo")]))
    code, out, err = await run(harness, "--json", "hi")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and err == ""
    assert [e["type"] for e in events][:3] == ["user/message", "turn/start", "step/start"]
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"type": "completed"}
    assert [e["seq"] for e in events] == list(range(len(events)))


async def test_the_prompt_may_come_from_stdin() -> None:
    kit = Kit([text_response("a"), text_response("b")])
    assert (await run(make_harness(kit), "-", stdin=Piped("  from stdin\n")))[0] == 0
    assert (await run(make_harness(kit), stdin=Piped("piped")))[0] == 0
    sent = [request.messages[-1].content for request in kit.adapter.requests]
    assert sent == [(Text("from stdin"),), (Text("piped"),)]


async def test_problems_before_the_turn_exit_2() -> None:
    harness = make_harness(Kit())
    assert await run(harness) == (2, "", "dsh run: give a prompt (or '-' to read it from stdin)\n")
    code, _, err = await run(harness, "hi", "--model", "gpt-9")
    assert code == 2 and err.startswith("dsh run: no adapter serves model 'gpt-9'")
    code, _, err = await run(make_harness(Kit()), "hi", "--resume", "nope")
    assert code == 2 and err.startswith("dsh run: no stored session 'nope'")


async def test_ctrl_c_aborts_the_turn() -> None:
    kit = Kit([hang()])
    harness = make_harness(kit)
    running = asyncio.create_task(run(harness, "hi"))
    await kit.adapter.started.wait()
    signal.raise_signal(signal.SIGINT)
    code, _, err = await running
    assert code == 130 and "⏹ aborted (interrupted)" in err
    assert signal.getsignal(signal.SIGINT) is not None  # the previous handler is back


async def test_a_second_ctrl_c_disposes_the_agent() -> None:
    kit = Kit([hang()])
    running = asyncio.create_task(run(make_harness(kit), "hi", "--json"))
    await kit.adapter.started.wait()
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)
    code, out, _ = await running
    assert code == 130
    assert json.loads(out.splitlines()[-1])["data"]["reason"]["type"] in ("aborted", "disposed")


async def test_a_closed_output_aborts_the_turn() -> None:
    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    kit = Kit([text_response("never read")])
    code = await headless.run(make_harness(kit), run_args("hi"), Terminal(), Gone(), io.StringIO())
    assert code == 130


def test_off_the_main_thread_ctrl_c_is_left_to_the_host() -> None:
    harness = make_harness(Kit([text_response("fine")]))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(asyncio.run(run(harness, "hi"))[0]))
    thread.start()
    thread.join()
    assert codes == [0]


async def test_no_turn_since_the_prompt_counts_as_disposed() -> None:
    async with make_harness(Kit()) as harness:
        agent = harness.agent_loop.create("a", AgentOptions("scripted"))
        assert headless.outcome(agent, 0) == 130


async def test_resuming_continues_the_conversation() -> None:
    store = MemoryStore()
    kit = Kit([text_response("first"), text_response("second")])
    assert (await run(make_harness(kit, store=store), "one"))[0] == 0
    (session_id,) = store.stored
    code, out, _ = await run(make_harness(kit, store=store), "two", "--resume", session_id)
    assert (code, out) == (0, "second\n")
    assert len(kit.adapter.requests[-1].messages) == 3


async def test_through_the_cli_harness_against_the_mock_server(
    mock_server: MockServer, tmp_path: Path
) -> None:
    config = tmp_path / "dsh.toml"
    config.write_text(f'[llm_deepseek]\nbase_url = "{mock_server.url}"\napi_key = "k"\n')
    mock_server.queue("text")  # the same answer whatever tools the installed plugins offer
    harness = Harness(config=config)
    harness.load()
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(harness, run_args("hello"), Terminal(), out, err)
    assert (code, out.getvalue()) == (0, "Hello! How can I help you today? 😊\n")
    assert mock_server.requests[0].body["model"] == "deepseek-flash"


async def test_a_retried_stream_leaves_only_the_answer_in_a_redirected_stdout(
    mock_server: MockServer, tmp_path: Path
) -> None:
    """``dsh run 'hi' > answer.md`` while the first attempt stalls after ``Partial answer``:
    the retry's answer is the whole file, and stderr says why it took longer."""
    config = tmp_path / "dsh.toml"
    config.write_text(
        f'[llm_deepseek]\nbase_url = "{mock_server.url}"\napi_key = "k"\nidle_timeout_s = 0.5\n'
        "[retry]\nbase_delay_s = 0.05\n"
    )
    mock_server.queue("stall", "text")
    answer = tmp_path / "answer.md"
    boot = "import sys; from dsh.cli import main; sys.exit(main(sys.argv[1:]))"
    with answer.open("w") as out:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", boot, "--config", str(config), "run", "hi",
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ, DSH_DISABLE_PLUGINS="permissions"),
        )  # fmt: skip
        _, err = await asyncio.wait_for(child.communicate(), 30)
    assert child.returncode == 0, err.decode()
    assert answer.read_text() == "Hello! How can I help you today? 😊\n"
    notes = err.decode()
    assert "↻ the model stopped answering — retrying in " in notes and "(2/5)" in notes
    assert "Partial answer" not in notes


async def test_connection_failures_are_retried_visibly_then_told_in_words(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "dsh.toml"
    config.write_text(
        f'[llm_deepseek]\nbase_url = "http://127.0.0.1:{port}"\napi_key = "k"\n'
        "[retry]\nbase_delay_s = 0.01\nmax_attempts = 3\n"
    )
    harness = Harness(config=config)
    harness.load()
    out, err = io.StringIO(), io.StringIO()
    code = await headless.run(harness, run_args("hello"), Terminal(), out, err)
    notes = err.getvalue().splitlines()
    retries = [line for line in notes if line.startswith("↻ ")]
    assert code == 1 and out.getvalue() == ""
    assert [line.split(" — ")[0] for line in retries] == [
        "↻ cannot connect to the model's server"
    ] * 2
    assert retries[0].endswith("(2/3)") and retries[1].endswith("(3/3)")
    error = next(line for line in notes if line.startswith("error: "))
    assert error.startswith("error: cannot connect to the model's server (")
    assert error.endswith("[TRANSPORT]") and "Error:" not in error
