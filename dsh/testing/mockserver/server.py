"""The mock DeepSeek server: an aiohttp app on 127.0.0.1.

``POST /chat/completions`` (also under ``/v1`` and ``/beta``) checks the request as the real API
does, then answers with the next queued scenario, else the one named by the
``X-Mock-Scenario`` header, else the scripted conversation. ``GET /models`` lists the models.
``POST /mock/queue`` (a JSON list of specs), ``GET /mock/stats`` and ``POST /mock/shutdown``
control it from outside the process.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, cast

from aiohttp import web
from attrs import evolve, frozen

from dsh.llm._sse import parse_sse
from dsh.testing.mockserver import anthropic, anthropic_checks
from dsh.testing.mockserver.cache import PrefixCache, with_cache_hits
from dsh.testing.mockserver.catalogue import ScenarioSpec, check_spec, resolve
from dsh.testing.mockserver.conversation import in_thinking_mode, thinking_enabled
from dsh.testing.mockserver.scenario import Scenario, error_reply
from dsh.testing.mockserver.validate import serving_model, validate
from dsh.testing.mockserver.wire import KEEP_ALIVE, TRACE_ID_HEADER, dumps, frame_bytes
from dsh.values._value import Value

__all__ = ["MODELS", "MockServer", "RecordedRequest", "completion_json"]

#: The models the API lists today; the legacy names it still serves are accepted too
#: (``validate.LEGACY_MODELS``), and answered by (and in the name of) their successor.
MODELS = ("deepseek-flash", "deepseek-v4-pro")
_KEEP_ALIVE_INTERVAL_S = 0.01


@frozen(repr=False, eq=False)
class RecordedRequest(Value):
    """A request the server received: its path, headers and JSON body (``None`` if not JSON)."""

    path: str
    headers: Mapping[str, str]
    body: Any


class MockServer:
    """A DeepSeek-compatible server on loopback. ``async with MockServer() as server:`` then
    point an adapter at ``server.url``. ``api_key=None`` accepts any bearer token.
    ``prefix_cache``: report cache hits as DeepSeek does, for the part of each prompt that an
    earlier prompt started with (:mod:`.cache`); off, every prompt is a miss."""

    def __init__(
        self,
        *,
        port: int = 0,
        api_key: str | None = None,
        models: Iterable[str] = MODELS,
        prefix_cache: bool = False,
    ) -> None:
        self.api_key = api_key
        self.prefix_cache = PrefixCache() if prefix_cache else None
        self.models = tuple(models)
        self.requests: list[RecordedRequest] = []
        self._port = port
        self._queue: deque[ScenarioSpec] = deque()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._shutdown = asyncio.Event()
        self._served = 0
        self._client_gone = asyncio.Event()
        #: How many clients went away while being answered (an abort, a timeout).
        self.disconnects = 0
        self.url = ""

    # -- lifetime ----------------------------------------------------------------------------
    async def __aenter__(self) -> MockServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen on ``127.0.0.1:port`` (a free port when 0); ``url`` is set once listening."""
        app = web.Application()
        for prefix in ("", "/v1", "/beta"):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        # The Messages API: Anthropic's base URL and DeepSeek's (``/anthropic``).
        for prefix in ("", "/anthropic"):
            app.router.add_post(f"{prefix}/v1/messages", self._messages)
        app.router.add_post("/mock/queue", self._queue_endpoint)
        app.router.add_post("/mock/shutdown", self._shutdown_endpoint)
        app.router.add_get("/mock/stats", self._stats_endpoint)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        """Release stalled answers and stop listening."""
        self._closing.set()
        self._shutdown.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_closed(self) -> None:
        """Return once ``close()`` ran or ``POST /mock/shutdown`` arrived."""
        await self._shutdown.wait()

    # -- control -----------------------------------------------------------------------------
    def queue(self, *specs: ScenarioSpec) -> None:
        """Answer the next requests with these scenarios, in order (then the default again)."""
        for spec in specs:
            check_spec(spec)
        self._queue.extend(specs)

    @property
    def queued(self) -> int:
        return len(self._queue)

    async def client_gone(self) -> None:
        """Return once a client has gone away in the middle of an answer."""
        await self._client_gone.wait()

    # -- handlers ----------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.path, request.headers.copy(), body))
        self._served += 1
        scenario = (
            self._auth_failure(request.headers.get("Authorization", ""))
            or validate(body, beta=request.path.startswith("/beta"), models=self.models)
            or self._chat_answer(body, request.headers.get("X-Mock-Scenario"))
        )
        if scenario.status != 200 or not scenario.event_stream:
            return self._error(scenario)
        if self.prefix_cache is not None:
            scenario = with_cache_hits(scenario, self.prefix_cache.hit_tokens(body))
        if body.get("stream") is True:
            return await self._stream(request, scenario)
        return await self._complete(request, scenario)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """The same scenarios in the Messages API format (:mod:`.anthropic`)."""
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.path, request.headers.copy(), body))
        self._served += 1
        headers = (("request-id", f"mock-{self._served}"),)
        refused = anthropic_checks.auth_failure(
            request.headers, self.api_key
        ) or anthropic_checks.validate(body, self.models)
        if refused is not None:
            return self._error(evolve(refused, headers=headers))
        chat = anthropic_checks.openai_body(body)
        scenario = self._next(chat, request.headers.get("X-Mock-Scenario"))
        if self.prefix_cache is not None and scenario.status == 200 and scenario.event_stream:
            scenario = with_cache_hits(scenario, self.prefix_cache.hit_tokens(chat))
        scenario = anthropic.encode(
            evolve(scenario, headers=(*headers, *scenario.headers)),
            anthropic_checks.thinking_on(body),
        )
        if scenario.status != 200 or not scenario.event_stream:
            return self._error(scenario)
        if body.get("stream") is True:
            return await self._stream(request, scenario)
        return await self._complete(request, scenario, anthropic.message_json(scenario))

    def _auth_failure(self, header: str) -> Scenario | None:
        scheme, _, key = header.partition(" ")
        if scheme != "Bearer" or not key.strip():
            return error_reply(
                401,
                "Authentication Fails (auth header format should be Bearer sk-...)",
                error_type="authentication_error",
                name="auth",
            )
        if self.api_key is not None and key != self.api_key:
            return error_reply(
                401,
                f"Authentication Fails, Your api key: ****{key[-3:]} is invalid",
                error_type="authentication_error",
                name="auth",
            )
        return None

    def _chat_answer(self, body: dict[str, Any], named: str | None) -> Scenario:
        served = {**body, "model": serving_model(body["model"])}
        scenario = self._next(served, named)
        return in_thinking_mode(scenario) if thinking_enabled(served) else scenario

    def _next(self, body: dict[str, Any], named: str | None) -> Scenario:
        spec: ScenarioSpec = self._queue.popleft() if self._queue else named or "scripted"
        return resolve(spec, body)

    def _headers(self, scenario: Scenario, content_type: str) -> dict[str, str]:
        # Every answer names its request, as DeepSeek's do.
        headers = {"Content-Type": content_type, TRACE_ID_HEADER: f"mock-{self._served}"}
        headers.update(scenario.headers)
        return headers

    def _error(self, scenario: Scenario) -> web.Response:
        headers = self._headers(scenario, f"{scenario.content_type}; charset=utf-8")
        return web.Response(status=scenario.status, text=scenario.body, headers=headers)

    async def _stream(self, request: web.Request, scenario: Scenario) -> web.StreamResponse:
        response = web.StreamResponse(headers=self._headers(scenario, "text/event-stream"))
        response.headers["Cache-Control"] = "no-cache"
        await response.prepare(request)
        try:
            for frame in scenario.frames:
                if scenario.interval_s:
                    await asyncio.sleep(scenario.interval_s)
                await response.write(frame_bytes(frame))
            await self._end(request, response, scenario)
        except ConnectionError:  # reset by the peer, or "Connection lost" while draining
            self._gone()
        return response

    async def _complete(
        self, request: web.Request, scenario: Scenario, text: str | None = None
    ) -> web.StreamResponse:
        """The answer not streamed: ``text``, else the frames folded into a completion."""
        response = web.StreamResponse(headers=self._headers(scenario, "application/json"))
        await response.prepare(request)
        # Non-streaming keep-alive is blank lines before the body.
        keep_alives = sum(frame == KEEP_ALIVE for frame in scenario.frames)
        body = completion_json(scenario) if text is None else text
        try:
            await response.write(b"\n" * keep_alives + body.encode())
            await self._end(request, response, scenario)
        except ConnectionError:  # reset by the peer, or "Connection lost" while draining
            self._gone()
        return response

    def _gone(self) -> None:
        """The client went away (an abort, a timeout): there is nothing left to answer."""
        self.disconnects += 1
        self._client_gone.set()

    async def _end(
        self, request: web.Request, response: web.StreamResponse, scenario: Scenario
    ) -> None:
        if scenario.ending == "close":
            await response.write_eof()
        elif scenario.ending == "disconnect":
            cast(asyncio.Transport, request.transport).close()
        elif scenario.ending == "stall":
            await self._closing.wait()
        else:
            await self._keep_alive_forever(response, scenario.interval_s or _KEEP_ALIVE_INTERVAL_S)

    async def _keep_alive_forever(self, response: web.StreamResponse, interval_s: float) -> None:
        while not self._closing.is_set():
            await response.write(KEEP_ALIVE.encode())
            try:
                await asyncio.wait_for(self._closing.wait(), interval_s)
            except TimeoutError:
                continue

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": model, "object": "model", "owned_by": "deepseek"} for model in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _queue_endpoint(self, request: web.Request) -> web.Response:
        try:
            specs = await request.json()
            if not isinstance(specs, list):
                raise ValueError("expected a JSON list of scenario names or objects")
            self.queue(*specs)
        except ValueError as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return web.json_response({"queued": self.queued})

    async def _stats_endpoint(self, request: web.Request) -> web.Response:
        """How many chat requests were served, how many scenarios wait, how many clients left."""
        stats = {"served": self._served, "queued": self.queued, "disconnects": self.disconnects}
        return web.json_response(stats)

    async def _shutdown_endpoint(self, request: web.Request) -> web.Response:
        self._shutdown.set()
        return web.json_response({"shutdown": True})


