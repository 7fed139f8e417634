"""The Anthropic Messages format of the mock server: the same scenarios, on the other wire.

A :class:`Scenario` is written in DeepSeek's chat-completions format; :func:`encode` rewrites it
as the Messages API would have sent the same answer, so every scenario and every fault of the
OpenAI-format endpoint is served on ``POST /anthropic/v1/messages`` too:

* the chunks become ``message_start``, a ``ping``, one ``content_block_start`` / ``_delta`` /
  ``_stop`` run per block (thinking, text, then each tool call: the Messages API streams blocks
  one after the other, so tool calls whose fragments interleave on the OpenAI wire arrive call
  by call), ``message_delta`` (the stop reason and usage) and ``message_stop`` for ``[DONE]``;
* a response in thinking mode (its first chunk carries ``reasoning_content: ""``) opens a
  thinking block even when it reasons nothing; so does a tool-using answer that starts without
  reasoning, served to a request in thinking mode (a transcript written without reasoning, such as
  ``tool-calls-parallel``), so that a correct client can pass the turn back; every thinking
  block ends with a
  ``signature_delta``: :func:`signature_of` its text, which :mod:`.anthropic_checks` verifies
  when the block comes back;
* finish reasons map to stop reasons (``stop`` → ``end_turn``, ``tool_calls`` → ``tool_use``,
  ``length`` → ``max_tokens``, ``content_filter`` → ``refusal``, others kept as they are),
  except ``insufficient_system_resource``, which becomes an in-stream ``overloaded_error``;
* an error object in the stream becomes an ``error`` event; a chunk cut off in its JSON stays
  cut off; keep-alive comments and the ending (close, disconnect, stall) are kept; what followed
  ``[DONE]`` follows ``message_stop`` unchanged;
* usage: ``input_tokens`` is the uncached prompt, ``cache_read_input_tokens`` the cache hits
  (``message_start``), ``output_tokens`` the completion (``message_delta``);
* error bodies become ``{"type": "error", "error": {"type", "message"}}`` with the status kept;
  a non-streamed chat completion becomes a non-streamed message; other bodies stay as they are.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from attrs import evolve

from dsh.testing.mockserver.scenario import Scenario
from dsh.testing.mockserver.wire import dumps, frame_data, frame_payload, payload_of

__all__ = [
    "ERROR_TYPES",
    "STOP_REASONS",
    "encode",
    "error_body",
    "event_frame",
    "message_json",
    "signature_of",
]

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
#: OpenAI-style error types (by a word they contain) → the Messages API's.
ERROR_TYPES = (
    ("auth", "authentication_error"),
    ("rate_limit", "rate_limit_error"),
    ("unavailable", "overloaded_error"),
    ("server", "api_error"),
    ("invalid_request", "invalid_request_error"),
)
_OVERLOADED = "insufficient_system_resource"
_BROKEN = (
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"ty\n\n'
)


def signature_of(thinking: str) -> str:
    """The signature the mock gives a thinking block (and requires back with it)."""
    digest = hashlib.sha256(f"dsh-mock-thinking:{thinking}".encode("utf-8", "surrogatepass"))
    return base64.b64encode(digest.digest()).decode()


def event_frame(payload: dict[str, Any]) -> str:
    """One named SSE event, as the Messages API sends them."""
    return f"event: {payload['type']}\ndata: {dumps(payload)}\n\n"


def error_type(openai_type: str) -> str:
    """The Messages API error type for an OpenAI-style one (``api_error`` if none fits)."""
    said = openai_type.lower()
    return next((mapped for word, mapped in ERROR_TYPES if word in said), "api_error")


def error_body(error: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style error object as the Messages API's error body."""
    kind = error_type(str(error.get("type")))
    return {"type": "error", "error": {"type": kind, "message": error.get("message")}}


