"""The Harness: one plugin manager, one config, the five services and the agent loop.

Use it as an async context manager. There is no module-level mutable state, so two harnesses
with different plugins can run side by side in one event loop.
"""

from __future__ import annotations

import asyncio
import reprlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from attrs import frozen

from dsh._log import get_logger
from dsh.hooks._caller import Hooks
from dsh.hooks._loading import Plugins, disabled_from_env
from dsh.llm._prompt import SystemPrompt
from dsh.llm._service import LlmService
from dsh.loop._agents import AgentRegistry
from dsh.loop._family import PLUGIN_NAME as FAMILY
from dsh.loop._family import Family
from dsh.loop._loop import AgentLoop
from dsh.loop._output import PLUGIN_NAME, OutputPlugin
from dsh.loop._toolset import PLUGIN_NAME as TOOLSET
from dsh.loop._toolset import ToolSet
from dsh.session._codec import EventCodec
from dsh.session._session import SessionRegistry
from dsh.tools._registry import (
    POLICY_SECTION,
    InvalidTool,
    NoPolicyConfig,
    Tool,
    ToolRegistry,
    ToolsConfig,
)
from dsh.values._config import AgentLoopConfig, Config, load_toml
from dsh.values._errors import ConfigError, DshError
from dsh.values._value import Value

__all__ = ["Command", "Harness"]

log = get_logger("dsh.harness")


@frozen(repr=False, eq=False)
class Command(Value):
    """A CLI subcommand contributed through ``dsh_register_commands``.

    ``configure(parser)`` adds arguments to its ``argparse`` parser; ``run(args)`` returns the
    exit code (or an awaitable of it).
    """

    name: str
    help: str
    run: Callable[[Any], Any]
    configure: Callable[[Any], None] | None = None


