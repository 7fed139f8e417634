"""The file operations behind the tools: blocking functions on paths already confined to the
workspace (the tools run them in a worker thread). Each failure is a :class:`ToolError` whose
message tells the model what went wrong and what to do instead. ``name`` is the path as the
model should see it (relative to the workspace)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from dsh.tools import ToolError
from dsh_plugins.tools_fs.config import FsConfig
from dsh_plugins.tools_fs.patterns import glob_regex

__all__ = [
    "display",
    "edit_text",
    "glob_paths",
    "grep_paths",
    "list_entries",
    "os_errors",
    "read_text",
    "write_text",
]

#: How much of a file is probed for NUL bytes to tell binary from text.
BINARY_PROBE = 8192


def display(path: Path, root: Path) -> str:
    """``path`` relative to the workspace ``root``, as the model should see it."""
    return path.relative_to(root).as_posix()


@contextlib.contextmanager
def os_errors(action: str, name: str) -> Iterator[None]:
    """Turn an ``OSError`` (permissions, a file where a directory should be, ...) into a
    ``ToolError`` that names the path as the model gave it, not the absolute one."""
    try:
        yield
    except OSError as exc:
        raise ToolError(f"cannot {action} {name}: {exc.strerror or exc}", "OS_ERROR") from exc


def _is_binary(probe: bytes) -> bool:
    return b"\0" in probe


def _require_file(path: Path, name: str) -> None:
    if not path.exists():
        raise ToolError(f"{name} does not exist; list_dir or glob show what does", "NOT_FOUND")
    if path.is_dir():
        raise ToolError(f"{name} is a directory; use list_dir to see inside it", "IS_A_DIRECTORY")
    _require_regular(path, name)


def _require_regular(path: Path, name: str) -> None:
    # Opening a named pipe would block the worker thread until someone writes to it.
    if path.exists() and not path.is_file():
        raise ToolError(f"{name} is not a regular file (a pipe, socket or device)", "NOT_A_FILE")


# -- read_file -------------------------------------------------------------------------------


def read_text(path: Path, name: str, offset: int, limit: int | None, config: FsConfig) -> str:
    """Lines ``offset``… of a text file, numbered, within the configured caps."""
    if offset < 1 or (limit is not None and limit < 1):
        raise ToolError("offset and limit count lines from 1; give 1 or more", "INVALID_ARGS")
    _require_file(path, name)
    count = min(limit or config.max_lines, config.max_lines)
    with os_errors("read", name), path.open("rb") as file:
        if _is_binary(file.read(BINARY_PROBE)):
            size = path.stat().st_size
            raise ToolError(
                f"{name} is a binary file ({size} bytes); read_file reads text only",
                "BINARY_FILE",
            )
        file.seek(0)
        lines, seen, more = _numbered_lines(file, offset, count, config)
    if not lines and offset > 1:
        raise ToolError(f"{name} has {seen} lines; offset {offset} is past its end", "OUT_OF_RANGE")
    if not lines:
        return f"({name} is empty)"
    if more:
        lines.append(f"[more lines follow: call read_file with offset={offset + len(lines)}]")
    return "\n".join(lines)


def _numbered_lines(
    file: BinaryIO, offset: int, count: int, config: FsConfig
) -> tuple[list[str], int, bool]:
    """Up to ``count`` numbered lines from line ``offset``; how many lines were seen; whether
    more follow (the line or byte cap was reached)."""
    lines: list[str] = []
    size = 0
    number = 0
    for number, raw in enumerate(file, 1):
        if number < offset:
            continue
        line = f"{number:6}\t{_cut(_decode(raw), config)}"
        size += len(line) + 1
        if len(lines) == count or (lines and size > config.max_output_bytes):
            return lines, number, True
        lines.append(line)
    return lines, number, False


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def _cut(line: str, config: FsConfig) -> str:
    excess = len(line) - config.max_line_chars
    if excess <= 0:
        return line
    return f"{line[: config.max_line_chars]} [... {excess} more characters]"


# -- write_file and edit_file ----------------------------------------------------------------


def write_text(path: Path, name: str, content: str) -> str:
    """Create or overwrite a file (creating its parent directories)."""
    if path.is_dir():
        raise ToolError(f"{name} is a directory; give a file path", "IS_A_DIRECTORY")
    _require_regular(path, name)
    existed = path.exists()
    data = content.encode()
    with os_errors("write", name):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"{'overwrote' if existed else 'created'} {name} ({len(data)} bytes, {lines} lines)"


def edit_text(path: Path, name: str, old: str, new: str) -> str:
    """Replace the one exact occurrence of ``old`` with ``new``."""
    if not old:
        raise ToolError("old is empty; give the exact text to replace", "INVALID_ARGS")
    text = _read_utf8(path, name)
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old text not found in {name} (0 matches); read the file and copy the exact text, "
            "whitespace and indentation included",
            "NO_MATCH",
        )
    if count > 1:
        lines = ", ".join(str(n) for n in _match_lines(text, old))
        raise ToolError(
            f"old text is not unique in {name}: {count} matches (at lines {lines}); include "
            "more surrounding text so that it matches exactly once",
            "AMBIGUOUS_MATCH",
        )
    with os_errors("write", name):
        path.write_bytes(text.replace(old, new, 1).encode())
    line = text.count("\n", 0, text.index(old)) + 1
    return f"edited {name}: replaced 1 match at line {line}"


def _read_utf8(path: Path, name: str) -> str:
    _require_file(path, name)
    with os_errors("read", name):
        data = path.read_bytes()
    not_text = ToolError(f"{name} is not UTF-8 text; edit_file edits text only", "BINARY_FILE")
    if _is_binary(data[:BINARY_PROBE]):
        raise not_text
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise not_text from exc


def _match_lines(text: str, old: str) -> list[int]:
    numbers = []
    start = text.find(old)
    while start != -1:
        numbers.append(text.count("\n", 0, start) + 1)
        start = text.find(old, start + len(old))
    return numbers


# -- list_dir, glob, grep --------------------------------------------------------------------


def list_entries(path: Path, name: str, config: FsConfig) -> str:
    """The entries of a directory, sorted; directories end with ``/``."""
    if not path.exists():
        raise ToolError(f"{name} does not exist", "NOT_FOUND")
    if not path.is_dir():
        raise ToolError(f"{name} is a file, not a directory; use read_file", "NOT_A_DIRECTORY")
    with os_errors("list", name):
        entries = sorted(path.iterdir(), key=lambda entry: entry.name)
    shown = [entry.name + ("/" if entry.is_dir() else "") for entry in entries]
    return _capped(shown, config.max_entries, f"({name} is empty)", "entries")


def glob_paths(root: Path, pattern: str, config: FsConfig) -> str:
    """Workspace paths matching ``pattern``, sorted; directories end with ``/``."""
    parts = pattern.split("/")
    if os.path.isabs(pattern) or ".." in parts:
        raise ToolError(
            f"pattern {pattern!r} reaches outside the workspace; glob patterns are relative to "
            "the workspace and may not contain '..'",
            "OUTSIDE_WORKSPACE",
        )
    regex = glob_regex(pattern)
    found = (
        path + ("/" if d else "") for path, d in _walk(root, root, config) if regex.fullmatch(path)
    )
    shown = list(itertools.islice(found, config.max_entries + 1))
    return _capped(shown, config.max_entries, f"no paths match {pattern!r}", "paths")


def grep_paths(root: Path, target: Path, pattern: str, config: FsConfig) -> str:
    """Lines matching the regex ``pattern`` in ``target`` (a file, or a directory searched
    recursively), as ``path:line:text``."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}", "INVALID_ARGS") from exc
    if not target.exists():
        raise ToolError(f"{display(target, root)} does not exist", "NOT_FOUND")
    files = (
        [target]
        if target.is_file()
        else (root / p for p, d in _walk(target, root, config) if not d)
    )
    found = (
        f"{display(file, root)}:{number}:{line}"
        for file in files
        for number, line in _search(file, regex, config)
    )
    matches = list(itertools.islice(found, config.max_matches + 1))
    empty = f"no matches for {pattern!r} in {display(target, root)}"
    return _capped(matches, config.max_matches, empty, "matches")


