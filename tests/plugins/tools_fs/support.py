"""Helpers for the file tool tests: read an outcome's text, assert success or a failure code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dsh import ToolOutcome
from dsh.values._content import Text

#: ``await call("read_file", path="a.txt")``: run a tool as the test agent.
Call = Callable[..., Awaitable[ToolOutcome]]


def text(outcome: ToolOutcome) -> str:
    [block] = outcome.content
    assert isinstance(block, Text)
    return block.text


def ok(outcome: ToolOutcome) -> str:
    assert not outcome.is_error, text(outcome)
    return text(outcome)


def failed(outcome: ToolOutcome, code: str) -> str:
    assert (outcome.is_error, outcome.code) == (True, code), text(outcome)
    return text(outcome)
