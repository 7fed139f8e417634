"""The DeepSeek adapter: one aiohttp session, one streamed POST per model call.

One call is one provider attempt (retries belong to the ``dsh_agent_request_error`` policy).
Transport and protocol failures raise :class:`LlmError`; the provider's own stop reasons end the
stream in-band with ``finish{error}``. Cancelling the consumer closes the response at once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator

import aiohttp

from dsh.plugin import (
    ChunkBatch,
    ChunkBatches,
    HistoryMemo,
    LlmError,
    LlmFailure,
    LlmRequest,
    Message,
    ModelInfo,
    api_key,
    get_logger,
)
from dsh.plugin import deepseek_model_info as model_info
from dsh.plugin import deepseek_served_ids as served_ids
from dsh.plugin import deepseek_wire_name as wire_name
from dsh.plugin.http import HttpClient, PayloadReader, decode_payload
from dsh_plugins.llm_deepseek.config import PROVIDER, DeepSeekConfig
from dsh_plugins.llm_deepseek.failures import (
    QUOTE_CHARS,
    http_failure,
    missing_key_failure,
    not_event_stream_failure,
)
from dsh_plugins.llm_deepseek.request import (
    encode_body,
    encoded_wire,
    passes_reasoning_back,
    uses_strict_tools,
    wire_message,
)
from dsh_plugins.llm_deepseek.stream import ChunkTranslator

__all__ = ["PROVIDER", "DeepSeekAdapter"]

#: The most messages whose encoded JSON the adapter keeps per mode (sessions used least recently
#: are forgotten first): the bound the cache of wire forms had before.
MEMO_MESSAGES = 16_384
log = get_logger("dsh.llm_deepseek")


class DeepSeekAdapter:
    """Streams DeepSeek chat completions. Serves ``deepseek/<model>`` and the bare names."""

    def __init__(self, config: DeepSeekConfig) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        # Read once, here; never logged, never part of a request that reaches the session.
        self._api_key = config.api_key or api_key("deepseek", "DEEPSEEK_API_KEY")
        self._http = HttpClient(
            connect_timeout_s=config.connect_timeout_s, max_connections=config.max_connections
        )
        # Histories are re-sent unchanged at every step: encode each message once (per
        # session, as its history grows; per mode, since the passback rule depends on it). The
        # cache of wire forms serves histories that were rewritten (compaction, fallback).
        self._serialize = functools.lru_cache(maxsize=1_024)(wire_message)
        self._encoded = (
            HistoryMemo(functools.partial(self._encode, passback=False), limit=MEMO_MESSAGES),
            HistoryMemo(functools.partial(self._encode, passback=True), limit=MEMO_MESSAGES),
        )

    def __repr__(self) -> str:
        return f"<DeepSeekAdapter {self.base_url}>"

    def model_ids(self) -> list[str]:
        """Every id this adapter serves: each configured model, and the retired names the API
        still accepts for it, bare and ``deepseek/``-prefixed."""
        return served_ids(self.config.models, PROVIDER)

    def model_info(self, model_id: str) -> ModelInfo | None:
        """Context window, output limit, image input, thinking default and prices of a model
        of the DeepSeek table (``None`` for a model it does not list)."""
        return model_info(model_id)

    def url_for(self, request: LlmRequest) -> str:
        base = f"{self.base_url}/beta" if uses_strict_tools(request) else self.base_url
        return f"{base}/chat/completions"

    def stream(self, request: LlmRequest) -> ChunkBatches:
        """The chunks of one streamed completion, a network read's together."""
        return ChunkBatches(self._batches(request))

    async def _batches(self, request: LlmRequest) -> AsyncGenerator[ChunkBatch, None]:
        model = wire_name(request.model.removeprefix(f"{PROVIDER}/"))
        encoded = self._encoded[passes_reasoning_back(request)]
        history = encoded.results(request.session_id, request.messages)
        response = await self._post(
            self.url_for(request), encode_body(request, model, history), model, request
        )
        translator = ChunkTranslator()
        reader = PayloadReader.limited(response, self.config)
        try:
            decode = functools.partial(decode_payload, sender="DeepSeek")
            async for batch in reader.batches(
                lambda payloads, batch: translator.translate(payloads, batch, decode)
            ):
                yield batch
            yield [*translator.done()]
        finally:
            reader.finish(complete=reader.parser.done)

    async def aclose(self) -> None:
        """Close the HTTP session (the harness awaits this at stop)."""
        await self._http.aclose()

    def _client(self) -> aiohttp.ClientSession:
        return self._http.session()

    def _encode(self, message: Message, passback: bool) -> bytes:
        return encoded_wire(message, passback, self._serialize)

    async def _post(
        self, url: str, body: bytes, model: str, request: LlmRequest
    ) -> aiohttp.ClientResponse:
        """Send the request and wait for a 2xx answer's headers; raise on anything else."""
        if self._api_key is None:
            raise LlmError(missing_key_failure())
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        }
        messages = len(request.messages) + bool(request.system)
        log.debug("deepseek request", url=url, model=model, messages=messages)
        timeout_s = self.config.idle_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._client().post(url, data=body, headers=headers)
                try:
                    failure = await _failure_of(response)
                    if failure is not None:
                        raise LlmError(failure)
                except BaseException:
                    response.close()
                    raise
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", f"no answer from {url} within {timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "TRANSPORT", f"cannot reach DeepSeek at {url}: {type(exc).__name__}: {exc}"
            ) from exc
        return response


async def _failure_of(response: aiohttp.ClientResponse) -> LlmFailure | None:
    """The failure an answer's status and type say (``None``: an event stream to read). An
    HTTP 200 that is not ``text/event-stream`` (a JSON error, a non-streamed completion, an
    HTML page, an empty body) is read, not mistaken for a stream that closed early."""
    if response.status >= 300:
        body = await _body_start(response)
        return http_failure(response.status, response.reason or "", response.headers, body)
    if response.content_type == "text/event-stream":
        return None
    content_type = response.headers.get("Content-Type", "")
    return not_event_stream_failure(content_type, response.headers, await _body_start(response))


async def _body_start(response: aiohttp.ClientResponse) -> bytes:
    """The start of a body that is not a stream (enough for its message; a huge page is not
    read whole)."""
    limit, body = 64 * QUOTE_CHARS, b""
    try:
        while len(body) < limit and (data := await response.content.read(limit - len(body))):
            body += data
    except aiohttp.ClientError:
        return b""  # a body that broke off says nothing reliable: the status speaks
    return body
