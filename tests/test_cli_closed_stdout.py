"""Every command that prints ends quietly when the reader of its stdout goes away (issue #34):
``dsh hooks | head``, ``dsh sessions list | head``, ``dsh sessions resume ... | head`` exit
``OUTPUT_CLOSED`` (141) with no ``BrokenPipeError`` traceback."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from dsh.cli import OUTPUT_CLOSED, main
from dsh.testing.mockserver import MockServer
from tests.helpers import disabled_plugins

BOOT = "import sys; from dsh.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    yield
    structlog.reset_defaults()  # the CLI configures logging process-wide


def test_a_closed_pipe_ends_a_command_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # ``| head`` that had read enough
    stdout = os.fdopen(writer, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["hooks"]) == OUTPUT_CLOSED
    finally:
        stdout.close()  # what was left goes to /dev/null now: no error


def test_an_output_without_a_descriptor_too(monkeypatch: pytest.MonkeyPatch) -> None:
    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Gone())
    assert main(["hooks"]) == OUTPUT_CLOSED


async def dsh(tmp_path: Path, *argv: str, closed: bool = False) -> tuple[int, str, str]:
    """``dsh ARGV`` in a child process; ``closed``: its stdout is a pipe nobody reads."""
    env = dict(os.environ, DSH_DISABLE_PLUGINS=disabled_plugins())
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    reader, writer = os.pipe()
    if closed:
        os.close(reader)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BOOT, "--config", str(tmp_path / "dsh.toml"), *argv,
        stdin=asyncio.subprocess.DEVNULL, stdout=writer, stderr=asyncio.subprocess.PIPE,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    os.close(writer)
    if closed:
        _, err = await child.communicate()
        return await child.wait(), "", err.decode()
    with os.fdopen(reader, "rb") as out:
        printed = await asyncio.to_thread(out.read)
    _, err = await child.communicate()
    return await child.wait(), printed.decode(), err.decode()


async def test_commands_that_print_into_a_closed_pipe(
    mock_server: MockServer, tmp_path: Path
) -> None:
    (tmp_path / "dsh.toml").write_text(
        f'[llm_deepseek]\nbase_url = "{mock_server.url}"\napi_key = "k"\n'
    )
    mock_server.queue("text")
    code, _, err = await dsh(tmp_path, "run", "hello")
    assert code == 0, err
    code, listed, err = await dsh(tmp_path, "sessions", "list")
    assert code == 0, err
    session_id = listed.splitlines()[1].split()[0]
    assert session_id.startswith("run-")

    for argv in (
        ["hooks"],
        ["sessions", "list"],
        ["sessions", "resume", session_id, "--prompt", "again"],
    ):
        code, _, err = await dsh(tmp_path, *argv, closed=True)
        assert (code, err) == (OUTPUT_CLOSED, ""), argv
