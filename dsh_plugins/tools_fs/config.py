"""Section ``tools_fs``: the caps that keep file tool results small enough for a model."""

from __future__ import annotations

from attrs import frozen

__all__ = ["SECTION", "FsConfig"]

SECTION = "tools_fs"


@frozen
class FsConfig:
    """Section ``tools_fs``.

    ``read_file`` returns at most ``max_lines`` lines and ``max_output_bytes`` bytes per call,
    each line cut at ``max_line_chars``; ``list_dir`` and ``glob`` list at most ``max_entries``
    paths; ``grep`` reports at most ``max_matches`` lines and skips files larger than
    ``max_grep_file_bytes``. ``glob`` and ``grep`` do not descend into directories named in
    ``ignore``.
    """

    max_lines: int = 2000
    max_line_chars: int = 2000
    max_output_bytes: int = 100_000
    max_entries: int = 1000
    max_matches: int = 200
    max_grep_file_bytes: int = 5_000_000
    ignore: tuple[str, ...] = (
        ".git",
        ".hg",
        ".svn",
        ".venv",
        ".tox",
        ".mypy_cache",
        ".ruff_cache",
        "__pycache__",
        "node_modules",
    )
