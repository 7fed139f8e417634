"""Section ``tools_shell``: timeouts, the output cap and which environment variables a command
sees."""

from __future__ import annotations

from attrs import field, frozen

from dsh.plugin import Value, at_least, greater_than

__all__ = ["BASE_ENV", "SECRET_PATTERNS", "SECTION", "ShellConfig"]

SECTION = "tools_shell"

#: Environment variable names (globs, case-insensitive) that look like secrets: API keys,
#: tokens, secrets, passwords, credentials. A glob in the allow-list never passes them (name
#: one exactly to pass it), and their values are wiped from the harness's own environment block.
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
    "*_DSN",
)

#: The variables a command gets from the harness's environment (names or globs), before
#: ``env_allow`` adds more: where programs are, who and where the user is, the locale, the
#: terminal, the temporary directory and the TLS certificates to trust. Nothing else passes.
BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


@frozen(repr=False, eq=False)
class ShellConfig(Value):
    """Section ``tools_shell``.

    A command runs at most ``timeout_s`` (the model may ask for less or more, up to
    ``max_timeout_s``); then its process group gets SIGTERM and, ``kill_grace_s`` later,
    SIGKILL. The result keeps the first and last halves of ``max_output_bytes``. ``executable``
    runs the command with ``-c`` (empty: bash if installed, else ``/bin/sh``).

    The environment is an allow-list: a command sees only the harness's variables named in
    the built-in list (``PATH``, ``HOME``, ``LANG``, ``LC_*``, ``TERM``, ``TMPDIR``, ``USER``,
    ``SHELL``...) or in ``env_allow`` (names or globs; a glob never passes a name that looks
    like a secret, an exact name does), plus ``env_set``. ``protect_process`` makes the harness
    process unreadable to its commands: not dumpable, and the values of secret-looking
    variables wiped from its initial environment block (``/proc/<pid>/environ``).
    """

    timeout_s: float = field(default=120.0, validator=greater_than(0))
    max_timeout_s: float = field(default=600.0, validator=greater_than(0))
    kill_grace_s: float = field(default=2.0, validator=at_least(0))
    max_output_bytes: int = field(default=30_000, validator=at_least(1))
    executable: str = ""
    env_allow: tuple[str, ...] = ()
    # Values may be tokens for the commands: ``dsh config --dump`` masks them.
    env_set: dict[str, str] = field(
        factory=lambda: {"PAGER": "cat", "GIT_PAGER": "cat"}, metadata={"secret": True}
    )
    protect_process: bool = True
