"""Terminal styling: ANSI attributes when the output is a colour terminal, plain text otherwise."""

from __future__ import annotations

import os
from typing import TextIO

__all__ = ["Style", "wants_color"]


def wants_color(stream: TextIO) -> bool:
    """Colour for a terminal, unless ``NO_COLOR`` is set or the terminal is ``dumb``."""
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


class Style:
    """Wraps text in ANSI attributes, or leaves it alone when ``color`` is off.

    Each piece is reset at its end, so an interrupted stream never leaves the terminal dimmed.
    """

    def __init__(self, color: bool) -> None:
        self.color = color

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text
