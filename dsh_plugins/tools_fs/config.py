"""Section ``tools_fs``: the caps that keep file tool results small enough for a model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import field, frozen

from dsh.plugin import Value, at_least

if TYPE_CHECKING:
    from dsh.plugin import CheckpointCaps

__all__ = ["SECTION", "FsConfig"]

SECTION = "tools_fs"


@frozen(repr=False, eq=False)
class FsConfig(Value):
    """Section ``tools_fs``.

    ``read_file`` returns at most ``max_lines`` lines and ``max_output_bytes`` bytes per call,
    each line cut at ``max_line_chars``; ``list_dir`` and ``glob`` list at most ``max_entries``
    paths; ``grep`` reports at most ``max_matches`` lines and skips files larger than
    ``max_grep_file_bytes``. ``glob`` and ``grep`` do not descend into directories named in
    ``ignore``. Every cap is 1 or more.

    Before a file tool changes a file it keeps the file's previous content in the session, for
    rewind (``dsh sessions rewind``): at most ``checkpoint_file_bytes`` of one file and
    ``checkpoint_session_bytes`` per session (each distinct content counted once). A file whose
    previous content is over either cap is still changed, but cannot be rewound, and the tool's
    result says so. 0 keeps nothing.
    """

    max_lines: int = field(default=2000, validator=at_least(1))
    max_line_chars: int = field(default=2000, validator=at_least(1))
    max_output_bytes: int = field(default=100_000, validator=at_least(1))
    max_entries: int = field(default=1000, validator=at_least(1))
    max_matches: int = field(default=200, validator=at_least(1))
    max_grep_file_bytes: int = field(default=5_000_000, validator=at_least(1))
    checkpoint_file_bytes: int = field(default=10_000_000, validator=at_least(0))
    checkpoint_session_bytes: int = field(default=100_000_000, validator=at_least(0))
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

    @property
    def checkpoint_caps(self) -> CheckpointCaps:
        """The checkpoint caps as the recorder takes them (its module is imported by the first
        change a file tool records, not when the plugin loads)."""
        from dsh.plugin import CheckpointCaps

        return CheckpointCaps(self.checkpoint_file_bytes, self.checkpoint_session_bytes)
