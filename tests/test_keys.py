"""``dsh keys``: keys stored in the user config directory, used when the environment has none."""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dsh import AgentOptions, Harness
from dsh.app import _keys as keys
from dsh.app._userconfig import UserConfigError, config_dir
from dsh.cli import main
from dsh.testing.mockserver import MockServer
from dsh.values._content import Text
from dsh.values._events import TurnCompleted, TurnEnd, TurnError, UserMessage
from dsh_plugins.llm_deepseek import DeepSeekPlugin
from dsh_plugins.terminal_ui import startup
from tests.helpers import data_of
from tests.plugins.terminal_ui.test_startup import deepseek_harness


def dsh(*argv: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``dsh ARGV`` as a real process, with the test's (isolated) environment and no key."""
    env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    env["DSH_DISABLE_PLUGINS"] = ""
    return subprocess.run(
        [sys.executable, "-m", "dsh", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
    )


def private_file(path: Path, text: str) -> Path:
    """``path`` holding ``text``, readable by the user only, in a directory only the user can
    open (as ``dsh keys set`` makes them)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_set_list_remove_as_a_user_would() -> None:
    stored = dsh("keys", "set", "deepseek", stdin="sk-secret-1\n")
    assert stored.returncode == 0, stored.stderr
    path = config_dir() / "keys.json"
    assert stored.stdout == f"stored the key for deepseek in {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert dsh("keys", "set", "other", "--value", "sk-2").returncode == 0
    listed = dsh("keys", "list")
    assert listed.stdout == "deepseek\nother\n"  # names only, never the keys
    assert dsh("keys", "path").stdout == f"{path}\n"
    assert keys.load() == {"deepseek": "sk-secret-1", "other": "sk-2"}
    assert dsh("keys", "remove", "other").stdout == "removed the key for other\n"
    gone = dsh("keys", "remove", "other")
    assert gone.returncode == 1 and "there is no stored key 'other'" in gone.stderr
    assert keys.load() == {"deepseek": "sk-secret-1"}
    assert keys.remove("deepseek") and keys.load() == {}
    assert dsh("keys", "list").stdout == "no stored keys ('dsh keys set NAME' stores one)\n"


def test_bad_names_keys_and_files_are_clear_errors_that_lose_nothing() -> None:
    keys.store("deepseek", "sk-1")
    bad = dsh("keys", "set", "../evil", "--value", "sk-2")
    assert bad.returncode == 1 and "'../evil' is not a key name" in bad.stderr
    empty = dsh("keys", "set", "deepseek", stdin="\n")
    assert empty.returncode == 1 and "nothing was stored" in empty.stderr
    assert keys.load() == {"deepseek": "sk-1"}
    keys.keys_path().write_text("[1, 2]")
    broken = dsh("keys", "set", "deepseek", "--value", "sk-3")
    # The command that reads the file says what is wrong with it (the adapters read it only
    # when a model is first used, so loading the harness does not).
    assert broken.returncode == 1
    assert broken.stderr.startswith(
        f"dsh keys set: {keys.keys_path()} is not a JSON object of names to strings"
    )
    assert keys.keys_path().read_text() == "[1, 2]"  # not overwritten
    keys.keys_path().write_text("{not json")
    with pytest.raises(UserConfigError, match="fix it, or delete it"):
        keys.load()


def test_unreadable_and_unwritable_files_are_clear_errors() -> None:
    keys.keys_path().parent.mkdir(parents=True, mode=0o700)
    keys.keys_path().mkdir(mode=0o700)  # a directory where the file should be
    with pytest.raises(UserConfigError, match="cannot read"):
        keys.load()
    keys.keys_path().rmdir()
    # The file is written beside its place first: a directory there makes the write fail.
    (keys.keys_path().parent / f".keys.json.{os.getpid()}.tmp").mkdir()
    with pytest.raises(UserConfigError, match="cannot write"):
        keys.store("deepseek", "sk-1")
    assert not keys.keys_path().exists()


def test_the_terminal_is_asked_without_echo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def getpass(prompt: str) -> str:
        asked.append(prompt)
        return "sk-typed"

    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    assert main(["keys", "set", "deepseek"]) == 0
    assert asked == ["Enter the key for deepseek: "]
    assert "sk-typed" not in capsys.readouterr().out
    assert keys.load() == {"deepseek": "sk-typed"}
    assert main(["keys"]) == 2
    assert "usage: dsh keys" in capsys.readouterr().out


def test_the_environment_wins_over_the_stored_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    assert keys.api_key("deepseek", "DEEPSEEK_API_KEY") is None
    keys.store("deepseek", "sk-stored")
    assert keys.api_key("deepseek", "DEEPSEEK_API_KEY") == "sk-stored"
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-env")
    assert keys.api_key("deepseek", "DEEPSEEK_API_KEY") == "sk-env"


def test_without_xdg_config_home_it_is_under_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert keys.keys_path() == tmp_path / ".config" / "dsh" / "keys.json"


def test_a_stored_key_makes_the_real_api_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    assert startup.model_problem(deepseek_harness(), "deepseek-flash") == startup.NO_KEY
    assert "dsh keys set deepseek" in startup.NO_KEY
    keys.store("deepseek", "sk-stored")
    assert startup.model_problem(deepseek_harness(), "deepseek-flash") is None


async def test_the_adapters_send_the_stored_key(tmp_path: Path) -> None:
    keys.store("deepseek", "sk-stored")
    async with MockServer(api_key="sk-stored") as server:
        (tmp_path / "dsh.toml").write_text(f'[llm_deepseek]\nbase_url = "{server.url}"\n')
        env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
        env["DSH_DISABLE_PLUGINS"] = ""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh", "run", "--no-thinking", "-m", "deepseek-flash", "hi",
            cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        assert server.requests[0].headers["Authorization"] == "Bearer sk-stored"


async def test_a_broken_keys_file_ends_the_turn_saying_so_and_is_read_again_once_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    private_file(keys.keys_path(), "[1, 2]")
    async with MockServer(api_key="sk-stored") as server:
        config = {"llm_deepseek": {"base_url": server.url}}
        async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin()], config=config) as h:
            # Loading the harness reads no key: the adapter is built when the model is used.
            agent = h.agent_loop.create("a", AgentOptions(model="deepseek-flash", thinking=False))
            agent.send("hi")
            await agent.wait_idle()
            reason = data_of(agent.session.events, TurnEnd)[-1].reason
            assert isinstance(reason, TurnError) and reason.failure.code == "ADAPTER_ERROR"
            assert reason.failure.message.startswith(
                "the adapter of 'DeepSeekPlugin' for model 'deepseek-flash' could not be built: "
                f"UserConfigError: {keys.keys_path()} is not a JSON object of names to strings"
            )
            assert server.requests == []
            keys.keys_path().write_text('{"deepseek": "sk-stored"}')
            agent.send("again")
            await agent.wait_idle()
            assert isinstance(data_of(agent.session.events, TurnEnd)[-1].reason, TurnCompleted)
            assert [m.content for m in data_of(agent.session.events, UserMessage)] == [
                (Text("hi"),),
                (Text("again"),),
            ]
        assert server.requests[0].headers["Authorization"] == "Bearer sk-stored"


def test_the_commands_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same commands through ``main`` (the subprocess tests above show them for real)."""
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    monkeypatch.setattr("sys.stdin", io.StringIO("sk-piped\n"))
    assert main(["keys", "set", "deepseek"]) == 0
    assert main(["keys", "set", "other", "--value", "sk-2"]) == 0
    assert main(["keys", "set", "bad name", "--value", "sk-3"]) == 1
    assert main(["keys", "set", "empty", "--value", "  "]) == 1
    capsys.readouterr()
    assert main(["keys", "list"]) == 0
    assert capsys.readouterr().out == "deepseek\nother\n"
    assert main(["keys", "path"]) == 0
    assert capsys.readouterr().out == f"{keys.keys_path()}\n"
    assert main(["keys", "remove", "other"]) == 0
    assert main(["keys", "remove", "other"]) == 1
    assert "there is no stored key 'other'" in capsys.readouterr().err
    assert keys.remove("deepseek")
    assert main(["keys", "list"]) == 0
    assert "no stored keys" in capsys.readouterr().out
    assert keys.load() == {}


# -- modes: a keys file others can get at is refused, as ssh refuses such private keys --------


def refusal(path: Path, *opened: tuple[Path, int, str]) -> str:
    """The message refusing ``path`` for the ``(target, mode, chmod mode)`` that are open."""
    named = " and ".join(f"{target} (mode {mode:04o})" for target, mode, _ in opened)
    fix = " && ".join(f"chmod {private} {shlex.quote(str(t))}" for t, _, private in opened)
    tail = " (and replace the keys if someone else may have read them)"
    return (
        f"your API keys are stored in {path}, but {named} "
        f"{'is' if len(opened) == 1 else 'are'} open to group or others: refused, as ssh "
        f"refuses such private keys. Make it private with: {fix}"
        + (tail if any(t == path for t, _, _ in opened) else "")
    )


def test_a_keys_file_others_can_read_is_refused_by_every_command_and_left_alone() -> None:
    path = private_file(keys.keys_path(), '{"deepseek": "sk-1"}\n')
    path.chmod(0o644)
    expected = refusal(path, (path, 0o644, "600"))
    for argv in (["list"], ["set", "other", "--value", "sk-2"], ["remove", "deepseek"]):
        refused = dsh("keys", *argv)
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr == f"dsh keys {argv[0]}: {expected}\n"
    assert path.read_text() == '{"deepseek": "sk-1"}\n'  # nothing written, nothing lost
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # and not changed behind the user's back
    assert dsh("keys", "path").stdout == f"{path}\n"  # where it is: still said
    path.chmod(0o600)
    assert dsh("keys", "list").stdout == "deepseek\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o601, 0o660, 0o666])
def test_any_group_or_other_bit_on_the_file_is_refused(mode: int) -> None:
    path = private_file(keys.keys_path(), '{"deepseek": "sk-1"}')
    path.chmod(mode)
    with pytest.raises(UserConfigError) as info:
        keys.api_key("deepseek", "DSH_TEST_NO_SUCH_VARIABLE")
    assert str(info.value) == refusal(path, (path, mode, "600"))
    for private in (0o600, 0o400, 0o700):
        path.chmod(private)
        assert keys.api_key("deepseek", "DSH_TEST_NO_SUCH_VARIABLE") == "sk-1"


def test_an_open_directory_is_refused_and_the_printed_chmod_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "my config"))  # quoted in the fix
    path = private_file(keys.keys_path(), '{"deepseek": "sk-1"}')
    path.parent.chmod(0o755)
    with pytest.raises(UserConfigError) as info:
        keys.load()
    assert str(info.value) == refusal(path, (path.parent, 0o755, "700"))
    assert "'" in str(info.value)  # the path with a space is quoted for the shell
    path.chmod(0o644)
    refused = dsh("keys", "list")
    message = refusal(path, (path.parent, 0o755, "700"), (path, 0o644, "600"))
    assert refused.stderr == f"dsh keys list: {message}\n"
    # The command the message gives is the one that fixes it, run as the user would.
    command = message.split("Make it private with: ")[1].split(" (and replace")[0]
    subprocess.run(["sh", "-c", command], check=True)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert dsh("keys", "list").stdout == "deepseek\n"


