"""``cluster``: agents hosted on a Ray cluster, reached through :func:`dsh.cluster.connect`.

A pool of host actors (:mod:`.pool`), each running one harness with the agents of many
sessions (:mod:`.host`); every call for a session goes to the host that holds its writer lease,
else to the host its id hashes to (:mod:`.ring`); a host or node that dies is restarted by Ray,
and its sessions are resumed from the shared store by the next call that reaches them. This
plugin contributes ``dsh cluster up|status|down``. Ray is an optional extra
(``pip install 'dsh-harness[ray]'``); nothing here imports it until a command or a pool needs it.
See ``docs/scaling.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dsh.plugin import Command, hookimpl

__all__ = ["CLUSTER_HELP", "ClusterPlugin"]

CLUSTER_HELP = "up, status or down: a pool of agent hosts on a Ray cluster (extra: ray)"


def _deferred(function: str) -> Callable[[Any], Any]:
    """``cli.function``, imported when first called (it imports Ray)."""

    def call(args: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.cli"), function)(args)

    return call


class ClusterPlugin:
    """Contributes the ``cluster`` CLI command."""

    @hookimpl
    def dsh_register_commands(self, register: Callable[[Command], Any]) -> None:
        register(Command("cluster", CLUSTER_HELP, _deferred("run"), _configure))


def _configure(parser: Any) -> None:
    importlib.import_module(f"{__name__}.cli").configure(parser)
