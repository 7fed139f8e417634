"""A section of the system prompt, as a plugin or a host registers it
(:meth:`SystemPrompt.section <dsh.llm._prompt.SystemPrompt.section>`): imported when one is
first made, since a harness of the default plugins registers none."""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from dsh.values._value import Value

__all__ = ["PromptSection"]


@frozen(repr=False, eq=False)
class PromptSection(Value):
    """A named part of the system prompt. Lower ``order`` comes first; ``text`` may be a
    function evaluated at every assembly (for content that changes)."""

    name: str
    text: str | Callable[[], str]
    order: int = 0

    def render(self) -> str:
        return self.text() if callable(self.text) else self.text
