"""``dsh cluster up|status|down``: a pool of agent hosts on a Ray cluster, from the shell.

``up`` starts the pool's hosts on a running Ray cluster (``ray start --head`` starts a local
one), ``status`` lists the hosts (node, process, live sessions), ``down`` stops them (their
sessions stay in the store). Ray is imported only when one of them runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

from dsh.agent import AgentOptions
from dsh.config import load_toml
from dsh.errors import DshError

if TYPE_CHECKING:
    from dsh_plugins.cluster.pool import RayPool

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "status", "down"), help="what to do")
    parser.add_argument(
        "--address", help="the Ray cluster (default: RAY_ADDRESS, else the one ray start began)"
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


async def run(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Exit code 0 on success, 1 when Ray or the cluster cannot be reached or a host fails
    (``out`` and ``err`` default to the standard streams of the moment)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        import ray  # noqa: F401 (only to say what is missing)
    except ImportError:
        print("dsh cluster: MISSING_DEPENDENCY: pip install 'dsh-harness[ray]'", file=err)
        return 1
    try:
        if args.action == "up":
            return await _up(args, out)
        pool = await _connect(args, create=False)
        if args.action == "status":
            return await _status(pool, out)
        return await _down(pool, out)
    except DshError as exc:
        print(f"dsh cluster: {exc}", file=err)
        return 1


async def _up(args: argparse.Namespace, out: TextIO) -> int:
    from dsh_plugins.cluster.spec import HostSpec

    config = load_toml(args.config) if args.config else {}
    spec = HostSpec(config, tuple(args.plugin), AgentOptions(model=args.model))
    pool = await _connect(args, create=True, spec=spec)
    return await _status(pool, out)


async def _connect(args: argparse.Namespace, create: bool, spec: Any = None) -> RayPool:
    from dsh_plugins.cluster.pool import RayPool, connect, ensure_connected, host_names

    if create:
        return await connect(
            args.address, hosts=args.hosts, spec=spec, namespace=args.namespace, prefix=args.prefix
        )
    ensure_connected(args.address, args.namespace)
    return RayPool(host_names(args.hosts, args.prefix), args.namespace)


async def _status(pool: RayPool, out: TextIO) -> int:
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


async def _down(pool: RayPool, out: TextIO) -> int:
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
    return 0
