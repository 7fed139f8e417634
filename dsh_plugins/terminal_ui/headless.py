"""``dsh run``: one prompt, headless. The answer streams to stdout, reasoning and tool activity
to stderr; ``--json`` streams the session events as JSON lines instead. The exit code says how
the turn ended (:data:`EXIT_CODES`). When stdout is not a terminal, a step's text is written
once its stream succeeded, so ``dsh run ... > answer.md`` holds the answer and nothing of an
attempt that was retried; a pipe is watched meanwhile, and its reader going away aborts the
turn at once (:class:`~.view.OutputGuard`), not when the held text is finally written.
``--schema`` asks for a typed answer (:mod:`dsh.loop._output`): stdout gets the validated JSON
alone, like ``llm --schema``; so does ``--agent`` with a profile that names an ``output_type``."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from attrs import evolve

from dsh.plugin import (
    Agent,
    DshError,
    ErrorEvent,
    Harness,
    OutputError,
    PendingApproval,
    ToolExecution,
    TurnAborted,
    TurnCompleted,
    TurnDisposed,
    TurnEnd,
    TurnEndReason,
    TurnError,
    TurnInterrupted,
    TurnMaxTokens,
    UsageMeter,
    load_schema,
    price_book,
    unstructure,
)
from dsh_plugins.terminal_ui import RUN_HELP, startup
from dsh_plugins.terminal_ui.options import run as configure
from dsh_plugins.terminal_ui.progress import Progress, wants_progress
from dsh_plugins.terminal_ui.render import Lines, Renderer, one_line
from dsh_plugins.terminal_ui.style import Style, wants_color
from dsh_plugins.terminal_ui.view import AgentView, ApprovalPolicy, JsonFeed, OutputGuard

__all__ = [
    "EXIT_CODES",
    "HELP",
    "PARKED",
    "USAGE_ERROR",
    "configure",
    "exit_code",
    "outcome",
    "run",
]

HELP = RUN_HELP

#: Exit code by turn end reason (its type tag: ``completed``, ``error``...).
EXIT_CODES = {
    TurnCompleted.type: 0,
    TurnError.type: 1,
    TurnMaxTokens.type: 3,
    TurnAborted.type: 130,
    TurnInterrupted.type: 130,
    TurnDisposed.type: 130,
}
#: Exit code when the command cannot start: bad options, unknown model, no API key, no session.
USAGE_ERROR = 2
#: Exit code when the turn is parked: a tool call waits for a decision (``approval = "defer"``)
#: that ``dsh approvals allow|deny`` or any host that resumes the session can give.
PARKED = 4


def exit_code(reason: TurnEndReason) -> int:
    return EXIT_CODES[reason.type]


def read_prompt(given: str | None, stdin: TextIO) -> str:
    """The prompt: the argument, or stdin for ``-`` (and for no argument when stdin is piped)."""
    if given == "-" or (given is None and not stdin.isatty()):
        return stdin.read().strip()
    return (given or "").strip()


async def run(
    harness: Harness,
    args: argparse.Namespace,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Run the prompt as one turn of an agent; returns the exit code."""
    harness.load()
    startup.quiet_logs(args)
    prompt = read_prompt(args.prompt, stdin)
    problem = "give a prompt (or '-' to read it from stdin)" if not prompt else None
    problem = problem or startup.options_problem(harness, args)
    if problem:
        print(f"dsh run: {problem}", file=err)
        return USAGE_ERROR
    # A typed answer (--schema, or an --agent whose profile names an output_type): stdout
    # holds the validated JSON alone, the answer as text goes to stderr.
    profile = startup.configured_agent(harness, args.agent)
    typed = bool(args.schema) or (profile is not None and profile.output_type is not None)
    answer = Lines(err if typed else out, Style(wants_color(out)))
    notes = Lines(err, Style(wants_color(err)))
    stdout = Lines(out, answer.style) if typed else answer
    watchers = _plugins(harness, args, answer, notes, stdout)
    async with harness:
        try:
            options = startup.agent_options(harness, args)
            if args.schema:
                options = evolve(options, output_type=load_schema(args.schema))
            agent = await startup.open_agent(harness, "run", args, options)
        except DshError as exc:
            print(f"dsh run: {exc}", file=err)
            return USAGE_ERROR
        for watcher in watchers:
            watcher.watch(agent)
        sent_at = len(agent.session)
        with _interrupts_abort(agent), stdout.reader_watched():
            agent.send(prompt)
            await agent.wait_idle()
        # Read while the agent lives: its live sub-agents' calls are among them.
        parked = agent.pending_approvals() if agent.status == "waiting" else None
    if parked is not None:  # said once the harness closed, after what closing it logged
        return _parked(agent, parked, notes)
    code = outcome(agent, sent_at)
    return await _print_result(agent, out, err) if typed and code == 0 else code


