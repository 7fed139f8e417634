"""The mcp plugin without servers running: its config, the missing SDK, its commands. These
tests also run where the ``mcp`` extra is not installed (tox env ``nomcp``)."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from dsh import ConfigError, Harness, hookimpl
from dsh.app._configdoc import MASK, masked_config
from dsh.cli import main
from dsh_plugins.mcp import McpConfig, McpPlugin, McpServerConfig, McpServers
from dsh_plugins.mcp.config import INSTALL, McpError, expand
from dsh_plugins.permissions import PermissionsPlugin

HAVE_SDK = importlib.util.find_spec("mcp") is not None


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory for the CLI, with every plugin enabled."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_DISABLE_PLUGINS", "")
    yield tmp_path
    structlog.reset_defaults()  # the CLI configures logging process-wide


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``mcp`` SDK is not importable (it really is not in the ``nomcp`` env)."""
    if HAVE_SDK:
        monkeypatch.setitem(sys.modules, "mcp", None)


def plugin_harness(config: dict[str, Any]) -> Harness:
    return Harness(load_entrypoints=False, plugins=[McpPlugin()], config={"mcp": config})


def test_config_defaults_and_the_server_shapes() -> None:
    h = plugin_harness({"servers": {"files": {"command": "python", "args": ["-m", "srv"]}}})
    h.load()
    config = h.config.section("mcp", McpConfig)
    files = config.servers["files"]
    assert (files.transport, files.enabled, files.timeout_s, files.tools) == (
        "stdio",
        True,
        None,
        None,
    )
    assert files.describe() == "stdio: python -m srv"
    remote = McpServerConfig(url="https://me:pw@example.com/mcp", headers={"A": "b"})
    assert (remote.transport, remote.describe()) == ("http", "http: https://example.com/mcp")
    assert (config.max_output_bytes, config.restart_backoff_s) == (30_000, 1.0)
    assert (config.max_message_bytes, config.max_tools) == (8 * 1024 * 1024, 128)
    assert (files.max_message_bytes, files.max_tools) == (None, None)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"x": {}}, "needs either command"),
        ({"x": {"command": "a", "url": "http://h"}}, "not both and not neither"),
        ({"bad name": {"command": "a"}}, "not 'bad name'"),
        ({"s" * 33: {"command": "a"}}, "use at most 32 characters, not 'sss"),
        ({"x": {"command": "a", "max_message_bytes": 10}}, "max_message_bytes must be at least"),
        ({"x": {"command": "a", "max_tools": 0}}, "max_tools must be at least 1"),
        ({"x": {"command": "a", "timeout_s": 0}}, "timeout_s must be greater than 0"),
        ({"x": {"command": "a", "start_timeout_s": -1}}, "start_timeout_s must be greater"),
        ({"x": {"command": "a", "colour": "red"}}, "colour"),
    ],
)
def test_bad_server_config_is_a_config_error(servers: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plugin_harness({"servers": servers}).load()


def test_environment_references_are_expanded() -> None:
    environ = {"TOKEN": "t0k", "USER_NAME": "zoe"}
    values = {"Authorization": "Bearer ${TOKEN}", "X": "${USER_NAME}/${TOKEN}", "Y": "$TOKEN"}
    assert expand(values, "the headers", environ) == {
        "Authorization": "Bearer t0k",
        "X": "zoe/t0k",
        "Y": "$TOKEN",
    }
    with pytest.raises(McpError, match="the headers refers to the environment variable NOPE"):
        expand({"A": "${NOPE}"}, "the headers", environ)


def test_config_dump_masks_env_and_headers() -> None:
    h = plugin_harness(
        {
            "servers": {
                "files": {"command": "srv", "env": {"GITHUB_TOKEN": "ghp_x", "MODE": "fast"}},
                "web": {"url": "https://u:pw@h/mcp", "headers": {"Authorization": "Bearer x"}},
            }
        }
    )
    h.load()
    dumped = masked_config(h.config)["mcp"]["servers"]
    assert dumped["files"]["env"] == {"GITHUB_TOKEN": MASK, "MODE": MASK}
    assert dumped["web"]["headers"] == {"Authorization": MASK}
    assert dumped["web"]["url"] == f"https://u:{MASK}@h/mcp"
    assert dumped["files"]["command"] == "srv"


async def test_without_the_sdk_a_configured_server_is_missing_dependency(no_sdk: None) -> None:
    config = {"servers": {"files": {"command": "srv"}, "off": {"command": "x", "enabled": False}}}
    async with plugin_harness(config) as h:
        servers: McpServers = h.mcp
        status = servers.status()
        tools = h.tools.names()
    assert [(s.name, s.state, s.code) for s in status] == [
        ("files", "failed", "MISSING_DEPENDENCY"),
        ("off", "disabled", None),
    ]
    assert status[0].error == (
        f"MCP server 'files' is configured but the MCP SDK is not installed: run {INSTALL} to "
        "use MCP servers"
    )
    assert "pip install 'dsh-harness[mcp]'" in (status[0].error or "")
    assert tools == []


async def test_without_servers_nothing_starts(no_sdk: None) -> None:
    async with plugin_harness({}) as h:
        servers: McpServers = h.mcp
        assert servers.status() == []
    with pytest.raises(AttributeError):
        h.mcp  # noqa: B018 - the service is gone once the harness stops


async def test_a_taken_service_name_fails_the_start_hook_not_the_harness() -> None:
    class Squatter:
        @hookimpl
        def dsh_harness_start(self, harness: Harness) -> None:
            harness.add_service("mcp", object())

    h = Harness(load_entrypoints=False, plugins=[McpPlugin(), Squatter()], config={})
    async with h:  # McpPlugin's start hook raises; the hook is contained
        assert not isinstance(h.mcp, McpServers)


def write_config(directory: Path, servers: str) -> None:
    (directory / "dsh.toml").write_text(servers)


def test_mcp_list_without_the_sdk(
    in_tmp: Path, no_sdk: None, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(in_tmp, '[mcp.servers.files]\ncommand = "srv"\n')
    assert main(["--log-level", "critical", "mcp", "list"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "files  failed  stdio: srv"
    assert "MISSING_DEPENDENCY: MCP server 'files' is configured but" in out
    assert main(["--log-level", "critical", "mcp", "serve"]) == 1
    assert f"MISSING_DEPENDENCY: the MCP SDK is not installed: run {INSTALL}" in (
        capsys.readouterr().err
    )


def test_mcp_list_and_help_without_servers(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mcp", "list"]) == 0
    assert "no MCP servers are configured" in capsys.readouterr().out
    assert main(["mcp"]) == 2
    assert "serve" in capsys.readouterr().out


def test_plugins_lists_configured_servers(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(
        in_tmp,
        '[mcp.servers.files]\ncommand = "srv"\nargs = ["--root", "."]\n'
        '[mcp.servers.web]\nurl = "http://127.0.0.1:9/mcp"\nenabled = false\n',
    )
    main(["--log-level", "critical", "plugins"])
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["mcp"])
    assert [line.strip() for line in lines[at + 1 : at + 3]] == [
        "server files: stdio: srv --root .",
        "server web: http: http://127.0.0.1:9/mcp (disabled)",
    ]


def test_the_guides_configurations_are_valid() -> None:
    page = (Path(__file__).parents[3] / "docs" / "mcp.md").read_text()
    configs = re.findall(r"```toml\n(.*?)```", page, re.DOTALL)
    assert len(configs) == 4
    for text in configs:
        harness = Harness(
            load_entrypoints=False,
            plugins=[McpPlugin(), PermissionsPlugin()],
            config=tomllib.loads(text),
        )
        harness.load()
