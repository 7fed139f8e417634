"""Each hook is declared once, in ``dsh/hooks/_specs.py``: every spec documents each of its
arguments (``:param name:``) and what its call style means for an implementer, and the
hand-written typed facade (:class:`dsh.hooks._caller.Hooks`) agrees with the specs.

Each rule is checked on the real modules and, to prove it can fail, on small fakes.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from dsh.app._hookdoc import split_params
from dsh.hooks import _specs as hookspecs
from dsh.hooks._caller import HookRuntime, Hooks
from dsh.hooks._markers import STYLES, spec, style_of
from dsh.values._agent import Agent
from dsh.values._chunks import StreamChunk

#: The runtime methods that call a hook of each style: the facade calls a hook through one of
#: its style's (``register`` hooks are called by the harness, and have no facade method).
CALLERS: dict[str, frozenset[str]] = {
    "register": frozenset(),
    "notify": frozenset({"notify"}),
    "notify-sync": frozenset({"notify_sync", "notifier"}),
    "waterfall": frozenset({"waterfall"}),
    "middleware": frozenset({"middleware"}),
    "first": frozenset({"first"}),
    "parallel": frozenset({"parallel"}),
}
CALLING = frozenset().union(*CALLERS.values())


def styles_of(specs: types.ModuleType) -> dict[str, str]:
    """Each hook of ``specs`` (its ``dsh_*`` functions) and its call style."""
    return {name: style_of(fn) for name, fn in vars(specs).items() if name.startswith("dsh_")}


def runtime_calls(method: Callable[..., Any]) -> list[tuple[str, str | None]]:
    """The ``self.runtime.<method>(<hook>, ...)`` calls in ``method``'s source, as (method,
    hook); hook ``None`` where the hook's name is not a string literal."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    calls: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and ast.unparse(node.func.value) == "self.runtime"
        ):
            first = node.args[0] if node.args else None
            value = first.value if isinstance(first, ast.Constant) else None
            calls.append((node.func.attr, value if isinstance(value, str) else None))
    return calls


def _parameters(fn: Callable[..., Any], drop_self: bool, middleware: bool) -> list[str]:
    """``fn``'s parameters as ``name: annotation`` (the annotation text). Of a middleware hook,
    the spec's ``call_next`` and the facade's ``terminal`` both read ``terminal``: the facade
    takes the terminal where the implementations take ``call_next``."""
    params = list(inspect.signature(fn).parameters.values())[1 if drop_self else 0 :]
    return [
        "terminal"
        if middleware and p.name in {"call_next", "terminal"}
        else f"{p.name}: {p.annotation}"
        for p in params
    ]


def _awaited(method: Any) -> bool:
    """Whether the caller of facade ``method`` awaits what it returns: an ``async def``, or a
    ``def`` that hands back the runtime's awaitable (annotated ``Awaitable[...]``)."""
    returns = str(inspect.signature(method).return_annotation)
    return inspect.iscoroutinefunction(method) or returns.startswith("Awaitable[")


def _method_problems(hook: str, style: str, spec_fn: Any, method: Any, where: str) -> list[str]:
    """How facade ``method`` (``where``) disagrees with the spec of ``hook``."""
    problems: list[str] = []
    middleware = style == "middleware"
    takes = _parameters(method, True, middleware)
    wants = _parameters(spec_fn, False, middleware)
    if takes != wants:
        problems.append(
            f"{hook}: {where} takes ({', '.join(takes)}), the spec ({', '.join(wants)})"
        )
    if _awaited(method) == (style == "notify-sync"):
        kind = "def" if style == "notify-sync" else "async def (or def returning an Awaitable)"
        problems.append(f"{hook}: {where} must be '{kind}' for a {style} hook")
    callers = CALLERS[style]
    if not any(
        hook == called_hook and called in callers for called, called_hook in runtime_calls(method)
    ):
        problems.append(
            f"{hook}: {where} never calls runtime.{'/'.join(sorted(callers))}({hook!r})"
        )
    return problems


