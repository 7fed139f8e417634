"""The agent side of ``dsh chat``: it runs on the loop thread and does what the terminal thread
asks (a message, a steering line, a slash command, an abort), and posts back when the agent is
idle or a tool call needs the user's approval."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Literal

from attrs import evolve

from dsh.plugin import (
    Agent,
    AgentOptions,
    DshError,
    Harness,
    ToolExecution,
    TurnAborted,
    TurnEndReason,
    UsageMeter,
    price_book,
    resolve_alias,
    text_of,
)
from dsh_plugins.terminal_ui import startup
from dsh_plugins.terminal_ui.progress import Progress, wants_progress
from dsh_plugins.terminal_ui.render import Lines, Renderer, one_line
from dsh_plugins.terminal_ui.threads import Approval, Draft, Idle, Message, OutputClosed
from dsh_plugins.terminal_ui.view import OUTPUT_CLOSED, AgentView, ApprovalPolicy

__all__ = ["AGENT_ID", "Action", "ChatSession"]

AGENT_ID = "chat"
#: What the terminal does next: prompt again, follow the working agent, or quit.
Action = Literal["idle", "busy", "quit"]
SlashCommand = Callable[[str], Awaitable[Action]]

KEYS = (
    "Ctrl-C interrupts the agent (twice: quit) · type while it works to steer it · "
    "end a line with \\ to continue it · Ctrl-D quits"
)
#: Why a chat aborts a turn when the user presses Ctrl-C.
USER_ABORT = "interrupted"
#: The slash commands that run at once while the agent works: they leave the agent alone
#: (``/help``, ``/reasoning``, ``/quit``) or only change how its next calls are judged
#: (``/plan``: a user who asked for plan mode must not get a write the next moment). The
#: others wait until the turn ends (:meth:`ChatSession.steer`).
AT_ONCE = frozenset({"/quit", "/exit", "/help", "/reasoning", "/plan"})


class ChatSession:
    """One chat: the harness, the agent it talks to, and the slash commands. ``terminal``: a
    person types at a terminal (key hints are for them; a piped script gets none)."""

    def __init__(
        self,
        harness: Harness,
        args: argparse.Namespace,
        out: Lines,
        post: Callable[[Message], None],
        *,
        terminal: bool = True,
    ) -> None:
        self.harness = harness
        self.args = args
        self.post = post
        self.style = out.style
        self.terminal = terminal
        self.out = out
        out.on_closed = self._output_closed
        self._watching_out = contextlib.ExitStack()
        show_reasoning = startup.section(harness).show_reasoning and not args.hide_reasoning
        self.renderer = Renderer(
            out,
            out,
            show_reasoning=show_reasoning,
            progress=Progress(out, enabled=wants_progress(out.stream)),
        )
        meter = UsageMeter(price_book(harness))
        self.view = AgentView(self.renderer, meter, show_usage=True, after_turn=self._after_turn)
        self.approvals = ApprovalPolicy(self.approve)
        self._agent: Agent | None = None
        self._watching: set[asyncio.Task[None]] = set()
        #: Slash commands typed while the agent worked, run in order once it is idle.
        self.queued: deque[str] = deque()
        self.commands: dict[str, tuple[SlashCommand, str]] = {
            "/help": (self._help, "what you can type"),
            "/compact": (self._compact, "summarise the older conversation to free context"),
            "/model": (self._model, "[NAME]  show or switch the model"),
            "/sessions": (self._sessions, "list stored sessions"),
            "/resume": (self._resume, "ID  switch to a stored session"),
            "/rewind": (
                self._rewind,
                "N [--in-place] [--force]  put the files back as before turn N; fork there",
            ),
            "/reasoning": (self._reasoning, "show or hide the model's reasoning"),
            "/plan": (self._plan, "plan first: only read-only tools run until /approve"),
            "/approve": (self._approve, "approve the plan: tools may write, the agent goes on"),
            "/quit": (self._quit, "leave (also /exit, Ctrl-D)"),
        }

    @property
    def agent(self) -> Agent:
        assert self._agent is not None, "start() first"
        return self._agent

    def note(self, text: str) -> None:
        self.renderer.note(text)

    # -- lifetime ----------------------------------------------------------------------------
    async def start(self) -> Action:
        """Start the harness and the agent; say hello. ``busy`` when a resumed session had
        messages waiting, which the agent now answers."""
        for plugin in (self.view, self.approvals):
            self.harness.plugins.register(plugin, name=f"terminal_ui.chat.{type(plugin).__name__}")
        await self.harness.start()
        options = startup.agent_options(self.harness, self.args)
        resumed = bool(self.args.resume or self.args.continue_latest)
        self._attach(await startup.open_agent(self.harness, AGENT_ID, self.args, options))
        # A pipe's reader that goes away while nothing is written (a stalled model) is noticed.
        self._watching_out.enter_context(self.out.reader_watched())
        self.note(
            f"{self.style.bold('dsh chat')} · {options.model} · session {self.agent.session.id}"
        )
        if resumed:
            self._recap()
        if self.terminal:
            self.note(self.style.dim("/help for commands · Ctrl-C interrupts · Ctrl-D quits"))
        return self._follow_if_busy()

    async def close(self) -> None:
        """Close the harness: a running turn ends ``disposed``, sessions are flushed."""
        self._watching_out.close()
        await self.harness.close()

    def resume_hint(self) -> str | None:
        """How to come back to this conversation, once it has a turn and a store keeps it."""
        agent = self._agent
        if agent is None or not self.harness.sessions.persistent:
            return None
        if not agent.session.last_turn:
            return None
        return f"resume this chat: dsh chat --resume {agent.session.id}"

    def _output_closed(self) -> None:
        """Nobody reads the chat any more (``dsh chat < script | head``): the running turn
        stops, and the terminal ends the chat."""
        self.agent.abort(OUTPUT_CLOSED)  # nothing is written, or watched, before it is attached
        self.post(OutputClosed())

    def _attach(self, agent: Agent) -> None:
        self._agent = agent
        self.view.watch(agent)
        self.approvals.watch(agent)

    def _follow_if_busy(self) -> Action:
        agent = self.agent
        if agent.idle:
            return "idle"
        task = asyncio.ensure_future(self._post_when_idle(agent))
        self._watching.add(task)
        task.add_done_callback(self._watching.discard)
        return "busy"

    async def _post_when_idle(self, agent: Agent) -> None:
        """Once the agent is idle, run the commands queued meanwhile (in order), then tell the
        terminal. A command that starts a turn (``/approve``) leaves the rest queued for that
        turn's end (its own watcher runs them)."""
        await agent.wait_idle()
        while self.queued:
            text = self.queued.popleft()
            self.note(self.style.dim(f"▸ {text} (queued while the agent worked)"))
            if await self.command(text) == "busy":
                return
            await self.agent.wait_idle()  # a line typed meanwhile may have started a turn
        self.post(Idle())

    def _recap(self) -> None:
        """Where a resumed conversation stands: its size and its last exchange."""
        session = self.agent.session
        turns = session.last_turn
        self.note(self.style.dim(f"resumed {session.id} · {turns} turn{'s' if turns != 1 else ''}"))
        for message in session.derive_messages()[-2:]:
            text = text_of(message.content)
            if text and message.role in ("user", "assistant"):
                who = "you" if message.role == "user" else "assistant"
                self.note(self.style.dim(f"  {who}: {one_line(text, 200)}"))

    # -- what the terminal hands over --------------------------------------------------------
    async def submit(self, line: str) -> Action:
        """A line typed at the prompt: a slash command, or a message that starts a turn."""
        text = line.strip()
        if not text:
            return "idle"
        if text.startswith("/"):
            return await self.command(text)
        self.agent.send(text)
        return self._follow_if_busy()

    async def steer(self, line: str) -> Action:
        """A line typed while the agent works: steering for its next step. A slash command of
        :data:`AT_ONCE` (and an unknown one, to say so) runs now; the others are queued and run
        in order when the agent is idle again, and the screen says so."""
        text = line.strip()
        if not text.startswith("/"):
            if text:
                self.agent.steer(text)
                self.note(self.style.dim(f"↪ queued: {one_line(text)}"))
            return "busy"
        name = text.split()[0]
        if name in AT_ONCE or name not in self.commands:
            action = await self.command(text)
            return "quit" if action == "quit" else "busy"
        self.queued.append(text)
        self.note(self.style.dim(f"⧗ {text}: runs when the agent is done (Ctrl-C interrupts it)"))
        return "busy"

    async def abort(self) -> None:
        self.agent.abort(USER_ABORT)

    def _after_turn(self, agent: Agent, reason: TurnEndReason) -> None:
        """After the user's abort, steering that has not reached the model goes back to the
        user as a draft: it must not start a turn on its own."""
        if not (isinstance(reason, TurnAborted) and reason.reason == USER_ABORT):
            return
        left = [text_of(message.content) for message in agent.withdraw_steering()]
        if not left:
            return
        draft = " ".join(text for text in left if text)
        if self.terminal:
            hint = "not sent; it is back at the prompt: Enter sends it, Ctrl-C drops it"
            self.note(self.style.dim(f"↩ {one_line(draft, 80)}: {hint}"))
            self.post(Draft(draft))
        else:
            self.note(self.style.dim(f"↩ not sent: {one_line(draft, 80)}"))

    async def approve(self, execution: ToolExecution, reason: str) -> bool:
        """Ask the user (through the terminal thread) whether a tool call may run."""
        if self.args.yes:
            return True
        self.renderer.progress.stop()  # the question is written by the terminal thread
        if reason:
            self.note(self.style.yellow(f"approval needed: {reason}"))
        self.renderer.end_lines()
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
        call = f"{execution.name} {one_line(execution.arguments, 120)}"
        self.post(Approval(f"allow {call}? [y/N] ", answer))
        return await asyncio.wrap_future(answer)

    # -- slash commands ----------------------------------------------------------------------
    async def command(self, text: str) -> Action:
        name, _, arg = text.partition(" ")
        found = self.commands.get("/quit" if name == "/exit" else name)
        if found is None:
            self.note(self.style.yellow(f"unknown command {name}; /help lists the commands"))
            return "idle"
        return await found[0](arg.strip())

    async def _help(self, arg: str) -> Action:
        for name, (_, help_) in self.commands.items():
            usage, _, rest = help_.partition("  ")
            shown = f"{name} {usage}" if rest else name
            self.note(f"  {shown:<16} {rest or help_}")
        if self.terminal:
            self.note(self.style.dim(KEYS))
        return "idle"

    async def _quit(self, arg: str) -> Action:
        return "quit"

    async def _reasoning(self, arg: str) -> Action:
        self.renderer.show_reasoning = not self.renderer.show_reasoning
        shown = "shown" if self.renderer.show_reasoning else "hidden"
        self.note(self.style.dim(f"reasoning {shown}"))
        return "idle"

    async def _model(self, arg: str) -> Action:
        if not arg:
            models = ", ".join(startup.usable_models(self.harness))
            available = self.style.dim(f"(available: {models})")
            self.note(f"model: {self.agent.options.model} {available}")
            return "idle"
        model = resolve_alias(arg)
        problem = startup.model_problem(self.harness, model)
        if problem:
            self.note(self.style.red(problem))
            return "idle"
        self.agent.options = evolve(self.agent.options, model=model)
        self.note(f"model: {model}")
        return "idle"

    async def _plan(self, arg: str) -> Action:
        self.agent.set_permission_mode("plan")
        when = "" if self.agent.idle else ", from the agent's next tool call on"
        self.note(f"plan mode: only read-only tools run{when}; /approve carries out the plan")
        return "idle"

    async def _approve(self, arg: str) -> Action:
        """Plan mode ends (``workspace-write``), and the agent carries out its plan."""
        self.agent.set_permission_mode("workspace-write")
        self.note("plan approved: workspace-write mode")
        self.agent.send("The plan is approved: carry it out.")
        return self._follow_if_busy()

    async def _sessions(self, arg: str) -> Action:
        stored = await self.harness.sessions.stored(limit=20)
        if not stored:
            self.note("no stored sessions (is a persistence plugin enabled? see `dsh plugins`)")
        for summary in stored:
            current = "*" if summary.id == self.agent.session.id else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.updated))
            facts = self.style.dim(f"{when} · {summary.events} events")
            self.note(f"{current} {summary.id}  {facts}  {one_line(summary.title, 60)}")
        return "idle"

    async def _resume(self, arg: str) -> Action:
        if not arg:
            self.note("usage: /resume SESSION_ID (/sessions lists them)")
            return "idle"
        if arg == self.agent.session.id:
            self.note(f"already in session {arg}")
            return "idle"
        if await self.harness.sessions.load(arg) is None:
            self.note(self.style.red(f"no stored session {arg!r} (/sessions lists them)"))
            return "idle"
        previous, options = self.agent.session.id, self.agent.options
        await self.agent.dispose()
        resume = self.harness.agent_loop.resume
        try:
            agent: Agent = await resume(arg, options, AGENT_ID)
        except DshError as exc:
            self.note(self.style.red(f"cannot resume {arg!r}: {exc}"))
            agent = await self._reopen(previous, options)
        self._attach(agent)
        self._recap()
        return self._follow_if_busy()

    async def _rewind(self, arg: str) -> Action:
        words = arg.split()
        flags = {word for word in words if word.startswith("--")}
        numbers = [word for word in words if not word.startswith("--")]
        if len(numbers) != 1 or not numbers[0].isdigit() or flags - {"--in-place", "--force"}:
            self.note("usage: /rewind N [--in-place] [--force] (N: the turn to go back before)")
            return "idle"
        try:
            report = await self.agent.rewind(
                int(numbers[0]), in_place="--in-place" in flags, force="--force" in flags
            )
        except DshError as exc:
            self.note(self.style.red(f"cannot rewind: {exc}"))
            return "idle"
        for line in report.lines():
            self.note(line)
        return "idle"

    async def _reopen(self, session_id: str, options: AgentOptions) -> Agent:
        """Back to the session a failed ``/resume`` left: resumed when a store has it, else
        (no turn ran, so nothing was stored yet) started afresh under the same id."""
        if await self.harness.sessions.load(session_id) is None:
            return self.harness.agent_loop.create(AGENT_ID, options, session_id=session_id)
        return await self.harness.agent_loop.resume(session_id, options, AGENT_ID)

    async def _compact(self, arg: str) -> Action:
        compaction = self.harness.services.get("compaction")
        if compaction is None:
            self.note("compaction is not available: the compaction plugin is not loaded")
            return "idle"
        try:
            # What it did (or that there was nothing to do) is told by its compaction events.
            await compaction.compact(self.agent)
        except DshError as exc:
            self.note(self.style.red(f"compaction failed: {exc}"))
        return "idle"
