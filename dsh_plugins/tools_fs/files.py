"""The file operations behind the tools: blocking functions on paths already confined to the
workspace (the tools run them in a worker thread; ``grep`` runs its search in a worker process
it can kill, see :mod:`~dsh_plugins.tools_fs.search`). Each failure is a :class:`ToolError` whose
message tells the model what went wrong and what to do instead. ``name`` is the path as the
model should see it (relative to the workspace)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dsh.plugin import ToolError
from dsh_plugins.tools_fs import search
from dsh_plugins.tools_fs.config import FsConfig
from dsh_plugins.tools_fs.patterns import glob_regex
from dsh_plugins.tools_fs.replace import replace_file
from dsh_plugins.tools_fs.search import BINARY_PROBE, cut
from dsh_plugins.tools_fs.search import is_binary as _is_binary

__all__ = [
    "delete",
    "display",
    "edit_text",
    "glob_paths",
    "grep_paths",
    "list_entries",
    "move",
    "os_errors",
    "prepare_delete",
    "prepare_edit",
    "prepare_move",
    "prepare_write",
    "read_text",
    "write_text",
]


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
    for number, (head, excess) in enumerate(_bounded_lines(file, config.max_line_chars), 1):
        if number < offset:
            continue
        line = f"{number:6}\t{cut(head, config.max_line_chars, excess)}"
        size += len(line) + 1
        if len(lines) == count or (lines and size > config.max_output_bytes):
            return lines, number, True
        lines.append(line)
    return lines, number, False


#: How much of the rest of an over-long line is read at a time, only to count its characters.
_SKIP_CHUNK = 1 << 16


def _bounded_lines(file: BinaryIO, max_chars: int) -> Iterator[tuple[str, int]]:
    """Each line of ``file`` as ``(head, excess)``: ``head`` holds at least the first
    ``max_chars`` characters (all of a short line) and ``excess`` counts the characters after
    ``head``, line break excluded. No more than ``4 * max_chars + 4`` bytes of one line are held
    at a time, so a file that is one huge line costs no more memory than a short one."""
    cap = 4 * max_chars + 4  # a UTF-8 character takes at most 4 bytes
    while raw := file.readline(cap):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if raw.endswith(b"\n") or len(raw) < cap:
            yield decoder.decode(raw, final=True).rstrip("\r\n"), 0
            continue
        head = decoder.decode(raw)  # an incomplete last character stays in the decoder
        rest, trail = _measure_rest(file, decoder, _breaks_at_end(head, 0))
        length = len(head) + rest - trail  # the line's characters, without its line break
        yield head[:length], max(length - len(head), 0)


def _measure_rest(
    file: BinaryIO, decoder: codecs.IncrementalDecoder, trail: int
) -> tuple[int, int]:
    """Read the rest of the current line in chunks: how many characters it holds, and how
    many line-break characters (``\\r``, ``\\n``) end the line (``trail`` of them ended what
    was read before)."""
    count = 0
    while True:
        chunk = file.readline(_SKIP_CHUNK)
        final = chunk.endswith(b"\n") or len(chunk) < _SKIP_CHUNK  # the line break, or the end
        piece = decoder.decode(chunk, final=final)
        count += len(piece)
        trail = _breaks_at_end(piece, trail)
        if final:
            return count, trail


def _breaks_at_end(piece: str, trail: int) -> int:
    """How many line-break characters end the text so far, once ``piece`` is added to text
    that ended with ``trail`` of them."""
    kept = len(piece.rstrip("\r\n"))
    return trail + len(piece) if kept == 0 else len(piece) - kept


# -- write_file, edit_file, delete_file, move_file ------------------------------------------
#
# Each change is prepared first (checked, its previous content read) and applied after: the
# tool records the previous content for rewind in between.


def prepare_write(path: Path, name: str) -> bytes | None:
    """Check that ``path`` can be written; its content now (``None``: no file yet)."""
    if path.is_dir():
        raise ToolError(f"{name} is a directory; give a file path", "IS_A_DIRECTORY")
    _require_regular(path, name)
    with os_errors("read", name):
        return path.read_bytes() if path.exists() else None


def write_text(path: Path, name: str, content: str, root: Path, existed: bool) -> str:
    """Create or overwrite a file (creating its parent directories)."""
    data = content.encode()
    with os_errors("write", name):
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, name, data, root)
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"{'overwrote' if existed else 'created'} {name} ({len(data)} bytes, {lines} lines)"


def prepare_edit(path: Path, name: str, old: str, new: str) -> tuple[bytes, bytes, int]:
    """The content of ``path`` now, with the one exact occurrence of ``old`` replaced by
    ``new``, and the line of that occurrence."""
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
    line = text.count("\n", 0, text.index(old)) + 1
    return text.encode(), text.replace(old, new, 1).encode(), line


def edit_text(path: Path, name: str, data: bytes, line: int, root: Path) -> str:
    """Write the edited content prepared by :func:`prepare_edit`."""
    replace_file(path, name, data, root)
    return f"edited {name}: replaced 1 match at line {line}"


def prepare_delete(path: Path, name: str) -> bytes:
    """Check that ``path`` is a file that can be deleted; its content now."""
    _require_file(path, name)
    with os_errors("read", name):
        return path.read_bytes()


def delete(path: Path, name: str) -> str:
    """Remove the file ``path``."""
    with os_errors("delete", name):
        path.unlink()
    return f"deleted {name}"


def prepare_move(path: Path, name: str, to: Path, to_name: str) -> bytes:
    """Check that the file ``path`` can be moved to ``to`` (where nothing is); its content."""
    _require_file(path, name)
    if to == path:
        raise ToolError(f"{name} and {to_name} are the same path", "INVALID_ARGS")
    if to.exists():
        raise ToolError(
            f"{to_name} already exists; delete it first or give another destination",
            "ALREADY_EXISTS",
        )
    with os_errors("read", name):
        return path.read_bytes()


def move(path: Path, name: str, to: Path, to_name: str, root: Path) -> str:
    """Rename the file ``path`` to ``to`` (creating its parent directories)."""
    with os_errors("move", name):
        to.parent.mkdir(parents=True, exist_ok=True)
        if not to.parent.resolve().is_relative_to(root):
            raise ToolError(
                f"cannot move {name}: the directory of {to_name} now leads outside the "
                f"workspace {root}; give a path inside the workspace",
                "OUTSIDE_WORKSPACE",
            )
        os.rename(path, to)
    return f"moved {name} to {to_name}"


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


async def grep_paths(root: Path, target: Path, pattern: str, config: FsConfig) -> str:
    """Lines matching the regex ``pattern`` in ``target`` (a file, or a directory searched
    recursively), as ``path:line:text``. The search runs in a worker process
    (:mod:`~dsh_plugins.tools_fs.search`), killed if the call is cancelled or times out."""
    if not await asyncio.to_thread(target.exists):
        raise ToolError(f"{display(target, root)} does not exist", "NOT_FOUND")
    request = {
        "pattern": pattern,
        "root": str(root),
        "target": str(target),
        "max_matches": config.max_matches,
        "max_line_chars": config.max_line_chars,
        "max_file_bytes": config.max_grep_file_bytes,
        "ignore": list(config.ignore),
    }
    answer = await _run_worker(request)
    if "error" in answer:
        raise ToolError(answer["error"], "INVALID_ARGS")
    empty = f"no matches for {pattern!r} in {display(target, root)}"
    return _capped(answer["matches"], config.max_matches, empty, "matches")


#: Run by ``python -I -c``: load the search module by its path (not as part of the package, so
#: that dsh is not imported) and call its ``main``.
_BOOT = "import runpy, sys; runpy.run_path(sys.argv[1])['main']()"


async def _run_worker(request: dict[str, Any]) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        _BOOT,
        search.__file__,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate(json.dumps(request).encode())
    finally:
        if process.returncode is None:  # cancelled or timed out: the search must stop too
            process.kill()
            await process.wait()
    if process.returncode != 0:
        detail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise ToolError(
            f"the search failed (worker exit status {process.returncode}: {detail[0]})",
            "TOOL_ERROR",
        )
    answer: dict[str, Any] = json.loads(out)
    return answer


def _walk(top: Path, root: Path, config: FsConfig) -> Iterator[tuple[str, bool]]:
    return search.walk(top, root, config.ignore)


def _capped(items: list[str], cap: int, empty: str, what: str) -> str:
    if not items:
        return empty
    if len(items) <= cap:
        return "\n".join(items)
    shown = "\n".join(items[:cap])
    return f"{shown}\n[only the first {cap} {what} are shown; narrow the path or pattern]"
