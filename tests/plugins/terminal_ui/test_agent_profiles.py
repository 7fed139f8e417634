"""``dsh run/chat --agent ID``: the profile's tools and output type apply."""

from __future__ import annotations

from dsh_plugins.terminal_ui import startup
from tests.plugins.terminal_ui.conftest import Kit, make_harness, run_args

AGENTS = [
    {"id": "reader", "tools": ["word_count"], "output_type": "tests.test_profiles:Summary"},
    {"id": "broken", "output_type": "tests.test_profiles:Missing"},
]


def test_the_agent_profile_applies() -> None:
    harness = make_harness(Kit(), {"agent_loop": {"agents": AGENTS}})
    options = startup.agent_options(harness, run_args("hi", "--agent", "reader"))
    assert options.tools == ("word_count",)
    assert options.output_type.__name__ == "Summary"
    assert startup.agent_options(harness, run_args("hi")).tools is None


def test_an_output_type_that_cannot_be_imported_is_a_usage_problem() -> None:
    harness = make_harness(Kit(), {"agent_loop": {"agents": AGENTS}})
    problem = startup.options_problem(harness, run_args("hi", "--agent", "broken"))
    assert problem is not None and "cannot import the output type" in problem