def encode(scenario: Scenario, thinking: bool = False) -> Scenario:
    """``scenario`` as the Messages API would send it to a request in thinking mode (or not)."""
    if scenario.status != 200 or not scenario.event_stream:
        return evolve(scenario, body=_encode_body(scenario.body))
    return evolve(scenario, frames=tuple(_Encoder(scenario.frames, thinking).frames()))


def _encode_body(body: str) -> str:
    try:
        decoded = json.loads(body)
    except ValueError:
        return body
    if not isinstance(decoded, dict):
        return body
    if isinstance(decoded.get("error"), dict):
        return dumps(error_body(decoded["error"]))
    if decoded.get("object") == "chat.completion":
        return dumps(_message_of_completion(decoded))
    return body


def _message_of_completion(completion: dict[str, Any]) -> dict[str, Any]:
    choice = completion["choices"][0]
    content = [{"type": "text", "text": choice["message"].get("content") or ""}]
    usage = completion.get("usage") or {}
    return {
        "id": f"msg_{completion.get('id')}",
        "type": "message",
        "role": "assistant",
        "model": completion.get("model"),
        "content": content,
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason"), choice.get("finish_reason")),
        "stop_sequence": None,
        "usage": _usage(usage),
    }


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    prompt = int(usage.get("prompt_tokens") or 0)
    hits = usage.get("prompt_cache_hit_tokens")
    if hits is None:
        hits = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": prompt - int(hits),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": int(hits),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


