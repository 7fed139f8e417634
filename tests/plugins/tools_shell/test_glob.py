"""``glob_match`` is :func:`fnmatch.fnmatchcase`: it compares the literal parts of a pattern
whose only wildcard is ``*`` in order instead of compiling a regular expression, and hands any
other pattern to ``fnmatchcase``. Hypothesis holds the two to the same answers."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dsh_plugins.tools_shell.config import SECRET_PATTERNS
from dsh_plugins.tools_shell.environment import glob_match

#: Few letters, so that parts of patterns and names meet often; the wildcards; a newline
#: (``*`` matches it too) and a regular-expression character (literal in a glob).
NAMES = st.text(alphabet="AB_.\n", max_size=12)
PATTERNS = st.text(alphabet="AB_.\n**?[]", max_size=8)


@given(NAMES, PATTERNS)
@example("AB", "A**B")
@example("ABA", "A*BA*A")
@example("", "*")
@example("A", "")
def test_glob_match_agrees_with_fnmatchcase(name: str, pattern: str) -> None:
    assert glob_match(name, pattern) == fnmatchcase(name, pattern)


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789", max_size=30))
def test_the_secret_patterns_match_as_fnmatchcase_does(name: str) -> None:
    for pattern in SECRET_PATTERNS:
        assert glob_match(name, pattern) == fnmatchcase(name, pattern)


@pytest.mark.parametrize(
    ("name", "pattern", "matches"),
    [
        ("DEEPSEEK_API_KEY", "*API_KEY*", True),
        ("MY_AUTH", "*_AUTH", True),
        ("AUTHOR", "*_AUTH", False),
        ("AB", "A*B*B", False),  # head and tail may not overlap
        ("LC_ALL", "LC_?LL", True),
        ("LC_ALL", "LC_[AB]LL", True),
        ("PATH", "PATH", True),
        ("PATHS", "PATH", False),
    ],
)
def test_glob_match_examples(name: str, pattern: str, matches: bool) -> None:
    assert glob_match(name, pattern) is matches
