"""Scenarios by name, and how a queued scenario spec becomes the answer to a request.

A spec is a name from :data:`SCENARIOS`, a mapping ``{"name": ..., **parameters}`` (what the
``/mock/queue`` endpoint takes), a :class:`Scenario`, or a callable that builds one from the
request body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from dsh.testing.mockserver import faults, transcripts
from dsh.testing.mockserver.conversation import scripted, thinking_enabled
from dsh.testing.mockserver.scenario import Scenario, reply

__all__ = [
    "SCENARIOS",
    "ScenarioSpec",
    "check_spec",
    "delta_text",
    "deltas",
    "long_text",
    "resolve",
    "tool_loop",
]

ScenarioSpec = str | Mapping[str, Any] | Scenario | Callable[[Mapping[str, Any]], Scenario]


def long_text(body: Mapping[str, Any], chunks: int = 20_000) -> Scenario:
    """A text answer of exactly ``chunks`` content deltas (for benchmarks)."""
    text = " ".join(f"w{i}" for i in range(chunks))
    return reply(model=str(body.get("model", "deepseek-v4-flash")), text=text, name="long-text")


DELTA_WORDS = ("héj", "wöl", "日本語", "abc", "ü12", "ok!")


def delta_text(chunks: int) -> str:
    """``chunks`` word-sized pieces of about four characters, non-ASCII among them."""
    return "".join(f" {DELTA_WORDS[i % len(DELTA_WORDS)]}" for i in range(chunks))


def deltas(body: Mapping[str, Any], chunks: int = 20_000) -> Scenario:
    """A text answer of exactly ``chunks`` content deltas of ~4 characters, some non-ASCII."""
    model = str(body.get("model", "deepseek-v4-flash"))
    return reply(model=model, text=delta_text(chunks), name="deltas")


def tool_loop(
    body: Mapping[str, Any], steps: int = 5, tool: str = "echo", reasoning: str | None = None
) -> Scenario:
    """Call ``tool`` until the conversation holds ``steps`` tool results, then answer: the
    same answer to the same conversation, so any number of agents can share the queue.
    ``reasoning`` (thinking mode): what each step reasons first; ``""`` streams only the
    empty opening ``reasoning_content`` (the turn the API still wants passed back). Left
    unset, a request in thinking mode gets a short reasoning before each answer, as the API
    gives, and one with thinking off gets none."""
    done = sum(1 for message in body.get("messages", ()) if message.get("role") == "tool")
    model = str(body.get("model", "deepseek-v4-flash"))
    if reasoning is None and "messages" in body and thinking_enabled(body):
        reasoning = f"{done} tool result(s) so far; {steps} wanted."
    if done >= steps:
        text = f"finished after {done} steps"
        return reply(model=model, reasoning=reasoning, text=text, name="tool-loop")
    arguments = json.dumps({"text": f"step {done}"})
    call = (f"call_{done}", tool, arguments)
    return reply(model=model, reasoning=reasoning, tool_calls=(call,), name="tool-loop")


def _fixed(build: Callable[..., Scenario]) -> Callable[..., Scenario]:
    """A factory that ignores the request body."""
    return lambda body, **params: build(**params)


SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "scripted": scripted,
    "long-text": long_text,
    "deltas": deltas,
    "tool-loop": tool_loop,
    # deepseek-wire.md §4 transcripts and §6 shapes
    "text": _fixed(transcripts.text),
    "text-v4": _fixed(transcripts.text_v4),
    "thinking": _fixed(transcripts.thinking),
    "thinking-length": _fixed(transcripts.thinking_length),
    "tool-calls-parallel": _fixed(transcripts.tool_calls_parallel),
    "tool-call-thinking": _fixed(transcripts.tool_call_thinking),
    "tool-calls-one-chunk": _fixed(transcripts.tool_calls_one_chunk),
    "usage-trailing": _fixed(transcripts.usage_trailing),
    "usage-running": _fixed(transcripts.usage_running),
    "keep-alive": _fixed(transcripts.keep_alive),
    "finish-with-content": _fixed(transcripts.finish_with_content),
    "finish-without-delta": _fixed(transcripts.finish_without_delta),
    "reasoning-only": _fixed(transcripts.reasoning_only),
    "data-after-done": _fixed(transcripts.data_after_done),
    # framing only proxies send
    "framing-fields": _fixed(transcripts.framing_fields),
    "done-whitespace": _fixed(transcripts.done_whitespace),
    "usage-choices-null": _fixed(transcripts.usage_choices_null),
    "usage-no-choices": _fixed(transcripts.usage_no_choices),
    "invalid-utf8": _fixed(transcripts.invalid_utf8),
    "queued": _fixed(faults.queued),
    # faults
    "bad-request": _fixed(faults.bad_request),
    "context-length": _fixed(faults.context_length),
    "auth": _fixed(faults.auth),
    "insufficient-balance": _fixed(faults.insufficient_balance),
    "unprocessable": _fixed(faults.unprocessable),
    "rate-limit": _fixed(faults.rate_limit),
    "server-error": _fixed(faults.server_error),
    "overloaded": _fixed(faults.overloaded),
    "disconnect": _fixed(faults.disconnect),
    "stall": _fixed(faults.stall),
    "keep-alive-stall": _fixed(faults.keep_alive_stall),
    "malformed-json": _fixed(faults.malformed_json),
    "missing-done": _fixed(faults.missing_done),
    "empty": _fixed(faults.empty),
    "content-filter": _fixed(faults.content_filter),
    "insufficient-resource": _fixed(faults.insufficient_resource),
    "error-event": _fixed(faults.error_event),
    "unknown-finish": _fixed(faults.unknown_finish),
    "queued-stall": _fixed(faults.queued_stall),
    "json-error-200": _fixed(faults.json_error_200),
    "completion-200": _fixed(faults.completion_200),
    "html-200": _fixed(faults.html_200),
    "empty-200": _fixed(faults.empty_200),
}


def check_spec(spec: ScenarioSpec) -> None:
    """Fail now, not at request time, on a scenario name nobody knows."""
    if isinstance(spec, str | Mapping):
        name = spec if isinstance(spec, str) else spec.get("name")
        if name not in SCENARIOS:
            known = ", ".join(sorted(SCENARIOS))
            raise ValueError(f"unknown mock scenario {name!r}; known scenarios: {known}")


def resolve(spec: ScenarioSpec, body: Mapping[str, Any]) -> Scenario:
    """The scenario ``spec`` stands for, for the request ``body``."""
    if isinstance(spec, Scenario):
        return spec
    if isinstance(spec, str):
        return SCENARIOS[spec](body)
    if isinstance(spec, Mapping):
        params = dict(spec)
        return SCENARIOS[params.pop("name")](body, **params)
    return spec(body)
