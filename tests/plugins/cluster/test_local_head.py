"""``dsh cluster up|status|down --local``: a one-node Ray head that dsh starts, reports and
stops, as a real ``ray start`` process of the installed Ray on 127.0.0.1.

Each head gets a short temp dir of its own (Ray's Unix socket paths live under it), so it
collides neither with the other tests' clusters nor with a Ray cluster another run keeps on
the machine. The commands run as ``python -m dsh`` subprocesses, and in this process where
coverage must see them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip(
    "ray", reason="the cluster tests need Ray: pip install 'dsh-harness[ray]'"
)
pytestmark = pytest.mark.timeout(300)

from dsh_plugins.cluster import cli  # noqa: E402 (after the skip: Ray may be missing)
from dsh_plugins.cluster.cli import LocalHead  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[3])
ADDRESS = re.compile(r"local Ray head at (127\.0\.0\.1:\d+)")


@pytest.fixture
def temp_dir() -> Iterator[Path]:
    """A short temp dir for one head; whatever of the head a failing test left is killed."""
    path = Path(tempfile.mkdtemp(prefix="dsh-rt-"))
    try:
        yield path
    finally:
        ray.shutdown()
        pid_file = path / "dsh-head.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The hosts' dsh.toml: their sessions in a JSONL store under the test's directory."""
    path = tmp_path / "dsh.toml"
    path.write_text(f'[persistence_jsonl]\ndir = "{tmp_path / "sessions"}"\n')
    return path


def cluster_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return parser.parse_args(list(argv))


async def run(*argv: str) -> tuple[int, str, str]:
    """``dsh cluster ARGV`` in this process: exit code, output, errors."""
    out, err = io.StringIO(), io.StringIO()
    code = await cli.run(cluster_args(*argv), out, err)
    return code, out.getvalue(), err.getvalue()


