"""persistence_jsonl keeps the session-store contract."""

from __future__ import annotations

from pathlib import Path

from dsh.testing.stores import SessionStoreContract
from dsh_plugins.persistence_jsonl import JsonlStore, file_name


class TestJsonlStore(SessionStoreContract):
    def make_store(self, directory: Path) -> object:
        return JsonlStore(directory / "sessions")

    def tear(self, directory: Path, session_id: str) -> bool:
        with (directory / "sessions" / file_name(session_id)).open("ab") as file:
            file.write(b'{"type":"user/message","seq":2,"time":1.5,"da')
        return True