def disagreements(specs: types.ModuleType, facade: type) -> list[str]:
    """Where the typed facade ``facade`` and the hook specs ``specs`` disagree.

    Every hook whose style is not ``register`` has a method named without ``dsh_`` that takes
    the spec's arguments (in order, with the same annotation text; a middleware hook's
    ``call_next`` is the facade's ``terminal``), is ``def`` for a notify-sync hook and
    ``async def`` (or a ``def`` returning an ``Awaitable``) otherwise, and calls the runtime
    with the hook's name through a method of its style. Every call of the runtime in the
    facade names a hook that has a spec, by a string literal; one that calls a hook (rather
    than asks about it, as ``observed`` does) is that hook's method and goes through a method
    of its style.
    """
    styles = styles_of(specs)
    methods = {name: getattr(facade, name) for name in dir(facade)}
    methods = {name: fn for name, fn in methods.items() if inspect.isfunction(fn)}
    problems: list[str] = []
    for hook, style in styles.items():
        if style == "register":
            continue
        name = hook.removeprefix("dsh_")
        where = f"{facade.__name__}.{name}"
        if name not in methods:
            problems.append(f"{hook}: {facade.__name__} has no method {name}")
            continue
        problems += _method_problems(hook, style, getattr(specs, hook), methods[name], where)
    for name, method in methods.items():
        where = f"{facade.__name__}.{name}"
        for called, target in runtime_calls(method):
            if target is None:
                problems.append(f"{where} calls runtime.{called} with a hook name not a literal")
            elif target not in styles:
                problems.append(f"{where} calls runtime.{called}({target!r}): no such hook")
            elif called not in CALLING:
                continue  # asks about the hook (``observed``), does not call it
            elif called not in CALLERS[styles[target]]:
                problems.append(
                    f"{where} calls {target} with runtime.{called}: it is a {styles[target]} hook"
                )
            elif name != target.removeprefix("dsh_"):
                problems.append(f"{where} calls {target}: only its method may call it")
    return problems


def documentation_problems(specs: types.ModuleType) -> list[str]:
    """Where a spec of ``specs`` does not document itself: a ``:param name:`` line for each
    of its arguments, in order, none for an argument it does not take, none malformed (left
    in the prose), and a paragraph saying what its call style means, starting ``Style:``."""
    problems: list[str] = []
    for hook, style in styles_of(specs).items():
        fn = getattr(specs, hook)
        prose, params = split_params(inspect.cleandoc(fn.__doc__ or ""))
        documented = [name for name, _ in params]
        takes = list(inspect.signature(fn).parameters)
        if documented != takes:
            problems.append(
                f"{hook} documents ({', '.join(documented)}), takes ({', '.join(takes)})"
            )
        if ":param" in prose:
            problems.append(f"{hook} has a malformed :param line")
        lead = f"{style.capitalize()}: "
        if not any(paragraph.startswith(lead) for paragraph in prose.split("\n\n")):
            problems.append(f"{hook} has no paragraph starting {lead!r}")
    return problems


# -- the real modules -----------------------------------------------------------------------------


def test_every_style_is_called_through_known_runtime_methods() -> None:
    assert set(CALLERS) == set(STYLES)
    assert all(callable(getattr(HookRuntime, method)) for method in CALLING)


def test_the_facade_agrees_with_the_specs() -> None:
    assert disagreements(hookspecs, Hooks) == []


def test_every_spec_documents_its_arguments_and_its_call_style() -> None:
    assert documentation_problems(hookspecs) == []


# -- fakes: the checks can fail ---------------------------------------------------------------


def fake_specs() -> types.ModuleType:
    """A small spec module: one hook of each style the fakes below exercise."""

    @spec("register")
    def dsh_fake_register(register: Callable[..., Any]) -> None:
        """Register: contribute.

        :param register: Adds one.
        """

    @spec("notify")
    def dsh_fake_seen(agent: Agent, turn: int) -> None:
        """Something was seen.

        Notify: every implementation is awaited.

        :param agent: The agent.
        :param turn: The turn,
            over two lines.
        """

    @spec("notify-sync")
    def dsh_fake_chunk(agent: Agent, chunk: StreamChunk) -> None:
        """Notify-sync: every implementation is called.

        :param agent: The agent.
        :param chunk: The chunk.
        """

    @spec("waterfall")
    def dsh_fake_value(agent: Agent, value: int) -> int | None:
        """Waterfall: each passes ``value`` on.

        :param agent: The agent.
        :param value: The value.
        """

    @spec("middleware")
    def dsh_fake_wrap(value: int, call_next: Callable[[int], Awaitable[int]]) -> Any:
        """Middleware: around the terminal.

        :param value: The value.
        :param call_next: The rest of the chain.
        """

    module = types.ModuleType("fake_specs")
    for fn in (dsh_fake_register, dsh_fake_seen, dsh_fake_chunk, dsh_fake_value, dsh_fake_wrap):
        setattr(module, fn.__name__, fn)
    return module