async def dsh(*argv: str) -> tuple[int, str, str]:
    """``python -m dsh cluster ARGV`` as a subprocess (the tests' package on its path)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dsh",
        "cluster",
        *argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def processes_mentioning(text: str) -> list[int]:
    """The pids whose command line names ``text`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode():
                found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_up_status_down_local_as_commands(temp_dir: Path, config: Path) -> None:
    where = ("--local", "--temp-dir", str(temp_dir))
    pool = ("--hosts", "2", "--prefix", "local", "--namespace", "dsh-local")
    code, out, err = await dsh("up", *where, "--cpus", "1", *pool, "--config", str(config))
    assert code == 0, err
    match = ADDRESS.search(out)
    assert match is not None, out
    address = match[1]
    assert "started a local Ray head" in out
    # One node, on the loopback address, with the CPUs asked for; both hosts answered.
    assert re.search(r"^node \w+ at 127\.0\.0\.1: alive, 1 CPUs$", out, re.M), out
    assert "local-0: node" in out and "local-1: node" in out
    head = int((temp_dir / "dsh-head.pid").read_text())

    code, out, err = await dsh("status", *where, *pool)
    assert code == 0, err
    assert f"Ray cluster at {address} (local head in {temp_dir})" in out
    host_pids = [int(pid) for pid in re.findall(r"^local-\d: node \w+, pid (\d+)", out, re.M)]
    assert len(host_pids) == 2
    # This process sees it too (then lets it go: the command below stops the head).
    code, out, err = await run("status", *where, *pool)
    assert code == 0, err
    assert out.count(": no sessions") == 2
    ray.shutdown()
    ray_status = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "ray"),
        "status",
        f"--address={address}",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert await asyncio.wait_for(ray_status.wait(), 120) == 0

    code, out, err = await dsh("down", *where, *pool)
    assert code == 0, err
    assert out.count(": stopped") == 2
    assert f"the local Ray head at {address} stopped" in out
    # Nothing of that head is left: its ray start, its hosts, every process of its temp dir.
    for _ in range(50):
        if all(gone(pid) for pid in [head, *host_pids]):
            break
        await asyncio.sleep(0.2)
    assert all(gone(pid) for pid in [head, *host_pids])
    assert processes_mentioning(str(temp_dir)) == []
    assert not (temp_dir / "dsh-head.pid").exists()

    code, out, err = await dsh("down", *where, *pool)
    assert (code, out) == (0, f"no local Ray head runs in {temp_dir}\n"), err


async def test_up_local_reuses_a_running_head_and_down_stops_it(
    temp_dir: Path, config: Path
) -> None:
    where = ("--local", "--temp-dir", str(temp_dir))
    pool = ("--hosts", "1", "--prefix", "reuse", "--namespace", "dsh-local")
    code, out, err = await run("up", *where, *pool, "--config", str(config))
    assert code == 0, err
    match = ADDRESS.search(out)
    assert match is not None and "started" in out, out
    head = int((temp_dir / "dsh-head.pid").read_text())
    ray.shutdown()
    code, out, err = await run("up", *where, *pool, "--config", str(config))
    assert code == 0, err
    assert f"a local Ray head runs at {match[1]}" in out
    assert "reuse-0: node" in out
    assert int((temp_dir / "dsh-head.pid").read_text()) == head

    code, out, err = await run("down", *where, *pool)
    assert code == 0, err
    assert "reuse-0: stopped" in out and f"the local Ray head at {match[1]} stopped" in out
    assert not ray.is_initialized()
    assert processes_mentioning(str(temp_dir)) == []
    code, out, err = await run("down", *where, *pool)
    assert (code, out) == (0, f"no local Ray head runs in {temp_dir}\n"), err
    code, out, err = await run("status", *where, *pool)
    assert code == 1
    assert f"no local Ray head runs in {temp_dir}: start one with dsh cluster up --local" in err


async def test_a_head_that_fails_to_start_is_reported_with_its_log() -> None:
    # Ray refuses a temp dir whose socket paths would pass the 107 bytes of a Unix socket.
    temp_dir = Path(tempfile.mkdtemp(prefix="dsh-" + "x" * 90))
    try:
        code, out, err = await run("up", "--local", "--temp-dir", str(temp_dir))
        assert code == 1
        assert "the local Ray head did not start (ray start exited with 1)" in err
        assert f"the end of {temp_dir / 'dsh-head.log'}:" in err
        assert "AF_UNIX path length cannot exceed 107 bytes" in err
        assert out == ""
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


async def test_a_head_that_does_not_start_in_time_is_stopped(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "START_TIMEOUT_S", 0.0)
    monkeypatch.setattr(cli, "STOP_TIMEOUT_S", 0.0)  # killed at once
    code, _, err = await run("up", "--local", "--temp-dir", str(temp_dir))
    assert code == 1
    assert "the local Ray head did not start within 0 s (stopped again)" in err
    head = int((temp_dir / "dsh-head.pid").read_text())
    for _ in range(50):  # SIGKILLed: gone as soon as the kernel is done with it
        if not cli._alive(head) and not processes_mentioning(str(temp_dir)):
            break
        await asyncio.sleep(0.2)
    assert not cli._alive(head)
    assert processes_mentioning(str(temp_dir)) == []
    assert LocalHead(temp_dir).running() is None


async def test_up_local_says_when_the_ray_command_is_missing(
    temp_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = await run("up", "--local", "--temp-dir", str(temp_dir))
    assert code == 1
    assert "the ray command is neither beside" in err
    assert "nor on PATH: install Ray into this environment" in err
    assert not (temp_dir / "dsh-head.pid").exists()


async def test_up_local_refuses_a_temp_dir_it_cannot_make(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = await run("up", "--local", "--temp-dir", str(blocker / "ray"))
    assert code == 1
    assert f"{blocker / 'ray'} cannot hold the local Ray head" in err
    assert "pass another --temp-dir" in err


async def test_a_head_whose_process_is_gone_is_not_running(temp_dir: Path) -> None:
    # What a crashed head or a reboot leaves: its files, naming a process that is gone.
    finished = await asyncio.create_subprocess_exec(sys.executable, "-c", "")
    assert await finished.wait() == 0  # waited for: the process is gone
    (temp_dir / "dsh-head.pid").write_text(f"{finished.pid}\n")
    (temp_dir / "ray_current_cluster").write_text("127.0.0.1:9")
    assert LocalHead(temp_dir).running() is None
    code, _, err = await run("status", "--local", "--temp-dir", str(temp_dir))
    assert code == 1
    assert "no local Ray head runs in" in err
    (temp_dir / "dsh-head.pid").write_text("not a pid\n")
    assert LocalHead(temp_dir).running() is None
    await LocalHead(temp_dir).stop()  # nothing to stop: it only forgets the file
    assert not (temp_dir / "dsh-head.pid").exists()


def test_the_local_head_lives_in_ray_tmpdir_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", "/somewhere")
    assert LocalHead.at(None).temp_dir == Path("/somewhere", "dsh-ray")
    assert LocalHead.at("/elsewhere").temp_dir == Path("/elsewhere")
    monkeypatch.delenv("RAY_TMPDIR")
    assert LocalHead.at(None).temp_dir == Path(tempfile.gettempdir(), "dsh-ray")


def test_the_options_are_checked_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cluster_args("up", "--local", "--address", "127.0.0.1:6379")
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cluster_args("up", "--local", "--cpus", "-1")
    assert "'-1' is not a CPU count (0, 1, 2, ...)" in capsys.readouterr().err
    assert cluster_args("up", "--local", "--cpus", "0").cpus == 0


def test_a_client_server_port_is_asked_for_only_where_ray_runs_a_client_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A minimal Ray (no grpc, no ray[client]) refuses --ray-client-server-port outright.
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "grpc" else real(name)
    )
    assert cli._client_server_flags() == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    [flag] = cli._client_server_flags()
    assert flag.startswith("--ray-client-server-port=") and int(flag.split("=")[1]) > 0
