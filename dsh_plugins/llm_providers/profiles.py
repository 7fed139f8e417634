"""The built-in profiles and how a provider's settings are resolved against them.

The facts behind each profile (with the documentation they come from) are in
``docs/providers.md``; a profile only fills what the user's table leaves unset.
"""

from __future__ import annotations

from typing import TypeVar

from attrs import field, frozen

from dsh.plugin import ConfigError, ModelInfo, Price, Value
from dsh_plugins.llm_providers.config import (
    ModelSettings,
    ProviderSettings,
    ReasoningField,
    ReasoningPassback,
    TokenLimitField,
)

__all__ = ["DEFAULT_CAPS", "PROFILES", "Profile", "Provider", "listed_caps", "resolve"]

T = TypeVar("T")


@frozen(repr=False, eq=False)
class Profile(Value):
    """What a built-in endpoint is: where it listens, the key it wants (``key_required``:
    it refuses requests without one) and its wire quirks."""

    base_url: str
    api_key_env: str | None
    key_required: bool
    token_limit_field: TokenLimitField = "max_tokens"
    reasoning_field: ReasoningField = "none"
    stream_options: bool = True
    cached_tokens: bool = True
    reasoning_passback: ReasoningPassback = "none"


PROFILES: dict[str, Profile] = {
    "openai": Profile(
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        key_required=True,
        token_limit_field="max_completion_tokens",
    ),
    "openrouter": Profile(
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
        key_required=True,
        reasoning_field="reasoning",
        reasoning_passback="reasoning_details",
    ),
    "ollama": Profile("http://localhost:11434/v1", None, False, reasoning_field="reasoning"),
    "vllm": Profile("http://localhost:8000/v1", "VLLM_API_KEY", False, reasoning_field="auto"),
    # llama-server sends usage (and its own ``timings``) with the last chunk unasked.
    "llamacpp": Profile(
        "http://localhost:8080/v1",
        "LLAMA_API_KEY",
        False,
        reasoning_field="reasoning_content",
        stream_options=False,
    ),
}


#: What a model the config does not list is taken to do: tools yes (an agent needs them; a
#: model without sends an error the user sees at once), images no (each is sent as a note),
#: JSON mode no (a ``json_object`` request fails before it is sent), reasoning unknown, windows
#: and price unknown.
DEFAULT_CAPS = ModelSettings(tools=True, image_input=False, json_mode=False)


@frozen(repr=False, eq=False)
class Provider(Value):
    """A provider as the adapter uses it: every setting decided."""

    name: str
    base_url: str
    api_key_env: str | None
    key_required: bool
    models: dict[str, ModelSettings]
    token_limit_field: TokenLimitField
    reasoning_field: ReasoningField
    stream_options: bool
    cached_tokens: bool
    send_reasoning: bool
    reasoning_passback: ReasoningPassback
    settings: ProviderSettings
    #: The models ``dsh models --refresh`` cached for this provider (see
    # :mod:`dsh.app._modelcache`).
    listed: dict[str, ModelSettings] = field(factory=dict)

    @property
    def key_hint(self) -> str:
        """How the user gives this provider a key."""
        env = f"set {self.api_key_env} or " if self.api_key_env else ""
        return f"{env}store one with 'dsh keys set {self.name}'"

    def model_ids(self) -> list[str]:
        """The ids its models are served under (``<provider>/<model>``): those of its table
        and those its cached listing names."""
        return [f"{self.name}/{model}" for model in {**self.listed, **self.models}]

    def caps(self, model: str) -> ModelSettings:
        """What ``model`` (its wire name) can do: its table entry, else what the provider's
        cached listing reported, else :data:`DEFAULT_CAPS`."""
        found = self.models.get(model)
        return found if found is not None else self.listed.get(model, DEFAULT_CAPS)


def listed_caps(info: ModelInfo) -> ModelSettings:
    """What a provider's model listing reported, as a table entry: anything it did not report
    is :data:`DEFAULT_CAPS`'s (only a flat price is kept)."""
    return ModelSettings(
        context_window=info.context_window,
        max_output_tokens=info.max_output_tokens,
        tools=_pick(info.tools, DEFAULT_CAPS.tools),
        image_input=_pick(info.image_input, DEFAULT_CAPS.image_input),
        json_mode=_pick(info.json_mode, DEFAULT_CAPS.json_mode),
        reasoning=info.thinking_default,
        price=info.pricing if isinstance(info.pricing, Price) else None,
    )


def _pick(value: T | None, default: T) -> T:
    return default if value is None else value


def resolve(
    name: str, settings: ProviderSettings, listed: dict[str, ModelInfo] | None = None
) -> Provider:
    """``settings`` over the profile ``name`` (a custom provider has none: it must name its
    ``base_url``, and it needs a key only when it names ``api_key_env``); ``listed``: the
    provider's cached model listing."""
    profile = PROFILES.get(name)
    if profile is None:
        if not settings.base_url:
            raise ConfigError(
                [
                    f"[llm_providers.custom.{name}] has no base_url: give the endpoint's URL "
                    'without /chat/completions, e.g. base_url = "https://host/v1"'
                ]
            )
        profile = Profile(settings.base_url, None, settings.api_key_env is not None)
    reasoning_field = _pick(settings.reasoning_field, profile.reasoning_field)
    return Provider(
        name=name,
        base_url=_pick(settings.base_url, profile.base_url).rstrip("/"),
        api_key_env=_pick(settings.api_key_env, profile.api_key_env),
        key_required=profile.key_required,
        models=dict(settings.models),
        token_limit_field=_pick(settings.token_limit_field, profile.token_limit_field),
        reasoning_field=reasoning_field,
        stream_options=_pick(settings.stream_options, profile.stream_options),
        cached_tokens=_pick(settings.cached_tokens, profile.cached_tokens),
        send_reasoning=_pick(settings.send_reasoning, False) and reasoning_field != "none",
        reasoning_passback=_pick(settings.reasoning_passback, profile.reasoning_passback),
        settings=settings,
        listed={model: listed_caps(info) for model, info in (listed or {}).items()},
    )
