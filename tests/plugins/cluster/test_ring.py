"""The hash ring: every replica routes a session alike, and a host leaving moves only its
own sessions."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.values._errors import DshError
from dsh_plugins.cluster.ring import HashRing, hash64

hosts = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6, unique=True)
keys = st.lists(st.text(max_size=20), min_size=1, max_size=50)


@given(hosts, keys)
def test_every_ring_over_the_same_hosts_routes_alike(names: list[str], ids: list[str]) -> None:
    one, two = HashRing(names), HashRing(reversed(names))
    assert [one.host(k) for k in ids] == [two.host(k) for k in ids]
    assert all(one.host(k) in names for k in ids)


@given(hosts.filter(lambda n: len(n) > 1), keys, st.data())
def test_a_host_leaving_moves_only_its_sessions(
    names: list[str], ids: list[str], data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(names))
    ring = HashRing(names)
    smaller = ring.without(gone)
    assert smaller.hosts == frozenset(names) - {gone}
    for key in ids:
        if ring.host(key) != gone:
            assert smaller.host(key) == ring.host(key)
        else:
            assert smaller.host(key) != gone


def test_sessions_spread_over_the_hosts() -> None:
    ring = HashRing(["dsh-host-0", "dsh-host-1", "dsh-host-2"])
    counts = Counter(ring.host(f"session-{i}") for i in range(3000))
    assert all(800 < n < 1200 for n in counts.values())


def test_the_hash_is_stable_across_processes() -> None:
    assert hash64("dsh") == 0x3F66804BBCD941B8  # blake2b, 8 bytes: the same everywhere
    assert hash64("a") != hash64("b")


def test_an_empty_ring_says_what_to_do() -> None:
    with pytest.raises(DshError, match="dsh cluster up"):
        HashRing([]).host("s1")
