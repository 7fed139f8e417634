"""research_team: a lead agent splits a question between two researcher sub-agents (the
``task`` tool of the ``subagents`` plugin) and answers with a typed :class:`Report`.

Run it against a real model (``DEEPSEEK_API_KEY`` set, or ``dsh keys set deepseek``)::

    python research_team.py "the history of the Oslo metro" --model deepseek-v4-flash

It prints the report as JSON. The researchers are a configured agent profile (``RESEARCHER``):
their own system prompt, no tools of their own, nested under the lead's ``task`` calls; the
lead's answer is validated as a :class:`Report` and sent back to the model when it is not one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import attrs

import dsh
from dsh.plugin import unstructure

#: The sub-agent profile the lead delegates to: ``task(agent="researcher", ...)``.
RESEARCHER = {
    "id": "researcher",
    "system_prompt": "You are a careful researcher. Answer the question you are given in a "
    "few factual sentences, and say when you are unsure.",
    "tools": [],
}
CONFIG: dict[str, Any] = {"agent_loop": {"agents": [RESEARCHER]}}

LEAD = (
    "You lead a small research team. Split the user's topic into two focused questions and "
    "give each to a researcher with the task tool (agent 'researcher'), both in the same step "
    "so that they work in parallel. Then write the report from their answers."
)


@attrs.frozen
class Report:
    """A short research report."""

    topic: str
    findings: list[str]
    summary: str


async def research(topic: str, *, model: str, harness: dsh.Harness | None = None) -> dsh.RunResult:
    """Run the team on ``topic``; the result's ``output`` is the :class:`Report` (``None``, with
    ``error`` saying why, when the lead never gave a valid one)."""
    return await dsh.run(
        f"Research this topic: {topic}",
        model=model,
        system_prompt=LEAD,
        output_type=Report,
        harness=harness or dsh.Harness(config=CONFIG),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("topic")
    parser.add_argument("--model", default="deepseek-v4-flash")
    args = parser.parse_args(argv)
    result = asyncio.run(research(args.topic, model=args.model))
    if result.output is None:
        print(f"research_team: no report ({result.error})", file=sys.stderr)
        return 1
    print(json.dumps(unstructure(result.output), indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
