"""Starting a harness imports only what a run uses: the modules of commands (``dsh run``,
``dsh chat``, ``dsh mcp``), of config documentation and of TOML files, the OpenTelemetry API,
and the model adapters with their HTTP client (aiohttp) load when they are used; the converter
makes the writer of a class when it first writes one. ``dsh --help`` imports no adapter
and no server either. Checked in a fresh process, where ``sys.modules`` shows what was imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

START = """
import asyncio, json, sys
from dsh import Harness
from dsh.session import _codec as converter

async def main():
    config = {
        "llm_deepseek": {"api_key": "k"},
        "llm_providers": {"ollama": {"models": {"llama3": {}}}},
    }
    async with Harness(config=config, disabled=("tools_fs", "tools_shell")) as h:
        report = {
            "plugins": sorted(h.plugins.names()),
            "imported": sorted(m for m in sys.argv[1].split(",") if m in sys.modules),
            "writers": len(converter._WRITERS),
        }
    print(json.dumps(report))

asyncio.run(main())
"""
ADAPTERS = (
    "aiohttp",
    "dsh_plugins.llm_anthropic.adapter",
    "dsh_plugins.llm_deepseek.adapter",
    "dsh_plugins.llm_openai_sdk.adapter",
    "dsh_plugins.llm_providers.adapter",
    "dsh.testing.mockserver.server",
)
TERMINAL = (
    "dsh_plugins.terminal_ui.console",
    "dsh_plugins.terminal_ui.headless",
    "dsh_plugins.terminal_ui.render",
)
LAZY = (
    *ADAPTERS,
    *TERMINAL,
    "argparse",
    "dsh.app._configdoc",
    "dsh_plugins.mcp.commands",
    "opentelemetry",
    "tomllib",
)


def test_starting_a_harness_leaves_what_a_run_does_not_use_unimported() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    env.pop("OTEL_PYTHON_METER_PROVIDER", None)
    done = subprocess.run(
        [sys.executable, "-c", START, ",".join(LAZY)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"mcp", "otel", "terminal_ui", "persistence_postgres"} <= set(report["plugins"])
    assert report["imported"] == []
    assert report["writers"] == 0  # the codec makes its writers when it writes


COMMAND = """
import json, sys
from dsh.cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.argv[1].split(",") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("argv", "unimported", "printed"),
    [
        # Every command's parser is built, and no adapter, no server, no HTTP client, no
        # console or renderer loaded.
        (["--help"], (*ADAPTERS, *TERMINAL), "mock-server"),
        # Every model is listed with what its adapter says: the adapters are built, but the
        # openai SDK (~0.5 s to import) is only looked for.
        (["models"], ("openai", "dsh.testing.mockserver.server"), "deepseek-sdk/deepseek-flash"),
    ],
)
def test_commands_import_only_what_they_use(
    argv: list[str], unimported: tuple[str, ...], printed: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, ",".join(unimported), *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DSH_DISABLE_PLUGINS": ""},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_the_pytest_plugin_imports_nothing_of_dsh_but_itself() -> None:
    """pytest loads it in every project where dsh is installed (entry point ``pytest11``)."""
    code = (
        "import json, sys, pytest, dsh.testing.pytest_plugin; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('dsh', 'aiohttp')))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "dsh",
        "dsh._lazy",
        "dsh.testing",
        "dsh.testing.mock",
        "dsh.testing.pytest_plugin",
    ]
