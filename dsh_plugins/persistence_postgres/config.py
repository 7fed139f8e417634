"""Configuration and errors of ``persistence_postgres``."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import socket
from typing import Any

import attrs
from attrs import field, frozen

from dsh.plugin import DshError, Value, at_least, greater_than

__all__ = [
    "DSN_ENV",
    "INSTALL",
    "SECTION",
    "PostgresConfig",
    "PostgresStoreError",
    "asyncpg_missing",
    "default_owner",
    "shown",
]

SECTION = "persistence_postgres"
#: The environment variable the DSN is read from when the config does not give one.
DSN_ENV = "DSH_POSTGRES_DSN"
INSTALL = "pip install 'dsh-harness[postgres]'"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)(?:'[^']*'|\S+)", re.IGNORECASE)


def _identifier(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not _IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must be a lower-case SQL identifier (letters, digits, '_', at "
            f"most 63, not starting with a digit), not {value!r}"
        )


@frozen(repr=False, eq=False)
class PostgresConfig(Value):
    """Section ``persistence_postgres``. ``dsn`` (a secret: leave it out of config files) is
    read from the environment variable ``DSH_POSTGRES_DSN`` when not set here. ``schema``: the
    PostgreSQL schema that holds the tables (created and migrated on start). ``owner``: this
    process's label in the session leases (default ``<host>:<pid>:<random>``; a cluster sets
    the name of its host actor, so that the actor restarted under that name takes its
    sessions back at once). ``lease_seconds``: how long a lease lasts without a write or a
    heartbeat (every ``heartbeat_seconds``) before another writer may take the session over.
    ``pool_size``: connections at most. ``connect_timeout`` and ``command_timeout`` (how long
    one statement may take before the call fails: a hung server must not hang a turn), in
    seconds."""

    enabled: bool = False
    dsn: str | None = field(default=None, repr=False, metadata={"secret": True})
    schema: str = field(default="dsh", validator=_identifier)
    owner: str = ""
    lease_seconds: float = field(default=30.0, validator=greater_than(0))
    heartbeat_seconds: float = field(default=10.0, validator=greater_than(0))
    pool_size: int = field(default=10, validator=at_least(1))
    connect_timeout: float = field(default=10.0, validator=greater_than(0))
    command_timeout: float = field(default=60.0, validator=greater_than(0))


class PostgresStoreError(DshError):
    """The PostgreSQL store cannot do what was asked; ``code`` says why:
    ``MISSING_DEPENDENCY`` (asyncpg is not installed), ``NO_DSN``, ``UNAVAILABLE`` (the server
    cannot be reached or refused the login), ``SCHEMA`` (a newer or damaged schema), ``DAMAGED``
    (a stored log fails its checks) or ``WRITE`` (a write failed and was rolled back)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(f"{code}: {message}")
        self.message = message
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its fields, so that it crosses process boundaries (a cluster's workers).
        return type(self), (self.message, self.code)


def asyncpg_missing() -> PostgresStoreError | None:
    """The error to raise when asyncpg is not installed, else ``None``."""
    if importlib.util.find_spec("asyncpg") is not None:
        return None
    return PostgresStoreError(
        f"[{SECTION}] is enabled but asyncpg is not installed: run {INSTALL} (or pip install "
        f"asyncpg), or disable the section",
        "MISSING_DEPENDENCY",
    )


def default_owner() -> str:
    """``<host>:<pid>:<random>``: unique to one store instance, so that two stores of one
    process (two harnesses) are two writers."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def shown(dsn: str) -> str:
    """``dsn`` with its password hidden, for error messages. :mod:`dsh.app._configdoc` is imported
    here, not at the top: every harness loads this module, and only an error message needs it."""
    from dsh.plugin import masked

    return str(masked(_KEYWORD_PASSWORD.sub(r"\1***", dsn)))
