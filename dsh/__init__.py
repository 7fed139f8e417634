"""dsh: an extensible agent harness. A minimal loop driver; everything else is a plugin.

The names below are the embedding API. They are imported lazily so that ``import dsh`` stays
cheap (no plugin, no HTTP client is imported until used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh._lazy import imported

if TYPE_CHECKING:
    from dsh.app._harness import Command, Harness
    from dsh.app._runner import RunResult, run, run_sync
    from dsh.hooks._markers import Stop, for_events, hookimpl
    from dsh.llm._section import PromptSection
    from dsh.loop._output import OutputError
    from dsh.session._rewind import RewindReport
    from dsh.tools._define import tool
    from dsh.tools._registry import Tool, ToolExecution, ToolOutcome
    from dsh.values._agent import Agent, AgentOptions, Continuation, Retry
    from dsh.values._approval import AlreadyDecided, PendingApproval
    from dsh.values._errors import ConfigError, DshError, HookError, LlmError, PluginLoadError

__all__ = [
    "Agent",
    "AgentOptions",
    "AlreadyDecided",
    "Command",
    "ConfigError",
    "Continuation",
    "DshError",
    "Harness",
    "HookError",
    "LlmError",
    "OutputError",
    "PendingApproval",
    "PluginLoadError",
    "PromptSection",
    "Retry",
    "RewindReport",
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
    "Agent": "dsh.values._agent",
    "AgentOptions": "dsh.values._agent",
    "Continuation": "dsh.values._agent",
    "Retry": "dsh.values._agent",
    "AlreadyDecided": "dsh.values._approval",
    "PendingApproval": "dsh.values._approval",
    "PromptSection": "dsh.llm._section",
    "ConfigError": "dsh.values._errors",
    "DshError": "dsh.values._errors",
    "HookError": "dsh.values._errors",
    "LlmError": "dsh.values._errors",
    "PluginLoadError": "dsh.values._errors",
    "Command": "dsh.app._harness",
    "Harness": "dsh.app._harness",
    "Stop": "dsh.hooks._markers",
    "OutputError": "dsh.loop._output",
    "RewindReport": "dsh.session._rewind",
    "RunResult": "dsh.app._runner",
    "run": "dsh.app._runner",
    "run_sync": "dsh.app._runner",
    "for_events": "dsh.hooks._markers",
    "hookimpl": "dsh.hooks._markers",
    "Tool": "dsh.tools._registry",
    "ToolExecution": "dsh.tools._registry",
    "ToolOutcome": "dsh.tools._registry",
    "tool": "dsh.tools._define",
}


def __getattr__(name: str) -> Any:
    return imported(__name__, name, _HOMES)
