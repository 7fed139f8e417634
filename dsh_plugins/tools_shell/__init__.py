"""``tools_shell``: the ``shell(command, timeout_s)`` tool.

The command runs in the agent's workspace in its own process group, with stdin closed, stdout and
stderr merged, and an allow-listed environment (``PATH``, ``HOME``, the locale... plus what
config adds), so no secret reaches it by accident; at harness start the process is made
unreadable to its commands (see :mod:`dsh_plugins.tools_shell.environment`). A timeout or a
cancellation (the agent aborted) kills the whole group: SIGTERM, then SIGKILL after a grace
period. The output keeps its head and tail within a cap; the exit code ends the result. The
tool declares ``effect="execute"``. Configured by section ``tools_shell``; see
``docs/plugins/tools_shell.md``.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.plugin import HeadTail, Tool, ToolError, ToolExecution, get_logger, hookimpl, tool
from dsh_plugins.tools_shell.config import BASE_ENV, SECRET_PATTERNS, SECTION, ShellConfig
from dsh_plugins.tools_shell.environment import allowed, protect_process

if TYPE_CHECKING:
    from dsh.plugin import Harness
    from dsh_plugins.tools_shell.process import Completed

__all__ = ["ShellConfig", "ShellToolPlugin", "make_shell_tool"]

log = get_logger("dsh.tools_shell")


def make_shell_tool(config: ShellConfig) -> Tool:
    """The ``shell`` tool, with the limits of ``config``."""
    executable = config.executable or shutil.which("bash") or "/bin/sh"
    description = (
        f"Run a shell command with {os.path.basename(executable)} in the workspace root and "
        "return its combined stdout and stderr, then its exit code. stdin is closed: "
        "interactive commands fail. The command is killed after timeout_s seconds (default "
        f"{config.timeout_s:g}, at most {config.max_timeout_s:g}). Long output keeps its "
        "beginning and end. Prefer the file tools to read, search and edit files."
    )

    # The command enforces its own timeout (and keeps its output), so no registry timeout.
    @tool(description=description, effect="execute", timeout_s=math.inf)
    async def shell(
        command: str, timeout_s: float | None = None, *, execution: ToolExecution
    ) -> str:
        """
        Args:
            command: The command line to run.
            timeout_s: Seconds after which the command is killed.
        """
        limit = _timeout(timeout_s, config)
        cwd = execution.workspace
        if not cwd.is_dir():
            raise ToolError(f"the workspace {cwd} is not a directory", "NOT_FOUND")
        env = allowed(os.environ, BASE_ENV + config.env_allow, SECRET_PATTERNS, config.env_set)
        output = HeadTail(config.max_output_bytes)
        argv = [executable, "-c", command]
        # Imported at the first command: every harness registers the tool, few runs call it.
        from dsh_plugins.tools_shell.process import run_command

        done = await run_command(
            argv, cwd=cwd, env=env, timeout_s=limit, grace_s=config.kill_grace_s, output=output
        )
        return _report(done, output.text(), limit)

    return shell


def _timeout(requested: float | None, config: ShellConfig) -> float:
    if requested is None:
        return min(config.timeout_s, config.max_timeout_s)
    if requested <= 0:
        raise ToolError("timeout_s must be more than 0 seconds", "INVALID_ARGS")
    return min(requested, config.max_timeout_s)


def _report(done: Completed, output: str, timeout_s: float) -> str:
    text = output or "(no output)\n"
    text = text if text.endswith("\n") else text + "\n"
    if done.timed_out:
        raise ToolError(
            f"the command timed out after {timeout_s:g} s and its process group was killed. "
            f"Output so far:\n{text}",
            "TOOL_TIMEOUT",
        )
    if done.returncode < 0:
        return f"{text}[killed by signal {signal.Signals(-done.returncode).name}]"
    return f"{text}[exit code {done.returncode}]"


class ShellToolPlugin:
    """Registers the ``shell`` tool and its config section."""

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, ShellConfig)

    @hookimpl
    def dsh_register_tools(self, register: Callable[..., Any], harness: Harness) -> None:
        register(make_shell_tool(harness.config.section(SECTION, ShellConfig)))

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        """Before any command can run, hide the harness's own secrets from its commands."""
        if harness.config.section(SECTION, ShellConfig).protect_process:
            wiped = protect_process(SECRET_PATTERNS)
            log.debug("harness process protected from its commands", wiped=wiped)
