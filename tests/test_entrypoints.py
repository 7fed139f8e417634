"""The fast entry-point discovery (:mod:`dsh.hooks._entrypoints`) finds what
``importlib.metadata.entry_points(group=...)`` finds: the same names, values and groups from the
same distribution when a name is installed twice. Held equal with Hypothesis on generated site
directories, and on the real environment; each case where it hands the question to importlib
is checked to do so and to get the same answer."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib.metadata import Distribution, EntryPoint
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.hooks import _entrypoints
from dsh.hooks._entrypoints import EntryPointLike, entry_points

GROUP = "dsh"

#: Spellings of two distribution names: case, ``-``/``_``/``.`` and runs of them all normalize
#: to ``al_pha`` (or ``beta``); ``al-pha`` is named ``al`` (a dist-info's name ends at its
#: first ``-``).
NAMES = st.sampled_from(
    ["alpha", "al_pha", "Al.Pha", "AL__PHA", "al._pha", "al-pha", "beta", "BETA", "_beta", "beta."]
)
VERSIONS = st.sampled_from(["", "-1.0", "-2.0.post1"])
SUFFIXES = st.sampled_from([".dist-info", ".egg-info"])

HEADERS = st.sampled_from(
    ["[dsh]", "  [dsh]  ", "[[dsh]]", "[DSH]", "[ dsh ]", "[dsh.cluster]", "[console_scripts]"]
)
ENTRIES = st.builds(
    "{}{}{}".format,
    st.sampled_from(["one", "two", "Two", "three.x", "four-4"]),
    st.sampled_from(["=", " = ", "=  ", "\t=\t"]),
    st.sampled_from(["pkg.mod:Plugin", "pkg:obj.attr", "pkg.mod", "pkg.mod:Plugin [extra]"]),
)
NOISE = st.sampled_from(["", "   ", "# a comment", "  # an indented [dsh] comment", "; x = y"])
LINES = st.lists(st.one_of(ENTRIES, NOISE), max_size=4)
#: An ``entry_points.txt``: lines before any header (ignored), then sections.
TEXTS = st.builds(
    lambda lead, sections, newline: newline.join(
        [*lead, *(line for header, lines in sections for line in [header, *lines])]
    ),
    LINES,
    st.lists(st.tuples(HEADERS, LINES), max_size=3),
    st.sampled_from(["\n", "\r\n"]),
)
#: What a metadata directory holds: an ``entry_points.txt`` (text), none (``None``), or it is
#: a file (``"file"``), or its ``entry_points.txt`` is a directory (``"eps-dir"``).
CONTENTS = st.one_of(TEXTS, st.none(), st.sampled_from(["file", "eps-dir"]))
METADATA_DIRS = st.lists(
    st.tuples(NAMES, VERSIONS, SUFFIXES, CONTENTS),
    max_size=6,
    unique_by=lambda made: made[0] + made[1] + made[2],
)


def build(site: Path, roots: list[list[tuple[str, str, str, Any]]]) -> list[str]:
    """Make ``roots`` under ``site``: each a directory of metadata directories whose metadata
    names the distribution and tells, by its version, which directory it is."""
    paths = []
    for i, made in enumerate(roots):
        root = site / f"root{i}"
        root.mkdir()
        paths.append(str(root))
        for j, (name, version, suffix, content) in enumerate(made):
            info = root / f"{name}{version}{suffix}"
            if content == "file":
                info.write_text("")
                continue
            info.mkdir()
            metadata = "METADATA" if suffix == ".dist-info" else "PKG-INFO"
            (info / metadata).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {i}.{j}\n")
            if content == "eps-dir":
                (info / "entry_points.txt").mkdir()
            elif content is not None:
                (info / "entry_points.txt").write_bytes(content.encode())
    return paths


def described(found: Iterable[EntryPointLike]) -> list[tuple[str, str, str, str, str]]:
    """What tells two lists of entry points apart: each one's name, value, group and the name
    and version of its distribution (the version says which metadata directory it came from)."""
    out = []
    for ep in found:
        assert ep.dist is not None
        out.append((ep.name, ep.value, ep.group, ep.dist.metadata["Name"], ep.dist.version))
    return out


@contextmanager
def counted_reference() -> Iterator[list[str]]:
    """Count the calls of ``importlib.metadata.entry_points`` (the fast function's fallback)."""
    calls: list[str] = []
    reference = importlib.metadata.entry_points

    def counting(**params: Any) -> Any:
        calls.append(params["group"])
        return reference(**params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importlib.metadata, "entry_points", counting)
        yield calls


def both(path: list[Any], group: str = GROUP) -> tuple[list[Any], list[Any], list[str]]:
    """The fast function's and importlib's answers with ``sys.path`` set to ``path``, and the
    fallback calls the fast one made."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", path)
        reference = importlib.metadata.entry_points(group=group)
        with counted_reference() as calls:
            fast = entry_points(group)
    return described(fast), described(reference), calls


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roots=st.lists(METADATA_DIRS, min_size=1, max_size=3), missing=st.booleans())
def test_the_fast_discovery_finds_what_importlib_finds(
    roots: list[list[tuple[str, str, str, Any]]], missing: bool
) -> None:
    with tempfile.TemporaryDirectory() as site:
        path = build(Path(site), roots)
        if missing:  # a sys.path entry that does not exist is skipped by both
            path.insert(1, os.path.join(site, "missing"))
        fast, reference, calls = both(path)
    assert fast == reference
    assert calls == []  # found without importlib's help


def test_the_same_distribution_twice_on_the_path_is_found_once_from_the_first(
    tmp_path: Path,
) -> None:
    first = [("Al.Pha", "-2.0", ".egg-info", "[dsh]\none = first:Plugin\n")]
    second = [("al_pha", "-1.0", ".dist-info", "[dsh]\none = second:Plugin\ntwo = second\n")]
    fast, reference, calls = both(build(tmp_path, [first, second]))
    assert fast == reference == [("one", "first:Plugin", "dsh", "Al.Pha", "0.0")]
    assert calls == []


def test_in_this_environment_the_fast_discovery_finds_what_importlib_finds() -> None:
    groups = (GROUP, "dsh.cluster", "console_scripts", "pytest11")
    with counted_reference() as calls:
        found = {group: entry_points(group) for group in groups}
    for group in groups:
        assert described(found[group]) == described(importlib.metadata.entry_points(group=group))
    assert {ep.name for ep in found[GROUP]} >= {"tools_fs", "permissions"}
    # setuptools' editable finder offers no distributions: an editable install stays fast.
    assert calls == [] or not _entrypoints._only_the_path_finder()


# -- where importlib is asked instead --------------------------------------------------------


def zipped_dist(archive: Path) -> None:
    with zipfile.ZipFile(archive, "w") as made:
        made.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        made.writestr("zipped-1.0.dist-info/entry_points.txt", "[dsh]\nzipped = zipped:Plugin\n")


def test_a_zip_file_on_the_path_is_read_by_importlib(tmp_path: Path) -> None:
    archive = tmp_path / "plugins.zip"
    zipped_dist(archive)
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", "[dsh]\na = alpha:Plugin\n")]])
    fast, reference, calls = both([*site, str(archive)])
    assert fast == reference
    assert [ep[0] for ep in fast] == ["a", "zipped"]
    assert calls == [GROUP]


def test_a_directory_egg_on_the_path_is_read_by_importlib(tmp_path: Path) -> None:
    egg = tmp_path / "eggy-1.0-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Name: eggy\nVersion: 1.0\n")
    (egg / "EGG-INFO" / "entry_points.txt").write_text("[dsh]\neggy = eggy:Plugin\n")
    fast, reference, calls = both([str(egg)])
    assert fast == reference == [("eggy", "eggy:Plugin", "dsh", "eggy", "1.0")]
    assert calls == [GROUP]


def test_an_egg_inside_a_path_directory_is_read_by_importlib(tmp_path: Path) -> None:
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", "[dsh]\na = alpha:Plugin\n")]])
    egg = Path(site[0]) / "eggy-1.0-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Name: eggy\nVersion: 1.0\n")
    (egg / "EGG-INFO" / "entry_points.txt").write_text("[dsh]\neggy = eggy:Plugin\n")
    fast, reference, calls = both(site)
    assert fast == reference
    assert calls == [GROUP]


@pytest.mark.parametrize("odd", ["Odd-1.0.DIST-INFO", "-1.0.dist-info", "..dist-info"])
def test_a_metadata_directory_importlib_names_from_its_metadata_is_left_to_importlib(
    tmp_path: Path, odd: str
) -> None:
    # importlib reads these directories' names from their METADATA: here one that clashes
    # with the regular directory beside it, which then may or may not be hidden.
    site = build(tmp_path, [[("odd", "-2.0", ".dist-info", "[dsh]\nregular = odd:Plugin\n")]])
    info = Path(site[0]) / odd
    info.mkdir()
    (info / "METADATA").write_text("Name: odd\nVersion: 9.0\n")
    (info / "entry_points.txt").write_text("[dsh]\nodd = odd:Odd\n")
    fast, reference, calls = both(site)
    assert fast == reference and len(fast) == 1
    assert calls == [GROUP]


def test_a_path_entry_that_is_no_string_is_left_to_importlib(tmp_path: Path) -> None:
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", "[dsh]\na = alpha:Plugin\n")]])
    fast, reference, calls = both([Path(site[0])])
    assert fast == reference == [("a", "alpha:Plugin", "dsh", "alpha", "0.0")]
    assert calls == [GROUP]


class Offered(Distribution):
    """A distribution a finder holds in memory."""

    def read_text(self, filename: str) -> str | None:
        texts = {
            "METADATA": "Name: offered\nVersion: 3.0\n",
            "entry_points.txt": "[dsh]\noffered = offered:Plugin\n",
        }
        return texts.get(filename)

    def locate_file(self, path: Any) -> Any:
        raise NotImplementedError


class OfferingFinder:
    """A meta-path finder that finds no module but offers a distribution of its own."""

    @staticmethod
    def find_spec(*args: Any) -> None:
        return None

    @staticmethod
    def find_distributions(context: Any = None) -> list[Distribution]:
        return [Offered()]


def test_a_finder_that_offers_distributions_is_left_to_importlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", "[dsh]\na = alpha:Plugin\n")]])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, OfferingFinder()])
    fast, reference, calls = both(site)
    assert fast == reference
    assert [ep[0] for ep in fast] == ["a", "offered"]
    assert calls == [GROUP]


def test_a_finder_without_find_distributions_keeps_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setuptools' editable-install finder is one: it finds modules, not distributions.
    class ModulesOnly:
        @staticmethod
        def find_spec(*args: Any) -> None:
            return None

    monkeypatch.setattr(sys, "meta_path", [ModulesOnly(), importlib.machinery.PathFinder])
    assert _entrypoints._only_the_path_finder()
    monkeypatch.setattr(sys, "meta_path", [ModulesOnly()])  # none at all: importlib finds none
    assert not _entrypoints._only_the_path_finder()
    assert list(entry_points(GROUP)) == list(importlib.metadata.entry_points(group=GROUP)) == []


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"[dsh]\na = alpha:Plugin\nno equals sign\n", TypeError),
        (b"[other]\nno equals sign\n[dsh]\na = alpha:Plugin\n", TypeError),
        (b"[dsh]\na = alpha:Plugin\n# caf\xe9 is not UTF-8\n", UnicodeDecodeError),
    ],
)
def test_a_file_importlib_cannot_read_is_left_to_importlib_to_say_why(
    tmp_path: Path, content: bytes, error: type[Exception]
) -> None:
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", None)]])
    (Path(site[0]) / "alpha-1.0.dist-info" / "entry_points.txt").write_bytes(content)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", site)
        with pytest.raises(error):
            importlib.metadata.entry_points(group=GROUP)
        with counted_reference() as calls, pytest.raises(error):
            entry_points(GROUP)
    assert calls == [GROUP]


#: Entry-point values: a module, an attribute path in it, extras, spaces, and what importlib's
#: pattern does not match.
VALUES = st.builds(
    "{}{}{}".format,
    st.sampled_from(
        ["tests.loadable", "tests.loadable ", "tests", "tests.nowhere", "", "1-x", "tests..x", "é"]
    ),
    st.sampled_from(
        ["", ":Plugin", ": Plugin ", ":Plugin.name", ":Plugin.missing", ":", ":1st", ":Plugin."]
    ),
    st.sampled_from(["", " [extra]", "[a,b] ", " [unclosed"]),
)


def outcome(load: Any) -> tuple[str, Any]:
    try:
        return "loaded", load()
    except Exception as exc:
        return "raised", type(exc)


@settings(max_examples=100, deadline=None)
@given(value=VALUES)
def test_a_found_entry_point_loads_what_importlibs_loads(value: str) -> None:
    found = _entrypoints.Found("x", value, GROUP, "unused")
    reference = EntryPoint("x", value, GROUP)
    fast, slow = outcome(found.load), outcome(reference.load)
    if slow[0] == "raised" and _entrypoints._pattern().match(value) is None:
        # importlib fails on a value its pattern does not match with an AttributeError about
        # ``None``; the fast one says what is wrong.
        assert fast == ("raised", ValueError)
    else:
        assert fast == slow


def test_a_found_entry_point_reads_its_distribution_when_asked(tmp_path: Path) -> None:
    site = build(tmp_path, [[("alpha", "-1.0", ".dist-info", "[dsh]\na = alpha:Plugin\n")]])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", site)
        [found] = entry_points(GROUP)
    assert isinstance(found, _entrypoints.Found)
    assert repr(found) == "Found(name='a', value='alpha:Plugin', group='dsh')"
    assert _entrypoints.origin(found) == found.path == os.path.join(site[0], "alpha-1.0.dist-info")
    assert found.dist.metadata["Name"] == "alpha"
    bare = EntryPoint("bare", "alpha:Plugin", GROUP)
    assert _entrypoints.origin(bare) is None
