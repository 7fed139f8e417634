"""``dsh cluster up|status|down``: a pool of agent hosts on a Ray cluster, from the shell.

``up`` starts the pool's hosts on a running Ray cluster, ``status`` shows the cluster (its
address and nodes) and lists the hosts (node, process, live sessions), ``down`` stops them
(their sessions stay in the store). With ``--local`` the cluster is a one-node Ray head on
127.0.0.1 that dsh keeps in a temp dir of its own: ``up --local`` starts it when it does not
run, ``down --local`` stops it after the hosts. Ray is imported only when one of them runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from attrs import frozen

from dsh.plugin import AgentOptions, DshError, Value, load_toml

if TYPE_CHECKING:
    from dsh_plugins.cluster.pool import RayPool

__all__ = ["LocalHead", "configure", "run"]

#: How long ``up --local`` waits for ``ray start`` to write the head's address.
START_TIMEOUT_S = 120.0
#: How long ``down --local`` waits for the head to stop before it kills what is left.
STOP_TIMEOUT_S = 60.0
#: How often those waits look again.
POLL_S = 0.2
#: Lines of the head's log quoted when it fails to start.
LOG_TAIL_LINES = 20
#: Ray reads this once, on import: ``0`` keeps every node and the driver on the loopback
#: address (on Linux Ray would put them on the machine's network address).
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
#: The hosts are stopped before the head, so there is nothing left for it to drain.
_HEAD_ENV = {**LOOPBACK_ONLY, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
#: ``ray start`` processes this process started; polling them reaps them once they exit.
_started: dict[int, subprocess.Popen[bytes]] = {}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "status", "down"), help="what to do")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--address", help="the Ray cluster (default: RAY_ADDRESS, else the one ray start began)"
    )
    where.add_argument(
        "--local",
        action="store_true",
        help="a one-node Ray head on 127.0.0.1 that up starts when it does not run and "
        "down stops after the hosts",
    )
    parser.add_argument("--cpus", type=_cpus, help="CPUs the local head offers (up --local)")
    parser.add_argument(
        "--temp-dir",
        help="the local head's Ray temp dir (default: dsh-ray in RAY_TMPDIR, else the "
        "system's temp dir)",
    )
    parser.add_argument("--hosts", type=int, default=3, help="hosts in the pool (default: 3)")
    parser.add_argument("--namespace", default="dsh", help="Ray namespace (default: dsh)")
    parser.add_argument("--prefix", default="dsh-host", help="host actor names' prefix")
    parser.add_argument("--config", help="dsh.toml the hosts run with (up; it names the store)")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a host plugin beside the installed ones (up; repeatable)",
    )
    parser.add_argument("--model", default="", help="the agents' model (up)")


def _cpus(text: str) -> int:
    """A CPU count for ``ray start --num-cpus``: a whole number, zero or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPU count (0, 1, 2, ...)")
    return int(text)


