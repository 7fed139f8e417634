"""The adapter of one OpenAI-compatible provider: one aiohttp session, one streamed POST per
model call, framed by :class:`dsh.plugin.http.SseParser`.

One call is one provider attempt (retries and fallbacks belong to ``dsh_agent_request_error``).
An HTTP error or a broken stream raises :class:`LlmError`; an error the server puts in the
stream ends it in-band with ``finish{error}``. Cancelling the consumer closes the response.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from dsh.plugin import (
    ChunkBatch,
    ChunkBatches,
    LlmError,
    LlmFailure,
    LlmRequest,
    ModelInfo,
    get_logger,
)
from dsh.plugin import api_key as stored_api_key
from dsh.plugin.http import HttpClient, PayloadReader, decode_json, decode_payload
from dsh_plugins.llm_providers.failures import QUOTE, http_failure, not_a_stream
from dsh_plugins.llm_providers.listing import listed_models
from dsh_plugins.llm_providers.profiles import Provider
from dsh_plugins.llm_providers.request import body_for
from dsh_plugins.llm_providers.stream import Translator

__all__ = ["ProviderAdapter"]

log = get_logger("dsh.llm_providers")


class ProviderAdapter:
    """Serves ``<provider>/<model>`` for any model: those the provider lists with their
    capabilities, any other with :data:`~dsh_plugins.llm_providers.profiles.DEFAULT_CAPS`."""

    def __init__(self, provider: Provider, api_key: str | None = None) -> None:
        self.provider = provider
        # Read once; never logged, never part of anything that reaches the session.
        self._api_key = api_key or stored_api_key(provider.name, provider.api_key_env or "")
        self._http = HttpClient(connect_timeout_s=provider.settings.connect_timeout_s)

    def __repr__(self) -> str:
        return f"<ProviderAdapter {self.provider.name} {self.provider.base_url}>"

    def model_ids(self) -> list[str]:
        return self.provider.model_ids()

    def _model(self, model_id: str) -> str:
        return model_id.removeprefix(f"{self.provider.name}/")

    def model_info(self, model_id: str) -> ModelInfo:
        """The capabilities the config gives the model (the defaults for one it does not
        list)."""
        caps = self.provider.caps(self._model(model_id))
        return ModelInfo(
            context_window=caps.context_window,
            max_output_tokens=caps.max_output_tokens,
            image_input=caps.image_input,
            thinking_default=caps.reasoning,
            pricing=caps.price,
        )

    def unavailable(self, model_id: str) -> str | None:
        """Why the model cannot be called: its provider wants a key and has none."""
        if self._api_key is None and self.provider.key_required:
            return f"no API key for {self.provider.name}: {self.provider.key_hint}"
        return None

    def stream(self, request: LlmRequest) -> ChunkBatches:
        """The chunks of one streamed completion, a network read's together."""
        return ChunkBatches(self._batches(request))

    async def _batches(self, request: LlmRequest) -> AsyncGenerator[ChunkBatch, None]:
        provider = self.provider
        missing = self.unavailable(request.model)
        if missing is not None:
            raise LlmError.of("AUTH", missing)
        body = body_for(provider, self._model(request.model), request)
        response = await self._post(body)
        translator = Translator(
            provider.name,
            provider.reasoning_field,
            provider.cached_tokens,
            provider.reasoning_passback,
        )
        reader = PayloadReader.limited(response, provider.settings)
        try:

            def translate(payloads: list[bytes | str], batch: ChunkBatch) -> None:
                for payload in payloads:
                    batch += translator.feed(decode_payload(payload, provider.name))

            async for batch in reader.batches(translate, stop=lambda: translator.failed):
                yield batch
            yield [*translator.done()]
        finally:
            reader.finish(complete=reader.parser.done)

    async def list_models(self) -> dict[str, ModelInfo]:
        """The provider's ``GET /models``: its models by wire name, with what it reports."""
        provider = self.provider
        missing = self.unavailable(provider.name)
        if missing is not None:
            raise LlmError.of("AUTH", missing)
        url = f"{provider.base_url}/models"
        timeout_s = provider.settings.idle_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                headers = {**self._headers(), "Accept": "application/json"}
                async with self._http.session().get(url, headers=headers) as response:
                    body = await response.read()
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", f"no answer from {url} within {timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "TRANSPORT", f"cannot reach {provider.name} at {url}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status >= 300:
            raise LlmError(http_failure(provider.name, response.status, response.headers, body))
        try:
            payload = decode_json(body)
        except ValueError as exc:
            raise LlmError.of(
                "MALFORMED_RESPONSE", f"{provider.name}'s model list is not JSON: {body[:200]!r}"
            ) from exc
        return listed_models(provider.name, payload)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {
            **self.provider.settings.headers,
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        }
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _post(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """Send the request; return a response that is an event stream, else raise."""
        provider = self.provider
        url = f"{provider.base_url}/chat/completions"
        log.debug("provider request", provider=provider.name, model=body["model"])
        timeout_s = provider.settings.idle_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._http.session().post(
                    url, data=json.dumps(body), headers=self._headers()
                )
                try:
                    failure = await _failure_of(provider.name, response)
                except BaseException:
                    response.close()
                    raise
        except TimeoutError as exc:
            raise LlmError.of("TIMEOUT", f"no answer from {url} within {timeout_s} s") from exc
        except aiohttp.ClientError as exc:
            raise LlmError.of(
                "TRANSPORT", f"cannot reach {provider.name} at {url}: {type(exc).__name__}: {exc}"
            ) from exc
        if failure is not None:
            response.close()
            raise LlmError(failure)
        return response


async def _failure_of(provider: str, response: aiohttp.ClientResponse) -> LlmFailure | None:
    """What an answer that is not an event stream says went wrong (``None``: a stream)."""
    if response.status >= 300:
        body = await response.content.read(64 * QUOTE)
        return http_failure(provider, response.status, response.headers, body)
    if response.content_type == "text/event-stream":
        return None
    body = await response.content.read(64 * QUOTE)
    return not_a_stream(provider, response.status, response.content_type, response.headers, body)
