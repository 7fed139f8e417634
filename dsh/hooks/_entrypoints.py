"""The entry points of one group, found the way :func:`importlib.metadata.entry_points` finds
them, in a fraction of its time.

``importlib.metadata.entry_points(group=...)`` builds a :class:`~importlib.metadata.Distribution`
for every installed distribution (~160 here), reads each one's ``entry_points.txt`` through
:mod:`pathlib`, parses every group of it and normalizes each name with regular expressions:
~4 ms of a ~200 ms start of dsh. :func:`entry_points` lists each directory of ``sys.path`` with
:func:`os.listdir`, reads the ``entry_points.txt`` of each ``*.dist-info`` and ``*.egg-info``
with a plain ``open`` and parses the few that mention the group (``[dsh]``) as importlib does
(:class:`Found`: ``name``, ``value``, ``group``, ``load()`` as importlib's
:class:`~importlib.metadata.EntryPoint`, and ``dist``, built when asked), so a start of dsh does
not import :mod:`importlib.metadata` (~2 ms) unless it must fall back to it.

What it must keep from the reference is which distribution wins when a name is installed twice:
importlib keeps the first distribution of each normalized name (PEP 503, with ``_`` for ``-``),
in ``sys.path`` order and, within a directory, in the order the directory lists them, whatever
the version or the metadata file's kind; a ``*.dist-info`` that is a file, or that has no
``entry_points.txt``, still hides a later one of the same name.

Where it cannot be sure to find what importlib finds it returns importlib's answer instead: a
``sys.path`` entry that is not a directory name (a zip file or an egg file, which importlib
reads as an archive, or not a ``str``), a directory egg (``*.egg``, whose metadata importlib
names from its ``PKG-INFO``, on the path or inside one of its directories), a metadata directory
whose name importlib reads from its metadata (an upper-case suffix, no name before the version),
or a finder on ``sys.meta_path`` other than the standard path finder that offers
``find_distributions`` (it could add distributions of its own; setuptools' editable-install
finder offers none).

It differs in one way, on purpose: importlib raises when any distribution's ``entry_points.txt``
is not UTF-8 or has a line without ``=``, whichever group that line is in; this reads only the
files that mention the group, so a broken file of an unrelated distribution does not stop dsh.
And a value importlib's pattern does not match fails to load with a :class:`ValueError` that
says so, where importlib's fails with an :class:`AttributeError` about ``None``.

``tests/test_entrypoints.py`` holds the two equal, with Hypothesis, on generated site
directories and entry-point values.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import re
import sys
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = ["EntryPointLike", "Found", "entry_points", "origin"]

_SUFFIXES = (".dist-info", ".egg-info")


@functools.cache
def _pattern() -> re.Pattern[str]:
    """How importlib reads an entry point's value (:attr:`importlib.metadata.EntryPoint.pattern`),
    compiled when a value needs it (~0.13 ms)."""
    return re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


def _dotted(name: str) -> bool:
    """Whether ``name`` is ASCII identifiers joined by dots (what the pattern's module and
    attribute parts surely match)."""
    return name.isascii() and all(part.isidentifier() for part in name.split("."))


def _module_and_attr(value: str) -> tuple[str, str] | None:
    """The module and the attribute path an entry point's value names, as importlib's pattern
    reads them (``None``: it does not match): a plain ``module:attr`` without the pattern."""
    module, colon, attr = value.partition(":")
    if _dotted(module) and (not colon or _dotted(attr)):
        return module, attr
    match = _pattern().match(value)
    return None if match is None else (match.group("module"), match.group("attr") or "")


class EntryPointLike(Protocol):
    """What dsh reads of an entry point: importlib's :class:`~importlib.metadata.EntryPoint`
    (found by the fallback) and :class:`Found` both are one."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def dist(self) -> Distribution | None: ...

    def load(self) -> Any: ...


