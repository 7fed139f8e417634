"""API keys stored for the user, like ``llm keys``: ``dsh keys set deepseek`` writes the key to
``keys.json`` in the user config directory (:func:`dsh.app._userconfig.config_dir`), readable by the
user only (mode 0600, the directory 0700). Adapters call :func:`api_key`, which prefers the
environment variable and falls back on the stored key.

As ssh does with private keys, a keys file that its group or others can get at (any of the
mode bits 077 set on the file, or on its directory) is refused, never read: the error names the
file and the ``chmod`` that fixes it. Storing a key into such a directory is refused too."""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

from dsh.app._userconfig import UserConfigError, config_dir, read_table, write_table

__all__ = ["api_key", "check_private", "keys_path", "load", "remove", "store"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FIX = "store the keys again with 'dsh keys set NAME'"
#: The mode bits that let the group or others at a file or directory (ssh refuses a private
#: key file with any of them set).
_OPEN = 0o077


def keys_path() -> Path:
    return config_dir() / "keys.json"


def load() -> dict[str, str]:
    """Every stored key by name (empty when there is no keys file). A keys file that its group
    or others can get at, or whose directory they can, is refused (:func:`check_private`)."""
    path = keys_path()
    if path.exists():
        check_private(path)
    return read_table(path, _FIX)


def check_private(path: Path) -> None:
    """Raise :class:`UserConfigError` when the keys file ``path`` or its directory has any mode
    bit for its group or others (what exists of them): the message names each, its mode and
    the ``chmod`` that makes it private."""
    directory, file = _mode(path.parent), _mode(path)
    opened = [
        (target, mode, private)
        for target, mode, private in ((path.parent, directory, 0o700), (path, file, 0o600))
        if mode is not None and mode & _OPEN
    ]
    if not opened:
        return
    named = " and ".join(f"{target} (mode {mode:04o})" for target, mode, _ in opened)
    fix = " && ".join(f"chmod {private:o} {shlex.quote(str(t))}" for t, _, private in opened)
    readable = file is not None and file & _OPEN
    are = "is" if len(opened) == 1 else "are"
    raise UserConfigError(
        f"your API keys are stored in {path}, but {named} {are} open to group or others: "
        f"refused, as ssh refuses such private keys. Make it private with: {fix}"
        + (" (and replace the keys if someone else may have read them)" if readable else "")
    )


def _mode(path: Path) -> int | None:
    """The permission bits of ``path``; ``None`` when it cannot be looked at (it does not
    exist: reading or writing it then says what is wrong)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def api_key(name: str, env_var: str) -> str | None:
    """The key for ``name``: the environment variable ``env_var`` when set, else the stored key
    (``dsh keys set NAME``), else ``None``."""
    return os.environ.get(env_var) or load().get(name) or None


def store(name: str, key: str) -> Path:
    """Store ``key`` under ``name``; returns the keys file."""
    if not _NAME.fullmatch(name):
        raise UserConfigError(
            f"{name!r} is not a key name: use letters, digits, '-', '_' or '.' (e.g. deepseek)"
        )
    key = key.strip()
    if not key or any(c.isspace() for c in key):
        raise UserConfigError("a key is one word with no spaces; nothing was stored")
    keys = load()
    keys[name] = key
    path = keys_path()
    check_private(path)  # the directory: a new file in an open one would be refused next time
    return write_table(path, keys)


def remove(name: str) -> bool:
    """Forget the key ``name``; ``False`` when none was stored."""
    keys = load()
    if keys.pop(name, None) is None:
        return False
    write_table(keys_path(), keys)
    return True
