"""Model aliases of the user: ``dsh models alias set fast deepseek-flash`` makes ``-m fast``
mean ``deepseek-flash`` in ``dsh run``, ``dsh chat`` (and its ``/model``) and ``dsh sessions
resume``. Kept in ``aliases.json`` in the user config directory
(:func:`dsh.app._userconfig.config_dir`). An alias names a model, never another alias, and never
shadows a model an adapter serves."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from dsh.app._userconfig import UserConfigError, config_dir, read_table, write_table

__all__ = ["aliases_path", "load", "remove", "resolve", "store"]

_FIX = "set the aliases again with 'dsh models alias set NAME MODEL'"


def aliases_path() -> Path:
    return config_dir() / "aliases.json"


def load() -> dict[str, str]:
    """Every alias and the model it names (empty when there is no aliases file)."""
    return read_table(aliases_path(), _FIX)


def resolve(model: str) -> str:
    """The model ``model`` names: its target if it is an alias, else itself."""
    return load().get(model, model)


def store(name: str, model: str, serves: Callable[[str], bool], listed: Collection[str]) -> Path:
    """Make ``name`` an alias of ``model``, which must be a model id an adapter ``serves``
    (``listed``: the ids registered by name, for the message)."""
    if serves(name):
        raise UserConfigError(f"{name!r} is already a model id; choose another alias")
    if not serves(model):
        known = ", ".join(sorted(listed)) or "none"
        raise UserConfigError(f"no adapter serves model {model!r}; known models: {known}")
    if not name or any(c.isspace() for c in name):
        raise UserConfigError("an alias is one word with no spaces")
    aliases = load()
    aliases[name] = model
    return write_table(aliases_path(), aliases)


def remove(name: str) -> bool:
    """Forget the alias ``name``; ``False`` when there was none."""
    aliases = load()
    if aliases.pop(name, None) is None:
        return False
    write_table(aliases_path(), aliases)
    return True
