"""Plugin discovery and registration: the ``dsh`` entry-point group over pluggy.

Entry points are loaded sorted by name and deduplicated; a class is instantiated once per
harness (so plugins keep their state on ``self``, never in module globals). One broken plugin is
reported with its distribution and skipped; ``strict`` makes it fatal. ``DSH_DISABLE_PLUGINS``
blocks plugins by name (a name that matches no plugin is warned about). Functions named
``dsh_*`` are hook implementations even without the ``@hookimpl`` marker, so a misspelled hook
name fails loudly instead of being ignored; special names (``__init__``, ``__call__``...) never
are.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Hashable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pluggy
from attrs import frozen

from dsh._log import get_logger
from dsh.hooks import _entrypoints
from dsh.hooks import _specs as hookspecs
from dsh.hooks._caller import HOOK_STYLES, HookRuntime, check_impl
from dsh.hooks._entrypoints import EntryPointLike, entry_points, origin
from dsh.hooks._markers import PROJECT
from dsh.values._errors import PluginLoadError
from dsh.values._value import Value

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = [
    "ENTRY_POINT_GROUP",
    "DistributionInfo",
    "LoadFailure",
    "PluginInfo",
    "Plugins",
    "disabled_from_env",
]

ENTRY_POINT_GROUP = "dsh"
#: The name prefix of the core's own hook implementations (not plugins: `names` leaves them out).
CORE_PREFIX = "dsh:"

log = get_logger("dsh.plugins")
#: The attribute ``@hookimpl`` sets on a function it marks.
_MARKER = f"{PROJECT}_impl"


def disabled_from_env() -> frozenset[str]:
    raw = os.environ.get("DSH_DISABLE_PLUGINS", "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


class DistributionInfo:
    """The name and version of a distribution that ships plugins, read from its metadata the
    first time either is asked for (``dsh plugins``, a plugin that fails to load), and once for
    all its plugins (dsh's own ships many): parsing the metadata imports :mod:`email` (and
    finding the distribution :mod:`importlib.metadata`), which a start of dsh never needs
    otherwise. ``ep``: one of its entry points."""

    def __init__(self, ep: EntryPointLike) -> None:
        self.ep = ep

    @cached_property
    def dist(self) -> Distribution:
        dist = self.ep.dist
        assert dist is not None  # an entry point without one has no DistributionInfo
        return dist

    @cached_property
    def _metadata(self) -> tuple[str, str]:
        metadata = self.dist.metadata  # once: ``dist.name`` and ``dist.version`` each parse it
        return metadata["Name"], metadata["Version"]

    @property
    def name(self) -> str:
        return self._metadata[0]

    @property
    def version(self) -> str:
        return self._metadata[1]


@frozen(repr=False, eq=False)
class PluginInfo(Value):
    """A plugin's name and the distribution it came from (``None``: the host registered it)."""

    name: str
    source: DistributionInfo | None = None

    @property
    def distribution(self) -> str | None:
        return None if self.source is None else self.source.name

    @property
    def version(self) -> str | None:
        return None if self.source is None else self.source.version


@frozen(repr=False, eq=False)
class LoadFailure(Value):
    name: str
    distribution: str | None
    error: str


def _class_attribute(plugin: object, name: str) -> object:
    """What ``plugin``'s class holds under ``name`` (``None`` if nothing), without running a
    descriptor."""
    for klass in type(plugin).__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return found
    return None


def _not_a_hook(plugin: object, name: str) -> bool:
    """Whether ``plugin.name`` is surely no hook implementation, told without pluggy's static
    attribute lookup (~5 µs a name, and a harness start looks up ~800): a property (pluggy
    before 1.6 reads every attribute with ``getattr``, which runs the property: work, imports
    or an error at registration), or a plain method of its class without the marker whose name
    does not start with ``dsh_`` (an instance attribute of that name is left to pluggy)."""
    found = _class_attribute(plugin, name)
    if isinstance(found, property):
        return True
    return (
        inspect.isfunction(found)
        and not hasattr(found, _MARKER)
        and not name.startswith("dsh_")
        and name not in getattr(plugin, "__dict__", ())
    )


class _Manager(pluggy.PluginManager):
    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        """The hook options of ``plugin.name``. Special (``__dunder__``) names are never hook
        implementations and are skipped before pluggy's static attribute lookup, which costs
        ~5 µs a name: a plugin instance has ~30 of them, and every harness registers ~20
        plugins, so this was ~4 ms of each harness start. So are the names
        :func:`_not_a_hook` tells (another 0.8 ms)."""
        if (name.startswith("__") and name.endswith("__")) or _not_a_hook(plugin, name):
            return None
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith("dsh_") and callable(getattr(plugin, name, None)):
            opts = {
                "wrapper": False,
                "hookwrapper": False,
                "optionalhook": False,
                "tryfirst": False,
                "trylast": False,
                "specname": None,
            }
        return opts