class Fake:
    """A facade that agrees with :func:`fake_specs`."""

    def __init__(self, runtime: HookRuntime) -> None:
        self.runtime = runtime

    async def fake_seen(self, agent: Agent, turn: int) -> None:
        await self.runtime.notify("dsh_fake_seen", {"agent": agent, "turn": turn})

    def fake_chunk(self, agent: Agent, chunk: StreamChunk) -> None:
        self.runtime.notifier("dsh_fake_chunk")(agent, chunk)

    async def fake_value(self, agent: Agent, value: int) -> int:
        kwargs = {"agent": agent, "value": value}
        return cast("int", await self.runtime.waterfall("dsh_fake_value", "value", kwargs))

    async def fake_wrap(self, value: int, terminal: Callable[[int], Awaitable[int]]) -> int:
        return cast("int", await self.runtime.middleware("dsh_fake_wrap", "value", value, terminal))

    def fake_observed(self, cls: type[Any]) -> bool:
        return self.runtime.observed("dsh_fake_chunk", cls)


class SwappedArguments(Fake):
    async def fake_seen(self, turn: int, agent: Agent) -> None:  # type: ignore[override]
        await self.runtime.notify("dsh_fake_seen", {"agent": agent, "turn": turn})


class OtherAnnotation(Fake):
    async def fake_value(self, agent: Agent, value: float) -> int:
        kwargs = {"agent": agent, "value": value}
        return cast("int", await self.runtime.waterfall("dsh_fake_value", "value", kwargs))


class MisspelledHook(Fake):
    async def fake_seen(self, agent: Agent, turn: int) -> None:
        await self.runtime.notify("dsh_fake_sen", {"agent": agent, "turn": turn})


class OtherStyle(Fake):
    async def fake_value(self, agent: Agent, value: int) -> int:
        await self.runtime.notify("dsh_fake_value", {"agent": agent, "value": value})
        return value


class NotAsync(Fake):
    def fake_seen(self, agent: Agent, turn: int) -> None:  # type: ignore[override]
        self.runtime.notify_sync("dsh_fake_seen", {"agent": agent, "turn": turn})


class NotSync(Fake):
    async def fake_chunk(self, agent: Agent, chunk: StreamChunk) -> None:  # type: ignore[override]
        self.runtime.notifier("dsh_fake_chunk")(agent, chunk)


class NoTerminal(Fake):
    async def fake_wrap(self, value: int) -> int:  # type: ignore[override]
        return cast("int", await self.runtime.middleware("dsh_fake_wrap", "value", value, abs))


class SecondCaller(Fake):
    async def see_again(self, agent: Agent) -> None:
        await self.runtime.notify("dsh_fake_seen", {"agent": agent, "turn": 0})


class RegisterCaller(Fake):
    async def fake_register(self) -> None:
        await self.runtime.notify("dsh_fake_register", {})


class HookInAVariable(Fake):
    async def fake_seen(self, agent: Agent, turn: int) -> None:
        hook = "dsh_fake_seen"
        await self.runtime.notify(hook, {"agent": agent, "turn": turn})


class Missing(Fake):
    fake_value = None  # type: ignore[assignment]


SEEN = "dsh_fake_seen: {0}.fake_seen"


