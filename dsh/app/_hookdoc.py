"""The hook reference (``docs/hooks.md``), generated from ``dsh/hooks/_specs.py``.

``python -m dsh.app._hookdoc > docs/hooks.md`` regenerates it; a test fails when the committed file
differs, so a hook can never be undocumented. Each spec's ``:param name: text`` fields (Sphinx's)
are listed under it with the argument's annotation.
"""

from __future__ import annotations

import inspect
import re
import textwrap

from dsh.hooks import _specs as hookspecs
from dsh.hooks._caller import HOOK_STYLES

__all__ = ["render_hook_reference", "split_params"]

_STYLE_HELP = {
    "register": "sync; receives `register` (may take `harness`); registrations return disposers",
    "notify": "observers, awaited in call order; failures are logged and contained",
    "notify-sync": "hot-path observers; `def` only; failures are logged and contained",
    "waterfall": "return `None` (pass on), a new value (replace) or `Stop(value)` (end the chain)",
    "middleware": "gets `call_next`; `await call_next(x)` to continue, return without it to veto",
    "first": "the first non-`None` result wins",
    "parallel": "all run concurrently; failures are raised together after all settle",
}


_PARAM = re.compile(r":param (\w+): (\S.*)")


def split_params(doc: str) -> tuple[str, list[tuple[str, str]]]:
    """A cleaned spec docstring (:func:`inspect.cleandoc`) split into its prose and its
    ``:param name: text`` fields, in their order; the indented lines after a field continue it.
    """
    prose: list[str] = []
    params: list[tuple[str, str]] = []
    for line in doc.splitlines():
        found = _PARAM.fullmatch(line)
        if found is not None:
            params.append((found[1], found[2]))
        elif params and line.startswith(" "):
            name, text = params[-1]
            params[-1] = (name, f"{text} {line.strip()}")
        else:
            prose.append(line)
    return "\n".join(prose).strip(), params


def _signature(name: str) -> str:
    fn = getattr(hookspecs, name)
    params = ", ".join(inspect.signature(fn).parameters)
    return f"{name}({params})"


def _section(name: str, style: str) -> list[str]:
    """The reference of hook ``name``: its signature and style, its prose, its parameters."""
    fn = getattr(hookspecs, name)
    prose, params = split_params(inspect.cleandoc(fn.__doc__ or ""))
    annotations = {p.name: p.annotation for p in inspect.signature(fn).parameters.values()}
    return [
        "",
        f"## {name}",
        "",
        f"`{_signature(name)}` — **{style}**",
        "",
        prose,
        "",
        "Parameters:",
        "",
        *(
            _item(f"- `{param}` (`{annotations.get(param, '?')}`): ", text)
            for param, text in params
        ),
    ]


def _item(head: str, text: str) -> str:
    """A list item: ``head`` whole, then ``text`` wrapped at 100 columns (no word broken)."""
    return textwrap.fill(
        text,
        100,
        initial_indent=head,
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def render_hook_reference() -> str:
    lines = [
        "# Hook reference",
        "",
        "Generated from `dsh/hooks/_specs.py` by `python -m dsh.app._hookdoc`; do not edit",
        "by hand. Implementations take any subset of the arguments, by name. A plugin whose",
        "`session_hooks_active` attribute is false once the harness has started (a store",
        "configured off) is left out of the `dsh_session_*` hooks.",
        "",
        "| call style | meaning |",
        "|---|---|",
        *(f"| {style} | {meaning} |" for style, meaning in _STYLE_HELP.items()),
        "",
        "| hook | call style |",
        "|---|---|",
        *(f"| [`{name}`](#{name}) | {style} |" for name, style in HOOK_STYLES.items()),
    ]
    for name, style in HOOK_STYLES.items():
        lines += _section(name, style)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - a developer tool
    print(render_hook_reference(), end="")