def completion_json(scenario: Scenario) -> str:
    """The frames folded into one non-streaming ``chat.completion`` body. A frame that is not
    JSON is returned as it is (the malformed-body fault)."""
    payloads: list[Any] = []
    for event in parse_sse(frame_bytes("".join(scenario.frames))):
        try:
            payloads.append(json.loads(event.data))
        except ValueError:
            return event.data
    return dumps(_fold(payloads))


def _fold(payloads: list[Any]) -> dict[str, Any]:
    head = payloads[0] if payloads else {}
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    for payload in payloads:
        usage = payload.get("usage") or usage
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") or {}
            message["content"] += delta.get("content") or ""
            reasoning.append(delta.get("reasoning_content") or "")
            for fragment in delta.get("tool_calls") or ():
                _merge_call(calls, fragment)
            finish = choice.get("finish_reason") or finish
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
        "choices": [choice],
        "usage": usage,
        "system_fingerprint": head.get("system_fingerprint"),
    }


def _merge_call(calls: dict[int, dict[str, Any]], fragment: dict[str, Any]) -> None:
    call = calls.setdefault(
        fragment["index"],
        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
    )
    call["id"] = call["id"] or fragment.get("id", "")
    function = fragment.get("function") or {}
    call["function"]["name"] = call["function"]["name"] or function.get("name", "")
    call["function"]["arguments"] += function.get("arguments") or ""
