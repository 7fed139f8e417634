"""Public test kit: a scripted adapter and its script entries, and an in-memory store.

``ScriptedAdapter(script)`` plays one entry per model call and records every request it got.
Entries: ``text_response``, ``reasoning_response``, ``tool_call_response``,
``max_tokens_response``, ``error_response`` (in-band ``finish{error}``), ``raise_error`` (the
adapter raises), ``hang()`` (waits until cancelled), a list of chunks, or a callable taking the
request and returning (or awaiting to) any of these (:mod:`dsh.testing.scripted`).
``MemoryStore`` is a complete session store without a disk (:mod:`dsh.testing.memory`).
Hypothesis strategies live in :mod:`dsh.testing.strategies`, the pytest fixtures in
:mod:`dsh.testing.pytest_plugin` (loaded automatically by pytest), the mock DeepSeek server in
:mod:`dsh.testing.mockserver`.

The names are imported when first used: pytest loads the fixtures' plugin (a module of this
package) in every project where dsh is installed, and that must not import dsh's core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh._lazy import imported

if TYPE_CHECKING:
    from dsh.testing.memory import MemoryStore
    from dsh.testing.scripted import (
        Hang,
        RaiseError,
        ScriptedAdapter,
        ScriptEntry,
        error_response,
        hang,
        max_tokens_response,
        raise_error,
        reasoning_response,
        text_response,
        tool_call_response,
        tool_calls_response,
    )

__all__ = [
    "Hang",
    "MemoryStore",
    "RaiseError",
    "ScriptEntry",
    "ScriptedAdapter",
    "error_response",
    "hang",
    "max_tokens_response",
    "raise_error",
    "reasoning_response",
    "text_response",
    "tool_call_response",
    "tool_calls_response",
]

_HOMES = {
    "MemoryStore": "dsh.testing.memory",
    "Hang": "dsh.testing.scripted",
    "RaiseError": "dsh.testing.scripted",
    "ScriptEntry": "dsh.testing.scripted",
    "ScriptedAdapter": "dsh.testing.scripted",
    "error_response": "dsh.testing.scripted",
    "hang": "dsh.testing.scripted",
    "max_tokens_response": "dsh.testing.scripted",
    "raise_error": "dsh.testing.scripted",
    "reasoning_response": "dsh.testing.scripted",
    "text_response": "dsh.testing.scripted",
    "tool_call_response": "dsh.testing.scripted",
    "tool_calls_response": "dsh.testing.scripted",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)
