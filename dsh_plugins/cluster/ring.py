"""Consistent hashing: which host a session goes to when no host holds its lease.

Each host owns many points on a ring of 64-bit hashes; a session goes to the host of the first
point at or after its id's hash. A host leaving moves only the sessions it had (to the next
points' hosts), and one joining takes a share from each — so a pool that loses a host does not
reshuffle every session, and every replica computes the same answer without talking to the
others.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable

from dsh.plugin import DshError

__all__ = ["POINTS", "HashRing", "hash64"]

#: Points per host: enough that three hosts share sessions within a few percent of a third.
POINTS = 160


def hash64(text: str) -> int:
    """A stable 64-bit hash of ``text`` (the same in every process, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """An immutable ring over ``hosts`` (names); :meth:`host` maps a key to one of them."""

    def __init__(self, hosts: Iterable[str], points: int = POINTS) -> None:
        self.hosts = frozenset(hosts)
        self._points = points
        ring = sorted((hash64(f"{host}#{i}"), host) for host in self.hosts for i in range(points))
        self._hashes = [h for h, _ in ring]
        self._owners = [host for _, host in ring]

    def host(self, key: str) -> str:
        """The host ``key`` goes to."""
        if not self._owners:
            raise DshError("no live host in the pool: start the pool's hosts (dsh cluster up)")
        index = bisect.bisect_left(self._hashes, hash64(key)) % len(self._owners)
        return self._owners[index]

    def without(self, host: str) -> HashRing:
        """The ring once ``host`` has left."""
        return HashRing(self.hosts - {host}, self._points)
