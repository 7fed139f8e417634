"""The decisions the plugin remembers (``_decisions.Decisions``) are the reference's
(``policy.decide``): for any configuration, mode, tool, effect, arguments and agent above, call
after call, with the configuration loaded again between them; and the arguments are parsed
only for a decision that reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attrs import evolve
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.values._agent import PERMISSION_MODES
from dsh_plugins.permissions._decisions import Decisions, reads_arguments
from dsh_plugins.permissions.policy import Decision, PermissionsConfig, Rule, decide

WS = Path("/srv/workspace")
TOOLS = ("shell", "write_file", "read_file", "mcp__srv__deploy", "echo")
EFFECTS = ("read", "write", "execute", "other")

rules = st.builds(
    Rule,
    st.sampled_from(("allow", "deny", "ask")),
    st.sampled_from(("*", "shell", "*_file", "mcp__*", "echo", "nothing")),
    st.sampled_from(("*", "git *", "ls", "*.py", "/etc/*", "a*")),
)
configs = st.builds(
    PermissionsConfig,
    st.sampled_from(PERMISSION_MODES),
    st.lists(rules, max_size=4).map(tuple),
)
arguments = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "command": st.sampled_from(("git status", "ls", "rm -rf /", "ls; rm x", "git -c a")),
            "path": st.sampled_from(("a.py", "../out.txt", "/etc/passwd", "sub/b.txt")),
            "pattern": st.sampled_from(("*.py", "x")),
            "text": st.text(max_size=3),
        },
    ),
    st.lists(st.integers(), max_size=2),
)
calls = st.lists(
    st.tuples(
        st.sampled_from(PERMISSION_MODES),
        st.sampled_from(TOOLS),
        st.sampled_from(EFFECTS),
        arguments,
        st.sampled_from((None, None, "parent")),  # the agent above whose mode it is
        st.booleans(),  # the configuration was loaded again before this call
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(configs, calls)
def test_a_remembered_decision_is_the_reference_decision(
    config: PermissionsConfig, calls: list[tuple[Any, str, Any, Any, str | None, bool]]
) -> None:
    decisions = Decisions()
    for mode, tool, effect, args, inherited_from, reloaded in calls:
        if reloaded:
            config = evolve(config)  # an equal value, but another one
        parsed: list[Any] = []

        def parse(args: Any = args, parsed: list[Any] = parsed) -> Any:
            parsed.append(args)
            return args

        got = decisions.decide(config, mode, tool, effect, parse, lambda: WS, inherited_from)
        judged = evolve(config, mode=mode)
        expected = decide(judged, tool, effect, args, WS, inherited_from=inherited_from)
        assert (got.action, got.by, got.reason) == (expected.action, expected.by, expected.reason)
        # The arguments are read where the decision may depend on them, and only there.
        if inherited_from is None and not reads_arguments(config, mode, tool, effect):
            assert parsed == []
        for other in ({}, {"command": "x", "path": "/elsewhere"}):
            if not reads_arguments(config, mode, tool, effect):
                assert decide(judged, tool, effect, other, WS, inherited_from=None) == decide(
                    judged, tool, effect, args, WS, inherited_from=None
                )


def test_a_decision_that_does_not_read_the_arguments_is_made_once() -> None:
    decisions = Decisions()
    config = PermissionsConfig(rules=(Rule("allow", "shell", "git *"),))
    first = decisions.decide(config, "workspace-write", "echo", "other", never, lambda: WS)
    assert decisions.decide(config, "workspace-write", "echo", "other", never, lambda: WS) is first
    assert first == Decision(
        "allow",
        "mode",
        'echo does something dsh cannot classify and the permissions mode is "workspace-write"',
    )
    # The rule reads a shell call's command: each call is decided with its own.
    allowed = decisions.decide(
        config, "workspace-write", "shell", "execute", lambda: {"command": "git log"}, lambda: WS
    )
    asked = decisions.decide(
        config, "workspace-write", "shell", "execute", lambda: {"command": "rm x"}, lambda: WS
    )
    assert (allowed.action, asked.action) == ("allow", "ask")
    # Another configuration value: what was remembered for the first does not hold.
    full = decisions.decide(
        PermissionsConfig(mode="full"), "full", "echo", "other", never, lambda: WS
    )
    assert full is not first and full.action == "allow"


def never() -> Any:
    raise AssertionError("the arguments were parsed for a decision that does not read them")
