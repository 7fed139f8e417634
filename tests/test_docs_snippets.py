"""The docs' snippets, run as written: each in a child process, from a temporary project
directory whose own ``dsh.toml`` points dsh at the mock server (only the model is faked).

A snippet may use names the page defines in prose or an earlier block (``dsh``, ``add``,
``MyHostPlugin``): the prelude defines those, and nothing else. Top-level ``await`` and
``async with`` run as in an asyncio REPL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from dsh.testing.mockserver import MockServer
from dsh_plugins.mock_server.cli import setup_block

DOCS = Path(__file__).parent.parent / "docs"

RUNNER = """
import ast, asyncio, json, sys

source = open(sys.argv[1], encoding="utf-8").read()
namespace = {"__name__": "__main__"}
exec(open(sys.argv[2], encoding="utf-8").read(), namespace)
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
awaited = eval(code, namespace)
if awaited is not None:
    asyncio.run(awaited)
result = namespace.get("result")
print(json.dumps({"reason": getattr(getattr(result, "reason", None), "type", None),
                  "text": getattr(result, "text", None),
                  "output": repr(getattr(result, "output", None))}))
"""

PRELUDE = '''
import dsh


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class MyHostPlugin:
    """A host plugin with no hooks."""
'''


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of a docs page, in order."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in (DOCS / page).read_text().splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


async def run_snippet(tmp_path: Path, server: MockServer, snippet: str) -> dict[str, str]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "dsh.toml").write_text(setup_block(server.url, None) + "\n")
    (project / "snippet.py").write_text(snippet)
    (project / "prelude.py").write_text(textwrap.dedent(PRELUDE))
    (project / "runner.py").write_text(textwrap.dedent(RUNNER))
    environment = {
        k: v for k, v in os.environ.items() if k not in ("DEEPSEEK_API_KEY", "DSH_CONFIG")
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "runner.py",
        "snippet.py",
        "prelude.py",
        cwd=project,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    found: dict[str, str] = json.loads(out.decode().strip().splitlines()[-1])
    return found


async def test_the_structured_output_snippet(tmp_path: Path, mock_server: MockServer) -> None:
    """The mock fills ``final_result``'s required fields with samples: the point is that the
    snippet runs as written, finds the project's dsh.toml and returns a typed value."""
    found = await run_snippet(tmp_path, mock_server, python_blocks("structured-output.md")[0])
    assert found["reason"] == "completed"
    assert found["output"].startswith("City(name=")


async def test_the_one_call_run_sync_snippet(tmp_path: Path, mock_server: MockServer) -> None:
    [snippet] = [b for b in python_blocks("structured-output.md") if "run_sync" in b]
    found = await run_snippet(tmp_path, mock_server, snippet)
    assert found["reason"] == "completed"
    assert found["text"].startswith("The tool returned: ")


@pytest.mark.parametrize("page", ["embedding.md"])
async def test_the_embedding_snippet(tmp_path: Path, mock_server: MockServer, page: str) -> None:
    first = python_blocks(page)[0]
    assert 'Harness(config="dsh.toml"' in first
    await run_snippet(tmp_path, mock_server, first)
    first_request = mock_server.requests[0].body["messages"]
    assert first_request[-1] == {"role": "user", "content": "Summarise ticket 4711"}
