"""Fuzz the config loader: any bytes as ``dsh.toml`` give a loaded config or a
``ConfigError`` (never another exception), with every section the built-in plugins
register."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from dsh.app._harness import Harness
    from dsh.values._config import Config, load_toml
    from dsh.values._errors import ConfigError

from _support import json_value, key

_DIR = Path(tempfile.mkdtemp(prefix="dsh-fuzz-config-"))
_KNOWN = Harness()
_KNOWN.load()
_SECTIONS = _KNOWN.config.sections()
#: Every section's class and owner, as the built-in plugins registered them.
_CLASSES = [
    (name, type(_KNOWN.config.section(name, object)), _KNOWN.config.owner(name))
    for name in _SECTIONS
]


def _toml(data: atheris.FuzzedDataProvider) -> bytes:
    """Raw bytes, or tables of known sections with keys and values the fuzzer picks."""
    if data.ConsumeBool():
        return bytes(data.ConsumeBytes(data.remaining_bytes()))
    lines: list[str] = []
    for _ in range(data.ConsumeIntInRange(1, 3)):
        lines.append(f"[{_SECTIONS[data.ConsumeIntInRange(0, len(_SECTIONS) - 1)]}]")
        for _ in range(data.ConsumeIntInRange(0, 4)):
            lines.append(f"{_bare(key(data))} = {_value(json_value(data))}")
    return "\n".join(lines).encode()


def _bare(name: str) -> str:
    return name if name.replace("_", "").isalnum() and name.isascii() else f'"{name}"'


def _value(value: object) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if value == value and abs(value) != float("inf") else "nan"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_bare(k)} = {_value(v)}" for k, v in value.items()) + "}"


def one_input(raw: bytes) -> None:
    data = atheris.FuzzedDataProvider(raw)
    path = _DIR / "dsh.toml"
    path.write_bytes(_toml(data))
    # What Harness(config=path).load() does, less loading the plugins at every input.
    try:
        config = Config(load_toml(path))
        for name, cls, owner in _CLASSES:
            config.register(name, cls, owner)
        config.load()
    except ConfigError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
