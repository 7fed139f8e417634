"""A web host with approve and deny buttons for the tool calls its agents park.

::

    GET  /                                   an HTML page: every waiting call, with its buttons
    POST /agents/{id}/messages               {"text": "..."}: queue a message (the agent is
                                             created, or its stored session resumed)
    GET  /approvals                          the waiting calls, as JSON
    POST /approvals/{session}/{call}/allow   decide a call (form field or JSON key "reason")
    POST /approvals/{session}/{call}/deny

The harness is configured with ``[permissions] approval = "defer"``: a call that needs approval
parks its agent's turn (nobody is at a terminal to ask), and the page shows it. A decision made
here — or by ``dsh approvals allow|deny`` in a shell, or by another host that resumed the
session — goes into the session's log, and the turn goes on. A session whose agent is not live
in this process (the host restarted) is resumed when it is decided.

Run it with ``python approvals_web.py --model deepseek-v4-flash`` (see README.md).
"""

from __future__ import annotations

import argparse
import html
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from attrs import frozen

from dsh import AgentOptions, AlreadyDecided, DshError, Harness, PendingApproval
from dsh.plugin import SessionBusy, SessionConflict

__all__ = ["HARNESS", "Settings", "create_app", "main"]

#: What a client may name an agent (it also names the agent's session).
NAME = "[A-Za-z0-9_-]{1,64}"


@frozen
class Settings:
    """What every agent of the host runs with."""

    model: str


HARNESS = web.AppKey("harness", Harness)
SETTINGS = web.AppKey("settings", Settings)


def create_app(
    settings: Settings,
    *,
    config: str | Mapping[str, Any] | None = None,
    plugins: Sequence[object] = (),
    load_entrypoints: bool = True,
) -> web.Application:
    """The application; its harness starts and closes with it. ``config`` is merged under
    ``[permissions] approval = "defer"``, which this host is about."""
    app = web.Application()
    app[SETTINGS] = settings

    async def harness_lifetime(app: web.Application) -> AsyncIterator[None]:
        merged = _deferring(config)
        async with Harness(
            config=merged, plugins=list(plugins), load_entrypoints=load_entrypoints
        ) as harness:
            app[HARNESS] = harness
            yield

    app.cleanup_ctx.append(harness_lifetime)
    app.router.add_get("/", page)
    app.router.add_post(f"/agents/{{id:{NAME}}}/messages", post_message)
    app.router.add_get("/approvals", list_approvals)
    app.router.add_post(
        f"/approvals/{{session:{NAME}}}/{{call:[^/]+}}/{{verdict:allow|deny}}", decide
    )
    return app