class _Encoder:
    """Rewrites one streamed answer's frames."""

    def __init__(self, frames: tuple[str, ...], thinking: bool) -> None:
        self._frames = frames
        self._thinking_mode = thinking
        self._payloads = [p for p in map(frame_payload, frames) if isinstance(p, dict)]
        self._usage: dict[str, Any] = {}
        for payload in self._payloads:
            self._usage = payload.get("usage") or self._usage
        self._started = False
        self._block: str | None = None
        self._index = -1
        self._thinking: list[str] = []
        self._finish: str | None = None
        self._arguments = _tool_arguments(self._payloads)
        self._emitted_delta = False
        self._failed = False

    def frames(self) -> Iterator[str]:
        done = False
        for frame in self._frames:
            data = frame_data(frame)
            if self._failed:
                return  # the API ends the stream after an error event
            if done or data is None:
                yield frame
            elif data.strip() == "[DONE]":
                done = True
                yield from self._closing()
                yield event_frame({"type": "message_stop"})
            else:
                yield from self._frame(data)
        if not done and not self._failed and self._finish is not None:
            yield from self._closing()

    def _frame(self, data: str) -> Iterator[str]:
        yield from self._start()
        payload = payload_of(data)
        if not isinstance(payload, dict):
            yield _BROKEN
            return
        if payload.get("error"):
            self._failed = True
            error = payload["error"]
            yield event_frame(error_body(error if isinstance(error, dict) else {"message": error}))
            return
        for choice in payload.get("choices") or ():
            yield from self._delta(choice.get("delta") or {})
            if choice.get("finish_reason") == _OVERLOADED:
                self._failed = True
                yield _overloaded()
            elif choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
                yield from self._close()

    def _start(self) -> Iterator[str]:
        if self._started:
            return
        self._started = True
        head = self._payloads[0] if self._payloads else {}
        usage = {**_usage(self._usage), "output_tokens": 1}
        message: dict[str, Any] = {
            "id": f"msg_{head.get('id')}",
            "type": "message",
            "role": "assistant",
            "model": head.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        yield event_frame({"type": "message_start", "message": message})
        yield event_frame({"type": "ping"})

    def _delta(self, delta: dict[str, Any]) -> Iterator[str]:
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str):
            if self._block != "thinking":
                yield from self._open({"type": "thinking", "thinking": "", "signature": ""})
            if reasoning:
                self._thinking.append(reasoning)
                yield self._piece({"type": "thinking_delta", "thinking": reasoning})
        if delta.get("content"):
            if self._block != "text":
                yield from self._open({"type": "text", "text": ""})
            yield self._piece({"type": "text_delta", "text": delta["content"]})
        for fragment in delta.get("tool_calls") or ():
            yield from self._tool(fragment)

    def _tool(self, fragment: dict[str, Any]) -> Iterator[str]:
        """A call opens at its head with all its arguments: the Messages API sends a block's
        deltas together."""
        if not fragment.get("id"):
            return
        function = fragment.get("function") or {}
        yield from self._open(
            {"type": "tool_use", "id": fragment["id"], "name": function.get("name"), "input": {}}
        )
        for piece in self._arguments.get(fragment.get("index"), []):
            yield self._piece({"type": "input_json_delta", "partial_json": piece})

    def _open(self, block: dict[str, Any]) -> Iterator[str]:
        if (
            self._thinking_mode
            and self._index == -1
            and self._arguments
            and block["type"] != "thinking"
        ):
            # A tool-using turn in thinking mode starts with its (signed) thinking, even when a
            # transcript written without reasoning is served: else no client could pass it back.
            yield from self._open({"type": "thinking", "thinking": "", "signature": ""})
        yield from self._close()
        self._index += 1
        self._block = block["type"]
        yield event_frame(
            {"type": "content_block_start", "index": self._index, "content_block": block}
        )

    def _piece(self, delta: dict[str, Any]) -> str:
        return event_frame({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close(self) -> Iterator[str]:
        if self._block is None:
            return
        if self._block == "thinking":
            signature = signature_of("".join(self._thinking))
            yield self._piece({"type": "signature_delta", "signature": signature})
            self._thinking = []
        self._block = None
        yield event_frame({"type": "content_block_stop", "index": self._index})

    def _closing(self) -> Iterator[str]:
        """``message_delta`` once the answer has its finish (and its usage)."""
        yield from self._close()
        if self._finish is None or self._emitted_delta:
            return
        self._emitted_delta = True
        reason = STOP_REASONS.get(self._finish, self._finish)
        usage = {"output_tokens": _usage(self._usage)["output_tokens"]}
        delta = {"stop_reason": reason, "stop_sequence": None}
        yield event_frame({"type": "message_delta", "delta": delta, "usage": usage})


def _overloaded() -> str:
    error = {"type": "overloaded_error", "message": "Overloaded"}
    return event_frame({"type": "error", "error": error})


def _tool_arguments(payloads: list[dict[str, Any]]) -> dict[Any, list[str]]:
    """Every call's argument fragments by its wire index, in order."""
    arguments: dict[Any, list[str]] = {}
    for payload in payloads:
        for choice in payload.get("choices") or ():
            for fragment in (choice.get("delta") or {}).get("tool_calls") or ():
                piece = (fragment.get("function") or {}).get("arguments")
                if piece:
                    arguments.setdefault(fragment.get("index"), []).append(piece)
    return arguments


def message_json(scenario: Scenario) -> str:
    """An encoded scenario's events folded into one non-streamed message (a cut-off event is
    returned as it is: the malformed-body fault)."""
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    arguments: dict[int, str] = {}
    for frame in scenario.frames:
        data = frame_data(frame)
        if data is None:
            continue
        event = payload_of(data)
        if not isinstance(event, dict):
            return data
        kind = event.get("type")
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            _fold_delta(blocks[event["index"]], arguments, event["index"], event["delta"])
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message.get("usage", {}), **event["usage"]}
        elif kind == "message_stop":
            break
    for index, text in arguments.items():
        blocks[index]["input"] = json.loads(text)
    return dumps({**message, "content": [blocks[index] for index in sorted(blocks)]})


def _fold_delta(
    block: dict[str, Any], arguments: dict[int, str], index: int, delta: dict[str, Any]
) -> None:
    kind = delta["type"]
    if kind == "input_json_delta":
        arguments[index] = arguments.get(index, "") + delta["partial_json"]
        return
    field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}
    name = field[kind]
    block[name] = block.get(name, "") + delta[name]
