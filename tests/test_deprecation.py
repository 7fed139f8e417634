"""Old import paths of moved names: they still resolve, to the same object, and warn."""

from __future__ import annotations

import importlib

import pytest

from dsh.deprecation import moved

MOVED = [
    ("dsh.replay", "verify", "dsh.verify"),
    ("dsh.replay", "Mismatch", "dsh.verify"),
    ("dsh.replay", "ReplayReport", "dsh.verify"),
    ("dsh.assembly", "PromptAssembly", "dsh.prompt"),
    ("dsh.assembly", "PromptSection", "dsh.prompt"),
    ("dsh.assembly", "SystemPrompt", "dsh.prompt"),
    ("dsh.assembly", "render", "dsh.prompt"),
    ("dsh.agents", "AgentRegistry", "dsh.registry"),
    ("dsh.tooldef", "Docstring", "dsh.docstrings"),
    ("dsh.tooldef", "parse_docstring", "dsh.docstrings"),
    ("dsh.tooldef", "validate", "dsh.toolschema"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_moved_name_resolves_from_its_old_module_with_a_warning(
    old: str, name: str, new: str
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved to {new}\.{name}; import"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", sorted({old for old, _, _ in MOVED}))
def test_an_old_module_has_no_other_names(old: str) -> None:
    module = importlib.import_module(old)
    with pytest.raises(AttributeError, match=rf"module '{old}' has no attribute 'nothing_here'"):
        _ = module.nothing_here
    with pytest.raises(AttributeError, match="has no attribute '__wrapped__'"):
        _ = module.__wrapped__


def test_the_warning_points_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="dsh.replay.verify moved") as caught:
        from dsh.replay import verify  # noqa: F401
    assert caught[0].filename == __file__


def test_moved_takes_one_home_for_every_name_or_a_home_per_name() -> None:
    with pytest.warns(DeprecationWarning, match="^old.mod.dumps moved to json.dumps"):
        assert moved("old.mod", "dumps", "json") is importlib.import_module("json").dumps
    with pytest.warns(DeprecationWarning, match="^old.mod.loads moved to json.loads"):
        assert moved("old.mod", "loads", {"loads": "json"}) is importlib.import_module("json").loads
    with pytest.raises(AttributeError, match=r"module 'old\.mod' has no attribute 'dumps'"):
        moved("old.mod", "dumps", {"loads": "json"})
    with pytest.raises(AttributeError, match=r"module 'old\.mod' has no attribute 'absent'"):
        moved("old.mod", "absent", "json")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("CompactionStart", "HistoryRewriteStart"),
        ("CompactionPrune", "HistoryPrune"),
        ("CompactionSummary", "HistorySummary"),
        ("CompactionEnd", "HistoryRewriteEnd"),
    ],
)
def test_the_compaction_events_kept_their_old_names_as_aliases(old: str, new: str) -> None:
    import dsh.events

    with pytest.warns(
        DeprecationWarning, match=rf"^dsh\.events\.{old} moved to dsh\.events\.{new}"
    ):
        assert getattr(dsh.events, old) is getattr(dsh.events, new)
