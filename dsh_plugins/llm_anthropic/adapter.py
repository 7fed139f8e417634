"""The Messages API adapter: one aiohttp session, one streamed ``POST /v1/messages`` per call.

One instance serves one provider (Anthropic, or DeepSeek's Anthropic-format endpoint). One call
is one provider attempt; transport and protocol failures raise :class:`LlmError`, the model's
own stop reasons end the stream in band with ``finish{error}``. Cancelling the consumer closes
the response at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import attrs

from dsh.plugin import (
    LlmError,
    LlmFailure,
    LlmRequest,
    ModelInfo,
    StreamChunk,
    deepseek_model_info,
    deepseek_wire_name,
    get_logger,
)
from dsh.plugin import api_key as stored_api_key
from dsh.plugin.http import EventReader, HttpClient, SseEvent, decode_json
from dsh_plugins.llm_anthropic.config import ANTHROPIC, DEEPSEEK, AnthropicConfig, Provider
from dsh_plugins.llm_anthropic.failures import (
    QUOTE_CHARS,
    http_failure,
    missing_key_failure,
    not_event_stream_failure,
)
from dsh_plugins.llm_anthropic.listing import page_of
from dsh_plugins.llm_anthropic.request import request_body
from dsh_plugins.llm_anthropic.stream import EventTranslator

__all__ = ["ANTHROPIC", "API_VERSION", "DEEPSEEK", "MessagesAdapter", "Provider"]

#: The ``anthropic-version`` header every request carries (DeepSeek's endpoint ignores it).
API_VERSION = "2023-06-01"
log = get_logger("dsh.llm_anthropic")


class MessagesAdapter:
    """Streams the Messages API of one provider. Serves ``<prefix>/<model>``."""

    def __init__(
        self,
        provider: Provider,
        config: AnthropicConfig,
        base_url: str,
        models: tuple[str, ...],
        api_key: str | None,
        listed: dict[str, ModelInfo] | None = None,
    ) -> None:
        self.provider = provider
        self.config = config
        self.base_url = base_url.rstrip("/")
        self.models = models
        #: What the provider's cached listing (``dsh models --refresh``) reported, by wire name.
        self.listed = listed or {}
        # Read once, here; never logged, never part of a request that reaches the session.
        self._api_key = api_key or stored_api_key(provider.key_name, provider.env_var)
        self._http = HttpClient(
            connect_timeout_s=config.connect_timeout_s, max_connections=config.max_connections
        )

    def __repr__(self) -> str:
        return f"<MessagesAdapter {self.provider.prefix} {self.base_url}>"

    def model_ids(self) -> list[str]:
        return self.provider.ids(dict.fromkeys([*self.models, *self.listed]))

    def model_info(self, model_id: str) -> ModelInfo | None:
        """DeepSeek's models through this endpoint are the models of the DeepSeek table, but
        read no images: the endpoint does not support image content. Other models are
        described by what the cached listing reported, if it names them (else ``None``)."""
        info = deepseek_model_info(model_id) if self.provider is DEEPSEEK else None
        if info is not None:
            return attrs.evolve(info, image_input=False)
        return self.listed.get(model_id.removeprefix(f"{self.provider.prefix}/"))

    def unavailable(self, model_id: str) -> str | None:
        """Why the model cannot be called: the provider has no key."""
        return None if self._api_key is not None else self._missing_key().message

    def _missing_key(self) -> LlmFailure:
        provider = self.provider
        return missing_key_failure(
            provider.name, provider.env_var, provider.key_name, provider.option
        )

    def wire_model(self, model_id: str) -> str:
        """The name to send: the id without its prefix (a retired DeepSeek name as its
        successor, as the table says)."""
        model = model_id.removeprefix(f"{self.provider.prefix}/")
        return deepseek_wire_name(model) if self.provider is DEEPSEEK else model

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """The chunks of one streamed message."""
        body = request_body(
            request,
            self.wire_model(request.model),
            self.config.max_tokens,
            self.config.thinking_budget_tokens,
            self.provider.checks_budget,
        )
        response = await self._post(f"{self.base_url}/v1/messages", body)
        translator = EventTranslator()
        # Keep-alives here are comments and the API's ``ping`` events: traffic, not progress.
        reader = EventReader.limited(response, self.config, end="message_stop", keepalive=_is_ping)
        try:
            while not translator.done:
                for event in await reader.read():
                    for chunk in translator.feed(_json(event)):
                        yield chunk
        finally:
            reader.finish(complete=translator.done)

    async def list_models(self) -> dict[str, ModelInfo]:
        """The provider's ``GET /v1/models``, every page: its models by wire name."""
        models: dict[str, ModelInfo] = {}
        after: str | None = ""
        while after is not None:
            query = "?limit=1000" + (f"&after_id={after}" if after else "")
            page, after = page_of(self.provider.name, await self._get(f"/v1/models{query}"))
            models.update(page)
        return models

    async def _get(self, path: str) -> Any:
        """The JSON of a ``GET`` on the provider; an ``LlmError`` on anything else."""
        provider = self.provider
        if self._api_key is None:
            raise LlmError(self._missing_key())
        url = f"{self.base_url}{path}"
        timeout_s = self.config.idle_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                headers = {**self._headers(self._api_key), "accept": "application/json"}
                async with self._http.session().get(url, headers=headers) as response:
                    body = await response.read()
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", f"no answer from {url} within {timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "TRANSPORT", f"cannot reach {provider.name} at {url}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status >= 300:
            raise LlmError(
                http_failure(
                    provider.name, response.status, response.reason or "", response.headers, body
                )
            )
        try:
            return decode_json(body)
        except ValueError as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE", f"{provider.name}'s answer is not JSON: {body[:200]!r}"
            ) from exc

    @staticmethod
    def _headers(api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": API_VERSION}

    async def aclose(self) -> None:
        """Close the HTTP session (the harness awaits this at stop)."""
        await self._http.aclose()

    async def _post(self, url: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """Send the request and wait for a 2xx answer's headers; raise on anything else."""
        provider = self.provider
        if self._api_key is None:
            raise LlmError(self._missing_key())
        headers = {
            **self._headers(self._api_key),
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        log.debug("messages request", url=url, model=body["model"], messages=len(body["messages"]))
        timeout_s = self.config.idle_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._http.session().post(
                    url, data=json.dumps(body), headers=headers
                )
                try:
                    failure = await _failure_of(provider.name, response)
                    if failure is not None:
                        raise LlmError(failure)
                except BaseException:
                    response.close()
                    raise
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", f"no answer from {url} within {timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "TRANSPORT", f"cannot reach {provider.name} at {url}: {type(exc).__name__}: {exc}"
            ) from exc
        return response


async def _failure_of(provider: str, response: aiohttp.ClientResponse) -> LlmFailure | None:
    """The failure an answer's status and type say (``None``: an event stream to read)."""
    if response.status >= 300:
        body = await _body_start(response)
        return http_failure(
            provider, response.status, response.reason or "", response.headers, body
        )
    if response.content_type == "text/event-stream":
        return None
    content_type = response.headers.get("Content-Type", "")
    return not_event_stream_failure(
        provider, content_type, response.headers, await _body_start(response)
    )


async def _body_start(response: aiohttp.ClientResponse) -> bytes:
    """The start of a body that is not a stream (enough for its message)."""
    limit, body = 64 * QUOTE_CHARS, b""
    try:
        while len(body) < limit and (data := await response.content.read(limit - len(body))):
            body += data
    except aiohttp.ClientError:
        return b""  # a body that broke off says nothing reliable: the status speaks
    return body


def _json(event: SseEvent) -> Any:
    try:
        return decode_json(event.data)
    except ValueError as exc:
        raise LlmError.of(
            "MALFORMED_RESPONSE",
            f"the Messages API sent an event that is not JSON: {event.data:.200}",
        ) from exc


def _is_ping(event: SseEvent) -> bool:
    return event.event == "ping"
