"""dsh: an extensible agent harness. A minimal loop driver; everything else is a plugin.

The names below are the embedding API. They are imported lazily so that ``import dsh`` stays
cheap (no plugin, no HTTP client is imported until used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.lazy import imported

if TYPE_CHECKING:
    from dsh.agent import Agent, AgentOptions, Continuation, Retry
    from dsh.errors import ConfigError, DshError, HookError, LlmError, PluginLoadError
    from dsh.harness import Command, Harness
    from dsh.markers import Stop, for_events, hookimpl
    from dsh.output import OutputError
    from dsh.prompt import PromptSection
    from dsh.runner import RunResult, run, run_sync
    from dsh.tooldef import tool
    from dsh.tools import Tool, ToolExecution, ToolOutcome

__all__ = [
    "Agent",
    "AgentOptions",
    "Command",
    "ConfigError",
    "Continuation",
    "DshError",
    "Harness",
    "HookError",
    "LlmError",
    "OutputError",
    "PluginLoadError",
    "PromptSection",
    "Retry",
    "RunResult",
    "Stop",
    "Tool",
    "ToolExecution",
    "ToolOutcome",
    "for_events",
    "hookimpl",
    "run",
    "run_sync",
    "tool",
]
__version__ = "0.1.0"

_HOMES = {
    "Agent": "dsh.agent",
    "AgentOptions": "dsh.agent",
    "Continuation": "dsh.agent",
    "Retry": "dsh.agent",
    "PromptSection": "dsh.prompt",
    "ConfigError": "dsh.errors",
    "DshError": "dsh.errors",
    "HookError": "dsh.errors",
    "LlmError": "dsh.errors",
    "PluginLoadError": "dsh.errors",
    "Command": "dsh.harness",
    "Harness": "dsh.harness",
    "Stop": "dsh.markers",
    "OutputError": "dsh.output",
    "RunResult": "dsh.runner",
    "run": "dsh.runner",
    "run_sync": "dsh.runner",
    "for_events": "dsh.markers",
    "hookimpl": "dsh.markers",
    "Tool": "dsh.tools",
    "ToolExecution": "dsh.tools",
    "ToolOutcome": "dsh.tools",
    "tool": "dsh.tooldef",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)
