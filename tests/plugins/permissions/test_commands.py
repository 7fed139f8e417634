"""Command rules mean what they say: they match words, deny rules see through the forms that
hide a program, allow rules refuse the options that turn a harmless program into a runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_plugins.permissions.commands import (
    allow_refusal,
    matches_words,
    simple_commands,
    split_compound,
    words,
)
from dsh_plugins.permissions.policy import Decision, PermissionsConfig, Rule, decide

WS = Path("/srv/workspace")


def decide_command(
    rules: tuple[Rule, ...], command: str, mode: str = "workspace-write"
) -> Decision:
    config = PermissionsConfig(mode=mode, rules=rules)  # type: ignore[arg-type]
    return decide(config, "shell", "execute", {"command": command}, WS)


def allowed_by(match: str, command: str) -> str:
    return decide_command((Rule("allow", tool="shell", match=match),), command).action


def denied_by(match: str, command: str) -> str:
    return decide_command((Rule("deny", tool="shell", match=match),), command, "full").action


# -- the findings of the issue -----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "git -c alias.x='!touch pwned' x",
        "git -c core.pager='sh -c id' log",
        "git --config-env=core.pager=EVIL log",
        "git diff --output=/tmp/file",
        "git diff --output /tmp/file",
        "git -C / status",
        "git --git-dir=/elsewhere/.git log",
        "git rebase -x 'make' main",
        "git format-patch -o /tmp HEAD~1",
        "git log --ext-diff",
    ],
)
def test_git_star_does_not_allow_options_that_run_or_write(command: str) -> None:
    decision = decide_command((Rule("allow", tool="shell", match="git *"),), command)
    assert decision.action == "ask" and decision.by == "mode"
    assert "rule 1 does not allow it: git " in decision.reason
    assert "can run other programs or write files" in decision.reason


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build",
        "rm\t-rf build",
        "rm  -rf\t\tbuild",
        "/bin/rm -rf build",
        "/usr/bin/rm -rf build",
        "command rm -rf build",
        "env rm -rf build",
        "env -i PATH=/bin rm -rf build",
        "\\rm -rf build",
        "'rm' -rf build",
        '"rm" -rf build',
        "FOO=1 rm -rf build",
        "sudo -u root rm -rf build",
        "nice -n 5 rm -rf build",
        "timeout 10 rm -rf build",
        "nohup env rm -rf build",
        "exec rm -rf build",
        "ls | xargs rm",
        "ls | xargs -0 -n 1 rm",
        "bash -c 'rm -rf build'",
        'sh -c "cd x && rm -rf build"',
        "eval rm -rf build",
        "echo ok; /bin/rm -rf build",
        "echo `rm -rf build`",
        "echo ok\nrm -rf build",
        "rm\t-rf 'build",  # an unclosed quote: split at blanks
    ],
)
def test_every_form_of_a_program_meets_the_rule_for_it(command: str) -> None:
    assert denied_by("rm *", command) == "deny"


@pytest.mark.parametrize(
    "command", ["echo rm -rf build", "ls", "rmdir x", "grep rm notes.txt", "echo 'rm -rf'"]
)
def test_a_deny_rule_still_matches_only_its_program(command: str) -> None:
    assert denied_by("rm *", command) == "allow"


# -- allow rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", "allow"),
        ("git\tstatus", "allow"),
        ("git 'status'", "allow"),
        ("git status --short", "ask"),  # the rule names two words
        ("/usr/bin/git status", "ask"),
        ("./git status", "ask"),
        ("env git status", "ask"),
        ("GIT_DIR=/x git status", "ask"),
        ("command git status", "ask"),
        ("git status; rm -rf ~", "ask"),
        ("git 'status", "ask"),  # an unclosed quote: not a command the rule can read
    ],
)
def test_an_allow_rule_allows_only_what_it_names_as_written(command: str, expected: str) -> None:
    assert allowed_by("git status", command) == expected


@pytest.mark.parametrize(
    ("match", "command", "expected"),
    [
        ("git diff *", "git diff", "allow"),  # a last * is any rest, none included
        ("git diff *", "git diff HEAD~1 -- src", "allow"),
        ("git diff *", "git diffx", "ask"),
        ("git log -n *", "git log -n 5", "allow"),
        ("ls *", "ls -la src", "allow"),
        ("/usr/bin/ls *", "/usr/bin/ls -l", "allow"),  # the rule names the path itself
        ("find *", "find . -name '*.py'", "allow"),
        ("find *", "find . -name '*.pyc' -delete", "ask"),
        ("find *", "find . -exec rm {} ;", "ask"),
        ("find *", "find . -execdir sh -c id \\;", "ask"),
        ("find *", "find . -fprint /tmp/x", "ask"),
        ("sed *", "sed -n 5p notes.txt", "allow"),
        ("sed *", "sed 's/a/b/' notes.txt", "allow"),
        ("sed *", "sed -i 's/a/b/' notes.txt", "ask"),
        ("sed *", "sed -ni 's/a/b/p' notes.txt", "ask"),
        ("sed *", "sed --in-place=.bak 's/a/b/' notes.txt", "ask"),
        ("sed *", "sed 's/a/id/e' notes.txt", "ask"),
        ("sed *", "sed 's/a/b/w /tmp/out' notes.txt", "ask"),
        ("sed *", "sed -f script.sed notes.txt", "ask"),
        ("awk *", "awk NR==1 notes.txt", "allow"),
        ("awk *", "awk '{print $1}' notes.txt", "ask"),  # braces: not a simple command
        ("awk *", "awk getline notes.txt", "ask"),
        ("sort *", "sort -n notes.txt", "allow"),
        ("sort *", "sort -o /tmp/x notes.txt", "ask"),
        ("tee *", "tee", "allow"),
        ("tee *", "tee /tmp/x", "ask"),
        ("dd *", "dd if=/dev/zero count=1", "allow"),
        ("dd *", "dd if=/dev/zero of=/tmp/x", "ask"),
        ("tar *", "tar -tf a.tar", "allow"),
        ("tar *", "tar -xf a.tar --to-command=sh", "ask"),
        ("xargs *", "xargs echo", "ask"),
        ("bash *", "bash -c id", "ask"),
        ("eval *", "eval id", "ask"),
        ("curl *", "curl -fsS https://example.org", "allow"),
        ("curl *", "curl -o /tmp/x https://example.org", "ask"),
        ("* --version", "python3 --version", "allow"),
        ("* --version", "./python3 --version", "ask"),  # a program of the workspace
    ],
)
def test_allow_rules_refuse_options_that_run_or_write(
    match: str, command: str, expected: str
) -> None:
    assert allowed_by(match, command) == expected


def test_a_refused_allow_falls_through_to_the_next_rules() -> None:
    rules = (
        Rule("allow", tool="shell", match="git *"),
        Rule("deny", tool="shell", match="git *"),
    )
    decision = decide_command(rules, "git -c x=y log")
    assert (decision.action, decision.by) == ("deny", "rule")
    refused = decide_command(rules[:1], "git -c x=y log", mode="read-only")
    assert refused.action == "deny"
    assert refused.reason == (
        'shell runs commands and the permissions mode is "read-only" (rule 1 does not allow it: '
        "git -c can run other programs or write files)"
    )


def test_file_rules_still_match_paths_as_strings() -> None:
    config = PermissionsConfig(rules=(Rule("deny", tool="write_file", match="*.lock"),))
    assert decide(config, "write_file", "write", {"path": "a/b.lock"}, WS).action == "deny"
    assert decide(config, "write_file", "write", {"path": "a/b.txt"}, WS).action == "allow"


# -- the pieces ----------------------------------------------------------------------------------


def test_words_and_patterns() -> None:
    assert words("git  log\t'a b'") == ["git", "log", "a b"]
    assert words("echo 'open") is None
    assert matches_words(["git", "*"], ["git"])
    assert matches_words(["git", "l?g"], ["git", "log"])
    assert not matches_words(["git", "log"], ["git"])
    assert not matches_words(["git", "log", "*"], ["git"])
    assert matches_words([], [])
    assert split_compound("a; b && c") == ["a", " b ", " c"]


def test_simple_commands_look_through_wrappers_paths_and_shells() -> None:
    seen = list(simple_commands("FOO=1 /usr/bin/env -u X sh -c 'rm -rf y'"))
    assert ["rm", "-rf", "y"] in seen
    assert list(simple_commands("FOO=1")) == [["FOO=1"]]  # an assignment alone runs nothing
    assert list(simple_commands(" \t")) == []
    assert list(simple_commands("env A=1")) == [["env", "A=1"], ["env", "A=1"]]
    deep = "sh -c 'sh -c \"sh -c rm\"'"
    assert ["rm"] not in list(simple_commands(deep, depth=1))
    assert ["rm"] in list(simple_commands(deep))


def test_allow_refusal_names_the_reason() -> None:
    assert allow_refusal(["ls", "*"], ["A=1", "ls"]) is not None
    assert allow_refusal(["ls", "*"], ["ls", "-l"]) is None
    assert allow_refusal(["git", "*"], ["git", "log", "-p"]) is None
    program = 'BEGIN{system("id")}'
    assert (
        allow_refusal(["awk", "*"], ["awk", program])
        == f"awk {program} can run other programs or write files"
    )


# -- properties ----------------------------------------------------------------------------------

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./", min_size=1, max_size=8)
_SPACE = st.sampled_from([" ", "\t", "  ", " \t "])
_FORMS = st.sampled_from(
    [
        "rm",
        "/bin/rm",
        "/usr/bin/rm",
        "\\rm",
        "'rm'",
        "command rm",
        "env rm",
        "X=1 rm",
        "sudo rm",
        "nice rm",
    ]
)


@given(
    form=_FORMS,
    args=st.lists(_WORD, max_size=5),
    space=_SPACE,
    before=st.sampled_from(["", "ls; ", "true && ", "echo x | "]),
)
def test_property_every_spelling_of_rm_is_denied(
    form: str, args: list[str], space: str, before: str
) -> None:
    command = before + space.join([form, *args])
    assert denied_by("rm *", command) == "deny"


@given(
    args=st.lists(_WORD, max_size=4),
    operator=st.sampled_from([";", "&&", "||", "|", "&", ">", "<", "\n", "$(", "`"]),
    tail=st.lists(_WORD, min_size=1, max_size=4),
)
def test_property_an_allow_rule_never_allows_a_compound_command(
    args: list[str], operator: str, tail: list[str]
) -> None:
    command = " ".join(["git", "log", *args]) + operator + " ".join(tail)
    assert allowed_by("git *", command) == "ask"


@given(args=st.lists(_WORD, max_size=4), option=st.sampled_from(["-c", "--output=x", "-C"]))
def test_property_a_refused_option_anywhere_refuses_the_allow(args: list[str], option: str) -> None:
    command = " ".join(["git", *args[:2], option, *args[2:]])
    assert allowed_by("git *", command) == "ask"