class Found:
    """An entry point read from the ``entry_points.txt`` of the metadata directory ``path``:
    what importlib's :class:`~importlib.metadata.EntryPoint` would hold (``name``, ``value``,
    ``group``), loaded as it loads one, and its distribution built when asked."""

    __slots__ = ("group", "name", "path", "value")

    def __init__(self, name: str, value: str, group: str, path: str) -> None:
        self.name = name
        self.value = value
        self.group = group
        self.path = path

    def __repr__(self) -> str:
        return f"Found(name={self.name!r}, value={self.value!r}, group={self.group!r})"

    @property
    def dist(self) -> Distribution:
        from importlib.metadata import Distribution

        return Distribution.at(self.path)

    def load(self) -> Any:
        """The module the value names, or the object its attribute path names in it."""
        named = _module_and_attr(self.value)
        if named is None:
            raise ValueError(f"entry point {self.name!r} names no module: {self.value!r}")
        module = importlib.import_module(named[0])
        return functools.reduce(getattr, filter(None, named[1].split(".")), module)


def origin(ep: EntryPointLike) -> Hashable | None:
    """What tells ``ep``'s distribution apart from others without reading its metadata (its
    metadata directory's path for a :class:`Found`), ``None`` when it has none."""
    return ep.path if isinstance(ep, Found) else ep.dist


def _reference(group: str) -> list[EntryPointLike]:
    import importlib.metadata

    return list(importlib.metadata.entry_points(group=group))


def entry_points(group: str) -> list[EntryPointLike]:
    """The entry points of ``group``, as ``importlib.metadata.entry_points(group=group)``."""
    if not _only_the_path_finder() or not all(isinstance(root, str) for root in sys.path):
        return _reference(group)
    header = f"[{group}]".encode()
    seen: set[str] = set()  # the normalized names of the distributions found so far
    found: list[EntryPointLike] = []
    for root in sys.path:
        if os.path.basename(root).lower().endswith(".egg"):
            return _reference(group)
        try:
            children = os.listdir(root or ".")
        except FileNotFoundError:
            continue
        except Exception:  # a file (importlib reads it as a zip archive), or unreadable
            return _reference(group)
        for child in children:
            low = child.lower()
            if low.endswith(".egg"):  # an egg inside the directory: importlib reads its PKG-INFO
                return _reference(group)
            if not low.endswith(_SUFFIXES):
                continue
            name = _normalized_name(child)
            if name is None:
                return _reference(group)
            if name in seen:
                continue
            seen.add(name)
            path = os.path.join(root, child)
            content = _read(f"{path}/entry_points.txt")
            if header in content:
                entries = _parsed(content, group, path)
                if entries is None:  # importlib raises for it: let it say why
                    return _reference(group)
                found += entries
    return found


def _only_the_path_finder() -> bool:
    """Whether the standard path finder is the only finder on ``sys.meta_path`` that finds
    distributions (importlib asks every finder that has ``find_distributions``)."""
    finders = [f for f in sys.meta_path if getattr(f, "find_distributions", None) is not None]
    return finders == [importlib.machinery.PathFinder]


def _normalized_name(child: str) -> str | None:
    """The name importlib files the metadata directory ``child`` under: the part before the
    first ``-``, lower-cased, each run of ``_`` and ``.`` made one ``_`` (PEP 503, with ``_`` for
    ``-``); ``None`` where importlib reads the name from the metadata instead."""
    stem, suffix = os.path.splitext(child)
    if suffix not in _SUFFIXES:
        return None
    name = stem.partition("-")[0].lower().replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name or None


def _read(path: str) -> bytes:
    """The bytes of ``path``; none if it cannot be read (importlib's ``read_text`` gives
    ``None`` for those errors)."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return b""


def _parsed(content: bytes, group: str, path: str) -> list[EntryPointLike] | None:
    """The entry points of ``group`` in the ``entry_points.txt`` ``content``, read as importlib
    reads one (:class:`importlib.metadata.Sectioned`): each line stripped, blank ones and ``#``
    comments skipped, ``[name]`` (any run of brackets stripped) starting a section, any other
    line in a section ``name = value`` split at its first ``=``. ``None`` where importlib
    raises (not UTF-8, a line in a section without ``=``)."""
    try:
        text = content.decode()
    except UnicodeDecodeError:
        return None
    found: list[EntryPointLike] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        name, equals, value = line.partition("=")
        if not equals:
            return None
        if section == group:
            found.append(Found(name.strip(), value.strip(), group, path))
    return found
