"""Docstrings: the description, and the text of each parameter in Google, NumPy or Sphinx style.

``@dsh.tool`` takes a tool's description and its parameters' descriptions from here; the
config reference (:mod:`dsh.app._configdoc`) documents config fields the same way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence

import attrs

from dsh.values._value import Value

__all__ = ["Docstring", "parse_docstring"]


@attrs.frozen(repr=False, eq=False)
class Docstring(Value):
    """A docstring's ``description`` (the text before its first section) and the text of each
    documented parameter."""

    description: str
    params: dict[str, str]


_PARAM_SECTIONS = {
    "args",
    "arguments",
    "attributes",
    "keyword args",
    "keyword arguments",
    "other parameters",
    "parameters",
    "params",
}
_OTHER_SECTIONS = {
    "example",
    "examples",
    "note",
    "notes",
    "raises",
    "references",
    "return",
    "returns",
    "see also",
    "todo",
    "warning",
    "warnings",
    "yield",
    "yields",
}
_GOOGLE_HEADER = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?::.*)?$")
_SPHINX_FIELD = re.compile(r"^:(?P<kind>\w+)(?P<args>[^:]*):\s*(?P<text>.*)$")
_SPHINX_PARAMS = {"param", "parameter", "arg", "argument", "key", "keyword", "ivar", "var"}


def parse_docstring(doc: str | None) -> Docstring:
    """Split ``doc`` (a raw ``__doc__``: it is cleaned here) into its description and its
    parameters' text, in any of the three styles."""
    lines = inspect.cleandoc(doc or "").splitlines()
    start = next((i for i in range(len(lines)) if _starts_section(lines, i)), len(lines))
    params = {**_numpy_params(lines), **_sphinx_params(lines), **_google_params(lines)}
    return Docstring("\n".join(lines[:start]).strip(), params)


def _starts_section(lines: Sequence[str], index: int) -> bool:
    line = lines[index]
    header = _GOOGLE_HEADER.match(line)
    if header and header[1].strip().lower() in _PARAM_SECTIONS | _OTHER_SECTIONS:
        return True
    return bool(_SPHINX_FIELD.match(line)) or _is_numpy_header(lines, index)


def _is_numpy_header(lines: Sequence[str], index: int) -> bool:
    following = lines[index + 1] if index + 1 < len(lines) else ""
    return bool(lines[index].strip()) and bool(_NUMPY_RULE.match(following))


def _google_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for index, line in enumerate(lines):
        header = _GOOGLE_HEADER.match(line)
        if header and header[1].strip().lower() in _PARAM_SECTIONS:
            params.update(_entries(_indented_block(lines, index + 1, _indent(line)), _GOOGLE_ENTRY))
    return params


def _numpy_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for index in range(len(lines)):
        if _is_numpy_header(lines, index) and lines[index].strip().lower() in _PARAM_SECTIONS:
            end = next(
                (j for j in range(index + 2, len(lines)) if _is_numpy_header(lines, j)),
                len(lines),
            )
            params.update(_entries(lines[index + 2 : end], _NUMPY_ENTRY))
    return params


def _sphinx_params(lines: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        field = _SPHINX_FIELD.match(line)
        if field:
            words = field["args"].split()
            current = words[-1] if field["kind"] in _SPHINX_PARAMS and words else None
            if current is not None:
                params[current] = field["text"].strip()
        elif current is not None and line[:1].isspace() and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
        else:
            current = None
    return params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _indented_block(lines: Sequence[str], start: int, indent: int) -> list[str]:
    """The lines from ``start`` that are blank or indented deeper than ``indent``, dedented."""
    block: list[str] = []
    for line in lines[start:]:
        if line.strip() and _indent(line) <= indent:
            break
        block.append(line)
    depth = min((_indent(line) for line in block if line.strip()), default=0)
    return [line[depth:] for line in block]


def _entries(block: Sequence[str], entry: re.Pattern[str]) -> dict[str, str]:
    """Entries start at column 0 (``name ...``); deeper lines continue the current one."""
    params: dict[str, str] = {}
    current: str | None = None
    for line in block:
        match = entry.match(line) if line[:1].strip() else None
        if match:
            current = match["name"]
            params[current] = (match.groupdict().get("text") or "").strip()
        elif current is not None and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
    return params
