"""The Ray engine of :mod:`dsh.cluster`: :func:`connect` and :class:`RayPool`.

The hosts are named Ray actors (``<prefix>-0`` … in ``namespace``), detached (they outlive the
replica that started them), restarted by Ray without limit when they or their node die, and
spread over the nodes. Every replica computes the same routes: the session's host from a hash
ring over the hosts' names, unless a host answered that another one holds the session's lease.

Calls that can be repeated (``abort``, ``resume``, ``events``, ``pending_approvals``,
``decide``) are repeated here, after the
host is restarted or the session found elsewhere, rather than by Ray (``max_task_retries`` is
0): only the pool can send the repeat to another host. ``send`` and ``steer`` are never
repeated once a host may have taken them (:class:`~dsh.cluster.HostLost`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import RayActorError

from dsh.plugin import DshError, HostLost, Pool
from dsh_plugins.cluster.host import BEAT_S, Beat, Elsewhere, HostInfo, SessionHost
from dsh_plugins.cluster.ring import HashRing
from dsh_plugins.cluster.spec import HostSpec

if TYPE_CHECKING:
    from dsh.plugin import Content, PendingApproval, SessionEvent

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_PREFIX",
    "RayHost",
    "RayPool",
    "connect",
    "ensure_connected",
    "host_names",
]

DEFAULT_NAMESPACE = "dsh"
DEFAULT_PREFIX = "dsh-host"
#: A host actor has many concurrent calls (one open event stream per watched session).
MAX_CONCURRENCY = 10_000
#: An event stream silent for this long (no event, no beat) is taken for lost and reopened:
#: Ray does not always end a stream whose host died while it was being opened.
SILENCE_S = 4 * BEAT_S


class RayHost(SessionHost):
    """:class:`SessionHost` as a Ray actor: it reports the node it runs on."""

    def info(self, node: str = "") -> HostInfo:
        return super().info(node or ray.get_runtime_context().get_node_id())

    async def stop(self) -> None:
        """Close the harness before the actor is killed (``dsh cluster down``)."""
        await self.close()


def host_names(hosts: int, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The actor names of a pool of ``hosts`` hosts."""
    return [f"{prefix}-{index}" for index in range(hosts)]


def ensure_connected(
    address: str | None, namespace: str, runtime_env: dict[str, Any] | None = None
) -> None:
    """Connect this process to the Ray cluster at ``address`` (``None``: the one
    ``RAY_ADDRESS`` or ``ray start`` names) unless it is connected already; ``runtime_env``
    (Ray's) makes the hosts' plugins importable on every node."""
    if not ray.is_initialized():
        ray.init(
            address=address or "auto",
            namespace=namespace,
            runtime_env=runtime_env,
            log_to_driver=False,
        )


async def connect(
    address: str | None = None,
    *,
    hosts: int = 3,
    spec: HostSpec | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    prefix: str = DEFAULT_PREFIX,
    resources: dict[str, float] | None = None,
    runtime_env: dict[str, Any] | None = None,
    route_timeout_s: float = 60.0,
) -> RayPool:
    """A pool of ``hosts`` host actors, created from ``spec`` where they do not run yet
    (running ones are joined as they are), after :func:`ensure_connected`. ``resources``: what
    each host needs of a node (a custom resource keeps hosts on the nodes that offer it).
    ``route_timeout_s`` bounds how long a call waits for a restarted host or for a lease to
    expire."""
    if hosts < 1:
        raise DshError(f"a pool needs at least one host, not {hosts}")
    ensure_connected(address, namespace, runtime_env)
    names = host_names(hosts, prefix)
    actor = ray.remote(RayHost)
    for name in names:
        actor.options(
            name=name,
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=MAX_CONCURRENCY,
            num_cpus=0,
            resources=resources or {},
            scheduling_strategy="SPREAD",
        ).remote(name, spec or HostSpec())
    return RayPool(names, namespace, route_timeout_s)


def _info_or_why(name: str, answer: HostInfo | BaseException) -> HostInfo | str:
    return answer if isinstance(answer, HostInfo) else f"{name}: {answer}"


async def _next(stream: Any) -> Any:
    """The next item of a Ray streaming generator, ``None`` at its end; ``TimeoutError`` after
    :data:`SILENCE_S` without one."""
    async with asyncio.timeout(SILENCE_S):
        try:
            ref = await anext(stream)
        except StopAsyncIteration:
            return None
        return await ref