def _walk(top: Path, root: Path, config: FsConfig) -> Iterator[tuple[str, bool]]:
    """``(path relative to root, is_dir)`` below ``top`` in path order, skipping ignored
    directories and never following or yielding symbolic links (they may lead outside the
    workspace)."""
    for entry in _scan(top):
        path = Path(entry.path)
        if entry.is_symlink() or (entry.is_dir() and entry.name in config.ignore):
            continue
        yield display(path, root), entry.is_dir()
        if entry.is_dir():
            yield from _walk(path, root, config)


def _scan(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` sorted by name; none if it cannot be read (a search goes
    on past a directory it may not enter)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError:
        return []


def _search(file: Path, regex: re.Pattern[str], config: FsConfig) -> Iterator[tuple[int, str]]:
    """Matching lines of a text file; binary, oversized and special files are skipped."""
    if not file.is_file():
        return
    with contextlib.suppress(OSError), file.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size > config.max_grep_file_bytes:
            return
        if _is_binary(handle.read(BINARY_PROBE)):
            return
        handle.seek(0)
        for number, raw in enumerate(handle, 1):
            line = _decode(raw)
            if regex.search(line):
                yield number, _cut(line, config)


def _capped(items: list[str], cap: int, empty: str, what: str) -> str:
    if not items:
        return empty
    if len(items) <= cap:
        return "\n".join(items)
    shown = "\n".join(items[:cap])
    return f"{shown}\n[only the first {cap} {what} are shown; narrow the path or pattern]"
