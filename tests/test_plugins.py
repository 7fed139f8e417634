"""Entry-point discovery: sorted, deduplicated, broken plugins reported, disabling, strict."""

from __future__ import annotations

import asyncio
import os
import sys
from importlib.metadata import Distribution, EntryPoint, EntryPoints
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import dsh.hooks._loading
from dsh import Harness, PluginLoadError, hookimpl
from dsh.hooks._loading import ENTRY_POINT_GROUP, Plugins, disabled_from_env
from tests.helpers import foreign_plugins, hide_plugins, make_dist


def entry_names(h: Harness) -> list[str]:
    return [n for n in h.plugins.names() if n in {"alpha", "zeta", "broken"}]


async def test_entry_points_are_loaded_sorted_and_deduplicated(dists: Path) -> None:
    with capture_logs() as logs:
        h = Harness()
        h.load()
    assert entry_names(h) == ["alpha", "zeta"]
    info = h.plugins.info["zeta"]
    assert (info.distribution, info.version) == ("fake_dist", "1.0")
    # A class entry point is instantiated once per harness.
    assert type(h.plugins.get("zeta")).__name__ == "Plugin"
    [failure] = h.plugins.failures
    assert failure.name == "broken" and failure.distribution == "fake_dist"
    assert "missing dependency xyz" in failure.error
    assert any(log["plugin"] == "broken" for log in logs)


def test_an_entry_point_without_a_distribution_loads_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = EntryPoint("bare", "tests.test_plugins:Host", ENTRY_POINT_GROUP)
    monkeypatch.setattr(dsh.hooks._loading, "entry_points", lambda group: EntryPoints([made]))
    plugins = Plugins()
    plugins.load_entrypoints()
    assert plugins.names() == ["bare"]
    info = plugins.info["bare"]
    assert (info.distribution, info.version) == (None, None)


class CountingDist(Distribution):
    """A distribution of two plugins whose metadata file counts its reads."""

    def __init__(self) -> None:
        self.reads = 0

    def read_text(self, filename: str) -> str | None:
        if filename == "entry_points.txt":
            return "[dsh]\nfirst = tests.test_plugins:Host\nsecond = tests.test_plugins:Host\n"
        if filename in ("METADATA", "PKG-INFO"):
            self.reads += 1
            return "Metadata-Version: 2.1\nName: counted\nVersion: 2.0\n"
        return None

    def locate_file(self, path: Any) -> Any:
        raise NotImplementedError