def test_no_key_is_stored_into_an_open_directory() -> None:
    directory = keys.keys_path().parent
    directory.mkdir(parents=True, mode=0o700)
    directory.chmod(0o750)
    stored = dsh("keys", "set", "deepseek", "--value", "sk-1")
    assert stored.returncode == 1
    expected = refusal(keys.keys_path(), (directory, 0o750, "700"))
    assert stored.stderr == f"dsh keys set: {expected}\n"
    assert not keys.keys_path().exists()
    assert keys.load() == {}  # no file: nothing to refuse
    directory.chmod(0o700)
    assert dsh("keys", "set", "deepseek", "--value", "sk-1").returncode == 0


def test_keys_are_stored_private_whatever_the_umask() -> None:
    """``dsh keys set`` under ``umask 000``: the directory is 0700 and the file 0600."""
    env = {**os.environ, "DSH_DISABLE_PLUGINS": ""}
    command = f"umask 000 && exec {shlex.quote(sys.executable)} -m dsh keys set deepseek"
    stored = subprocess.run(
        ["sh", "-c", command], input="sk-1\n", capture_output=True, text=True, env=env
    )
    assert stored.returncode == 0, stored.stderr
    assert stat.S_IMODE(keys.keys_path().stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.keys_path().parent.stat().st_mode) == 0o700
    assert keys.load() == {"deepseek": "sk-1"}


