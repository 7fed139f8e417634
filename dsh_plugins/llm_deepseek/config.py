"""Config section ``llm_deepseek``."""

from __future__ import annotations

from attrs import field, frozen

from dsh.plugin import Value, at_least, greater_than

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODELS", "PROVIDER", "DeepSeekConfig"]

#: The prefix of the ids this plugin serves (``deepseek/<model>``; bare names too).
PROVIDER = "deepseek"
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODELS = ("deepseek-flash", "deepseek-v4-pro")


@frozen(repr=False, eq=False)
class DeepSeekConfig(Value):
    """Where and how the DeepSeek adapter connects.

    ``models``: the models served; a current name also brings the retired names the API still
    accepts for it (``deepseek-v4-flash`` for ``deepseek-flash``, sent as the current name).

    ``api_key`` defaults to the ``DEEPSEEK_API_KEY`` environment variable, else the key stored
    with ``dsh keys set deepseek``, read when the adapter is built. ``idle_timeout_s`` bounds
    the wait for response headers and the silence between two SSE events; keep-alive comments do
    not count as progress once data has started. ``first_data_timeout_s`` bounds the wait for
    the first data event while the server keeps the request open with ``: keep-alive`` comments
    (DeepSeek queues a request under load for up to 10 minutes before inference starts; that
    wait is not a stall). ``max_event_bytes`` bounds one SSE event (a stream past it fails
    ``MALFORMED_RESPONSE``). ``max_connections`` bounds the open connections of one harness (0:
    no bound; aiohttp's default of 100 would queue the requests of the 101st concurrent agent
    behind the others).
    """

    base_url: str = DEFAULT_BASE_URL
    models: tuple[str, ...] = DEFAULT_MODELS
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = field(default=10.0, validator=greater_than(0))
    idle_timeout_s: float = field(default=120.0, validator=greater_than(0))
    first_data_timeout_s: float = field(default=600.0, validator=greater_than(0))
    max_event_bytes: int = field(default=4 * 1024 * 1024, validator=at_least(1))
    max_connections: int = field(default=0, validator=at_least(0))
