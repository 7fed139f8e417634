"""API keys stored for the user, like ``llm keys``: ``dsh keys set deepseek`` writes the key to
``keys.json`` in the user config directory (:func:`dsh.userconfig.config_dir`), readable by the
user only (mode 0600). Adapters call :func:`api_key`, which prefers the environment variable and
falls back on the stored key."""

from __future__ import annotations

import os
import re
from pathlib import Path

from dsh.userconfig import UserConfigError, config_dir, read_table, write_table

__all__ = ["api_key", "keys_path", "load", "remove", "store"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FIX = "store the keys again with 'dsh keys set NAME'"


def keys_path() -> Path:
    return config_dir() / "keys.json"


def load() -> dict[str, str]:
    """Every stored key by name (empty when there is no keys file)."""
    return read_table(keys_path(), _FIX)


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
    return write_table(keys_path(), keys)


def remove(name: str) -> bool:
    """Forget the key ``name``; ``False`` when none was stored."""
    keys = load()
    if keys.pop(name, None) is None:
        return False
    write_table(keys_path(), keys)
    return True