def test_the_environment_wins_without_reading_an_open_keys_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    private_file(keys.keys_path(), '{"deepseek": "sk-stored"}').chmod(0o644)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-env")
    assert keys.api_key("deepseek", "DEEPSEEK_API_KEY") == "sk-env"


async def test_an_open_keys_file_ends_the_turn_saying_so_and_the_agent_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    path = private_file(keys.keys_path(), '{"deepseek": "sk-stored"}')
    path.chmod(0o640)
    async with MockServer(api_key="sk-stored") as server:
        config = {"llm_deepseek": {"base_url": server.url}}
        async with Harness(load_entrypoints=False, plugins=[DeepSeekPlugin()], config=config) as h:
            agent = h.agent_loop.create("a", AgentOptions(model="deepseek-flash", thinking=False))
            agent.send("hi")
            await agent.wait_idle()
            reason = data_of(agent.session.events, TurnEnd)[-1].reason
            assert isinstance(reason, TurnError) and reason.failure.code == "ADAPTER_ERROR"
            assert reason.failure.message.endswith(refusal(path, (path, 0o640, "600")))
            assert server.requests == []  # the key was not sent
            path.chmod(0o600)
            agent.send("again")
            await agent.wait_idle()
            assert isinstance(data_of(agent.session.events, TurnEnd)[-1].reason, TurnCompleted)
        assert server.requests[0].headers["Authorization"] == "Bearer sk-stored"
