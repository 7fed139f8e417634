"""Loopback servers that answer ``POST /v1/chat/completions`` the way each built-in profile's
endpoint documents it (the facts, with their sources, are in ``docs/providers.md``):

* OpenAI: a key is required; ``max_tokens`` is refused (``max_completion_tokens`` replaces
  it); no reasoning text; usage only with ``stream_options.include_usage``, in a last chunk
  whose ``choices`` is empty (every other chunk then carries ``"usage": null``).
* OpenRouter: a key is required; ``: OPENROUTER PROCESSING`` comments before the first data;
  reasoning in ``delta.reasoning``; usage in the last chunk; errors after the stream started
  arrive as a data event with an ``error`` object (``code`` is an HTTP status) and
  ``finish_reason: "error"``.
* Ollama (``/v1``): no key; reasoning in ``delta.reasoning``; usage with ``include_usage``.
* vLLM with a reasoning parser: reasoning in ``delta.reasoning_content``; usage with
  ``include_usage``; errors as ``{"object": "error", "message", "code"}``.
* llama.cpp's server: no key; reasoning in ``delta.reasoning_content``
  (``--reasoning-format deepseek``); the last chunk carries the finish reason, ``usage`` and
  llama.cpp's own ``timings``, whether asked or not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from aiohttp import web
from attrs import frozen

UsageStyle = Literal["include_usage", "final", "with_finish"]


@frozen
class Dialect:
    """How one endpoint streams."""

    name: str
    key: str | None
    reasoning_field: str | None
    usage: UsageStyle
    refuses: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()
    timings: bool = False
    error_shape: Literal["openai", "openrouter", "vllm"] = "openai"


DIALECTS: dict[str, Dialect] = {
    "openai": Dialect("openai", "sk-openai", None, "include_usage", refuses=("max_tokens",)),
    "openrouter": Dialect(
        "openrouter",
        "sk-or-v1-test",
        "reasoning",
        "final",
        comments=("OPENROUTER PROCESSING", "OPENROUTER PROCESSING"),
        error_shape="openrouter",
    ),
    "ollama": Dialect("ollama", None, "reasoning", "include_usage"),
    "vllm": Dialect("vllm", None, "reasoning_content", "include_usage", error_shape="vllm"),
    "llamacpp": Dialect("llamacpp", None, "reasoning_content", "with_finish", timings=True),
}


@frozen
class Reply:
    """One scripted answer: reasoning, text and tool calls ``(id, name, arguments)``."""

    text: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    finish: str | None = None
    prompt_tokens: int = 20
    cached_tokens: int = 0
    completion_tokens: int = 7

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.calls else "stop")


@frozen
class Fail:
    """An HTTP error answer."""

    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@frozen
class BreakOff:
    """Stream ``text``, then an error in the stream with HTTP-like ``code``."""

    text: str
    code: int = 502
    message: str = "upstream provider went away"


Script = Reply | Fail | BreakOff


class ProfileServer:
    """A running loopback endpoint: ``base_url`` (ending in ``/v1``), the request bodies and
    headers it got, and the answers still queued."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.base_url = ""
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: list[Script] = []

    def queue(self, *answers: Script) -> None:
        self.script.extend(answers)


def _error(dialect: Dialect, status: int, message: str) -> dict[str, Any]:
    if dialect.error_shape == "vllm":
        return {"object": "error", "message": message, "type": "BadRequestError", "code": status}
    if dialect.error_shape == "openrouter":
        return {"error": {"code": status, "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def _chunk(dialect: Dialect, body: dict[str, Any], delta: dict[str, Any], **extra: Any) -> str:
    payload: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": body["model"],
        "choices": [{"index": 0, "delta": delta, "finish_reason": None, **extra}],
    }
    if dialect.usage == "include_usage" and _wants_usage(body):
        payload["usage"] = None
    return _event(payload)


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _events(dialect: Dialect, body: dict[str, Any], answer: Reply | BreakOff) -> list[str]:
    out = [f": {comment}\n\n" for comment in dialect.comments]
    out.append(_chunk(dialect, body, {"role": "assistant", "content": ""}))
    if isinstance(answer, BreakOff):
        out.append(_chunk(dialect, body, {"content": answer.text}))
        error = _error(dialect, answer.code, answer.message)
        if dialect.error_shape == "openrouter":
            choice = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
            out.append(_event({**error, "choices": [choice]}))
        else:
            out.append(_event(error))
        return [*out, "data: [DONE]\n\n"]
    if answer.reasoning and dialect.reasoning_field:
        for piece in _halves(answer.reasoning):
            out.append(_chunk(dialect, body, {dialect.reasoning_field: piece}))
    for piece in _halves(answer.text):
        out.append(_chunk(dialect, body, {"content": piece}))
    for position, (call_id, name, arguments) in enumerate(answer.calls):
        head = {"index": position, "id": call_id, "type": "function"}
        first = {**head, "function": {"name": name, "arguments": ""}}
        out.append(_chunk(dialect, body, {"tool_calls": [first]}))
        for piece in _halves(arguments):
            more = {"index": position, "function": {"arguments": piece}}
            out.append(_chunk(dialect, body, {"tool_calls": [more]}))
    out += _ending(dialect, body, answer)
    return [*out, "data: [DONE]\n\n"]


def _ending(dialect: Dialect, body: dict[str, Any], reply: Reply) -> list[str]:
    finish: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": body["model"],
        "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}],
    }
    if dialect.usage == "with_finish":
        finish["usage"] = _usage(reply)
        if dialect.timings:
            finish["timings"] = {"prompt_n": reply.prompt_tokens, "predicted_n": 7}
        return [_event(finish)]
    if dialect.usage == "include_usage" and not _wants_usage(body):
        return [_event(finish)]
    usage = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []}
    return [_event(finish), _event({**usage, "usage": _usage(reply)})]


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def _problem(dialect: Dialect, request: web.Request, body: Any) -> web.Response | None:
    """What the endpoint refuses before streaming."""
    if dialect.key is not None and request.headers.get("Authorization") != f"Bearer {dialect.key}":
        return web.json_response(_error(dialect, 401, "Incorrect API key provided"), status=401)
    if not isinstance(body, dict) or body.get("stream") is not True:
        return web.json_response(_error(dialect, 400, "this server only streams"), status=400)
    for name in dialect.refuses:
        if name in body:
            message = f"Unsupported parameter: '{name}' is not supported with this model."
            return web.json_response(_error(dialect, 400, message), status=400)
    return None


def _app(server: ProfileServer) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        server.bodies.append(body)
        server.headers.append(dict(request.headers))
        problem = _problem(server.dialect, request, body)
        if problem is not None:
            return problem
        answer = server.script.pop(0) if server.script else Reply(text="(no script left)")
        if isinstance(answer, Fail):
            error = _error(server.dialect, answer.status, answer.message)
            return web.json_response(error, status=answer.status, headers=dict(answer.headers))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in _events(server.dialect, body, answer):
            await response.write(event.encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    return app


@asynccontextmanager
async def serve(profile: str) -> AsyncIterator[ProfileServer]:
    """Run the loopback endpoint of ``profile`` on a free port."""
    server = ProfileServer(DIALECTS[profile])
    runner = web.AppRunner(_app(server))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield server
    finally:
        await runner.cleanup()
