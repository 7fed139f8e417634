"""Property: whatever the file tools do over some turns, a rewind to before any of those turns
gives back the exact tree the workspace held then."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh import AgentOptions, Harness, ToolExecution
from dsh.plugin import Text, UserMessage
from dsh.session._rewind import rewind
from dsh.values._events import TurnCompleted, TurnEnd, TurnStart
from dsh_plugins.tools_fs import FsToolsPlugin

NAMES = st.sampled_from(["a", "b", "d/c", "d/e/f"])
CONTENT = st.text(alphabet="xy\n", max_size=6)

OPERATIONS = st.one_of(
    st.tuples(st.just("write_file"), st.fixed_dictionaries({"path": NAMES, "content": CONTENT})),
    st.tuples(
        st.just("edit_file"),
        st.fixed_dictionaries({"path": NAMES, "old": st.sampled_from("xy"), "new": CONTENT}),
    ),
    st.tuples(st.just("delete_file"), st.fixed_dictionaries({"path": NAMES})),
    st.tuples(st.just("move_file"), st.fixed_dictionaries({"path": NAMES, "to": NAMES})),
)
TURNS = st.lists(st.lists(OPERATIONS, max_size=5), min_size=1, max_size=4)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def check(turns: list[list[tuple[str, dict[str, Any]]]], pick: int, in_place: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        config = {"permissions": {"mode": "full"}}
        async with Harness(load_entrypoints=False, plugins=[FsToolsPlugin], config=config) as h:
            agent = h.agent_loop.create("p", AgentOptions(workspace=str(workspace)))
            session = agent.session
            before: list[dict[str, bytes]] = []
            for number, operations in enumerate(turns, 1):
                before.append(tree(workspace))
                session.append(UserMessage((Text(f"turn {number}"),)))
                session.append(TurnStart(number))
                for name, args in operations:
                    await h.tools.execute(ToolExecution("c", name, json.dumps(args), agent))
                session.append(TurnEnd(number, TurnCompleted()))
            turn = pick % len(turns) + 1
            _, report = await rewind(h.sessions, session, turn, in_place=in_place)
            assert report.conflicts == report.lost == ()
            assert tree(workspace) == before[turn - 1]
            # Once more: already there, nothing to do, nothing in conflict.
            _, again = await rewind(h.sessions, session, turn, in_place=in_place)
            assert again.conflicts == () and tree(workspace) == before[turn - 1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=TURNS, pick=st.integers(min_value=0, max_value=3), in_place=st.booleans())
def test_a_rewind_gives_back_the_tree_before_the_turn(
    turns: list[list[tuple[str, dict[str, Any]]]], pick: int, in_place: bool
) -> None:
    asyncio.run(check(turns, pick, in_place))
