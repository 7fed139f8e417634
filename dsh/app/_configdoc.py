"""The configuration reference (``docs/configuration.md``), generated from the config classes
that dsh and its plugins register.

``python -m dsh.app._configdoc > docs/configuration.md`` regenerates it from the entry-point plugins
of the ``dsh-harness`` distribution; a test fails when the committed file differs, so a config
key can never be undocumented. Third-party authors document their own sections the same way:
``python -m dsh.app._configdoc --distribution my-dist``.

Each section lists its keys with their TOML type and default. The text comes from the class
docstring; a key's own description from its ``attrs`` field metadata (``description``) or from
an ``Attributes:`` section of the docstring.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs
import cattrs

from dsh.app._harness import Harness
from dsh.tools._docstrings import parse_docstring
from dsh.values._config import Config
from dsh.values._value import Value

__all__ = [
    "CORE",
    "MASK",
    "SECRET_WORDS",
    "ConfigSection",
    "config_sections",
    "main",
    "masked",
    "masked_config",
    "render_config_reference",
    "secret_key",
    "toml_value",
]

#: The distribution whose sections the committed reference documents.
CORE = "dsh-harness"

_plain = cattrs.Converter()
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@attrs.frozen(repr=False, eq=False)
class ConfigSection(Value):
    """One registered section: its name, its class, and the plugin and distribution that own it
    (``plugin`` is ``"dsh"`` for the core's own sections; ``distribution`` is ``None`` for a
    plugin the host registered)."""

    name: str
    cls: type[Any]
    plugin: str
    distribution: str | None


def config_sections(harness: Harness) -> list[ConfigSection]:
    """Every section ``harness`` knows, by name, with the plugin that registered it.

    Loads the harness (not started) if needed; the config records who registered each
    section (:meth:`~dsh.values._config.Config.owner`).
    """
    harness.load()
    found = []
    for name in harness.config.sections():
        plugin = harness.config.owner(name)
        distribution = CORE if plugin == "dsh" else harness.plugins.info[plugin].distribution
        cls = type(harness.config.section(name, object))
        found.append(ConfigSection(name, cls, plugin, distribution))
    return found


def render_config_reference(
    harness: Harness, distributions: Collection[str] | None = (CORE,)
) -> str:
    """The reference as MyST Markdown: the sections whose distribution is in ``distributions``
    (``None``: every section, host plugins' included)."""
    sections = [
        s
        for s in config_sections(harness)
        if distributions is None or s.distribution in distributions
    ]
    lines = [
        "# Configuration reference",
        "",
        "Generated from the registered config classes by `python -m dsh.app._configdoc`;",
        "do not edit by hand.",
        "",
        "dsh reads one TOML file: the one given with `--config` (or `config=` to `dsh.run`),",
        "else the one `$DSH_CONFIG` names, else `dsh.toml` in the working directory (a host",
        "passes a path or a mapping to `Harness(config=...)`). Each",
        "`[section]` belongs to the plugin that registered it; every key is optional. Unknown",
        "sections and keys are errors, and a bad file fails at start with every problem listed.",
        'A value must have its key\'s type: `"false"` is not a boolean, a string is not an',
        "array, `3` is not a string; numbers outside their documented range are errors too.",
        "`dsh config --dump` prints the effective values, secrets masked: values of keys that look",
        "secret (a word such as `key`, `token`, `secret`, `password`, `dsn`, `authorization`,",
        "`header`), of fields a plugin marks with `attrs` metadata `secret=True` (`env_set` of",
        "`tools_shell`), and passwords in URLs. Secrets (`DEEPSEEK_API_KEY`) come from the",
        "environment (or `dsh keys set deepseek`), never from this file.",
        "",
        "| section | registered by |",
        "|---|---|",
        *(f"| [`{s.name}`](#{s.name}) | {_owner(s)} |" for s in sections),
    ]
    for section in sections:
        lines += ["", f"## {section.name}", "", *_section(section)]
    return "\n".join(lines) + "\n"


def _owner(section: ConfigSection) -> str:
    if section.plugin == "dsh":
        return "the core"
    where = f" ({section.distribution})" if section.distribution else ""
    return f"plugin `{section.plugin}`{where}"


def _section(section: ConfigSection) -> list[str]:
    cls = section.cls
    lines = [f"Registered by {_owner(section)} as `{cls.__module__}.{cls.__qualname__}`.", ""]
    lines += _class_table(cls)
    for nested in _nested_classes(cls):
        lines += ["", f"### {section.name}: {nested.__name__}", "", *_class_table(nested)]
    return lines


def _class_table(cls: type[Any]) -> list[str]:
    doc = parse_docstring(cls.__doc__)
    hints = typing.get_type_hints(cls)
    fields = [f for f in attrs.fields(cls) if f.init]
    texts = {f.name: f.metadata.get("description") or doc.params.get(f.name, "") for f in fields}
    with_text = any(texts.values())
    lines = [doc.description, ""] if doc.description else []
    header = "| key | type | default | description |" if with_text else "| key | type | default |"
    lines += [header, "|---|---|---|---|" if with_text else "|---|---|---|"]
    for field in fields:
        name = field.alias or field.name
        row = f"| `{name}` | {_describe(hints[field.name])} | {_default(field)} |"
        lines.append(row + (f" {_cell(texts[field.name])} |" if with_text else ""))
    return lines


def _cell(text: str) -> str:
    """``text`` fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _default(field: attrs.Attribute[Any]) -> str:
    default: Any = field.default
    if default is attrs.NOTHING:
        return "required"
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return "computed"
        default = default.factory()
    if default is None:
        return "unset"
    return _cell(f"`{toml_value(_plain.unstructure(default))}`")


def toml_value(value: Any) -> str:
    """``value`` (plain data: what a converter unstructures to) as a TOML literal; ``None``
    entries of tables are left out, as TOML has no null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        items = [f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML literal for {value!r}")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


# ---------------------------------------------------------------------------------------------
# Types, as a TOML author reads them.
# ---------------------------------------------------------------------------------------------

_SCALARS: dict[Any, tuple[str, str]] = {
    bool: ("boolean", "booleans"),
    int: ("integer", "integers"),
    float: ("float", "floats"),
    str: ("string", "strings"),
    Any: ("any value", "any values"),
    object: ("any value", "any values"),
}
_ARRAYS = {list, tuple, Sequence, set, frozenset}
_TABLES = {dict, Mapping}


def _describe(tp: Any, plural: bool = False) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _SCALARS:
        return _SCALARS[tp][plural]
    if origin is Literal:
        return " or ".join(f"`{toml_value(a)}`" for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " or ".join(f"`{toml_value(m.value)}`" for m in tp)
    if origin in (typing.Union, types.UnionType):
        return _union(args, plural)
    if attrs.has(tp):
        return f"`{tp.__name__}` table" + ("s" if plural else "")
    if origin in _ARRAYS:
        return f"array{'s' if plural else ''} of {_describe(args[0], plural=True)}"
    if origin in _TABLES:
        return f"table{'s' if plural else ''} of {_describe(args[1], plural=True)}"
    return f"`{getattr(tp, '__name__', tp)}`"


def _union(members: tuple[Any, ...], plural: bool) -> str:
    named = " or ".join(_describe(m, plural) for m in members if m is not type(None))
    return f"{named}, optional" if type(None) in members else named


def _nested_classes(cls: type[Any]) -> Iterator[type[Any]]:
    """The attrs classes reachable from ``cls``'s fields, each once, in field order."""
    seen: list[type[Any]] = []

    def visit(tp: Any) -> None:
        if attrs.has(tp) and tp not in seen:
            seen.append(tp)
            walk(tp)
        for arg in typing.get_args(tp):
            visit(arg)

    def walk(owner: type[Any]) -> None:
        for tp in typing.get_type_hints(owner).values():
            visit(tp)

    walk(cls)
    return iter(seen)


# ---------------------------------------------------------------------------------------------
# Masking secrets, so that a dump is safe to paste into a bug report.
# ---------------------------------------------------------------------------------------------

#: What a secret value is replaced with.
MASK = "***"
#: Words that make a key secret (``api_key``, ``github_token``, ``sentry_dsn``, ``headers``...),
#: matched against the words of the key (``max_tokens`` is not one: ``tokens`` is not listed).
SECRET_WORDS = frozenset(
    {
        "apikey",
        "auth",
        "authorization",
        "bearer",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "dsn",
        "header",
        "headers",
        "key",
        "passphrase",
        "passwd",
        "password",
        "secret",
        "token",
    }
)
_KEY_WORDS = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")


def secret_key(key: str) -> bool:
    """Whether a config key names a secret: one of its words is in :data:`SECRET_WORDS`."""
    return any(w in SECRET_WORDS for w in _KEY_WORDS.findall(_CAMEL.sub("_", key).lower()))


def masked_config(config: Config) -> dict[str, Any]:
    """Every registered section's effective values (like :meth:`Config.dump`) with secrets
    masked: fields whose ``attrs`` metadata says ``secret=True`` (such as ``env_set`` of
    ``tools_shell``, whose values are environment variables), keys that look secret
    (:func:`secret_key`), and passwords in URLs (``https://user:***@host``)."""
    return {name: _masked_value(config.section(name, object)) for name in config.sections()}


def masked(value: Any) -> Any:
    """Plain data (tables, arrays, scalars) with the values of secret-looking keys masked and
    passwords in URLs hidden. Empty values stay visible: they show that nothing is set."""
    if isinstance(value, Mapping):
        return {k: _hidden(v) if secret_key(str(k)) else masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _URL_USERINFO.sub(rf"\g<scheme>\g<user>:{MASK}@", value)
    return value


def _masked_value(value: Any) -> Any:
    """A structured config value as plain data, masked; attrs classes are looked into
    wherever they sit (in tables and arrays too), so their fields' ``secret`` marks count."""
    if isinstance(value, Mapping):
        return {
            k: _hidden(_plain.unstructure(v)) if secret_key(str(k)) else _masked_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_masked_value(v) for v in value]
    if not attrs.has(type(value)):
        return masked(_plain.unstructure(value))
    out = {}
    for field in attrs.fields(type(value)):
        item = getattr(value, field.name)
        secret = field.metadata.get("secret") or secret_key(field.name)
        out[field.name] = _hidden(_plain.unstructure(item)) if secret else _masked_value(item)
    return out


def _hidden(value: Any) -> Any:
    """``value`` with every non-empty string in it replaced by :data:`MASK` (table keys kept)."""
    if isinstance(value, Mapping):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_hidden(v) for v in value]
    if isinstance(value, str) and value:
        return MASK
    return value


# ---------------------------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None,
    make_harness: Callable[[], Harness] = lambda: Harness(disabled=()),
) -> int:
    """``python -m dsh.app._configdoc [--distribution NAME ...] [--all]``: print the reference."""
    parser = argparse.ArgumentParser(prog="python -m dsh.app._configdoc", description=__doc__)
    parser.add_argument(
        "--distribution",
        action="append",
        metavar="NAME",
        help=f"document this distribution's sections (repeatable; default: {CORE})",
    )
    parser.add_argument("--all", action="store_true", help="document every installed plugin")
    args = parser.parse_args(argv)
    distributions = None if args.all else (args.distribution or [CORE])
    print(render_config_reference(make_harness(), distributions), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover - the command line
    raise SystemExit(main())
