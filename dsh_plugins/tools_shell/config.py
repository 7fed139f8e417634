"""Section ``tools_shell``: timeouts, the output cap and which environment variables a command
never sees."""

from __future__ import annotations

from attrs import field, frozen

__all__ = ["SECRET_PATTERNS", "SECTION", "ShellConfig"]

SECTION = "tools_shell"

#: Environment variable names (globs, case-insensitive) that are dropped: API keys, tokens,
#: secrets, passwords, credentials.
SECRET_PATTERNS = (
    "*API_KEY*",
    "*APIKEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*PRIVATE_KEY*",
    "*ACCESS_KEY*",
    "*_AUTH",
    "*DATABASE_URL*",
)


@frozen
class ShellConfig:
    """Section ``tools_shell``.

    A command runs at most ``timeout_s`` (the model may ask for less or more, up to
    ``max_timeout_s``); then its process group gets SIGTERM and, ``kill_grace_s`` later,
    SIGKILL. The result keeps the first and last halves of ``max_output_bytes``. ``executable``
    runs the command with ``-c`` (empty: bash if installed, else ``/bin/sh``). Variables whose
    names match ``env_deny`` are removed unless named in ``env_allow``; ``env_set`` is added.
    """

    timeout_s: float = 120.0
    max_timeout_s: float = 600.0
    kill_grace_s: float = 2.0
    max_output_bytes: int = 30_000
    executable: str = ""
    env_deny: tuple[str, ...] = SECRET_PATTERNS
    env_allow: tuple[str, ...] = ()
    env_set: dict[str, str] = field(factory=lambda: {"PAGER": "cat", "GIT_PAGER": "cat"})
