"""The ``openai`` SDK, set up for DeepSeek. Imported only once a model of this adapter is used:
the SDK is an optional extra.

Two things differ from a stock ``AsyncOpenAI``:

* DeepSeek ends every complete stream with ``data: [DONE]``; a body that ends without it was cut
  off (``deepseek-wire.md`` §4.6), but the SDK ends such a stream as if it were complete. The
  client wraps the SDK's event decoder, through the SDK's own ``_make_sse_decoder`` hook, so
  that such a stream raises :class:`MissingDone` instead.
* It never sends OpenAI account headers (``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID``) to DeepSeek.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai

__all__ = ["DeepSeekOpenAI", "MissingDone", "make_client"]


class MissingDone(Exception):
    """The response body ended before ``data: [DONE]``."""


class _DoneRequired:
    """The SDK's event decoder, plus one check: the byte stream must reach ``[DONE]``."""

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        done = False
        async for event in self._decoder.aiter_bytes(iterator):
            done = done or event.data.startswith("[DONE]")
            yield event
        if not done:
            raise MissingDone


class DeepSeekOpenAI(openai.AsyncOpenAI):
    """``AsyncOpenAI`` for DeepSeek's endpoint (see the module docstring)."""

    def _make_sse_decoder(self) -> Any:
        return _DoneRequired(super()._make_sse_decoder())

    @property
    def default_headers(self) -> dict[str, str | openai.Omit]:
        headers = super().default_headers
        return {name: value for name, value in headers.items() if not name.startswith("OpenAI-")}


def make_client(
    base_url: str, api_key: str, connect_timeout_s: float, idle_timeout_s: float
) -> DeepSeekOpenAI:
    """A client that makes exactly one attempt per call: retries belong to the loop's
    ``dsh_agent_request_error`` policy."""
    return DeepSeekOpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=openai.Timeout(idle_timeout_s, connect=connect_timeout_s),
    )
