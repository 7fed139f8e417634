"""Config section ``llm_openai_sdk``: the same shape as ``llm_deepseek``, so switching adapters
never means learning new options."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import field, frozen

from dsh.plugin import Value, greater_than
from dsh.plugin import deepseek_served_ids as served_ids

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODELS",
    "INSTALL",
    "PROVIDER",
    "OpenAISdkConfig",
    "served_model_ids",
]

#: The prefix of the ids this plugin serves (``deepseek-sdk/<model>``, never bare names).
PROVIDER = "deepseek-sdk"
#: What installs the SDK.
INSTALL = "pip install 'dsh-harness[openai]'"

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODELS = ("deepseek-flash", "deepseek-v4-pro")


@frozen(repr=False, eq=False)
class OpenAISdkConfig(Value):
    """Where and how the SDK adapter connects.

    ``models``: the models served; a current name also brings the retired names the API still
    accepts for it (``deepseek-v4-flash`` for ``deepseek-flash``, sent as the current name).

    ``api_key`` defaults to the ``DEEPSEEK_API_KEY`` environment variable (never to
    ``OPENAI_API_KEY``), else the key stored with ``dsh keys set deepseek``, read when the
    adapter is built. ``idle_timeout_s`` bounds the wait for
    the response headers and for the next chunk; once data has started, keep-alive comments do
    not count as progress. ``first_data_timeout_s`` bounds the wait for the first data event
    while the server holds the request open with ``: keep-alive`` comments (DeepSeek queues a
    request under load for up to 10 minutes before inference starts: a queue, not a stall).
    ``connect_timeout_s`` bounds the TCP/TLS connect.
    """

    base_url: str = DEFAULT_BASE_URL
    models: tuple[str, ...] = DEFAULT_MODELS
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = field(default=10.0, validator=greater_than(0))
    idle_timeout_s: float = field(default=120.0, validator=greater_than(0))
    first_data_timeout_s: float = field(default=600.0, validator=greater_than(0))


def served_model_ids(models: Iterable[str]) -> list[str]:
    """Every id the adapter serves for ``models``: each one, and the retired names the API
    still accepts for it (DeepSeek's model table), ``deepseek-sdk/``-prefixed."""
    prefix = f"{PROVIDER}/"
    return [name for name in served_ids(models, PROVIDER) if name.startswith(prefix)]
