"""The user config directory of dsh (``$XDG_CONFIG_HOME/dsh``, default ``~/.config/dsh``) and
the small JSON tables kept there: stored API keys (:mod:`dsh.app._keys`) and model aliases
(:mod:`dsh.app._aliases`).

A table is a JSON object of name → string. It is replaced atomically (written beside it, then
renamed), so a crash never leaves half a file, and it is created readable by the user only (mode
0600: it may hold keys). A file that is not such an object is an error that names it, never
silently read as empty: storing one entry would otherwise drop all the others.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dsh.values._errors import DshError

__all__ = ["UserConfigError", "config_dir", "read_table", "write_table"]


class UserConfigError(DshError):
    """A table of the user config directory cannot be read or written, or an entry is bad."""


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/dsh``, else ``~/.config/dsh``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "dsh"


def read_table(path: Path, fix: str) -> dict[str, str]:
    """The table in ``path`` (empty when there is no file); ``fix`` tells the user how to
    rebuild it when it is broken."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UserConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        table = json.loads(text)
    except ValueError:
        table = None
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise UserConfigError(
            f"{path} is not a JSON object of names to strings: fix it, or delete it and {fix}"
        )
    return table


def write_table(path: Path, table: dict[str, str]) -> Path:
    """Replace the table in ``path`` (mode 0600, its directory 0700 when created)."""
    try:
        _replace(path, table)
    except OSError as exc:
        raise UserConfigError(f"cannot write {path}: {exc.strerror}") from exc
    return path


def _replace(path: Path, table: dict[str, str]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(table, file, indent=2, sort_keys=True)
        file.write("\n")
    os.chmod(temporary, 0o600)  # O_CREAT's mode is filtered by the umask; 0600 is meant
    os.replace(temporary, path)
