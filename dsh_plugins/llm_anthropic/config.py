"""Config section ``llm_anthropic``."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import field, frozen

from dsh.plugin import Value, at_least, greater_than

__all__ = [
    "ANTHROPIC",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODELS",
    "DEEPSEEK",
    "DEEPSEEK_BASE_URL",
    "DEEPSEEK_MODELS",
    "AnthropicConfig",
    "Provider",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_MODELS = ("claude-opus-5", "claude-sonnet-5", "claude-haiku-4-5")
DEEPSEEK_BASE_URL = "https://api.deepseek.com/anthropic"
DEEPSEEK_MODELS = ("deepseek-flash", "deepseek-v4-pro")


@frozen(repr=False, eq=False)
class AnthropicConfig(Value):
    """Where and how the Messages API adapters connect: one for Anthropic (``anthropic/<model>``)
    and one for DeepSeek's Anthropic-format endpoint (``deepseek-anthropic/<model>``).

    ``anthropic_models`` / ``deepseek_models``: the models each lists in ``dsh models``
    (empty: the provider is not served); any other ``<prefix>/<model>`` is served too. Keys
    default to the ``ANTHROPIC_API_KEY`` / ``DEEPSEEK_API_KEY`` environment variables, else the
    key stored with ``dsh keys set anthropic`` / ``dsh keys set deepseek``, read when the
    adapters are built. ``max_tokens`` is sent when a request sets none (the API requires it).
    ``thinking_budget_tokens`` is the ``budget_tokens`` of a request with thinking on (at least
    1024, and below ``max_tokens``). The timeouts, ``max_event_bytes`` and ``max_connections``
    mean what they mean for ``llm_deepseek``: ``idle_timeout_s`` bounds the wait for headers and
    the silence between two events, keep-alives (comments and ``ping`` events) not counting once
    data has started; ``first_data_timeout_s`` bounds the wait for the first data event while
    only keep-alives arrive.
    """

    anthropic_base_url: str = ANTHROPIC_BASE_URL
    anthropic_models: tuple[str, ...] = ANTHROPIC_MODELS
    anthropic_api_key: str | None = field(default=None, repr=False)
    deepseek_base_url: str = DEEPSEEK_BASE_URL
    deepseek_models: tuple[str, ...] = DEEPSEEK_MODELS
    deepseek_api_key: str | None = field(default=None, repr=False)
    max_tokens: int = field(default=16_384, validator=at_least(1))
    thinking_budget_tokens: int = field(default=4_096, validator=at_least(1024))
    connect_timeout_s: float = field(default=10.0, validator=greater_than(0))
    idle_timeout_s: float = field(default=120.0, validator=greater_than(0))
    first_data_timeout_s: float = field(default=600.0, validator=greater_than(0))
    max_event_bytes: int = field(default=4 * 1024 * 1024, validator=at_least(1))
    max_connections: int = field(default=0, validator=at_least(0))


@frozen(repr=False, eq=False)
class Provider(Value):
    """One Messages API provider: the id prefix it serves, its name in messages, where its key
    comes from (environment variable, ``dsh keys`` name, config option), and whether it holds
    ``thinking.budget_tokens`` to Anthropic's rules (DeepSeek ignores the budget, so a request
    Anthropic would refuse is sent as it is)."""

    prefix: str
    name: str
    env_var: str
    key_name: str
    option: str
    checks_budget: bool = True

    def ids(self, models: Iterable[str]) -> list[str]:
        """The ids this provider serves ``models`` under: ``<prefix>/<model>``."""
        return [f"{self.prefix}/{model}" for model in models]


ANTHROPIC = Provider(
    "anthropic", "Anthropic", "ANTHROPIC_API_KEY", "anthropic", "anthropic_api_key"
)
DEEPSEEK = Provider(
    "deepseek-anthropic",
    "DeepSeek (Anthropic format)",
    "DEEPSEEK_API_KEY",
    "deepseek",
    "deepseek_api_key",
    checks_budget=False,
)
