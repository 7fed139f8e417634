"""The exception tree. Every error a user can cause says what happened and what to do."""

from __future__ import annotations

from dsh.values._chunks import LlmFailure

__all__ = ["ConfigError", "DshError", "HookError", "LlmError", "PluginLoadError"]


class DshError(Exception):
    """Base of every error dsh raises on purpose."""


class ConfigError(DshError):
    """The configuration is invalid. ``errors`` lists every problem found, not just the first."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {e}" for e in errors))


class PluginLoadError(DshError):
    """A plugin could not be loaded or registered."""


class HookError(DshError):
    """A plugin's hook implementation raised; the message names the plugin and the hook."""

    def __init__(self, hook: str, plugin: str, error: BaseException) -> None:
        self.hook = hook
        self.plugin = plugin
        self.error = error
        super().__init__(f"plugin {plugin!r} failed in {hook}: {type(error).__name__}: {error}")


class LlmError(DshError):
    """A model call failed. ``failure`` carries the canonical code and provider details."""

    def __init__(self, failure: LlmFailure) -> None:
        self.failure = failure
        super().__init__(f"{failure.code}: {failure.message}")

    @classmethod
    def of(cls, code: str, message: str, **details: object) -> LlmError:
        return cls(LlmFailure(message=message, code=code, **details))  # type: ignore[arg-type]
