"""The SDK adapter: DeepSeek's chat completions through the official ``openai`` SDK.

The independent twin of ``llm_deepseek``: the same endpoint, models and StreamChunks, built on
the SDK's stream helper (its typed events over an accumulated snapshot) instead of a
hand-rolled parser and fold. One call is one provider attempt (the
client never retries). It takes the *in-band* error path: a failed call — an HTTP error, a
timeout, a broken or malformed stream, a missing SDK or key — ends the stream with
``finish{error}`` carrying the full :class:`LlmFailure`, and never raises.

Cancelling the consuming task closes the response and the cancellation goes on, as asyncio
requires; a ``CancelledError`` the consumer throws into the stream ends it ``finish{aborted}``.
The SDK is an optional extra, imported when a model of this adapter is first used.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING

from dsh.plugin import (
    Finish,
    FinishAborted,
    FinishError,
    LlmFailure,
    LlmRequest,
    ModelInfo,
    StreamChunk,
    api_key,
    get_logger,
)
from dsh.plugin import deepseek_model_info as model_info
from dsh.plugin import deepseek_wire_name as wire_name
from dsh_plugins.llm_openai_sdk.config import (
    INSTALL,
    PROVIDER,
    OpenAISdkConfig,
    served_model_ids,
)
from dsh_plugins.llm_openai_sdk.request import create_params, uses_beta

if TYPE_CHECKING:
    from dsh_plugins.llm_openai_sdk.sdk import DeepSeekOpenAI

__all__ = ["ABORTED", "INSTALL", "PROVIDER", "OpenAISdkAdapter"]

ABORTED = LlmFailure("the stream was cancelled by its consumer", "ABORTED")
log = get_logger("dsh.llm_openai_sdk")


def _task_is_cancelled() -> bool:
    """Whether the running task itself is being cancelled. That cancellation must go on —
    asyncio's contract, which ``abort``, ``dispose`` and ``asyncio.timeout`` rely on — so only
    a ``CancelledError`` that reaches the stream any other way (thrown into it by its consumer)
    ends it in band."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _sdk_missing(model: str) -> LlmFailure | None:
    """Why ``model`` cannot be served without the SDK, or ``None`` when it is installed: told
    by finding it, not importing it (~0.5 s of CPU, and ``dsh models`` asks for every model)."""
    if importlib.util.find_spec("openai") is None:
        return LlmFailure(
            f"model {model!r} is served through the openai SDK, which is not installed: run "
            f"{INSTALL} (or pip install openai), or use the built-in llm_deepseek adapter "
            f"instead ({model.removeprefix(PROVIDER + '/')}), which needs no SDK",
            "MISSING_DEPENDENCY",
        )
    return None


def _missing_key() -> LlmFailure:
    return LlmFailure(
        "no DeepSeek API key: set the DEEPSEEK_API_KEY environment variable, store one with "
        "`dsh keys set deepseek` (or set api_key in the [llm_openai_sdk] config section), or run "
        "`dsh demo` to try dsh offline against the bundled mock server",
        "AUTH",
    )


class OpenAISdkAdapter:
    """Streams DeepSeek chat completions through ``openai.AsyncOpenAI``. Serves
    ``deepseek-sdk/<model>`` and sends the bare model name."""

    def __init__(self, config: OpenAISdkConfig) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        # Read once, here; never logged, never part of a request that reaches the session.
        self._api_key = config.api_key or api_key("deepseek", "DEEPSEEK_API_KEY")
        self._client: DeepSeekOpenAI | None = None
        self._beta: DeepSeekOpenAI | None = None

    def __repr__(self) -> str:
        return f"<OpenAISdkAdapter {self.base_url}>"

    def model_ids(self) -> list[str]:
        """Every id this adapter serves (:func:`served_model_ids` of its configured models)."""
        return served_model_ids(self.config.models)

    def model_info(self, model_id: str) -> ModelInfo | None:
        """Context window, output limit, image input, thinking default and prices of a model
        of DeepSeek's table (``None`` for a model it does not list)."""
        return model_info(model_id)

    def unavailable(self, model: str) -> str | None:
        """Why ``model`` cannot be used in this environment (the SDK is not installed), else
        ``None``: ``dsh chat``'s ``/model`` does not offer such a model."""
        failure = _sdk_missing(model)
        return None if failure is None else failure.message

    def url_for(self, request: LlmRequest) -> str:
        """The base URL a request goes to: strict tools are a beta feature."""
        return f"{self.base_url}/beta" if uses_beta(request) else self.base_url

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """The chunks of one streamed completion; a failure is the last chunk,
        ``finish{error}``."""
        failure = _sdk_missing(request.model)
        key = self._api_key
        if failure is not None or key is None:
            yield Finish(FinishError(failure or _missing_key()))
            return
        from dsh_plugins.llm_openai_sdk.completion import stream_completion
        from dsh_plugins.llm_openai_sdk.deadline import Deadline

        base_url = self.url_for(request)
        params = create_params(request, wire_name(request.model.removeprefix(f"{PROVIDER}/")))
        log.debug("deepseek-sdk request", url=base_url, model=params["model"])
        client = self._client_for(base_url, key)
        url = f"{base_url}/chat/completions"
        deadline = Deadline(self.config.idle_timeout_s, self.config.first_data_timeout_s)
        try:
            async with aclosing(stream_completion(client, params, url, deadline)) as chunks:
                async for chunk in chunks:
                    yield chunk
        except asyncio.CancelledError:
            if _task_is_cancelled():
                raise
            yield Finish(FinishAborted(ABORTED))

    def _client_for(self, base_url: str, api_key: str) -> DeepSeekOpenAI:
        """The client (made on first use), or its copy for the beta URL; both share one
        connection pool."""
        if self._client is None:
            from dsh_plugins.llm_openai_sdk.sdk import make_client

            config = self.config
            self._client = make_client(
                self.base_url, api_key, config.connect_timeout_s, config.idle_timeout_s
            )
        if base_url == self.base_url:
            return self._client
        if self._beta is None:
            self._beta = self._client.with_options(base_url=base_url)
        return self._beta

    async def aclose(self) -> None:
        """Close the client and its connection pool (the harness awaits this at stop)."""
        if self._client is not None:
            await self._client.close()
            self._client = self._beta = None
