"""The ``openai`` SDK, set up for DeepSeek. Imported only once a model of this adapter is used:
the SDK is an optional extra.

Two things differ from a stock ``AsyncOpenAI``:

* Its streamed bodies are decoded by :class:`~.framing.EventDecoder`, through the SDK's own
  ``_make_sse_decoder`` hook: proxy framing (``id:``/``event:``/``retry:`` fields, whitespace
  around ``[DONE]``, invalid UTF-8), chunk shapes the stream helper cannot accumulate, the
  ``[DONE]`` every complete DeepSeek stream ends with, and the wire progress the call's deadline
  follows (:mod:`.deadline`).
* It never sends OpenAI account headers (``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID``) to DeepSeek.
"""

from __future__ import annotations

import openai

from dsh_plugins.llm_openai_sdk.deadline import CURRENT
from dsh_plugins.llm_openai_sdk.framing import EventDecoder

__all__ = ["DeepSeekOpenAI", "make_client"]


class DeepSeekOpenAI(openai.AsyncOpenAI):
    """``AsyncOpenAI`` for DeepSeek's endpoint (see the module docstring)."""

    def _make_sse_decoder(self) -> EventDecoder:  # type: ignore[override]
        # The SDK makes the decoder as it wraps the response, inside the adapter's call: the
        # call's deadline is the context's.
        return EventDecoder(CURRENT.get())

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