def test_a_distribution_is_read_once_for_all_its_plugins_and_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dist = CountingDist()
    made = dist.entry_points.select(group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(dsh.hooks._loading, "entry_points", lambda group: made)
    plugins = Plugins()
    plugins.load_entrypoints()
    assert plugins.names() == ["first", "second"]
    assert dist.reads == 0  # loading reads no metadata
    first, second = plugins.info["first"], plugins.info["second"]
    assert first.source is second.source
    assert (first.distribution, first.version) == ("counted", "2.0")
    reads = dist.reads
    assert (second.distribution, second.version) == ("counted", "2.0")
    assert dist.reads == reads == 1  # the second plugin of the distribution parses nothing


async def test_strict_mode_makes_a_broken_plugin_fatal(dists: Path) -> None:
    with pytest.raises(PluginLoadError, match="'broken' from fake_dist failed to load"):
        Harness(strict=True).load()


async def test_plugins_can_be_disabled(dists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "broken, zeta,")
    assert disabled_from_env() == {"broken", "zeta"}
    h = Harness()
    h.load()
    assert entry_names(h) == ["alpha"] and h.plugins.failures == []
    h2 = Harness(disabled=["alpha"], load_entrypoints=False, plugins=[])
    assert h2.plugins.register(object(), name="alpha") == "alpha"
    assert h2.plugins.get("alpha") is None


def test_two_instances_of_one_class_get_distinct_names() -> None:
    class Observer:
        def dsh_agent_status(self) -> None:
            pass

    h = Harness(load_entrypoints=False, plugins=[Observer(), Observer(), Observer()])
    h.load()
    assert h.plugins.names() == ["Observer", "Observer#2", "Observer#3"]


async def test_an_unknown_name_in_dsh_disable_plugins_warns(
    dists: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "zeta,zetta,Host,tools_fs")
    with capture_logs() as logs:
        h = Harness(plugins=[Host()])
        h.load()
    assert entry_names(h) == ["alpha"]  # zeta is off; the typo "zetta" turned nothing off
    [warning] = [log for log in logs if log["event"] == "disabled plugin names match no plugin"]
    assert warning["log_level"] == "warning" and warning["unknown"] == ["zetta"]
    assert {"zeta", "Host", "tools_fs"} <= set(warning["known"])
    # an entry point that was not loaded is still a known name
    assert Harness(load_entrypoints=False, disabled=["zeta"]).plugins.warn_unknown_disabled() == []


def test_no_warning_without_disabled_plugins() -> None:
    with capture_logs() as logs:
        Harness(load_entrypoints=False, disabled=()).load()
    assert logs == []


class Host:
    def dsh_agent_status(self) -> None:
        pass


HINT_PLUGIN = """
from dsh import hookimpl, tool
from dsh.llm._section import PromptSection

@tool
def calculate(expression: str) -> str:
    return "42"

class Plugin:
    @hookimpl
    def dsh_register_tools(self, register):
        register(calculate)

    @hookimpl
    def dsh_register_prompt_sections(self, register):
        register(PromptSection("calculator", "Use calculate for arithmetic."))
"""


async def test_tests_do_not_load_a_third_party_plugin_installed_beside_dsh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(
        tmp_path,
        "third_party",
        {"fake_calculator": "third_hint:Plugin"},
        {"third_hint": HINT_PLUGIN},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    seen = Harness()
    seen.load()
    assert "fake_calculator" in seen.plugins.names()  # a real plugin that discovery would load
    assert seen.tools.get("calculate") is not None
    assert [s.name for s in seen.system_prompt.sections()] == ["calculator"]
    assert foreign_plugins()["fake_calculator"] == "third_party"

    hide_plugins(monkeypatch, foreign_plugins())
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")  # a test that clears it still hides it
    hidden = Harness()
    hidden.load()
    assert "fake_calculator" not in hidden.plugins.names()
    assert {"tools_fs", "persistence_jsonl"} <= set(hidden.plugins.names())
    assert hidden.tools.get("calculate") is None and hidden.system_prompt.sections() == ()
    hide_plugins(monkeypatch, {})  # nothing to hide: nothing changes
    assert os.environ["DSH_DISABLE_PLUGINS"] == ""


async def test_child_processes_inherit_the_hidden_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(
        tmp_path,
        "third_party",
        {"fake_calculator": "third_hint:Plugin"},
        {"third_hint": HINT_PLUGIN},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "permissions")
    hide_plugins(monkeypatch, foreign_plugins())
    assert set(os.environ["DSH_DISABLE_PLUGINS"].split(",")) >= {"fake_calculator", "permissions"}
    code = "from dsh import Harness; h = Harness(); h.load(); print(' '.join(h.plugins.names()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await child.communicate()
    names = out.decode().split()
    assert "tools_fs" in names and "fake_calculator" not in names and "permissions" not in names


async def test_implementers_names_the_plugins_of_a_hook_in_call_order() -> None:
    class First:
        @hookimpl
        def dsh_session_load(self, session_id: str) -> None:
            return None

    class Second:
        @hookimpl(tryfirst=True)
        def dsh_session_load(self, session_id: str) -> None:
            return None

    async with Harness(load_entrypoints=False, plugins=[First(), Second()]) as h:
        names = {n: type(h.plugins.get(n)).__name__ for n in h.plugins.names()}
        assert [names[n] for n in h.plugins.implementers("dsh_session_load")] == [
            "Second",
            "First",
        ]
        assert h.plugins.implementers("dsh_tools_approve") == []


def test_registering_a_plugin_runs_none_of_its_properties() -> None:
    # pluggy before 1.6 reads every attribute with getattr: a property ran at registration.
    class WithProperties:
        @property
        def costly(self) -> str:
            raise AssertionError("a property ran at registration")

        @hookimpl
        def dsh_agent_status(self) -> None:
            pass

    class Derived(WithProperties):
        label = "a plain attribute"

    h = Harness(load_entrypoints=False, plugins=[Derived()])
    h.load()
    impls = h.plugins.pm.hook.dsh_agent_status.get_hookimpls()
    assert "Derived" in [impl.plugin_name for impl in impls]


def test_a_hook_set_on_an_instance_is_found_over_a_plain_method_of_its_class() -> None:
    # Registration skips a plain method without the marker unless the instance holds the name.
    class Plain:
        def status(self) -> None:
            pass

    @hookimpl(specname="dsh_agent_status")
    def status() -> None:
        pass

    plugin = Plain()
    plugin.status = status  # type: ignore[method-assign]
    h = Harness(load_entrypoints=False, plugins=[plugin])
    h.load()
    impls = h.plugins.pm.hook.dsh_agent_status.get_hookimpls()
    assert [impl.function for impl in impls if impl.plugin_name == "Plain"] == [status]


def test_special_names_are_never_hook_implementations() -> None:
    class Callable_:
        @hookimpl(specname="dsh_agent_status")
        def __call__(self) -> None:
            pass

        @hookimpl(specname="dsh_agent_status")
        def status(self) -> None:
            pass

    h = Harness(load_entrypoints=False, plugins=[Callable_()])
    h.load()
    impls = h.plugins.pm.hook.dsh_agent_status.get_hookimpls()
    assert [impl.function.__name__ for impl in impls if impl.plugin_name == "Callable_"] == [
        "status"
    ]
