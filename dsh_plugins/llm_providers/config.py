"""Config section ``llm_providers``: which OpenAI-compatible endpoints to serve, their models
and what each model can do, and the wire quirks that set one endpoint apart from another."""

from __future__ import annotations

from typing import Any, Literal

from attrs import field, frozen

from dsh.plugin import Price, Value, at_least, greater_than

__all__ = [
    "BUILT_IN",
    "LlmProvidersConfig",
    "ModelSettings",
    "ProviderSettings",
    "ReasoningField",
    "ReasoningPassback",
    "TokenLimitField",
]

#: Where an endpoint streams reasoning text: DeepSeek and vLLM before 0.11 say
#: ``reasoning_content``, OpenRouter, Ollama and vLLM from 0.11 say ``reasoning``; ``auto``
#: reads ``reasoning_content`` and else ``reasoning`` (a gateway sending both sends one text
#: twice, so one is read per chunk); ``none`` reads neither.
ReasoningField = Literal["reasoning_content", "reasoning", "auto", "none"]
#: How a gateway carries signed reasoning (Anthropic thinking blocks and their signatures)
#: that must come back on the assistant message: LiteLLM in ``thinking_blocks``, OpenRouter in
#: ``reasoning_details``; ``none`` keeps only the reasoning text.
ReasoningPassback = Literal["none", "thinking_blocks", "reasoning_details"]
#: The name of the output limit in the request body: OpenAI deprecated ``max_tokens`` for
#: ``max_completion_tokens``; most other servers only know ``max_tokens``.
TokenLimitField = Literal["max_tokens", "max_completion_tokens"]

#: The built-in profiles, in the order ``dsh models`` lists them.
BUILT_IN = ("openai", "openrouter", "ollama", "vllm", "llamacpp")


def _positive(instance: Any, attribute: Any, value: int | None) -> None:
    """A token count: unset, or at least 1."""
    if value is not None:
        at_least(1)(instance, attribute, value)


@frozen(repr=False, eq=False)
class ModelSettings(Value):
    """What one model can do (``llm_providers.<provider>.models.<model>``).

    ``context_window`` and ``max_output_tokens`` are token counts (``None``: unknown; the
    compaction plugin then falls back on its default window). ``tools``: the model takes tool
    schemas (without, none are sent and it only answers in text). ``image_input``: it reads
    images (without, an image in the history is sent as a note saying one was left out).
    ``json_mode``: it accepts ``response_format: json_object`` (without, such a request fails
    ``INVALID_REQUEST`` before anything is sent). ``reasoning``: it reasons by default.
    ``price``: US dollars per million tokens, for the usage line and budgets.
    """

    context_window: int | None = field(default=None, validator=_positive)
    max_output_tokens: int | None = field(default=None, validator=_positive)
    tools: bool = True
    image_input: bool = False
    json_mode: bool = True
    reasoning: bool | None = None
    price: Price | None = None


@frozen(repr=False, eq=False)
class ProviderSettings(Value):
    """One provider (``llm_providers.<name>``, or ``llm_providers.custom.<name>``).

    Every field left unset takes the built-in profile's value (a custom provider has none,
    so it must give ``base_url``). ``api_key_env`` names the environment variable holding the
    key; else the key stored with ``dsh keys set <provider>`` is used; local servers need none.
    ``models`` maps the model name the endpoint knows (it may contain ``/``, as OpenRouter's
    do) to what it can do; each is served as ``<provider>/<model>``. A model it does not list
    is served too, as ``<provider>/<model>``, with conservative defaults (tools yes, images
    no, JSON mode no, reasoning, windows and price unknown); an entry overrides them.

    Quirks: ``token_limit_field`` (``max_tokens`` or ``max_completion_tokens``),
    ``reasoning_field`` (see :data:`ReasoningField`), ``stream_options`` (send
    ``stream_options: {include_usage: true}``; servers that reject unknown fields need
    ``false``), ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens`` counts cache
    reads inside ``prompt_tokens``), ``send_reasoning`` (pass earlier reasoning back in the
    ``reasoning_field`` of assistant messages), ``reasoning_passback`` (where a gateway puts
    signed reasoning blocks: ``thinking_blocks`` for LiteLLM, ``reasoning_details`` for
    OpenRouter, ``none``; they are kept with the reasoning and sent back verbatim on the
    assistant message, as a Claude model behind the gateway needs in a thinking tool loop).
    ``headers`` are added to every request (e.g.
    OpenRouter's ``HTTP-Referer`` and ``X-Title``), ``extra_body`` to every request body (e.g.
    OpenRouter's ``provider`` routing); neither may carry the key.

    ``idle_timeout_s`` bounds the wait for response headers and the silence between events;
    ``first_data_timeout_s`` how long keep-alive comments may hold off the first event (a
    queued request); ``max_event_bytes`` the size of one server-sent event.
    """

    base_url: str | None = None
    api_key_env: str | None = None
    models: dict[str, ModelSettings] = field(factory=dict)
    token_limit_field: TokenLimitField | None = None
    reasoning_field: ReasoningField | None = None
    stream_options: bool | None = None
    cached_tokens: bool | None = None
    send_reasoning: bool | None = None
    reasoning_passback: ReasoningPassback | None = None
    headers: dict[str, str] = field(factory=dict)
    extra_body: dict[str, Any] = field(factory=dict)
    connect_timeout_s: float = field(default=10.0, validator=greater_than(0))
    idle_timeout_s: float = field(default=120.0, validator=greater_than(0))
    first_data_timeout_s: float = field(default=600.0, validator=greater_than(0))
    max_event_bytes: int = field(default=4 * 1024 * 1024, validator=at_least(1024))


@frozen(repr=False, eq=False)
class LlmProvidersConfig(Value):
    """Section ``llm_providers``: a built-in profile is served once its table is present
    (``[llm_providers.openrouter]`` is enough: any ``openrouter/<model>`` then works);
    ``custom`` holds any other OpenAI-compatible endpoint by name."""

    openai: ProviderSettings | None = None
    openrouter: ProviderSettings | None = None
    ollama: ProviderSettings | None = None
    vllm: ProviderSettings | None = None
    llamacpp: ProviderSettings | None = None
    custom: dict[str, ProviderSettings] = field(factory=dict)

    def named(self) -> dict[str, ProviderSettings]:
        """Every provider the config names, built-in ones first."""
        found = {name: getattr(self, name) for name in BUILT_IN}
        return {name: s for name, s in found.items() if s is not None} | dict(self.custom)
