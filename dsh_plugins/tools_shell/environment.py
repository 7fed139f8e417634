"""What a command may learn from the harness: an allow-listed environment, and a harness
process it cannot read.

A command's environment is built from an allow-list (:data:`~.config.BASE_ENV` plus
``env_allow``), never from the harness's whole environment minus a deny-list: a secret under an
unexpected name is then simply absent.

The harness's own environment is readable by its children too: ``/proc/$PPID/environ`` shows
the environment the harness was started with, whatever ``os.environ`` says now. So
:func:`protect_process` makes the process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: the
kernel then lets only a process with ``CAP_SYS_PTRACE`` read its ``/proc`` files), and, for the
case where the command has that capability (running as root in a container), overwrites the
values of secret-looking variables in the initial environment block. ``os.environ`` keeps them,
and the C library's environment is pointed at fresh copies first, so the harness and what it
starts without an explicit environment still see them.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path

__all__ = [
    "allowed",
    "glob_match",
    "is_secret",
    "protect_process",
    "set_non_dumpable",
    "wipe_environment_block",
]

#: ``prctl`` option: whether the process may be dumped (and read through ``/proc``).
PR_SET_DUMPABLE = 4
_GLOB = frozenset("*?[")


def glob_match(name: str, pattern: str) -> bool:
    """:func:`fnmatch.fnmatchcase`, told without a regular expression when ``*`` is the only
    wildcard of ``pattern`` (as in every secret pattern). The harness checks each variable of
    its environment against each secret pattern when it starts, and ``fnmatchcase`` compiles a
    regular expression for each pattern and matches through it: ~0.5 ms of a start, where
    comparing the literal parts in order takes ~0.1 ms. ``fnmatchcase`` is the reference
    (``tests/plugins/tools_shell/test_glob.py`` holds this to it)."""
    if "?" in pattern or "[" in pattern:
        return fnmatchcase(name, pattern)
    if "*" not in pattern:
        return name == pattern
    head, *middle, tail = pattern.split("*")
    if len(name) < len(head) + len(tail) or not name.startswith(head) or not name.endswith(tail):
        return False
    at, end = len(head), len(name) - len(tail)
    for part in middle:  # each in order, leftmost first, between the head and the tail
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def is_secret(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the glob ``patterns`` (case-insensitive)."""
    upper = name.upper()
    return any(glob_match(upper, pattern.upper()) for pattern in patterns)


def allowed(
    environ: Mapping[str, str],
    allow: Iterable[str],
    secret: Iterable[str],
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables of ``environ`` that ``allow`` names, plus ``extra``.

    An exact name in ``allow`` passes its variable; a glob passes the matching names that are
    not ``secret`` (so ``LC_*`` cannot carry ``LC_TOKEN``). Names compare case-sensitively, as
    the environment does.
    """
    secret = tuple(secret)
    exact = {name for name in allow if not _GLOB & set(name)}
    globs = [name for name in allow if _GLOB & set(name)]

    def passes(name: str) -> bool:
        if name in exact:
            return True
        return any(glob_match(name, glob) for glob in globs) and not is_secret(name, secret)

    return {k: v for k, v in environ.items() if passes(k)} | dict(extra or {})


def protect_process(secret: Iterable[str], proc: Path = Path("/proc/self")) -> list[str]:
    """Make this process unreadable to its children: non-dumpable, and the values of the
    ``secret`` variables wiped from its initial environment block. Returns the wiped names.
    Where the system has neither (not Linux), it does nothing."""
    set_non_dumpable()
    return wipe_environment_block(secret, proc)


def set_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: whether it was done (``False`` without ``prctl``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = getattr(libc, "prctl", lambda *args: -1)  # only Linux has it
    return bool(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def wipe_environment_block(secret: Iterable[str], proc: Path = Path("/proc/self")) -> list[str]:
    """Overwrite with NUL bytes the values of the ``secret`` variables in the block that
    ``proc/environ`` shows (the environment the process started with); returns their names.

    The block's address comes from ``proc/stat`` (``env_start``, ``env_end``); nothing is
    written unless the memory there holds exactly what ``proc/environ`` shows. Before a value
    is wiped, the C library's entry for it is replaced by a copy (``putenv``), so ``getenv``
    and child processes that inherit the environment still get the value.
    """
    try:
        block = (proc / "environ").read_bytes()
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # no /proc: nothing shows the block to a child either
        return []
    start, end = int(fields[47]), int(fields[48])  # fields 50 and 51 of proc(5)
    if end - start != len(block) or ctypes.string_at(start, len(block)) != block:
        return []
    wiped = []
    offset = 0
    secret = tuple(secret)
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        text = os.fsdecode(name)
        if sep and value and is_secret(text, secret):
            if text in os.environ:
                os.putenv(text, os.environ[text])
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
            wiped.append(text)
        offset += len(entry) + 1
    return wiped
