"""MCP servers that break the rules a client must survive, run as ``hostile_server.py MODE``:

- ``flood``: a server whose tool ``flood`` answers by writing one endless line to stdout;
- ``flood-at-start``: writes one endless line before it reads anything;
- ``deep``: answers ``tools/list`` (by hand: the SDK cannot serialise it) with a tool whose
  input schema nests 300 levels deep, more than any JSON parser of the client takes;
- ``names``: tools named with 5,000 characters, with letters outside ASCII, with dots, and
  names that collide once made safe;
- ``schemas``: tools with malformed input schemas beside good ones, and entries that are not
  tools at all; ``no-list``: a tool list that is not a list;
- ``deaf``: closes its stdin once it has listed its tools, and runs on;
- ``many``: 10,000 tools, one page; ``many-paged``: the same, 50 to a page (every page asked
  for is noted in ``MCP_TEST_PAGES``).

They are written by hand: the SDK's server checks its own answers, and keeps its stdout to
itself. Each tool (but ``flood``) answers ``called <its exact name>``. ``MCP_TEST_PIDS``
names a file the server appends its process id to.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

#: Names the ``names`` server offers (with ``ok``).
LONG = "n" * 5000
UNICODE = "读取文件"
ACCENTED = "créer_fiche"
DOTTED = "files.read"
#: The name ``files.read`` becomes: offered by the server too, so the two collide.
TAKEN = "files_read_601e4eb6"
#: Malformed schemas the ``schemas`` server offers, by tool name.
BAD_SCHEMAS: dict[str, Any] = {
    "bad_type": {"type": 5},
    "bad_required": {"type": "object", "required": 5},
    "bad_properties": {"type": "object", "properties": [{"type": "string"}]},
    "bad_nested": {
        "type": "object",
        "properties": {"path": {"type": "object", "properties": {"a/b": {"type": "strng"}}}},
    },
}
DEPTH = 300


def _note(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a") as file:
            file.write(line + "\n")


def _flood() -> None:
    """One line without end (until the client stops reading)."""
    chunk = b"x" * 65536
    while True:
        os.write(1, chunk)


def _serve(mode: str) -> None:
    """Answer ``initialize``, ``tools/list`` and ``tools/call``; ignore notifications."""
    tools = _listed(mode)
    page_size = 50 if mode == "many-paged" else len(tools)
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue
        params = request.get("params") or {}
        if request["method"] == "initialize":
            result = json.dumps(
                {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": mode, "version": "1"},
                }
            )
        elif request["method"] == "tools/list":
            start = int(params.get("cursor") or 0)
            _note("MCP_TEST_PAGES", str(start))
            end = start + page_size
            page: dict[str, Any] = {"tools": tools[start:end]}
            if end < len(tools):
                page["nextCursor"] = str(end)
            result = _deep_list() if mode == "deep" else json.dumps(page)
            if mode == "no-list":
                result = '{"tools": 5}'
        else:
            if params["name"] == "flood":
                _flood()
            text = f"called {params['name']}"
            result = json.dumps({"content": [{"type": "text", "text": text}]})
        reply = f'{{"jsonrpc": "2.0", "id": {json.dumps(request["id"])}, "result": {result}}}\n'
        deaf = mode == "deaf" and request["method"] == "tools/list"
        if deaf:  # before it answers: the client may write as soon as it has the answer
            os.close(0)
        sys.stdout.write(reply)
        sys.stdout.flush()
        if deaf:
            time.sleep(3600)


def _deep_list() -> str:
    schema = '{"type": "object", "properties": {"x": ' * DEPTH + "{}" + "}}" * DEPTH
    return '{"tools": [{"name": "deep", "inputSchema": ' + schema + "}]}"


def _listed(mode: str) -> list[dict[str, Any]]:
    plain: dict[str, Any] = {"type": "object", "properties": {}}
    if mode == "names":
        names = [LONG, UNICODE, ACCENTED, DOTTED, TAKEN, "ok"]
        return [{"name": name, "inputSchema": plain} for name in names]
    if mode in ("flood", "deaf"):
        return [{"name": name, "inputSchema": plain} for name in ("flood", "echo")]
    if mode == "schemas":
        listed = [("good", plain), *BAD_SCHEMAS.items(), ("also_good", plain)]
        tools = [{"name": name, "inputSchema": schema} for name, schema in listed]
        return [*tools, {"name": "not_a_tool", "inputSchema": [1]}, {"name": 7}]
    return [{"name": f"tool_{index:05}", "inputSchema": plain} for index in range(10_000)]


def main(mode: str) -> None:
    _note("MCP_TEST_PIDS", str(os.getpid()))
    if mode == "flood-at-start":
        _flood()
    else:
        _serve(mode)


if __name__ == "__main__":
    main(sys.argv[1])
