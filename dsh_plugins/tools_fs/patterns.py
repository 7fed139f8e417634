"""Glob patterns for ``glob``: ``*`` and ``?`` within one path segment, ``[...]`` classes, and
``**`` for any number of directories (zero included)."""

from __future__ import annotations

import re

__all__ = ["glob_regex"]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex that fully matches the relative POSIX paths ``pattern`` selects."""
    segments = pattern.strip("/").split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:.*/)?")
        else:
            parts.append(_segment(segment) + ("" if last else "/"))
    return re.compile("".join(parts))


def _segment(segment: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in segment[index + 1 :]:
            end = segment.index("]", index + 1)
            out.append(_char_class(segment[index:end]))
            index = end + 1
        else:
            out.append(re.escape(char))
    return "".join(out)


def _char_class(body: str) -> str:
    negate = body[:1] in ("!", "^")
    inner = body[1:] if negate else body
    return f"[{'^' if negate else ''}{inner.replace(chr(92), chr(92) * 2)}]"