def _deferring(config: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` as a mapping (a TOML file is read), with ``approval = "defer"``."""
    if isinstance(config, str):
        import tomllib

        config = tomllib.loads(Path(config).read_text())
    merged = dict(config or {})
    merged["permissions"] = {**merged.get("permissions", {}), "approval": "defer"}
    return merged


# ---------------------------------------------------------------------------------------------
# Agents and their waiting calls
# ---------------------------------------------------------------------------------------------


async def _agent(app: web.Application, name: str) -> Any:
    """The live agent of session ``name``; else its stored session resumed; else a new one."""
    harness = app[HARNESS]
    options = AgentOptions(model=app[SETTINGS].model)
    live = harness.agents.get(name)
    if live is not None and not live.disposing:
        return live
    try:
        if await harness.sessions.load(name) is not None:
            return await harness.agent_loop.resume(name, options, agent_id=name)
    except (SessionBusy, SessionConflict) as exc:
        raise _error(web.HTTPConflict, str(exc)) from exc
    return harness.agent_loop.create(name, options, session_id=name)


def _waiting(app: web.Application) -> list[PendingApproval]:
    """The calls waiting in the agents live here (a parent's list holds its children's)."""
    harness = app[HARNESS]
    found: dict[tuple[str, str], PendingApproval] = {}
    for agent in harness.agents.list():
        for pending in agent.pending_approvals():
            found[(pending.session_id, pending.call_id)] = pending
    return list(found.values())


def _as_json(pending: PendingApproval) -> dict[str, Any]:
    return {
        "session": pending.session_id,
        "agent": pending.agent_id,
        "call": pending.call_id,
        "tool": pending.name,
        "arguments": pending.summary,
        "effect": pending.effect,
        "why": pending.reason,
        "requested_at": pending.requested_at,
        "deadline": pending.deadline,
    }


# ---------------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------------


async def post_message(request: web.Request) -> web.Response:
    body = await _body(request)
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise _error(web.HTTPBadRequest, 'give the message as {"text": "..."}')
    agent = await _agent(request.app, request.match_info["id"])
    agent.send(text)
    return web.json_response({"agent": agent.id, "status": agent.status}, status=202)


async def list_approvals(request: web.Request) -> web.Response:
    return web.json_response({"waiting": [_as_json(p) for p in _waiting(request.app)]})


async def decide(request: web.Request) -> web.Response:
    """Allow or deny a waiting call; a browser's form is sent back to the page (303)."""
    session, call = request.match_info["session"], request.match_info["call"]
    allow = request.match_info["verdict"] == "allow"
    reason = (await _body(request)).get("reason") or None
    agent = await _agent(request.app, session)
    try:
        await agent.decide(call, allow=allow, reason=None if reason is None else str(reason))
    except AlreadyDecided as exc:
        raise _error(web.HTTPConflict, str(exc)) from exc
    except DshError as exc:
        raise _error(web.HTTPNotFound, str(exc)) from exc
    if request.content_type == "application/x-www-form-urlencoded":
        raise web.HTTPSeeOther("/")
    verdict = "allowed" if allow else "denied"
    return web.json_response({"session": session, "call": call, "decision": verdict})


async def page(request: web.Request) -> web.Response:
    rows = "".join(_row(p) for p in _waiting(request.app)) or (
        '<tr><td colspan="4">No call waits for approval.</td></tr>'
    )
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Waiting for approval</title></head>
<body><h1>Waiting for approval</h1>
<table><tr><th>Session</th><th>Call</th><th>Why it asks</th><th>Decide</th></tr>{rows}</table>
</body></html>"""
    return web.Response(text=body, content_type="text/html")


def _row(pending: PendingApproval) -> str:
    escape = html.escape
    action = f"/approvals/{escape(pending.session_id)}/{escape(pending.call_id)}"
    return (
        f"<tr><td>{escape(pending.session_id)}</td>"
        f"<td><code>{escape(pending.name)} {escape(pending.summary)}</code></td>"
        f"<td>{escape(pending.reason)}</td><td>"
        f'<form method="post" action="{action}/allow"><button>Approve</button></form>'
        f'<form method="post" action="{action}/deny"><input name="reason" placeholder="why not">'
        "<button>Deny</button></form></td></tr>"
    )


async def _body(request: web.Request) -> dict[str, Any]:
    """A JSON object or a form's fields (an empty body: none)."""
    if not request.can_read_body:
        return {}
    if request.content_type == "application/x-www-form-urlencoded":
        return dict(await request.post())
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        raise _error(web.HTTPBadRequest, f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _error(web.HTTPBadRequest, "the body must be a JSON object")
    return body


def _error(kind: type[web.HTTPException], message: str) -> web.HTTPException:
    return kind(text=json.dumps({"error": message}), content_type="application/json")


def main(argv: Sequence[str] | None = None) -> None:
    """``python approvals_web.py``: serve until interrupted."""
    parser = argparse.ArgumentParser(description="A web host that decides parked tool calls.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model", default="deepseek-v4-flash")
    parser.add_argument("--config", help="dsh TOML config (default: ./dsh.toml if present)")
    args = parser.parse_args(argv)
    config = args.config or ("dsh.toml" if Path("dsh.toml").is_file() else None)
    web.run_app(create_app(Settings(args.model), config=config), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
