"""A second writer in a process of its own, driven line by line over stdin: ``claim``,
``append TEXT``, ``checkpoint``, ``close``, ``exit``. It answers each line with ``ok``,
``busy <message>``, ``conflict <message>`` or ``error <message>``.

Run as ``python -m tests.plugins.persistence_postgres.writer_process DSN SCHEMA OWNER
LEASE_SECONDS HEARTBEAT_SECONDS SESSION_ID``.
"""

from __future__ import annotations

import asyncio
import sys

from dsh import Harness
from dsh.session._session import Session, SessionBusy, SessionConflict, error_messages
from dsh.values._content import Text
from dsh.values._errors import DshError
from dsh.values._events import UserMessage
from dsh_plugins.persistence_postgres import PostgresStore


async def serve(argv: list[str]) -> None:
    dsn, schema, owner, lease, heartbeat, session_id = argv
    store = PostgresStore(
        dsn,
        schema=schema,
        owner=owner,
        lease_seconds=float(lease),
        heartbeat_seconds=float(heartbeat),
    )
    session: Session | None = None
    async with Harness(load_entrypoints=False, plugins=[store]) as harness:
        while line := await asyncio.to_thread(sys.stdin.readline):  # the heartbeat runs
            command, _, argument = line.strip().partition(" ")
            try:
                if command == "claim":
                    loaded = await harness.sessions.load(session_id) or []
                    session = harness.sessions.create(session_id, loaded, persisted=len(loaded))
                    await harness.sessions.claim(session)
                elif command == "append" and session is not None:
                    session.append(UserMessage((Text(argument),)))
                elif command == "checkpoint" and session is not None:
                    await session.checkpoint()
                elif command == "close" and session is not None:
                    await harness.sessions.close(session)
                elif command == "exit":
                    break
                print("ok", flush=True)
            except SessionBusy as exc:
                print(f"busy {exc}", flush=True)
            except SessionConflict as exc:
                print(f"conflict {exc}", flush=True)
            except (DshError, ExceptionGroup) as exc:
                leaves = exc.exceptions if isinstance(exc, ExceptionGroup) else [exc]
                causes = [getattr(leaf, "error", leaf) for leaf in leaves]
                kind = (
                    "conflict" if any(isinstance(c, SessionConflict) for c in causes) else "error"
                )
                print(f"{kind} {error_messages(exc)}", flush=True)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1:]))