async def run(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Exit code 0 on success, 1 when Ray or the cluster cannot be reached or a host fails
    (``out`` and ``err`` default to the standard streams of the moment)."""
    out = out or sys.stdout
    err = err or sys.stderr
    local = LocalHead.at(args.temp_dir) if args.local else None
    if local is not None:
        os.environ.update(LOOPBACK_ONLY)  # before Ray is imported: it reads it then
        os.environ.pop("RAY_ADDRESS", None)  # it would win over the local head's address
    try:
        import ray  # noqa: F401 (only to say what is missing)
    except ImportError:
        print("dsh cluster: MISSING_DEPENDENCY: pip install 'dsh-harness[ray]'", file=err)
        return 1
    try:
        if args.action == "up":
            return await _up(args, local, out)
        if local is not None and not await _find_local(args, local, out):
            return 0
        pool = await _connect(args, create=False)
        if args.action == "status":
            return await _status(pool, local, out)
        return await _down(pool, local, out)
    except (DshError, OSError) as exc:
        print(f"dsh cluster: {str(exc) or type(exc).__name__}", file=err)
        return 1


async def _up(args: argparse.Namespace, local: LocalHead | None, out: TextIO) -> int:
    from dsh_plugins.cluster.spec import HostSpec

    config = load_toml(args.config) if args.config else {}
    spec = HostSpec(config, tuple(args.plugin), AgentOptions(model=args.model))
    if local is not None:
        args.address = local.running()
        if args.address is None:
            args.address = await local.start(args.cpus)
            print(f"started a local Ray head at {args.address} (its log: {local.log})", file=out)
        else:
            print(f"a local Ray head runs at {args.address}", file=out)
    pool = await _connect(args, create=True, spec=spec)
    return await _status(pool, local, out)


async def _find_local(args: argparse.Namespace, local: LocalHead, out: TextIO) -> bool:
    """Point ``args`` at the running local head; ``False`` (said) when ``down`` finds none."""
    args.address = local.running()
    if args.address is not None:
        return True
    if args.action == "down":
        print(f"no local Ray head runs in {local.temp_dir}", file=out)
        return False
    raise DshError(
        f"no local Ray head runs in {local.temp_dir}: start one with dsh cluster up --local"
    )


async def _connect(args: argparse.Namespace, create: bool, spec: Any = None) -> RayPool:
    from dsh_plugins.cluster.pool import RayPool, connect, ensure_connected, host_names

    if create:
        return await connect(
            args.address, hosts=args.hosts, spec=spec, namespace=args.namespace, prefix=args.prefix
        )
    ensure_connected(args.address, args.namespace)
    return RayPool(host_names(args.hosts, args.prefix), args.namespace)


async def _status(pool: RayPool, local: LocalHead | None, out: TextIO) -> int:
    _print_cluster(local, out)
    failed = 0
    for info in await pool.info():
        if isinstance(info, str):
            failed += 1
            print(f"{info}", file=out)
            continue
        sessions = ", ".join(info.sessions) or "no sessions"
        print(
            f"{info.name}: node {info.node[:12]}, pid {info.pid} on {info.hostname}: {sessions}",
            file=out,
        )
    return 1 if failed else 0


def _print_cluster(local: LocalHead | None, out: TextIO) -> None:
    """The cluster's address and each node: where it listens, whether it lives, its CPUs."""
    import ray

    kept = f" (local head in {local.temp_dir})" if local is not None else ""
    print(f"Ray cluster at {ray.get_runtime_context().gcs_address}{kept}", file=out)
    nodes: Any = ray.nodes  # untyped in Ray
    for node in nodes():
        state = "alive" if node["Alive"] else "dead"
        cpus = node["Resources"].get("CPU", 0)
        print(
            f"node {node['NodeID'][:12]} at {node['NodeManagerAddress']}: {state}, {cpus:g} CPUs",
            file=out,
        )


async def _down(pool: RayPool, local: LocalHead | None, out: TextIO) -> int:
    import ray

    for name in pool.names:
        try:
            handle: Any = ray.get_actor(name, namespace=pool.namespace)
        except ValueError:
            print(f"{name}: not running", file=out)
            continue
        await asyncio.wait_for(handle.stop.remote(), 60)
        ray.kill(handle, no_restart=True)
        print(f"{name}: stopped", file=out)
    if local is not None:
        address = ray.get_runtime_context().gcs_address
        ray.shutdown()  # a driver whose cluster vanishes under it ends its process
        await local.stop()
        print(f"the local Ray head at {address} stopped", file=out)
    return 0


# -- the local head ----------------------------------------------------------------------------
@frozen(repr=False, eq=False)
class LocalHead(Value):
    """A one-node Ray cluster on 127.0.0.1 kept in ``temp_dir`` (Ray's temp dir for it).

    It is a ``ray start --head --block`` process of the installed Ray in a session of its own:
    it outlives the ``dsh`` command that started it, and a SIGTERM to it makes Ray stop every
    process of that head (and only those; ``ray stop`` would stop every Ray process of the
    machine). Its pid is in ``dsh-head.pid``, its output in ``dsh-head.log``, and Ray writes the
    head's address to ``ray_current_cluster``, all in ``temp_dir``.
    """

    temp_dir: Path

    @classmethod
    def at(cls, temp_dir: str | None) -> LocalHead:
        """The head in ``temp_dir``, by default ``dsh-ray`` in ``RAY_TMPDIR`` or the system's
        temp dir (Unix socket paths under it must stay short: Ray refuses over 107 bytes)."""
        default = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "dsh-ray")
        return cls(Path(temp_dir) if temp_dir else default)

    @property
    def log(self) -> Path:
        return self.temp_dir / "dsh-head.log"

    @property
    def pid_file(self) -> Path:
        return self.temp_dir / "dsh-head.pid"

    @property
    def address_file(self) -> Path:
        return self.temp_dir / "ray_current_cluster"

    def running(self) -> str | None:
        """The head's address while the ``ray start`` process dsh began for it lives."""
        pid = self._pid()
        return self._address() if pid is not None and _alive(pid) else None

    async def start(self, cpus: int | None) -> str:
        """Start the head and wait for its address; a head that exits or takes longer than
        :data:`START_TIMEOUT_S` is an error quoting the end of its log."""
        try:
            self.temp_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DshError(
                f"{self.temp_dir} cannot hold the local Ray head ({exc.strerror}): "
                "pass another --temp-dir"
            ) from exc
        self.address_file.unlink(missing_ok=True)  # a dead head's: wait for the new one
        return await self._wait_for_address(self._spawn(cpus))

    async def stop(self) -> None:
        """SIGTERM the head (Ray stops its processes), SIGKILL what of its process group is
        left after :data:`STOP_TIMEOUT_S`, and forget it."""
        pid = self._pid()
        if pid is not None and _alive(pid):
            await _terminate(pid)
        self.pid_file.unlink(missing_ok=True)

    def _spawn(self, cpus: int | None) -> subprocess.Popen[bytes]:
        """``ray start`` in a session of its own (it outlives this process), its output to
        :attr:`log`, its pid to :attr:`pid_file`. It only forks: nothing here waits."""
        with self.log.open("wb") as log:
            child = subprocess.Popen(
                self._command(cpus),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **_HEAD_ENV},
                start_new_session=True,
            )
        _started[child.pid] = child
        self.pid_file.write_text(f"{child.pid}\n")
        return child

    def _command(self, cpus: int | None) -> list[str]:
        command = [
            _ray_command(),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--port=0",
            *_client_server_flags(),
            f"--dashboard-agent-listen-port={_free_port()}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        return command if cpus is None else [*command, f"--num-cpus={cpus}"]

    async def _wait_for_address(self, child: subprocess.Popen[bytes]) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while (address := self._address()) is None:
            if child.poll() is not None:
                raise DshError(
                    f"the local Ray head did not start (ray start exited with "
                    f"{child.returncode}); the end of {self.log}:\n{self._log_tail()}"
                )
            if loop.time() >= deadline:
                await _terminate(child.pid)
                raise DshError(
                    f"the local Ray head did not start within {START_TIMEOUT_S:g} s (stopped "
                    f"again); the end of {self.log}:\n{self._log_tail()}"
                )
            await asyncio.sleep(POLL_S)
        return address

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):  # none, unreadable (``up`` says why) or not a pid
            return None

    def _address(self) -> str | None:
        try:
            return self.address_file.read_text().strip()
        except FileNotFoundError:
            return None

    def _log_tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(f"    {line}" for line in lines)


def _ray_command() -> str:
    """The ``ray`` command of this interpreter's environment, else the one on ``PATH``."""
    beside = os.path.dirname(sys.executable)
    found = shutil.which("ray", path=os.pathsep.join((beside, os.environ.get("PATH", ""))))
    if found is None:
        raise DshError(
            f"the ray command is neither beside {sys.executable} nor on PATH: install Ray "
            "into this environment (pip install 'dsh-harness[ray]')"
        )
    return found


def _client_server_flags() -> list[str]:
    """A free port for the head's Ray Client server (its default, 10001, clashes with another
    head on the machine) where Ray runs one: only with the ``ray[client]`` packages (grpc); a
    minimal Ray refuses the flag."""
    if importlib.util.find_spec("grpc") is None:
        return []
    return [f"--ray-client-server-port={_free_port()}"]


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (Ray's fixed defaults may be taken by another head)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _alive(pid: int) -> bool:
    """Whether the head's ``ray start`` (a process group leader) still runs: a pid reused by
    another process is not one; a child of this process is reaped once it has exited."""
    child = _started.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


async def _terminate(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    for _ in range(round(STOP_TIMEOUT_S / POLL_S)):
        if not _alive(pid):
            break
        await asyncio.sleep(POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
