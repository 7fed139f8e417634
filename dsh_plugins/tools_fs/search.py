"""The search behind ``grep``, run in a worker process, and the walk shared with ``glob``.

A regular expression can backtrack for minutes on one line (``(a+)+$`` on ``aaa…ab``), and
Python's ``re`` holds the GIL all that time: in a thread it would freeze the event loop of every
agent in the process. So ``grep`` runs :func:`main` in a child interpreter that it kills when
the tool's timeout expires (see :func:`dsh_plugins.tools_fs.files.grep_paths`). Python's engine
is kept, rather than ripgrep's, so that patterns mean the same everywhere ("Python syntax", as
the tool tells the model).

This module imports nothing from dsh: the worker is started with ``python -I`` on this file
alone, which keeps its start-up to a bare interpreter's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, TextIO

__all__ = ["BINARY_PROBE", "cut", "decode", "is_binary", "main", "search", "walk"]

#: How much of a file is probed for NUL bytes to tell binary from text.
BINARY_PROBE = 8192


def is_binary(probe: bytes) -> bool:
    return b"\0" in probe


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def cut(line: str, max_chars: int, excess: int = 0) -> str:
    """``line`` cut at ``max_chars`` characters, saying how many more there were (``excess``
    counts characters already left out before ``line`` reached here)."""
    excess += max(len(line) - max_chars, 0)
    if excess == 0:
        return line
    return f"{line[:max_chars]} [... {excess} more characters]"


def walk(top: Path, root: Path, ignore: Collection[str]) -> Iterator[tuple[str, bool]]:
    """``(path relative to root, is_dir)`` below ``top`` in path order, skipping directories
    named in ``ignore`` and never following or yielding symbolic links (they may lead outside
    the workspace)."""
    for entry in _scan(top):
        path = Path(entry.path)
        if entry.is_symlink() or (entry.is_dir() and entry.name in ignore):
            continue
        yield path.relative_to(root).as_posix(), entry.is_dir()
        if entry.is_dir():
            yield from walk(path, root, ignore)


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` sorted by name; none if it cannot be read (a search goes
    on past a directory it may not enter)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError:
        return []


def search(request: dict[str, Any]) -> dict[str, Any]:
    """Run one search. ``request``: ``pattern``, ``root`` and ``target`` (absolute paths,
    ``target`` inside ``root``), ``max_matches``, ``max_line_chars``, ``max_file_bytes`` and
    ``ignore``. Returns ``{"matches": [...]}`` (at most ``max_matches + 1`` lines
    ``path:line:text``, so that the caller can tell there were more) or ``{"error": ...}``."""
    try:
        regex = re.compile(request["pattern"])
    except re.error as exc:
        return {"error": f"invalid regular expression {request['pattern']!r}: {exc}"}
    root, target = Path(request["root"]), Path(request["target"])
    files = (
        [target]
        if target.is_file()
        else (root / p for p, d in walk(target, root, request["ignore"]) if not d)
    )
    matches: list[str] = []
    for file in files:
        for number, line in _matching_lines(file, regex, request):
            matches.append(f"{file.relative_to(root).as_posix()}:{number}:{line}")
            if len(matches) > request["max_matches"]:
                return {"matches": matches}
    return {"matches": matches}


def _matching_lines(
    file: Path, regex: re.Pattern[str], request: dict[str, Any]
) -> Iterator[tuple[int, str]]:
    """Matching lines of a text file; binary, oversized and special files are skipped."""
    if not file.is_file():
        return
    with contextlib.suppress(OSError), file.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size > request["max_file_bytes"]:
            return
        if is_binary(handle.read(BINARY_PROBE)):
            return
        handle.seek(0)
        for number, raw in enumerate(handle, 1):
            line = decode(raw)
            if regex.search(line):
                yield number, cut(line, request["max_line_chars"])


def main(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> None:
    """The worker: one JSON request on ``stdin``, one JSON answer on ``stdout``."""
    json.dump(search(json.load(stdin)), stdout)
    stdout.flush()
