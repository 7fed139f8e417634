"""The system prompt: ordered sections plus the tool schemas, assembled before every request."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attrs import frozen

from dsh.values._errors import DshError
from dsh.values._request import ToolSchema
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.hooks._caller import Hooks
    from dsh.llm._section import PromptSection
    from dsh.tools._registry import ToolRegistry

__all__ = ["PromptAssembly", "SystemPrompt", "render"]


@frozen(repr=False, eq=False)
class PromptAssembly(Value):
    sections: tuple[PromptSection, ...]
    tools: tuple[ToolSchema, ...]


def render(assembly: PromptAssembly) -> str:
    """Section texts, empty ones skipped, joined by blank lines."""
    return "\n\n".join(text for s in assembly.sections if (text := s.render()))


class SystemPrompt:
    def __init__(self, hooks: Hooks, tools: ToolRegistry) -> None:
        self._hooks = hooks
        self._tools = tools
        self._sections: dict[str, PromptSection] = {}

    def section(self, section: PromptSection) -> Callable[[], None]:
        """Add a section; returns its disposer. Names are unique."""
        if section.name in self._sections:
            raise DshError(f"prompt section {section.name!r} is registered twice")
        self._sections[section.name] = section

        def dispose() -> None:
            if self._sections.get(section.name) is section:
                del self._sections[section.name]

        return dispose

    def sections(self) -> tuple[PromptSection, ...]:
        return tuple(sorted(self._sections.values(), key=lambda s: s.order))

    async def assemble(self) -> PromptAssembly:
        """Sections in order and the registered tools, through ``dsh_system_prompt_assemble``."""
        assembly = PromptAssembly(self.sections(), self._tools.schemas())
        return await self._hooks.system_prompt_assemble(assembly)
