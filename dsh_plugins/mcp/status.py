"""What ``dsh mcp list`` shows of a server (:class:`ServerStatus`): imported when a status is
first asked for (:meth:`McpServers.status <dsh_plugins.mcp.manager.McpServers.status>`),
never by a start or a turn."""

from __future__ import annotations

from attrs import frozen

from dsh.plugin import Value

__all__ = ["ServerStatus"]


@frozen(repr=False, eq=False)
class ServerStatus(Value):
    """A server as ``dsh mcp list`` shows it: ``state`` is ``disabled``, ``running``,
    ``failed``, ``crashed`` (started again on the next call) or ``stopped``; ``tools`` are the
    dsh names of its tools; ``problems`` say which of its tools are not offered, and why."""

    name: str
    where: str
    state: str
    error: str | None = None
    code: str | None = None
    tools: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
