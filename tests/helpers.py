"""Helpers shared by the core tests."""

from __future__ import annotations

import importlib.metadata
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

import dsh.hooks._loading
from dsh import AgentOptions, Harness
from dsh.hooks._loading import ENTRY_POINT_GROUP
from dsh.loop._loop import LoopAgent
from dsh.testing import ScriptedAdapter, ScriptEntry
from dsh.values._events import SessionEvent

T = TypeVar("T")


def scripted_agent(
    h: Harness, script: Sequence[ScriptEntry], agent_id: str = "main", **options: object
) -> tuple[LoopAgent, ScriptedAdapter]:
    """An agent on a fresh scripted model."""
    adapter = ScriptedAdapter(script)
    model = f"scripted-{agent_id}"
    h.llm.register_adapter([model], adapter)
    agent = h.agent_loop.create(agent_id, AgentOptions(model=model, **options))  # type: ignore[arg-type]
    return agent, adapter


def kinds(events: Sequence[SessionEvent]) -> list[str]:
    """Event types with each run of ``assistant/chunk`` collapsed into ``chunks``."""
    out: list[str] = []
    for event in events:
        name = "chunks" if event.type == "assistant/chunk" else event.type
        if not (name == "chunks" and out and out[-1] == "chunks"):
            out.append(name)
    return out


def of_type(events: Sequence[SessionEvent], type_: str) -> list[SessionEvent]:
    return [e for e in events if e.type == type_]


def data_of(events: Sequence[SessionEvent], cls: type[T]) -> list[T]:
    """The data of the events that carry a ``cls``, in log order, typed as ``cls``."""
    return [e.data for e in events if isinstance(e.data, cls)]


def data_as(event: SessionEvent, cls: type[T]) -> T:
    """The data of ``event``, which must be a ``cls``."""
    assert isinstance(event.data, cls), f"event {event.seq} is a {event.type}, not a {cls}"
    return event.data


def make_dist(root: Path, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[dsh]\n{lines}\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


GOOD = """
from dsh import hookimpl

class Plugin:
    instances = 0

    def __init__(self):
        Plugin.instances += 1

    @hookimpl
    def dsh_register_config(self, register):
        pass
"""


def install_fake_dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_dist(
        tmp_path,
        "fake_dist",
        {"zeta": "fake_good:Plugin", "alpha": "fake_module", "broken": "fake_broken:Nope"},
        {
            "fake_good": GOOD,
            "fake_module": "def dsh_agent_status(status):\n    pass\n",
            "fake_broken": "raise ImportError('missing dependency xyz')\n",
        },
    )
    other = tmp_path / "other"
    other.mkdir()
    make_dist(other, "fake_twin", {"alpha": "fake_twin_module"}, {"fake_twin_module": ""})
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("DSH_DISABLE_PLUGINS", raising=False)
    return tmp_path


#: The distribution that ships dsh and its built-in plugins.
OWN_DISTRIBUTION = "dsh-harness"


def foreign_plugins() -> dict[str, str]:
    """``{entry-point name: distribution}`` of the installed ``dsh`` plugins that do not come
    with dsh (a third-party plugin installed in the same environment)."""
    return {
        ep.name: ep.dist.name
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.dist is not None and ep.dist.name != OWN_DISTRIBUTION
    }


def hide_plugins(monkeypatch: pytest.MonkeyPatch, hidden: Mapping[str, str]) -> None:
    """Keep the plugins ``hidden`` (from :func:`foreign_plugins`) out of the harnesses a test
    makes: in this process discovery skips their distributions (whatever the test sets
    ``DSH_DISABLE_PLUGINS`` to), and child processes inherit ``DSH_DISABLE_PLUGINS`` naming
    them. Plugins a test installs itself stay visible."""
    if not hidden:
        return
    distributions = set(hidden.values())

    def without_hidden(*, group: str) -> importlib.metadata.EntryPoints:
        found = importlib.metadata.entry_points(group=group)
        return importlib.metadata.EntryPoints(
            ep for ep in found if ep.dist is None or ep.dist.name not in distributions
        )

    monkeypatch.setattr(dsh.hooks._loading, "entry_points", without_hidden)
    disabled = {*dsh.hooks._loading.disabled_from_env(), *hidden}
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", ",".join(sorted(disabled)))


def disabled_plugins(*names: str) -> str:
    """A ``DSH_DISABLE_PLUGINS`` value for a child process: ``names`` added to what the test
    session already turns off (third-party plugins installed beside dsh, see
    :func:`hide_plugins`)."""
    current = [name for name in os.environ.get("DSH_DISABLE_PLUGINS", "").split(",") if name]
    return ",".join([*current, *names])
