"""Fuzz the JSONL session store's reading: a file of any bytes either loads or fails with a
``DshError`` naming the file, and listing the directory never fails because of it (a good
session beside it stays listed)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from dsh.values._errors import DshError
    from dsh_plugins.persistence_jsonl import JsonlStore, file_name

from _support import json_value

_DIR = Path(tempfile.mkdtemp(prefix="dsh-fuzz-jsonl-"))
_STORE = JsonlStore(_DIR)
_STORE.directory = _DIR  # what the harness's start sets
_GOOD = (
    b'{"format":"dsh-session","version":1,"id":"good","created":1.0,"title":"kept","events":0}\n'
)
(_DIR / file_name("good")).write_bytes(_GOOD)


def _content(data: atheris.FuzzedDataProvider) -> bytes:
    """Raw bytes, or a header whose fields the fuzzer picks followed by raw lines."""
    if data.ConsumeBool():
        return bytes(data.ConsumeBytes(data.remaining_bytes()))
    header = {"format": "dsh-session"} if data.ConsumeBool() else {}
    for name in ("version", "id", "created", "title", "events", "parent"):
        if data.ConsumeBool():
            header[name] = json_value(data)
    head = json.dumps(header, allow_nan=True).encode()
    return head + b"\n" + bytes(data.ConsumeBytes(data.remaining_bytes()))


def one_input(raw: bytes) -> None:
    data = atheris.FuzzedDataProvider(raw)
    path = _DIR / file_name("fuzzed")
    path.write_bytes(_content(data))
    try:
        _STORE.load("fuzzed")
    except DshError as exc:
        if str(path) not in str(exc):
            raise AssertionError(f"the error names no file: {exc}") from exc
    listed = _STORE.list_sessions(None, 10)
    assert "good" in [summary.id for summary in listed], "one damaged file hid a good session"


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
