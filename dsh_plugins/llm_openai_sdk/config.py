"""Config section ``llm_openai_sdk``: the same shape as ``llm_deepseek``, so switching adapters
never means learning new options."""

from __future__ import annotations

from attrs import field, frozen

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODELS", "OpenAISdkConfig"]

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")


@frozen
class OpenAISdkConfig:
    """Where and how the SDK adapter connects.

    ``api_key`` defaults to the ``DEEPSEEK_API_KEY`` environment variable (never to
    ``OPENAI_API_KEY``), read when the adapter is built. ``idle_timeout_s`` bounds the wait for
    the response headers and for the next chunk; keep-alive comments do not count as progress.
    ``connect_timeout_s`` bounds the TCP/TLS connect.
    """

    base_url: str = DEFAULT_BASE_URL
    models: tuple[str, ...] = DEFAULT_MODELS
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
