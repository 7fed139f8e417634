"""The hook reference (``docs/hooks.md``), generated from ``dsh/hookspecs.py``.

``python -m dsh.hookdoc > docs/hooks.md`` regenerates it; a test fails when the committed file
differs, so a hook can never be undocumented.
"""

from __future__ import annotations

import inspect

from dsh import hookspecs
from dsh.hooks import HOOK_STYLES

__all__ = ["render_hook_reference"]

_STYLE_HELP = {
    "register": "sync; receives `register` (may take `harness`); registrations return disposers",
    "notify": "observers, awaited in call order; failures are logged and contained",
    "notify-sync": "hot-path observers; `def` only; failures are logged and contained",
    "waterfall": "return `None` (pass on), a new value (replace) or `Stop(value)` (end the chain)",
    "middleware": "gets `call_next`; `await call_next(x)` to continue, return without it to veto",
    "first": "the first non-`None` result wins",
    "parallel": "all run concurrently; failures are raised together after all settle",
}


def _signature(name: str) -> str:
    fn = getattr(hookspecs, name)
    params = ", ".join(inspect.signature(fn).parameters)
    return f"{name}({params})"


def render_hook_reference() -> str:
    lines = [
        "# Hook reference",
        "",
        "Generated from `dsh/hookspecs.py` by `python -m dsh.hookdoc`; do not edit by hand.",
        "Implementations take any subset of the arguments, by name. A plugin whose",
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
        doc = inspect.cleandoc(getattr(hookspecs, name).__doc__ or "")
        lines += ["", f"## {name}", "", f"`{_signature(name)}` — **{style}**", "", doc]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - a developer tool
    print(render_hook_reference(), end="")
