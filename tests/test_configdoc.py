"""The configuration reference is generated from the registered config classes and stays true."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from dsh import Harness, hookimpl
from dsh.app._configdoc import (
    config_sections,
    main,
    masked,
    masked_config,
    render_config_reference,
    secret_key,
    toml_value,
)
from dsh.cli import main as cli_main
from dsh_plugins.tools_shell import ShellToolPlugin
from tests.helpers import make_dist

DOCS = Path(__file__).parent.parent / "docs"


def test_configuration_reference_is_generated_from_the_registered_classes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 0
    committed = (DOCS / "configuration.md").read_text()
    assert capsys.readouterr().out == committed, (
        "run: python -m dsh.app._configdoc > docs/configuration.md "
        "(after pip install -e . if setup.cfg's entry points changed)"
    )
    for section in config_sections(Harness(disabled=())):
        if section.distribution == "dsh-harness":
            assert f"\n## {section.name}\n" in committed


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Leaf:
    """A nested table.

    Attributes:
        weight: How heavy it is.
    """

    weight: float
    back: tuple[Branch, ...] = ()


@attrs.frozen
class Branch:
    """No description of its keys, so no description column."""

    leaves: dict[str, Leaf] = attrs.field(factory=dict)


def _twice(self: Everything) -> int:
    return 2 * self.size


@attrs.frozen
class Everything:
    """Section ``everything``.

    Attributes:
        size: How big.
        mode: Which way | how.
    """

    size: int = 3
    mode: Literal["fast", "slow"] = "fast"
    colour: Colour = Colour.RED
    either: int | str = 1
    maybe: float | None = None
    ratio: float = math.inf
    low: float = -math.inf
    odd: float = math.nan
    name: str = 'say "hi"'
    flag: bool = False
    anything: Any = None
    path: Path = Path(".")
    grid: tuple[tuple[int, ...], ...] = ((1, 2),)
    maps: dict[str, dict[str, int]] = attrs.field(factory=lambda: {"a b": {"c": 1}})
    branch: Branch = attrs.field(factory=Branch, metadata={"description": "The branch."})
    branches: tuple[Branch, ...] = ()
    doubled: int = attrs.field(default=attrs.Factory(_twice, takes_self=True))
    _secret: str = attrs.field(default="", alias="secret")
    derived: int = attrs.field(init=False, default=0)


class Owner:
    def dsh_register_config(self, register: Any) -> None:
        register("everything", Everything)


def test_render_shows_types_defaults_descriptions_and_nested_tables() -> None:
    harness = Harness(load_entrypoints=False, plugins=[Owner()])
    text = render_config_reference(harness, distributions=None)
    assert "| [`everything`](#everything) | plugin `Owner` |" in text
    assert "| [`tools`](#tools) | the core |" in text
    section = text.split("## everything\n", 1)[1]
    assert "Registered by plugin `Owner` as `tests.test_configdoc.Everything`." in section
    rows = [
        "| `size` | integer | `3` | How big. |",
        '| `mode` | `"fast"` or `"slow"` | `"fast"` | Which way \\| how. |',
        '| `colour` | `"red"` or `"blue"` | `"red"` |  |',
        "| `either` | integer or string | `1` |  |",
        "| `maybe` | float, optional | unset |  |",
        "| `ratio` | float | `inf` |  |",
        "| `low` | float | `-inf` |  |",
        "| `odd` | float | `nan` |  |",
        '| `name` | string | `"say \\"hi\\""` |  |',
        "| `flag` | boolean | `false` |  |",
        "| `anything` | any value | unset |  |",
        '| `path` | `Path` | `"."` |  |',
        "| `grid` | array of arrays of integers | `[[1, 2]]` |  |",
        '| `maps` | table of tables of integers | `{ "a b" = { c = 1 } }` |  |',
        "| `branch` | `Branch` table | `{ leaves = {} }` | The branch. |",
        "| `branches` | array of `Branch` tables | `[]` |  |",
        "| `doubled` | integer | computed |  |",
        '| `secret` | string | `""` |  |',
    ]
    for row in rows:
        assert row in section
    assert "`derived`" not in section
    assert "| key | type | default | description |\n|---|---|---|---|" in section
    branch = section.split("### everything: Branch\n", 1)[1]
    assert (
        "| key | type | default |\n|---|---|---|\n| `leaves` | table of `Leaf` tables |" in branch
    )
    leaf = section.split("### everything: Leaf\n\n", 1)[1]
    assert leaf.startswith("A nested table.\n\n| key | type | default | description |")
    assert "| `weight` | float | required | How heavy it is. |" in leaf
    assert section.count("### everything: ") == 2


def test_only_the_chosen_distributions_are_documented() -> None:
    harness = Harness(load_entrypoints=False, plugins=[Owner()])
    text = render_config_reference(harness)
    assert "## tools\n" in text
    assert "everything" not in text


def test_a_third_party_distribution_documents_its_own_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = """
    import attrs
    from dsh import hookimpl

    @attrs.frozen
    class WidgetConfig:
        '''How widgets behave.'''

        count: int = 1

    class Plugin:
        @hookimpl
        def dsh_register_config(self, register):
            register("widget", WidgetConfig)
    """
    make_dist(
        tmp_path,
        "fake_widget",
        {"widget": "fake_widget_plugin:Plugin"},
        {"fake_widget_plugin": plugin},
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    assert main(["--distribution", "fake_widget"]) == 0
    text = capsys.readouterr().out
    assert "| [`widget`](#widget) | plugin `widget` (fake_widget) |" in text
    assert "| `count` | integer | `1` |" in text
    assert "## tools" not in text

    assert main(["--all"], make_harness=lambda: Harness(disabled=())) == 0
    text = capsys.readouterr().out
    assert "## widget\n" in text
    assert "## retry\n" in text


def test_toml_value_refuses_what_toml_cannot_hold() -> None:
    assert toml_value({"x": None, "y": [1.5, True]}) == "{ y = [1.5, true] }"
    with pytest.raises(TypeError, match="no TOML literal"):
        toml_value(object())


# -- masking secrets in a dump -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("apiKey", True),
        ("github_token", True),
        ("client_secret", True),
        ("db_password", True),
        ("sentry_dsn", True),
        ("Authorization", True),
        ("headers", True),
        ("extra-header", True),
        ("cookie", True),
        ("max_tokens", False),
        ("reserve_tokens", False),
        ("keyboard", False),
        ("monkey", False),
        ("base_url", False),
    ],
)
def test_secret_looking_keys(key: str, secret: bool) -> None:
    assert secret_key(key) is secret


@attrs.frozen
class Endpoint:
    url: str = ""
    headers: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Server:
    env: dict[str, str] = attrs.field(factory=dict, metadata={"secret": True})
    name: str = ""


@attrs.frozen
class Service:
    endpoints: tuple[Endpoint, ...] = ()
    servers: dict[str, Server] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict)
    launch_codes: tuple[str, ...] = attrs.field(default=(), metadata={"secret": True})
    retries: int = 3


class ServicePlugin:
    @hookimpl
    def dsh_register_config(self, register: Any) -> None:
        register("service", Service)


def test_masked_config_hides_marked_fields_secret_keys_and_url_passwords() -> None:
    config = {
        "service": {
            "endpoints": [
                {"url": "https://me:hunter2@example.org/v1", "headers": {"X-Api": "abc"}}
            ],
            "extra": {"nested": [{"password": "p", "user": "u"}], "empty_token": ""},
            "launch_codes": ["0000", ""],
            "servers": {"files": {"env": {"GH": "ghp-2"}, "name": "n"}},
        },
        "tools_shell": {"env_set": {"GH_TOKEN": "ghp-1", "PAGER": "cat"}},
        "permissions": {"mode": "full"},
    }
    harness = Harness(
        load_entrypoints=False, plugins=[ServicePlugin, ShellToolPlugin], config=config
    )
    harness.load()
    dumped = masked_config(harness.config)
    assert dumped["service"] == {
        "endpoints": [{"url": "https://me:***@example.org/v1", "headers": {"X-Api": "***"}}],
        "extra": {"nested": [{"password": "***", "user": "u"}], "empty_token": ""},
        "launch_codes": ["***", ""],
        "servers": {"files": {"env": {"GH": "***"}, "name": "n"}},
        "retries": 3,
    }
    assert dumped["tools_shell"]["env_set"] == {"GH_TOKEN": "***", "PAGER": "***"}
    assert dumped["tools_shell"]["timeout_s"] == 120.0
    assert dumped["permissions"] == {
        "mode": "full",
        "rules": [],
        "approval": "ask",
        "approval_timeout_s": None,
    }
    for secret in ("hunter2", "ghp-1", "ghp-2", '"abc"', '"0000"'):
        assert secret not in json.dumps(dumped)


def test_config_dump_on_the_command_line_is_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dsh.toml"
    path.write_text(
        '[tools_shell.env_set]\nNPM_TOKEN = "npm-secret"\n'
        '[llm_deepseek]\napi_key = "sk-in-file"\nbase_url = "https://u:pw-123@proxy.example"\n'
    )
    assert cli_main(["--config", str(path), "config", "--dump"]) == 0
    out = capsys.readouterr().out
    assert "npm-secret" not in out and "sk-in-file" not in out and "pw-123" not in out
    dumped = json.loads(out)
    assert dumped["tools_shell"]["env_set"]["NPM_TOKEN"] == "***"
    assert dumped["llm_deepseek"]["api_key"] == "***"
    assert dumped["llm_deepseek"]["base_url"] == "https://u:***@proxy.example"


def test_masked_leaves_what_is_not_secret() -> None:
    assert masked({"a": 1, "b": [True, None, "x"], "token": 7}) == {
        "a": 1,
        "b": [True, None, "x"],
        "token": 7,  # a number is not a secret
    }
    assert masked("see https://example.org/a:b@c") == "see https://example.org/a:b@c"
