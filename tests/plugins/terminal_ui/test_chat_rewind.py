"""``/rewind`` in ``dsh chat``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.testing import text_response, tool_call_response
from dsh_plugins.tools_fs import FsToolsPlugin
from tests.plugins.terminal_ui.conftest import Kit
from tests.plugins.terminal_ui.test_chat import Chat, chats, start

__all__ = ["chats"]  # the fixture, imported for the tests below


async def test_rewind_puts_the_files_back_and_continues_in_a_fork(
    chats: list[Chat], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the chat's workspace
    kit = Kit(
        [
            tool_call_response("c1", "write_file", {"path": "a.txt", "content": "one"}),
            text_response("written"),
            tool_call_response("c2", "write_file", {"path": "a.txt", "content": "two"}),
            text_response("rewritten"),
            text_response("in the fork"),
        ],
        ask=False,
    )
    config = {"permissions": {"mode": "full"}}
    chat = await start(chats, kit, extra=[FsToolsPlugin()], config=config)
    await chat.say("write one")
    await chat.say("write two")
    first = chat.session.agent.session.id
    assert (tmp_path / "a.txt").read_text() == "two"

    for wrong in ("", "two", "1 2", "1 --hard"):
        assert await chat.session.submit(f"/rewind {wrong}".strip()) == "idle"
        assert chat.printed()[-1].startswith("usage: /rewind N [--in-place] [--force]")
    assert await chat.session.submit("/rewind 9") == "idle"
    assert chat.printed()[-1] == "cannot rewind: there is no turn 9: the session holds turns 1 to 2"

    assert await chat.session.submit("/rewind 2") == "idle"
    fork = chat.session.agent.session.id
    assert fork != first
    assert chat.printed()[-2:] == [
        f"rewound {first} to before turn 2 as {fork}",
        f"  restored   {tmp_path / 'a.txt'}",
    ]
    assert (tmp_path / "a.txt").read_text() == "one"
    await chat.say("go on")  # the conversation goes on in the fork, from turn 2
    assert chat.printed()[-2] == "in the fork"
    assert chat.session.agent.session.last_turn == 2
    assert await chat.session.submit("/rewind 1 --in-place --force") == "idle"
    assert chat.printed()[-2] == f"rewound {fork} to before turn 1 in place"
    assert not (tmp_path / "a.txt").exists()