def _parked(agent: Agent, parked: list[PendingApproval], notes: Lines) -> int:
    """The turn waits for decisions: say on which calls, and how to give them. A sub-agent's
    call is decided in the sub-agent's session, which then finishes its turn there; the task
    call that waited for it ended when this run did."""
    for pending in parked:
        call = f"{pending.name} {one_line(pending.summary, 80)}"
        notes.line(notes.style.yellow(f"waiting for approval: {call} ({pending.reason})"))
        notes.line(f"  dsh approvals allow|deny {pending.session_id} {pending.call_id}")
        if pending.session_id != agent.session.id:
            notes.line(
                f"  (sub-agent {pending.agent_id}'s call: deciding it finishes that agent's "
                "turn in its own session; this run's task call for it has ended)"
            )
    return PARKED


async def _print_result(agent: Agent, out: TextIO, err: TextIO) -> int:
    """A typed run: the validated answer as JSON on stdout (a profile's attrs class, dataclass
    or TypedDict as its JSON object), or why there is none."""
    try:
        value = await agent.result()
    except OutputError as exc:
        print(f"dsh run: {exc}", file=err)
        return EXIT_CODES[TurnError.type]
    print(json.dumps(unstructure(value), ensure_ascii=False), file=out)
    return 0


def _plugins(
    harness: Harness, args: argparse.Namespace, answer: Lines, notes: Lines, stdout: Lines
) -> list[AgentView | JsonFeed | ApprovalPolicy | OutputGuard]:
    """Register the output (text or JSON), the approval policy and the guard that aborts the
    turn when the reader of ``stdout`` goes away, for this run."""

    async def decide(execution: ToolExecution, reason: str) -> bool | None:
        if args.yes:
            return True
        if _defers(harness):
            return None  # nobody here can decide: the call is parked, and said so at the end
        call = f"{execution.name} {one_line(execution.arguments, 80)}"
        notes.line(notes.style.yellow(f"denied: {call} ({reason}); --yes approves"))
        return None  # nobody could be asked: denied, and the model is told so

    output: AgentView | JsonFeed
    if args.json:
        output = JsonFeed(answer, harness.events)
    else:
        # An answer going to a file gets a step's text only once the step's stream succeeded:
        # an attempt abandoned for a retry must not end up in it.
        renderer = Renderer(
            answer,
            notes,
            show_reasoning=not args.hide_reasoning,
            hold_answer=not answer.stream.isatty(),
            progress=Progress(notes, enabled=wants_progress(notes.stream)),
        )
        meter = UsageMeter(price_book(harness))
        output = AgentView(renderer, meter, show_usage=args.usage)
    plugins = [output, ApprovalPolicy(decide), OutputGuard(stdout)]
    for plugin in plugins:
        harness.plugins.register(plugin, name=f"terminal_ui.run.{type(plugin).__name__}")
    return plugins


def _defers(harness: Harness) -> bool:
    """Whether a call nobody approves is parked (``[permissions] approval = "defer"``)."""
    permissions = harness.config.dump().get("permissions") or {}
    return bool(permissions.get("approval") == "defer")


def outcome(agent: Agent, since: int) -> int:
    """The exit code of the last turn that ran since event ``since`` (that of ``disposed``
    when none did: the agent was disposed first). An ``error`` logged after its end (the
    session could not be saved) makes a completed turn a failure."""
    events = agent.session.events[since:]
    ends = [(n, e.data) for n, e in enumerate(events) if isinstance(e.data, TurnEnd)]
    if not ends:
        return EXIT_CODES[TurnDisposed.type]
    last, end = ends[-1]
    unsaved = any(isinstance(e.data, ErrorEvent) for e in events[last + 1 :])
    return exit_code(end.reason) or (EXIT_CODES[TurnError.type] if unsaved else 0)


@contextmanager
def _interrupts_abort(agent: Agent) -> Iterator[None]:
    """Ctrl-C aborts the running step (the turn ends ``aborted``); a second one disposes the
    agent; a third is an ordinary ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        # Signal handlers belong to the main thread: a host running us elsewhere keeps its own.
        yield
        return
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    presses: list[asyncio.Task[None] | None] = []

    def interrupt() -> None:
        if not presses:
            presses.append(None)
            agent.abort("interrupted")
        else:
            presses.append(loop.create_task(agent.dispose()))
            loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous or signal.default_int_handler)
