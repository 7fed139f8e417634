"""``dsh.cluster``: the client contract, and how ``connect`` finds a cluster engine through
its entry-point group without the core importing one."""

from __future__ import annotations

import ast
from collections.abc import AsyncGenerator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import dsh.cluster
from dsh.cluster import ENTRY_POINT_GROUP, HostLost, Pool, connect
from dsh.values._agent import Content
from dsh.values._approval import PendingApproval
from dsh.values._errors import DshError
from dsh.values._events import SessionEvent


class ListPool(Pool):
    """A pool of no hosts that keeps what it is sent (an engine as small as the contract)."""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.sent: list[tuple[str, Content]] = []
        self.closed = False

    async def send(self, session_id: str, message: Content) -> None:
        self.sent.append((session_id, message))

    async def steer(self, session_id: str, message: Content) -> None:
        self.sent.append((session_id, message))

    async def abort(self, session_id: str, reason: str = "aborted") -> None:
        raise DshError(f"{session_id}: {reason}")

    async def resume(self, session_id: str) -> None:
        raise DshError(f"no stored session {session_id!r}")

    async def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        return []

    async def decide(
        self, session_id: str, call_id: str, allow: bool, reason: str | None = None
    ) -> None:
        raise DshError(f"no call {call_id!r} waits in {session_id!r}")

    async def events(
        self, session_id: str, after_seq: int = -1
    ) -> AsyncGenerator[SessionEvent, None]:
        for _ in ():
            yield _

    async def close(self) -> None:
        self.closed = True


async def make_pool(**options: object) -> ListPool:
    return ListPool(**options)


def engines(monkeypatch: pytest.MonkeyPatch, *found: EntryPoint) -> None:
    monkeypatch.setattr(dsh.cluster, "entry_points", lambda group: list(found))


async def test_connect_finds_the_engine_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    here = EntryPoint("mine", f"{__name__}:make_pool", ENTRY_POINT_GROUP)
    engines(monkeypatch, here)
    async with await connect("mine", hosts=2) as pool:
        assert isinstance(pool, ListPool)
        assert pool.options == {"hosts": 2}
        await pool.send("s1", "hello")
    assert pool.closed
    assert pool.sent == [("s1", "hello")]


async def test_connect_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    engines(monkeypatch, EntryPoint("other", f"{__name__}:make_pool", ENTRY_POINT_GROUP))
    with pytest.raises(DshError, match=r"no cluster engine 'ray' is installed \(installed: other"):
        await connect()
    engines(monkeypatch)
    with pytest.raises(DshError, match=r"installed: none\); install it with pip install"):
        await connect()


async def test_an_engine_missing_its_packages_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engines(monkeypatch, EntryPoint("ray", "no_such_engine_module:connect", ENTRY_POINT_GROUP))
    with pytest.raises(DshError, match=r"pip install 'dsh-harness\[ray\]'"):
        await connect("ray")


def test_a_lost_host_says_how_to_check() -> None:
    error = HostLost("s1", RuntimeError("actor died"))
    assert error.session_id == "s1"
    assert "read the session's events" in str(error)


def test_the_core_does_not_import_an_engine() -> None:
    tree = ast.parse(Path(dsh.cluster.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m in imported if m and m.split(".")[0] in {"ray", "dsh_plugins"}}
