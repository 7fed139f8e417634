"""``tools_fs``: file tools confined to the agent's workspace.

``read_file(path, offset, limit)``, ``write_file(path, content)``, ``edit_file(path, old, new)``,
``delete_file(path)``, ``move_file(path, to)``, ``list_dir(path)``, ``glob(pattern)`` and
``grep(pattern, path)``. Every path is resolved inside
the workspace (``AgentOptions.workspace``, default the current directory) with
:func:`dsh.plugin.confine`: ``..``, absolute paths elsewhere and symbolic links that lead
outside are refused. The read-only tools are ``concurrency_safe`` and declare ``effect="read"``; the
writers declare ``effect="write"`` and, before each change, record the file's previous content in
the agent's session (:func:`dsh.plugin.record_change`), so that ``dsh sessions rewind`` can put it
back. Caps come from config section ``tools_fs``; see
``docs/plugins/tools_fs.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.plugin import (
    Tool,
    ToolError,
    ToolExecution,
    confine,
    error_messages,
    hookimpl,
    tool,
)
from dsh_plugins.tools_fs.config import SECTION, FsConfig

if TYPE_CHECKING:
    from dsh.plugin import Harness

__all__ = ["FsConfig", "FsToolsPlugin", "make_tools"]


#: One change a tool is about to make: the file, its content now and its content after
#: (``None``: no file).
Change = tuple[Path, bytes | None, bytes | None]


async def _changing(
    execution: ToolExecution,
    config: FsConfig,
    changes: list[Change],
    apply: Callable[[], str],
) -> str:
    """Record ``changes`` in the agent's session and make that durable, then ``apply`` them
    (in a worker thread). A failed change is recorded as such; a previous content over a cap is
    changed all the same and the result says it cannot be rewound."""
    agent = execution.agent
    if agent is None:  # a call outside any agent: there is no session to record in
        return await asyncio.to_thread(apply)
    # The checkpoint recorder (dsh.session._rewind) is imported by the first change: a run
    # whose tools change no file never loads it.
    from dsh.plugin import digest_of, record_change, record_failure

    session = agent.session
    notes = [
        note
        for path, before, after in changes
        if (
            note := record_change(
                session,
                tool=execution.name,
                path=path,
                before=before,
                after=None if after is None else digest_of(after),
                call_id=execution.call_id,
                caps=config.checkpoint_caps,
            )
        )
    ]
    try:
        try:
            await session.checkpoint()
        except Exception as exc:
            raise ToolError(
                "nothing was changed: the session could not save the file's previous state "
                f"({error_messages(exc)})",
                "SESSION_NOT_SAVED",
            ) from exc
        done = await asyncio.to_thread(apply)
    except ToolError as exc:
        for path, before, _ in changes:
            kept = None if before is None else digest_of(before)
            record_failure(
                session,
                tool=execution.name,
                path=path,
                kept=kept,
                error=str(exc),
                call_id=execution.call_id,
            )
        raise
    return "\n".join([done, *(f"note: {note}" for note in notes)])


def make_tools(config: FsConfig) -> list[Tool]:
    """The eight file tools, with the caps of ``config``. What they do is in
    :mod:`~dsh_plugins.tools_fs.files`, imported when a tool first runs: every harness
    registers these tools, few runs call them."""

    @tool(effect="read", concurrency_safe=True)
    async def read_file(
        path: str, offset: int = 1, limit: int | None = None, *, execution: ToolExecution
    ) -> str:
        """Read a text file in the workspace. Each line is prefixed with its number and a tab
        (the prefix is not part of the file). Long files are read in parts: the result says
        which offset to continue from.

        Args:
            path: The file, relative to the workspace root.
            offset: The first line to read, counting from 1.
            limit: The most lines to return (capped by the configuration).
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        name = files.display(target, root)
        return await asyncio.to_thread(files.read_text, target, name, offset, limit, config)

    @tool(effect="write")
    async def write_file(path: str, content: str, *, execution: ToolExecution) -> str:
        """Create a file in the workspace, or replace all of its content. Parent directories
        are created as needed. Prefer edit_file to change part of an existing file.

        Args:
            path: The file, relative to the workspace root.
            content: The complete new content of the file.
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        name = files.display(target, root)
        before = await asyncio.to_thread(files.prepare_write, target, name)
        return await _changing(
            execution,
            config,
            [(target, before, content.encode())],
            lambda: files.write_text(target, name, content, root, before is not None),
        )

    @tool(effect="write")
    async def edit_file(path: str, old: str, new: str, *, execution: ToolExecution) -> str:
        """Replace one exact piece of text in a file. ``old`` must occur exactly once in the
        file, whitespace and indentation included; add surrounding lines to make it unique.

        Args:
            path: The file, relative to the workspace root.
            old: The exact text to replace.
            new: The text to put in its place.
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        name = files.display(target, root)
        before, after, line = await asyncio.to_thread(files.prepare_edit, target, name, old, new)
        return await _changing(
            execution,
            config,
            [(target, before, after)],
            lambda: files.edit_text(target, name, after, line, root),
        )

    @tool(effect="write")
    async def delete_file(path: str, *, execution: ToolExecution) -> str:
        """Delete a file in the workspace (not a directory).

        Args:
            path: The file, relative to the workspace root.
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        name = files.display(target, root)
        before = await asyncio.to_thread(files.prepare_delete, target, name)
        return await _changing(
            execution, config, [(target, before, None)], lambda: files.delete(target, name)
        )

    @tool(effect="write")
    async def move_file(path: str, to: str, *, execution: ToolExecution) -> str:
        """Move or rename a file in the workspace. Parent directories of ``to`` are created as
        needed; ``to`` must not exist yet.

        Args:
            path: The file to move, relative to the workspace root.
            to: Its new path, relative to the workspace root.
        """
        root = execution.workspace
        source, target = confine(path, root), confine(to, root)
        from dsh_plugins.tools_fs import files

        name, to_name = files.display(source, root), files.display(target, root)
        content = await asyncio.to_thread(files.prepare_move, source, name, target, to_name)
        return await _changing(
            execution,
            config,
            [(source, content, None), (target, None, content)],
            lambda: files.move(source, name, target, to_name, root),
        )

    @tool(effect="read", concurrency_safe=True)
    async def list_dir(path: str = ".", *, execution: ToolExecution) -> str:
        """List a directory in the workspace; directory names end with a slash.

        Args:
            path: The directory, relative to the workspace root.
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        name = files.display(target, root)
        return await asyncio.to_thread(files.list_entries, target, name, config)

    @tool(effect="read", concurrency_safe=True)
    async def glob(pattern: str, *, execution: ToolExecution) -> str:
        """Find paths in the workspace by glob pattern: ``*`` and ``?`` match within one path
        segment, ``**`` matches any number of directories (e.g. ``src/**/*.py``).

        Args:
            pattern: The pattern, relative to the workspace root.
        """
        from dsh_plugins.tools_fs import files

        return await asyncio.to_thread(files.glob_paths, execution.workspace, pattern, config)

    @tool(effect="read", concurrency_safe=True)
    async def grep(pattern: str, path: str = ".", *, execution: ToolExecution) -> str:
        """Search text files for lines matching a regular expression (Python syntax). Results
        are ``path:line:text``; binary files are skipped.

        Args:
            pattern: The regular expression.
            path: A file, or a directory searched recursively, relative to the workspace root.
        """
        root = execution.workspace
        target = confine(path, root)
        from dsh_plugins.tools_fs import files

        return await files.grep_paths(root, target, pattern, config)

    return [read_file, write_file, edit_file, delete_file, move_file, list_dir, glob, grep]


class FsToolsPlugin:
    """Registers the file tools and their config section."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, FsConfig)

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any], harness: Harness) -> None:
        for fs_tool in make_tools(harness.config.section(SECTION, FsConfig)):
            register(fs_tool)