class Plugins:
    """The harness's plugin manager and what it loaded."""

    def __init__(self, disabled: Iterable[str] = (), strict: bool = False) -> None:
        self.pm = _Manager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.runtime = HookRuntime(self.pm)
        self.disabled = frozenset(disabled)
        self.strict = strict
        self.info: dict[str, PluginInfo] = {}
        self.failures: list[LoadFailure] = []
        self._offered: set[str] = set()  # every name a plugin was offered under
        self._installed: set[str] = set()  # the entry points load_entrypoints found
        self._sources: dict[Hashable, DistributionInfo] = {}
        for name in self.disabled:
            self.pm.set_blocked(name)

    def register(
        self, plugin: object, name: str | None = None, info: PluginInfo | None = None
    ) -> str:
        """Register ``plugin`` (a module, an instance, or a class to instantiate).

        Raises :class:`PluginLoadError` if it implements an unknown hook or breaks a call style.
        """
        if inspect.isclass(plugin):
            plugin = plugin()
        name = name or self._free_name(getattr(plugin, "__name__", None) or type(plugin).__name__)
        self._offered.add(name)
        if name in self.disabled:
            return name
        try:
            self.pm.register(plugin, name=name)
        except ValueError as exc:
            raise PluginLoadError(f"plugin {name!r} cannot be registered: {exc}") from exc
        try:
            self._validate(plugin)
        except PluginLoadError:
            self.pm.unregister(plugin)
            raise
        finally:
            self.runtime.invalidate()
        self.info[name] = info or PluginInfo(name)
        return name

    def _free_name(self, base: str) -> str:
        """``base``, or ``base#2``, ``base#3``... so that two instances of a class can coexist."""
        name, n = base, 1
        while self.pm.has_plugin(name):
            n += 1
            name = f"{base}#{n}"
        return name

    def _validate(self, plugin: object) -> None:
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.name not in HOOK_STYLES:
                raise PluginLoadError(
                    f"plugin {self.pm.get_name(plugin)!r} implements {caller.name!r}, which is "
                    f"not a dsh hook; known hooks: {', '.join(sorted(HOOK_STYLES))}"
                )
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin:
                    check_impl(caller.name, impl)

    def load_entrypoints(self) -> None:
        seen: set[str] = set()
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            self._installed.add(ep.name)
            if ep.name in seen or ep.name in self.disabled:
                continue
            seen.add(ep.name)
            self._load(ep)

    def warn_unknown_disabled(self) -> list[str]:
        """Log a warning naming each disabled name that no plugin has (a typo in
        ``DSH_DISABLE_PLUGINS`` would otherwise leave the plugin enabled without a word), and
        return those names. Installed entry points count even when they were not loaded."""
        if not self.disabled:
            return []
        known = self._offered | self._installed
        if not self.disabled <= known:  # all installed, whatever load_entrypoints was offered
            installed = _entrypoints.entry_points(group=ENTRY_POINT_GROUP)
            known |= {ep.name for ep in installed}
        unknown = sorted(self.disabled - known)
        if unknown:
            log.warning(
                "disabled plugin names match no plugin",
                unknown=unknown,
                known=sorted(known),
                hint="check the spelling in DSH_DISABLE_PLUGINS (dsh plugins lists the names)",
            )
        return unknown

    def _load(self, ep: EntryPointLike) -> None:
        info = PluginInfo(ep.name, self._source(ep))
        try:
            self.register(ep.load(), ep.name, info)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            self.failures.append(LoadFailure(ep.name, info.distribution, message))
            log.error(
                "plugin failed to load",
                plugin=ep.name,
                distribution=info.distribution,
                error=message,
            )
            if self.strict:
                raise PluginLoadError(
                    f"plugin {ep.name!r} from {info.distribution} failed to load: {message}"
                ) from exc

    def _source(self, ep: EntryPointLike) -> DistributionInfo | None:
        """The one :class:`DistributionInfo` of ``ep``'s distribution for all the plugins it
        ships (``None``: ``ep`` has none)."""
        key = origin(ep)
        if key is None:
            return None
        found = self._sources.get(key)
        if found is None:
            found = self._sources[key] = DistributionInfo(ep)
        return found

    def names(self) -> list[str]:
        """The plugins' names; the core's own hook implementations (named ``dsh:...``, such
        as typed results) are part of dsh, not plugins, and are not listed."""
        return [
            name
            for name, plugin in self.pm.list_name_plugin()
            if plugin is not None and not name.startswith(CORE_PREFIX)
        ]

    def get(self, name: str) -> Any:
        return self.pm.get_plugin(name)

    def implementers(self, hook: str) -> list[str]:
        """The names of the plugins implementing ``hook``, in the order dsh calls them (the
        core's own implementations included, as ``dsh:...``)."""
        return [impl.plugin for impl in self.runtime.impls(hook)]
