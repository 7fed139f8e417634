"""Command lines as a permission rule sees them: words (``argv``), not characters.

A rule's ``match`` for a command (``git status``, ``rm *``) is split into words like a shell
would (:func:`shlex.split`), and so is the command: each pattern word is a glob on one word of
the command, and a last pattern word ``*`` stands for any number of words (none included). So
tabs, quotes and backslashes (``rm\\t-rf``, ``'rm' -rf``, ``\\rm -rf``) change nothing.

The two kinds of rule are read differently, each in the direction that is safe:

- **deny / ask** look everywhere: in every simple command of a compound one (``;``, ``&&``,
  ``|``, ``$(...)``, backquotes, subshells, newlines), in the command a ``sh -c``/``eval`` runs,
  and through what only changes how a command is started: a path (``/bin/rm``), leading
  variable assignments and wrappers such as ``command``, ``env``, ``nice``, ``sudo``, ``xargs``
  (:data:`WRAPPERS`). ``rm *`` thus matches ``/bin/rm -rf x``, ``env rm x`` and
  ``cd a && command rm x``.
- **allow** applies only to a simple command that it matches word for word as written: no
  compound, no assignment or wrapper in front, no path where the rule has a bare name, and no
  option that makes a well-known command run other programs or write files
  (:data:`REFUSED_OPTIONS`, e.g. ``git -c``, ``git diff --output=FILE``, ``find -exec``,
  ``sed -i``). Such a call falls through to the next rules and the mode, which says why.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase

__all__ = [
    "REFUSED_OPTIONS",
    "SHELLS",
    "WRAPPERS",
    "allow_refusal",
    "compound",
    "matches_words",
    "simple_commands",
    "split_compound",
    "words",
]

#: Characters that make a command line more than one simple command (or redirect it).
_COMPOUND = re.compile(r"&&|\|\||\$\(|[;&|<>()`{}\n]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

#: Programs that run the command given in their arguments. A deny rule looks through them (their
#: own options are skipped); an allow rule never applies to them.
WRAPPERS = frozenset(
    {
        "builtin",
        "chrt",
        "command",
        "doas",
        "env",
        "exec",
        "ionice",
        "nice",
        "nohup",
        "setsid",
        "stdbuf",
        "sudo",
        "time",
        "timeout",
        "xargs",
    }
)
#: Shells whose ``-c`` argument is itself a command line; ``eval`` joins its arguments into one.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})

#: Options that make a well-known program run other programs or write files: an ``allow`` rule
#: does not apply to a call that uses one. ``-x`` matches ``-x``, ``-xVALUE`` and a cluster of
#: short options holding ``x`` (``-ni`` for ``sed``); ``--long`` matches ``--long`` and
#: ``--long=VALUE``; a word without a dash matches a word that starts with it (``of=`` for
#: ``dd``); ``*`` refuses every call of the program with an argument.
REFUSED_OPTIONS: dict[str, tuple[str, ...]] = {
    "git": (
        "-c",
        "--config-env",
        "-C",
        "--exec-path",
        "--git-dir",
        "--work-tree",
        "--output",
        "-o",
        "--upload-pack",
        "--receive-pack",
        "--exec",
        "--ext-diff",
        "--extcmd",
        "-x",
    ),
    "find": (
        "-exec",
        "-execdir",
        "-ok",
        "-okdir",
        "-delete",
        "-fprint",
        "-fprint0",
        "-fprintf",
        "-fls",
    ),
    "sed": ("-i", "--in-place", "-f", "--file"),
    "awk": ("-f", "--file"),
    "gawk": ("-f", "--file"),
    "tar": (
        "--to-command",
        "--checkpoint-action",
        "--use-compress-program",
        "-I",
        "--info-script",
        "--new-volume-script",
        "-F",
    ),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "ssh": ("-o", "-F"),
    "sort": ("-o", "--output", "--compress-program"),
    "curl": ("-o", "--output", "-O", "--remote-name", "-K", "--config", "-D", "--dump-header"),
    "wget": ("-O", "--output-document", "-o", "--output-file", "-e", "--execute"),
    "zip": ("-T", "--unzip-command"),
    "dd": ("of=",),
    "tee": ("*",),
}
#: sed scripts and awk programs that run commands or write files: sed's ``e``/``w``/``W``
#: commands and ``s///e``/``s///w`` flags, awk's ``system()``, pipes and redirections. Checked
#: conservatively (``s/the end/x/`` is refused too): refusing an allow only means asking.
_SED_RUNS = re.compile(r"[eEwW](\s|$|;|})")
_AWK_RUNS = re.compile(r"system|getline|[|>]")


def compound(command: str) -> bool:
    """Whether ``command`` is more than one simple command, or redirects or substitutes."""
    return _COMPOUND.search(command) is not None


def split_compound(command: str) -> list[str]:
    """The pieces of ``command`` between its operators, substitutions and redirections."""
    return _COMPOUND.split(command)


def words(command: str) -> list[str] | None:
    """``command`` split into words as a POSIX shell would; ``None`` if it cannot be (an
    unclosed quote)."""
    try:
        return shlex.split(command)
    except ValueError:
        return None


def matches_words(pattern: Sequence[str], argv: Sequence[str]) -> bool:
    """Whether ``argv`` matches ``pattern``: word by word globs, a last ``*`` for any rest."""
    if pattern and pattern[-1] == "*":
        head = pattern[:-1]
        return len(argv) >= len(head) and _each(head, argv[: len(head)])
    return len(argv) == len(pattern) and _each(pattern, argv)


def _each(pattern: Sequence[str], argv: Sequence[str]) -> bool:
    return all(fnmatchcase(word, glob) for glob, word in zip(pattern, argv, strict=True))


def simple_commands(command: str, depth: int = 3) -> Iterator[list[str]]:
    """Every simple command inside ``command`` as a deny rule should see it: split at each
    operator and substitution, looked through assignments, wrappers and paths, and into
    ``sh -c`` and ``eval`` (``depth`` levels deep). Each comes as written and unwrapped."""
    parts = [command, *split_compound(command)] if compound(command) else [command]
    for part in parts:
        argv = words(part)
        if argv is None:
            argv = part.split()
        if not argv:
            continue
        yield argv
        for unwrapped in _unwrapped(argv):
            yield unwrapped
            inner = _inner_command(unwrapped)
            if inner is not None and depth > 0:
                yield from simple_commands(inner, depth - 1)


#: How many words after a wrapper may be its own options and arguments.
_WRAPPER_WORDS = 8


def _unwrapped(argv: list[str]) -> Iterator[list[str]]:
    """The programs ``argv`` may run, with their arguments: without leading assignments and
    the program's directory; after a wrapper, each of the next words could be the program
    (which one depends on the wrapper's options, so a deny rule tries them all)."""
    program = _program(argv)
    if not program:
        return
    yield program
    if program[0] in WRAPPERS:
        for start in range(1, min(len(program), _WRAPPER_WORDS + 1)):
            inner = _program(program[start:])
            if inner:
                yield inner


def _program(argv: list[str]) -> list[str]:
    rest = list(argv)
    while rest and _ASSIGNMENT.match(rest[0]):
        rest.pop(0)
    return [os.path.basename(rest[0]), *rest[1:]] if rest else []


def _inner_command(argv: list[str]) -> str | None:
    """The command line that ``argv`` (a program and its arguments) runs itself, if any."""
    if argv[0] == "eval":
        return " ".join(argv[1:])
    if argv[0] in SHELLS and "-c" in argv[1:-1]:
        return argv[argv.index("-c", 1) + 1]
    return None


def allow_refusal(pattern: Sequence[str], argv: Sequence[str]) -> str | None:
    """Why an allow rule whose words match ``argv`` must still not allow it, or ``None``."""
    program = argv[0]
    if _ASSIGNMENT.match(program):
        return "it starts with a variable assignment, which can change what the program does"
    if "/" in program and "/" not in pattern[0]:
        return f"it runs {program} by path, which may not be the program the rule names"
    if program in WRAPPERS or program in SHELLS or program == "eval":
        return f"{program} runs another command, which the rule cannot see"
    option = _refused_option(program, argv[1:])
    if option is not None:
        return f"{program} {option} can run other programs or write files"
    return None


def _refused_option(program: str, args: Sequence[str]) -> str | None:
    for refused in REFUSED_OPTIONS.get(program, ()):
        for word in args:
            if _is_option(word, refused):
                return word
    if program == "sed":
        return next((w for w in args if not w.startswith("-") and _SED_RUNS.search(w)), None)
    if program in ("awk", "gawk", "mawk", "nawk"):
        return next((w for w in args if _AWK_RUNS.search(w)), None)
    return None


def _is_option(word: str, refused: str) -> bool:
    if refused == "*":
        return True
    if refused.startswith("--"):
        return word == refused or word.startswith(refused + "=")
    if len(refused) == 2 and refused.startswith("-"):  # a short option, maybe in a cluster
        cluster = word.startswith("-") and not word.startswith("--")
        return cluster and refused[1] in word[1:]
    if refused.startswith("-"):  # a long option with one dash (find's -exec)
        return word == refused
    return word.startswith(refused)
