"""The environment a command sees: the harness's own, minus anything that looks like a secret."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

__all__ = ["is_secret", "scrubbed"]


def is_secret(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the glob ``patterns`` (case-insensitive)."""
    upper = name.upper()
    return any(fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def scrubbed(
    environ: Mapping[str, str],
    deny: Iterable[str],
    allow: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``environ`` without the variables matching ``deny`` (unless named in ``allow``), plus
    ``extra``."""
    deny, allow = tuple(deny), set(allow)
    kept = {k: v for k, v in environ.items() if k in allow or not is_secret(k, deny)}
    return kept | dict(extra or {})
