"""Helpers shared by the core tests."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from dsh import AgentOptions, Harness
from dsh.events import SessionEvent
from dsh.loop import LoopAgent
from dsh.testing import ScriptedAdapter, ScriptEntry


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