@pytest.mark.parametrize(
    ("facade", "expected"),
    [
        (Fake, []),
        (
            SwappedArguments,
            [
                f"{SEEN.format('SwappedArguments')} takes (turn: int, agent: Agent), the spec "
                "(agent: Agent, turn: int)"
            ],
        ),
        (
            OtherAnnotation,
            [
                "dsh_fake_value: OtherAnnotation.fake_value takes (agent: Agent, value: float), "
                "the spec (agent: Agent, value: int)"
            ],
        ),
        (
            MisspelledHook,
            [
                f"{SEEN.format('MisspelledHook')} never calls runtime.notify('dsh_fake_seen')",
                "MisspelledHook.fake_seen calls runtime.notify('dsh_fake_sen'): no such hook",
            ],
        ),
        (
            OtherStyle,
            [
                "dsh_fake_value: OtherStyle.fake_value never calls "
                "runtime.waterfall('dsh_fake_value')",
                "OtherStyle.fake_value calls dsh_fake_value with runtime.notify: it is a "
                "waterfall hook",
            ],
        ),
        (
            NotAsync,
            [
                f"{SEEN.format('NotAsync')} must be 'async def (or def returning an Awaitable)' "
                "for a notify hook",
                f"{SEEN.format('NotAsync')} never calls runtime.notify('dsh_fake_seen')",
                "NotAsync.fake_seen calls dsh_fake_seen with runtime.notify_sync: it is a "
                "notify hook",
            ],
        ),
        (
            NotSync,
            ["dsh_fake_chunk: NotSync.fake_chunk must be 'def' for a notify-sync hook"],
        ),
        (
            NoTerminal,
            [
                "dsh_fake_wrap: NoTerminal.fake_wrap takes (value: int), the spec "
                "(value: int, terminal)"
            ],
        ),
        (SecondCaller, ["SecondCaller.see_again calls dsh_fake_seen: only its method may call it"]),
        (
            RegisterCaller,
            [
                "RegisterCaller.fake_register calls dsh_fake_register with runtime.notify: it is "
                "a register hook"
            ],
        ),
        (
            HookInAVariable,
            [
                f"{SEEN.format('HookInAVariable')} never calls runtime.notify('dsh_fake_seen')",
                "HookInAVariable.fake_seen calls runtime.notify with a hook name not a literal",
            ],
        ),
        (Missing, ["dsh_fake_value: Missing has no method fake_value"]),
    ],
)
def test_a_facade_that_disagrees_with_the_specs_is_reported(
    facade: type, expected: list[str]
) -> None:
    assert disagreements(fake_specs(), facade) == expected


def test_a_notify_sync_hook_may_be_called_through_notify_sync() -> None:
    class Plain(Fake):
        def fake_chunk(self, agent: Agent, chunk: StreamChunk) -> None:
            self.runtime.notify_sync("dsh_fake_chunk", {"agent": agent, "chunk": chunk})

    assert disagreements(fake_specs(), Plain) == []


def test_the_real_facade_is_checked_against_the_specs_it_is_given() -> None:
    specs = fake_specs()
    problems = disagreements(specs, Hooks)
    assert "dsh_fake_seen: Hooks has no method fake_seen" in problems
    assert "Hooks.agent_created calls runtime.notify('dsh_agent_created'): no such hook" in problems


def test_the_fake_specs_are_documented() -> None:
    assert documentation_problems(fake_specs()) == []


def test_a_spec_that_does_not_document_itself_is_reported() -> None:
    @spec("first")
    def dsh_fake_ask(question: str, limit: int) -> str | None:
        """Ask.

        Waterfall: the wrong style.

        :param question: The question.
        :param answer: Not an argument.
        :param  limit: Malformed.
        """

    @spec("parallel")
    def dsh_fake_all(session: object) -> None:
        """No style, no parameters."""

    module = types.ModuleType("bad_specs")
    module.dsh_fake_ask = dsh_fake_ask  # type: ignore[attr-defined]
    module.dsh_fake_all = dsh_fake_all  # type: ignore[attr-defined]
    assert documentation_problems(module) == [
        "dsh_fake_ask documents (question, answer), takes (question, limit)",
        "dsh_fake_ask has a malformed :param line",
        "dsh_fake_ask has no paragraph starting 'First: '",
        "dsh_fake_all documents (), takes (session)",
        "dsh_fake_all has no paragraph starting 'Parallel: '",
    ]


def test_split_params_reads_fields_and_their_continuations() -> None:
    doc = inspect.cleandoc(
        """Prose.

        An example::

            indented prose

        :param a: First,
            continued.
        :param b: Second.
        """
    )
    prose, params = split_params(doc)
    assert prose == "Prose.\n\nAn example::\n\n    indented prose"
    assert params == [("a", "First, continued."), ("b", "Second.")]