class RayPool(Pool):
    """A replica's view of the hosts ``names`` in ``namespace`` (see the module's docstring)."""

    def __init__(self, names: list[str], namespace: str, route_timeout_s: float = 60.0) -> None:
        self.names = tuple(names)
        self.namespace = namespace
        self.route_timeout_s = route_timeout_s
        self._ring = HashRing(names)
        self._routes: dict[str, str] = {}
        self._handles: dict[str, Any] = {}

    # -- the Pool ----------------------------------------------------------------------------
    async def send(self, session_id: str, message: Content) -> None:
        await self._call(session_id, "send", message, False, repeat=False)

    async def steer(self, session_id: str, message: Content) -> None:
        await self._call(session_id, "send", message, True, repeat=False)

    async def abort(self, session_id: str, reason: str = "aborted") -> None:
        await self._call(session_id, "abort", reason, repeat=True)

    async def resume(self, session_id: str) -> None:
        await self._call(session_id, "resume", repeat=True)

    async def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        found: list[PendingApproval] = await self._call(
            session_id, "pending_approvals", repeat=True
        )
        return found

    async def decide(
        self, session_id: str, call_id: str, allow: bool, reason: str | None = None
    ) -> None:
        # Repeated after a host died: the decision is on disk or it is not, and a repeat of one
        # that is says "already decided", with the verdict.
        await self._call(session_id, "decide", call_id, allow, reason, repeat=True)

    async def events(
        self, session_id: str, after_seq: int = -1
    ) -> AsyncGenerator[SessionEvent, None]:
        seen = after_seq
        waits = self._waits(session_id)
        while True:
            host, handle = self._reachable(session_id)
            stream = handle.events.remote(session_id, seen)
            try:
                while (item := await _next(stream)) is not None:
                    if isinstance(item, Beat):
                        continue
                    if isinstance(item, Elsewhere):
                        self._moved(session_id, host, item)
                        await anext(waits)
                        break
                    waits = self._waits(session_id)
                    seen = item.seq  # the host sends from seen + 1 on, each event once
                    yield item
                else:  # the host closed the session (it is stopping): ask again
                    await anext(waits)
            except (RayActorError, TimeoutError):  # the host died: its restart, or another
                self._lost(session_id, host)
                await anext(waits)
            finally:
                with contextlib.suppress(Exception):
                    ray.cancel(stream)

    async def info(self) -> list[HostInfo | str]:
        """Each host's :class:`HostInfo`, or why it did not answer."""
        handles = {name: self._handle(name) for name in self.names}
        calls = [h.info.remote() for h in handles.values() if h is not None]
        answers = iter(await asyncio.gather(*calls, return_exceptions=True))
        return [
            f"{name}: gone from the pool" if handle is None else _info_or_why(name, next(answers))
            for name, handle in handles.items()
        ]

    async def close(self) -> None:
        self._handles.clear()

    # -- routing -----------------------------------------------------------------------------
    def route(self, session_id: str) -> str:
        """The host the session's calls go to now."""
        return self._routes.get(session_id) or self._ring.host(session_id)

    def _reachable(self, session_id: str) -> tuple[str, Any]:
        """The host the session's calls go to now, and its actor: a host gone for good leaves
        the ring (:meth:`_handle`) and the session is routed again."""
        while True:
            host = self.route(session_id)
            handle = self._handle(host)
            if handle is not None:
                return host, handle

    def _moved(self, session_id: str, host: str, answer: Elsewhere) -> None:
        """A host said another writer holds the session: go to it when it is a host of this
        pool, else wait (a dead holder's lease expires) and ask again."""
        if answer.owner in self.names and answer.owner != host:
            self._routes[session_id] = answer.owner
        else:
            self._routes.pop(session_id, None)

    def _lost(self, session_id: str, host: str) -> None:
        """A call to ``host`` failed because it died: look it up again next time."""
        self._routes.pop(session_id, None)
        self._handles.pop(host, None)

    def _handle(self, name: str) -> Any:
        """The actor ``name``; ``None`` when it is gone for good (killed, or out of restarts),
        and the ring leaves it out from now on."""
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                self._ring = self._ring.without(name)
                self._routes = {s: h for s, h in self._routes.items() if h != name}
                return None
            self._handles[name] = handle
        return handle

    async def _call(self, session_id: str, method: str, *args: Any, repeat: bool) -> Any:
        waits = self._waits(session_id)
        while True:
            host, handle = self._reachable(session_id)
            try:
                answer = await getattr(handle, method).remote(session_id, *args)
            except RayActorError as exc:
                self._lost(session_id, host)
                if not repeat:
                    raise HostLost(session_id, exc) from exc
                await anext(waits)
                continue
            if not isinstance(answer, Elsewhere):
                return answer
            self._moved(session_id, host, answer)
            await anext(waits)

    async def _waits(self, session_id: str) -> AsyncGenerator[None, None]:
        """Pauses between attempts, growing to a second, until ``route_timeout_s`` is spent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.route_timeout_s
        pause = 0.05
        while loop.time() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            yield
        raise DshError(
            f"session {session_id!r}: no host took it within {self.route_timeout_s:g} s "
            "(hosts restarting, or its writer lease held by a process outside the pool); "
            "check dsh cluster status"
        )
