"""Glob patterns: segments, ``**``, classes, literals."""

from __future__ import annotations

import pytest

from dsh_plugins.tools_fs.patterns import glob_regex


@pytest.mark.parametrize(
    ("pattern", "matching", "not_matching"),
    [
        ("*.py", ["a.py", ".hidden.py"], ["src/a.py", "a.pyc"]),
        ("**/*.py", ["a.py", "src/a.py", "src/deep/a.py"], ["a.txt"]),
        ("src/**", ["src/a", "src/deep/b"], ["src", "other/a"]),
        ("src/**/test_*.py", ["src/test_a.py", "src/x/y/test_b.py"], ["test_a.py"]),
        ("a?c", ["abc"], ["ac", "a/c"]),
        ("[ab].txt", ["a.txt", "b.txt"], ["c.txt"]),
        ("[!ab].txt", ["c.txt"], ["a.txt"]),
        ("[^a].txt", ["b.txt"], ["a.txt"]),
        ("[]].txt", ["].txt"], ["a.txt"]),
        ("[\\].txt", ["\\.txt"], ["a.txt"]),
        ("[a.txt", ["[a.txt"], ["a.txt"]),
        ("a+b(1).txt", ["a+b(1).txt"], ["aab1.txt"]),
        ("/src/", ["src"], ["src/a"]),
    ],
)
def test_glob_patterns(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    regex = glob_regex(pattern)
    assert [p for p in matching if not regex.fullmatch(p)] == []
    assert [p for p in not_matching if regex.fullmatch(p)] == []