class Harness:
    """Owns plugins, config and services. ``async with Harness(...) as h:`` starts and stops it.

    ``plugins`` are registered after the entry-point plugins (so they are called first);
    ``config`` is a mapping or a path to a TOML file; ``disabled`` defaults to the
    ``DSH_DISABLE_PLUGINS`` environment variable; ``strict`` makes a broken plugin fatal;
    ``sleep`` is how retries wait (a fake clock in tests).
    """

    def __init__(
        self,
        plugins: Iterable[object] = (),
        config: Mapping[str, Any] | str | Path | None = None,
        *,
        load_entrypoints: bool = True,
        disabled: Iterable[str] | None = None,
        strict: bool = False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not (config is None or isinstance(config, Mapping | str | Path)):
            raise ConfigError(
                [
                    f"Harness(config=...) takes a mapping of section names to tables, or the "
                    f"path of a TOML file (str or Path); got {type(config).__name__} "
                    f"{reprlib.repr(config)}"
                ]
            )
        raw = load_toml(config) if isinstance(config, str | Path) else config
        self.config = Config(raw)
        #: The directory of the config file (``None`` for a mapping or no config): agent
        #: profiles' ``output_type`` paths import relative to it.
        self.config_dir = Path(config).resolve().parent if isinstance(config, str | Path) else None
        self.plugins = Plugins(disabled_from_env() if disabled is None else disabled, strict)
        self.hooks = Hooks(self.plugins.runtime)
        self.events = EventCodec()
        self.agents = AgentRegistry()
        self.sessions = SessionRegistry(self.hooks, self.events)
        self.llm = LlmService(self.hooks)
        self.tools = ToolRegistry(self.hooks)
        self.system_prompt = SystemPrompt(self.hooks, self.tools)
        self.agent_loop = AgentLoop(self)
        #: Which agents are sub-agents of which (``agent_loop.create(..., parent=agent)``).
        self.family = Family(self)
        self.commands: dict[str, Command] = {}
        #: Services plugins offer to hosts, reachable as attributes (``harness.compaction``).
        self.services: dict[str, Any] = {}
        #: How the loop waits before a retry; tests pass a fake that records and returns.
        self.sleep = sleep
        self._host_plugins = list(plugins)
        self._load_entrypoints = load_entrypoints
        self.loaded = False
        self.started = False

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not regular attributes: plugin services.
        services = self.__dict__.get("services", {})
        if name in services:
            return services[name]
        raise AttributeError(
            f"'Harness' has no attribute {name!r}"
            + (f" (plugin services: {', '.join(sorted(services))})" if services else "")
        )

    def add_service(self, name: str, service: Any) -> Callable[[], None]:
        """Offer ``service`` to hosts as ``harness.<name>``; returns its disposer."""
        if name in self.services or name in self.__dict__ or hasattr(type(self), name):
            raise DshError(f"harness attribute {name!r} is already taken")
        self.services[name] = service

        def dispose() -> None:
            self.services.pop(name, None)

        return dispose

    async def __aenter__(self) -> Harness:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def load(self) -> None:
        """Load plugins, collect their contributions and load the config (idempotent).

        ``start`` does this first; the CLI calls it alone to learn the plugins' commands.
        """
        if self.loaded:
            return
        # Typed results are core (AgentOptions.output_type); first registered, so called last.
        self.plugins.register(OutputPlugin(self), PLUGIN_NAME)
        self.plugins.register(self.family, FAMILY)
        self.plugins.register(ToolSet(), TOOLSET)  # after the output: filters before it adds
        if self._load_entrypoints:
            self.plugins.load_entrypoints()
        for plugin in self._host_plugins:
            self.plugins.register(plugin)
        self.plugins.warn_unknown_disabled()
        self._collect()
        self.loaded = True

    async def start(self) -> None:
        """Load, announce ``dsh_harness_start``, create the agents listed in config."""
        if self.started:
            raise DshError("the harness is already started")
        self.load()
        self.started = True
        await self.hooks.harness_start(self)
        self.plugins.runtime.invalidate()  # plugins configured: who takes part in sessions
        self.agent_loop.create_configured()

    def _collect(self) -> None:
        runtime = self.plugins.runtime
        self.config.register("agent_loop", AgentLoopConfig)
        self.config.register("tools", ToolsConfig)
        runtime.call_register(
            "dsh_register_config",
            lambda owner: lambda s, c: self.config.register(s, c, owner),
            self,
        )
        unpoliced = POLICY_SECTION not in self.config.sections()  # no policy plugin: fail closed
        if unpoliced:
            self.config.register(POLICY_SECTION, NoPolicyConfig)
        self.config.load()
        self.tools.configure(self.config.section("tools", ToolsConfig))
        if unpoliced:
            self.tools.no_policy = self.config.section(POLICY_SECTION, NoPolicyConfig)
        runtime.call_register("dsh_register_event_types", lambda _: self.events.register, self)
        runtime.call_register(
            "dsh_register_llm_adapters",
            lambda owner: lambda models, adapter: self.llm.register_adapter(models, adapter, owner),
            self,
        )
        runtime.call_register("dsh_register_tools", self._tool_register, self)
        runtime.call_register(
            "dsh_register_prompt_sections", lambda _: self.system_prompt.section, self
        )
        runtime.call_register("dsh_register_commands", lambda _: self._add_command, self)
        self._warn_without_policy()

    def _tool_register(self, owner: str) -> Callable[[Tool], Callable[[], None]]:
        """``register`` for ``owner``'s ``dsh_register_tools``: a tool the registry refuses for
        its name or schema is logged and left out, and the plugin's other tools go on."""

        def register(tool: Tool) -> Callable[[], None]:
            try:
                return self.tools.register(tool, owner)
            except InvalidTool as exc:
                log.error("tool refused", plugin=owner, tool=exc.tool, error=exc.message)
                return _nothing

        return register

    def _warn_without_policy(self) -> None:
        """Say once, at load, that tools are held back because no permission policy is loaded."""
        held = self.tools.held_back()
        if held:
            log.warning(
                "no permission policy is loaded: these tools are denied until the permissions "
                'plugin is enabled or [permissions] mode = "full"',
                tools=held,
            )

    def _add_command(self, command: Command) -> Callable[[], None]:
        if command.name in self.commands:
            raise DshError(f"CLI command {command.name!r} is registered twice")
        self.commands[command.name] = command

        def dispose() -> None:
            self.commands.pop(command.name, None)

        return dispose

    async def close(self) -> None:
        """Dispose every agent, flush every session, announce stop, close the adapters."""
        if not self.started:
            return
        self.started = False
        for agent in self.agents.list():
            await agent.dispose()
        try:
            await self.sessions.flush_all()
        finally:
            await self.hooks.harness_stop(self)
            await self.llm.aclose()


def _nothing() -> None:
    """The disposer of a tool that was refused."""
